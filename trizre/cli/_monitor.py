"""What a watching node sees: the model behind ``trizre watch`` and its web page.

:class:`Monitor` turns a node's events, and the status announcements of
pattern servers (:mod:`trizre.patterns._status`), into a JSON-able
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
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, suppress
from typing import Any, Final, final
from uuid import UUID

import trio
from trio_util import AsyncValue

from .._concurrency import unwrap_single_exception_group
from ..node._node import Node
from ..patterns._pair_health import SPLIT_BRAIN_MARGIN, ServerSeen, pair_health
from ..patterns._status import OWN_GROUPS, STATUS_GROUP, decode_status
from ..sansio._events import (
    Enter,
    Evasive,
    Event,
    Exit,
    Join,
    Leader,
    Leave,
    Shout,
    Silent,
    Whisper,
)

__all__ = ["Monitor", "open_monitor"]

MAX_STATUSES_PER_PEER: Final = 64
"""Statuses kept per peer; more (a peer's junk) are ignored."""

MAX_PAIRS: Final = 256
"""Binary Star pairs remembered (a server that left stays in its pair's row); more are ignored."""


@final
class Monitor:
    """The network as one node sees it; read it with :meth:`snapshot`.

    ``version`` (a trio-util ``AsyncValue``) grows whenever the snapshot may
    have changed: ``await monitor.version.wait_value(lambda v: v > seen)``.
    The log keeps the last ``log_size`` entries; each has a ``seq`` that
    grows by one, so a reader can ask for what it has not seen.

    A Binary Star server is remembered after it leaves (at most one per
    role for each of :data:`MAX_PAIRS` pairs), so that its pair's row shows
    it down, with when it was last heard.  ``clock`` gives the wall-clock
    time (seconds since the epoch) that the snapshot's health is judged at.
    """

    def __init__(
        self, node: Node, *, log_size: int = 500, clock: Callable[[], float] = time.time
    ) -> None:
        if log_size < 1:
            raise ValueError(f"log_size must be at least 1, got {log_size}")
        self.node = node
        self.clock = clock
        # (primary name, backup name) -> role -> what we know of that server.
        self._bstar: dict[tuple[str, str], dict[str, _Star]] = {}
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
                self._star_left(peer, now)
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
            self._star_said(peer, name, status, now)
            state = status.get("state")
            if old is None or old.get("state") != state:
                role = status.get("role", "?")
                self._note(now, "bstar", f"{name} ({role}) is {state}", peer)
        elif status["kind"] == "service" and old is None:
            self._note(now, "service", f"{name} serves {status.get('service')}", peer)

    def _star_said(self, peer: UUID, name: str, status: dict[str, Any], now: float) -> None:
        role = "primary" if status.get("role") == "primary" else "backup"
        partner = str(status.get("partner", "?"))
        key = (name, partner) if role == "primary" else (partner, name)
        if key not in self._bstar and len(self._bstar) >= MAX_PAIRS:
            return
        # A server restarted under the same role replaces the one before it.
        self._bstar.setdefault(key, {})[role] = _Star(peer, name, role, status, now)

    def _star_left(self, peer: UUID, now: float) -> None:
        for servers in self._bstar.values():
            for star in servers.values():
                if star.peer == peer and not star.gone:
                    if star.up:
                        # Responsive when it left: it said GOODBYE, heard now.
                        star.last_heard = now
                    star.gone = True
                    star.up = False

    def _heard(self, now: float) -> None:
        """Note when each present Binary Star server was last heard (wall clock)."""
        node = self.node
        try:
            trio_now = trio.current_time()
        except RuntimeError:
            return  # outside Trio (a test reading a snapshot): the last noted times stand
        for servers in self._bstar.values():
            for star in servers.values():
                if star.gone:
                    continue
                with suppress(LookupError, trio.ClosedResourceError):
                    star.up = node.peer_is_responsive(star.peer)
                    star.last_heard = now - (trio_now - node.peer_last_heard(star.peer))
                    continue
                star.up = False

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
        digest = json.dumps(self._view(self.clock()), sort_keys=True, default=str)
        if digest != self._digest:
            self._digest = digest
            self._bump()

    # ----------------------------------------------------------------- output

    def log(self, since: int = 0) -> list[dict[str, Any]]:
        """The log entries with a ``seq`` above ``since``, oldest first."""
        return [entry for entry in self._log if entry["seq"] > since]

    def statuses(self) -> list[tuple[UUID, str, dict[str, Any]]]:
        """Each present peer's announced statuses: (peer, its name, the status), by name.

        What the metrics read (``trizre watch --metrics``): the counters a
        server announces are in its status's ``stats``.
        """
        return sorted(
            (
                (peer, self._names.get(peer, str(peer)), status)
                for peer, statuses in self._statuses.items()
                for status in statuses.values()
            ),
            key=lambda item: (item[1], str(item[0]), item[2]["key"]),
        )

    def snapshot(self) -> dict[str, Any]:
        """Everything the views show, as JSON-able data (see ``docs/operations.md``).

        ``time`` is when it was taken (``clock``); each pair carries its
        ``health`` (:func:`~trizre.patterns._pair_health.pair_health`).
        """
        now = self.clock()
        view = self._view(now)
        view["log"] = self.log()
        view["version"] = self.version.value
        view["time"] = now
        return view

    def _view(self, now: float) -> dict[str, Any]:
        node = self.node
        self._heard(now)
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
            "pairs": self._pairs(now),
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

    def _pairs(self, now: float) -> list[dict[str, Any]]:
        margin = SPLIT_BRAIN_MARGIN
        result = []
        for (primary, backup), stars in sorted(self._bstar.items()):
            seen = [star.seen() for star in stars.values()]
            health = pair_health(seen, now, margin=margin)
            history = sorted(
                (t[0], server.name, t[1], t[2], t[3]) for server in seen for t in server.transitions
            )[-20:]
            by_name = {star.name: star for star in stars.values()}
            servers = [
                {
                    "uuid": str(by_name[shown.name].peer),
                    "name": shown.name,
                    "role": shown.role,
                    # What the views show: "down" for a server that no longer serves.
                    "state": shown.shown,
                    "claims": shown.claims,
                    "up": shown.up,
                    "gone": by_name[shown.name].gone,
                    "since": next(s.since for s in seen if s.name == shown.name),
                    "last_heard": None if shown.up else shown.last_heard,
                }
                for shown in health.servers
            ]
            failover = health.last_failover
            result.append(
                {
                    "pair": f"{primary} / {backup}",
                    "primary": primary,
                    "backup": backup,
                    "servers": servers,
                    "health": {
                        "status": health.status,
                        "reason": health.reason,
                        "since": health.since,
                        "serving": health.serving,
                        "standby": health.standby,
                    },
                    "history": [
                        {"time": t, "server": s, "old": o, "new": n, "event": e}
                        for t, s, o, n, e in history
                    ],
                    "last_failover": (
                        {
                            "time": failover.time,
                            "server": failover.server,
                            "event": failover.event,
                            "why": failover.why,
                        }
                        if failover
                        else None
                    ),
                    "failovers": sum(star.failovers() for star in stars.values()),
                }
            )
        return result


class _Star:
    """What the monitor knows of one Binary Star server (mutable: it is updated in place)."""

    def __init__(self, peer: UUID, name: str, role: str, status: dict[str, Any], now: float):
        self.peer = peer
        self.name = name
        self.role = role
        self.state = status.get("state")
        self.transitions = tuple(
            (float(t[0]), str(t[1]), str(t[2]), str(t[3]))
            for t in status.get("transitions", [])
            if isinstance(t, list) and len(t) == 4 and isinstance(t[0], (int, float))
        )
        count = status.get("failovers")
        self._failovers = count if isinstance(count, int) and count >= 0 else None
        self.gone = False
        self.up = True
        self.last_heard: float | None = now

    def failovers(self) -> int:
        """Its PASSIVE to ACTIVE changes: as it counts them, else in its (bounded) history."""
        if self._failovers is not None:
            return self._failovers
        return sum(1 for t in self.transitions if t[1] == "PASSIVE" and t[2] == "ACTIVE")

    def seen(self) -> ServerSeen:
        since = max((t[0] for t in self.transitions), default=None)
        return ServerSeen(
            self.name,
            self.role,
            None if self.state is None else str(self.state),
            since,
            self.up and not self.gone,
            self.last_heard,
            self.transitions,
        )


@asynccontextmanager
async def open_monitor(
    node: Node, *, log_size: int = 500, refresh: float = 1.0, clock: Callable[[], float] = time.time
) -> AsyncIterator[Monitor]:
    """Watch the network from ``node``: join the status group and keep a :class:`Monitor`.

    The node joins :data:`~trizre.patterns._status.STATUS_GROUP` so that pattern
    servers announce themselves to it, and leaves it when the block ends.
    Every ``refresh`` seconds the monitor checks for changes no event
    reports (a peer alive again).  Cancellation or the node stopping ends
    the watching; nothing is left running.  Bad input: ``log_size < 1`` or
    a non-positive ``refresh`` raises ``ValueError``.
    """
    if not refresh > 0:
        raise ValueError(f"refresh must be a positive number of seconds, got {refresh!r}")
    monitor = Monitor(node, log_size=log_size, clock=clock)
    events = node.events(max_buffer=10_000)

    async def feed() -> None:
        async for event in events:
            monitor.apply(event, clock())

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
