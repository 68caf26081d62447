"""A Binary Star pair's health, as a watcher can judge it: a pure function.

:func:`pair_health` takes what a watcher knows of the pair's servers (the
state each last announced, when it entered it, whether the watcher hears it
now and when it last did) and the wall-clock time, and says which server
serves, whether a standby exists, since when not, and the last failover and
why.  The terminal view, the web page and the metrics all show this one
judgement (``docs/operations.md``, "Binary Star health").

Why a watcher needs a rule at all: after ``kill -9`` of the active server
its partner takes over within the failover timeout, but the dead server's
last announcement ("ACTIVE") stays the last word the watcher has of it
until the watcher notices the silence (seconds) or the peer expires (tens of
seconds).  Two ACTIVE claims mean a split brain only when both servers were
heard *after* the later one took over; an ACTIVE claim older than the
partner's takeover, from a server not heard since, is a dead server's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final, Literal, final

import attrs

__all__ = ["Failover", "PairHealth", "ServerHealth", "ServerSeen", "pair_health"]

Status = Literal["ok", "degraded", "split brain", "down"]

SPLIT_BRAIN_MARGIN: Final = 2.0
"""Seconds a server claiming ACTIVE may still be heard after its partner took
over before the two claims count as a split brain: a beacon in flight, and
the skew between the servers' clocks and the watcher's."""


@final
@attrs.frozen
class ServerSeen:
    """One server of a pair as the watcher knows it (the input).

    ``since`` is when it entered ``state`` (its own clock, from its
    announced transitions; ``None`` when unknown).  ``up`` says the watcher
    hears it now (present and responsive); ``last_heard`` is when it last
    did (``None``: never).  ``transitions`` are its announced
    ``(time, old, new, event)`` changes, oldest first.
    """

    name: str
    role: str
    state: str | None
    since: float | None = None
    up: bool = True
    last_heard: float | None = None
    transitions: tuple[tuple[float, str, str, str], ...] = ()


@final
@attrs.frozen
class ServerHealth:
    """One server as the views show it: ``shown`` is ``"down"`` for a server
    not serving the pair any more, else the state it announced (``claims``)."""

    name: str
    role: str
    shown: str
    claims: str | None
    up: bool
    last_heard: float | None


@final
@attrs.frozen
class Failover:
    """A standby that became ACTIVE: when, which server, on what event, and why."""

    time: float
    server: str
    event: str
    why: str


@final
@attrs.frozen
class PairHealth:
    """The judgement (the output); :meth:`summary` is its one-line text.

    ``status`` is ``"ok"`` (one server serves, a PASSIVE standby waits),
    ``"degraded"`` (one serves, no standby: ``reason`` says so, ``since``
    since when; or its partner has not yet become PASSIVE, ``"standby not
    ready"``), ``"split brain"`` (two servers heard claiming ACTIVE at
    once) or ``"down"`` (no server serves).
    """

    status: Status
    reason: str
    since: float | None
    serving: str | None
    standby: str | None
    servers: tuple[ServerHealth, ...]
    last_failover: Failover | None

    def summary(self, clock: Any = None) -> str:
        """``ok``, ``degraded: no standby since 04:30:38``...; ``clock`` formats a time."""
        text = self.status if not self.reason else f"{self.status}: {self.reason}"
        if self.since is not None and self.status != "ok":
            text += f" since {clock(self.since) if clock else f'{self.since:.3f}'}"
        return text

    def as_json(self) -> dict[str, Any]:
        """The record as JSON-able data (the snapshot's ``health``)."""
        data = attrs.asdict(self)
        data["servers"] = list(data["servers"])
        data["summary"] = self.summary()
        return data


def _why(event: str, old: str) -> str:
    if event == "CLIENT_REQUEST":
        return "its partner was silent for the failover timeout and a client asked"
    if event in ("PEER_PRIMARY", "PEER_BACKUP"):
        return f"its partner restarted (said {event.removeprefix('PEER_')})"
    return f"{event} while {old}"


def last_failover(servers: Sequence[ServerSeen]) -> Failover | None:
    """The latest change of a server from PASSIVE to ACTIVE, if any."""
    found = [
        (time, server.name, event, old)
        for server in servers
        for time, old, new, event in server.transitions
        if new == "ACTIVE" and old == "PASSIVE"
    ]
    if not found:
        return None
    time, name, event, old = max(found)
    return Failover(time, name, event, _why(event, old))


def pair_health(
    servers: Sequence[ServerSeen], now: float, *, margin: float = SPLIT_BRAIN_MARGIN
) -> PairHealth:
    """Judge a pair from its servers' announced states and last-heard times at ``now``.

    Pure: no clock, no I/O.  Bad input: more than two servers, or two of
    one role, raise ``ValueError`` (the monitor keeps one per role).
    """
    roles = [s.role for s in servers]
    if len(servers) > 2 or len(set(roles)) != len(roles):
        raise ValueError(f"a pair has at most one server per role, got {roles}")
    replaced: set[str] = set()
    split = False
    claims = sorted(
        (s for s in servers if s.state == "ACTIVE"),
        key=lambda s: -1.0 if s.since is None else s.since,
    )
    if len(claims) == 2:
        older, newer = claims
        took_over = newer.since
        heard_since = (
            older.up
            and older.last_heard is not None
            and (took_over is None or older.last_heard > took_over + margin)
        )
        if heard_since and newer.up:
            split = True
        elif heard_since:
            replaced.add(newer.name)  # the newer claim's server is the one gone
        else:
            replaced.add(older.name)
    serving_ones = [s for s in servers if s.state == "ACTIVE" and s.up and s.name not in replaced]
    # Only a PASSIVE server can take over: one still PRIMARY or BACKUP has
    # not heard the active one yet, and refuses clients (the FSM's table).
    standbys = [s for s in servers if s.up and s.state == "PASSIVE"]
    waiting = [s for s in servers if s.up and s.state in ("PRIMARY", "BACKUP")]
    shown = tuple(
        ServerHealth(
            s.name,
            s.role,
            (s.state or "?") if s.up and s.name not in replaced else "down",
            s.state,
            s.up and s.name not in replaced,
            s.last_heard,
        )
        for s in sorted(servers, key=lambda s: s.role != "primary")
    )
    failover = last_failover(servers)
    serving = serving_ones[0] if len(serving_ones) == 1 else None
    standby = standbys[0] if standbys else None
    if split:
        since = max((s.since for s in claims if s.since is not None), default=None)
        return PairHealth("split brain", "both servers ACTIVE", since, None, None, shown, failover)
    if serving is not None and standby is not None:
        return PairHealth("ok", "", None, serving.name, standby.name, shown, failover)
    if serving is not None and waiting:
        return PairHealth(
            "degraded", "standby not ready", None, serving.name, None, shown, failover
        )
    if serving is not None:
        others = [s for s in servers if s is not serving]
        if not others:
            since = serving.since  # never had a partner: since it serves
        else:
            other = others[0]
            candidates = [other.last_heard]
            if other.state == "ACTIVE" and serving.since is not None:
                # It took over from the other: the standby was lost then at the latest.
                candidates.append(serving.since)
            since = min((t for t in candidates if t is not None), default=None)
        return PairHealth("degraded", "no standby", since, serving.name, None, shown, failover)
    # Nobody serves: since the last server claiming ACTIVE was last heard.
    gone = [s.last_heard for s in servers if s.state == "ACTIVE" and s.last_heard is not None]
    return PairHealth(
        "down",
        "no server active",
        max(gone, default=None),
        None,
        standby.name if standby else None,
        shown,
        failover,
    )
