"""What a watching node sees: the model behind ``trizre watch`` and its web page.

:class:`Monitor` turns a node's events, and the status announcements of
pattern servers (:mod:`trizre._status`), into a JSON-able
:meth:`~Monitor.snapshot`: peers with their presence, groups, services with
their workers, Binary Star pairs with their states and failovers, and a
bounded log of what happened.  It does no I/O of its own: :meth:`apply`
takes one event and the wall-clock time; :func:`open_monitor` feeds it
from a live node.  The terminal view and the web page render the same
snapshot.
"""

from __future__ import annotations

import json
import time
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from typing import Any, Final, final
from uuid import UUID

import trio
from trio_util import AsyncValue

from ._events import Enter, Evasive, Event, Exit, Join, Leader, Leave, Shout, Silent, Whisper
from ._node import Node
from ._status import OWN_GROUPS, STATUS_GROUP, decode_status
from ._util import unwrap_single_exception_group

__all__ = ["Monitor", "open_monitor"]

MAX_STATUSES_PER_PEER: Final = 64
"""Statuses kept per peer; more (a peer's junk) are ignored."""


@final
class Monitor:
    """The network as one node sees it; read it with :meth:`snapshot`.

    ``version`` (a trio-util ``AsyncValue``) grows whenever the snapshot may
    have changed: ``await monitor.version.wait_value(lambda v: v > seen)``.
    The log keeps the last ``log_size`` entries; each has a ``seq`` that
    grows by one, so a reader can ask for what it has not seen.
    """

    def __init__(self, node: Node, *, log_size: int = 500) -> None:
        if log_size < 1:
            raise ValueError(f"log_size must be at least 1, got {log_size}")
        self.node = node
        self.version: AsyncValue[int] = AsyncValue(0)
        self._log: deque[dict[str, Any]] = deque(maxlen=log_size)
        self._seq = 0
        self._presence: dict[UUID, str] = {}  # the last Evasive/Silent of a peer
        self._statuses: dict[UUID, dict[str, dict[str, Any]]] = {}
        self._names: dict[UUID, str] = {}
        self._digest = ""

    # ------------------------------------------------------------------ input

    def apply(self, event: Event, now: float) -> None:
        """Take one node event seen at wall-clock time ``now`` (seconds since the epoch)."""
        match event:
            case Enter(peer=peer, name=name, endpoint=endpoint):
                self._names[peer] = name
                self._presence.pop(peer, None)
                self._note(now, "enter", f"{name} entered from {endpoint}", peer)
            case Exit(peer=peer, name=name):
                self._presence.pop(peer, None)
                self._names.pop(peer, None)
                for status in self._statuses.pop(peer, {}).values():
                    if status["kind"] == "service":
                        self._note(now, "service", f"{name} no longer serves {status['service']}")
                self._note(now, "exit", f"{name} exited", peer)
            case Join(peer=peer, name=name, group=group) if group != STATUS_GROUP:
                self._note(now, "join", f"{name} joined {group}", peer)
            case Leave(peer=peer, name=name, group=group) if group != STATUS_GROUP:
                self._note(now, "leave", f"{name} left {group}", peer)
            case Evasive(peer=peer, name=name):
                self._presence[peer] = "evasive"
                self._note(now, "evasive", f"{name} is evasive", peer)
            case Silent(peer=peer, name=name):
                self._presence[peer] = "silent"
                self._note(now, "silent", f"{name} is silent", peer)
            case Leader(peer=peer, name=name, group=group):
                self._note(now, "leader", f"{name} leads {group}", peer)
            case Shout(peer=peer, name=name, group=group, frames=frames) if group == STATUS_GROUP:
                self._status(peer, name, frames, now)
            case Whisper(peer=peer, name=name, frames=frames):
                self._status(peer, name, frames, now)
            case _:
                return
        self._bump()

    def _status(self, peer: UUID, name: str, frames: tuple[bytes, ...], now: float) -> None:
        status = decode_status(frames)
        if status is None:
            return
        statuses = self._statuses.setdefault(peer, {})
        key = status["key"]
        if key not in statuses and len(statuses) >= MAX_STATUSES_PER_PEER:
            return
        old = statuses.get(key)
        statuses[key] = status
        if status["kind"] == "bstar":
            state = status.get("state")
            if old is None or old.get("state") != state:
                role = status.get("role", "?")
                self._note(now, "bstar", f"{name} ({role}) is {state}", peer)
        elif status["kind"] == "service" and old is None:
            self._note(now, "service", f"{name} serves {status.get('service')}", peer)

    def _note(self, now: float, kind: str, text: str, peer: UUID | None = None) -> None:
        self._seq += 1
        entry: dict[str, Any] = {"seq": self._seq, "time": now, "kind": kind, "text": text}
        if peer is not None:
            entry["peer"] = str(peer)
        self._log.append(entry)

    def _bump(self) -> None:
        self.version.value += 1

    def refresh(self) -> None:
        """Bump ``version`` if the snapshot changed without an event (a peer alive again)."""
        digest = json.dumps(self._view(), sort_keys=True, default=str)
        if digest != self._digest:
            self._digest = digest
            self._bump()

    # ----------------------------------------------------------------- output

    def log(self, since: int = 0) -> list[dict[str, Any]]:
        """The log entries with a ``seq`` above ``since``, oldest first."""
        return [entry for entry in self._log if entry["seq"] > since]

    def snapshot(self) -> dict[str, Any]:
        """Everything the views show, as JSON-able data (see ``docs/operations.md``)."""
        view = self._view()
        view["log"] = self.log()
        view["version"] = self.version.value
        return view

    def _view(self) -> dict[str, Any]:
        node = self.node
        try:
            present = node.peers()
            groups = {g: node.peers_by_group(g) for g in node.peer_groups()}
        except trio.ClosedResourceError:
            present, groups = [], {}
        peer_groups: dict[UUID, list[str]] = {}
        for group, members in groups.items():
            for member in members:
                peer_groups.setdefault(member, []).append(group)
        peers: list[dict[str, Any]] = []
        for peer in present:
            with suppress(LookupError, trio.ClosedResourceError):
                responsive = node.peer_is_responsive(peer)
                peers.append(
                    {
                        "uuid": str(peer),
                        "name": node.peer_name(peer),
                        "endpoint": node.peer_address(peer),
                        "groups": [g for g in peer_groups.get(peer, []) if g not in OWN_GROUPS],
                        "headers": node.peer_headers(peer),
                        "presence": "alive" if responsive else self._presence.get(peer, "evasive"),
                        "watcher": STATUS_GROUP in peer_groups.get(peer, []),
                    }
                )
        names: dict[UUID, str] = {UUID(str(p["uuid"])): str(p["name"]) for p in peers}
        return {
            "node": {"name": node.name, "uuid": str(node.uuid)},
            "peers": sorted(peers, key=lambda p: (p["name"], p["uuid"])),
            "groups": {
                group: sorted(names.get(m, str(m)) for m in members)
                for group, members in sorted(groups.items())
                if group not in OWN_GROUPS
            },
            "services": self._services(groups, names),
            "pairs": self._pairs(names),
        }

    def _services(
        self, groups: dict[str, list[UUID]], names: dict[UUID, str]
    ) -> list[dict[str, Any]]:
        services: dict[str, list[dict[str, str]]] = {}
        for peer, statuses in self._statuses.items():
            for status in statuses.values():
                service = status.get("service")
                # A worker is a member of the service's group that said it serves it.
                if status["kind"] == "service" and peer in groups.get(str(service), ()):
                    services.setdefault(str(service), []).append(
                        {"uuid": str(peer), "name": names.get(peer, str(peer))}
                    )
        return [
            {"service": name, "workers": sorted(workers, key=lambda w: w["name"])}
            for name, workers in sorted(services.items())
        ]

    def _pairs(self, names: dict[UUID, str]) -> list[dict[str, Any]]:
        servers = [
            (peer, status)
            for peer, statuses in self._statuses.items()
            if peer in names
            for status in statuses.values()
            if status["kind"] == "bstar"
        ]
        pairs: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for peer, status in servers:
            role = status.get("role")
            own, partner = names[peer], str(status.get("partner", "?"))
            key = (own, partner) if role == "primary" else (partner, own)
            pairs.setdefault(key, []).append(
                {
                    "uuid": str(peer),
                    "name": own,
                    "role": role,
                    "state": status.get("state"),
                    "transitions": status.get("transitions", []),
                }
            )
        result = []
        for (primary, backup), members in sorted(pairs.items()):
            for member in members:
                times = [t[0] for t in member["transitions"] if isinstance(t, list) and t]
                member["since"] = max(times, default=None)
                member["stale"] = False
            # Two servers saying ACTIVE: the one that became active last took
            # over from the other, which died without a word (kill -9) and
            # stays present until it expires.  A real split brain ends both.
            actives = [m for m in members if m["state"] == "ACTIVE"]
            for member in sorted(actives, key=lambda m: m["since"] or 0.0)[:-1]:
                member["stale"] = True
            history = sorted(
                [t[0], member["name"], t[1], t[2], t[3]]
                for member in members
                for t in member.pop("transitions")
                if isinstance(t, list) and len(t) == 4
            )[-20:]
            failovers = [h for h in history if h[3] == "ACTIVE" and h[2] == "PASSIVE"]
            result.append(
                {
                    "pair": f"{primary} / {backup}",
                    "primary": primary,
                    "backup": backup,
                    "servers": sorted(members, key=lambda m: m["role"] != "primary"),
                    "history": [
                        {"time": t, "server": s, "old": o, "new": n, "event": e}
                        for t, s, o, n, e in history
                    ],
                    "last_failover": (
                        {"time": failovers[-1][0], "server": failovers[-1][1]}
                        if failovers
                        else None
                    ),
                }
            )
        return result


@asynccontextmanager
async def open_monitor(
    node: Node, *, log_size: int = 500, refresh: float = 1.0
) -> AsyncIterator[Monitor]:
    """Watch the network from ``node``: join the status group and keep a :class:`Monitor`.

    The node joins :data:`~trizre._status.STATUS_GROUP` so that pattern
    servers announce themselves to it, and leaves it when the block ends.
    Every ``refresh`` seconds the monitor checks for changes no event
    reports (a peer alive again).  Cancellation or the node stopping ends
    the watching; nothing is left running.  Bad input: ``log_size < 1`` or
    a non-positive ``refresh`` raises ``ValueError``.
    """
    if not refresh > 0:
        raise ValueError(f"refresh must be a positive number of seconds, got {refresh!r}")
    monitor = Monitor(node, log_size=log_size)
    events = node.events(max_buffer=10_000)

    async def feed() -> None:
        async for event in events:
            monitor.apply(event, time.time())

    async def tick() -> None:
        while True:
            monitor.refresh()
            await trio.sleep(refresh)

    with unwrap_single_exception_group():
        async with trio.open_nursery() as nursery:
            await node.join(STATUS_GROUP)
            nursery.start_soon(feed)
            nursery.start_soon(tick)
            try:
                yield monitor
            finally:
                events.close()
                nursery.cancel_scope.cancel()
                with trio.CancelScope(shield=True), suppress(trio.ClosedResourceError):
                    await node.leave(STATUS_GROUP)
