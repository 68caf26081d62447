"""What the audit collects of each node, and the Binary Star timeline: plain Python.

The overview pass (``_overview.overview``) gathers the rare lines of each node
(state changes, starts, stops, exits) into :class:`NodeInfo`; from there on
the Binary Star rules are ordinary Python over ordinary data, with no
Spark: which server was in which state when (:func:`server_segments`),
intervals with no ACTIVE server or with two (split brain), and failovers
(:func:`bstar_timeline`).  Tested without Java (``tests/system/test_audit_timeline.py``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final, final

from ..trace._contract import ACTIVE_STATE
from ._summary import BstarSummary, DualActive, NoActive

__all__ = [
    "ExitLine",
    "Failover",
    "NodeInfo",
    "Overview",
    "Segment",
    "StateChange",
    "bstar_timeline",
    "nearest_rank",
    "server_segments",
]

_INF: Final = float("inf")


@final
@dataclass(frozen=True)
class StateChange:
    """One ``bstar-state`` line."""

    ts: float
    old_state: str | None
    state: str
    event: str | None


@final
@dataclass(frozen=True)
class ExitLine:
    """One ``exit`` line."""

    ts: float
    peer: str
    peer_name: str | None
    reason: str | None


@final
@dataclass
class NodeInfo:
    """What one node wrote."""

    node: str
    name: str | None = None
    lines: int = 0
    first_ts: float = _INF
    last_ts: float = -_INF
    kinds: dict[str, int] = field(default_factory=dict)
    changes: list[StateChange] = field(default_factory=list)
    starts: list[float] = field(default_factory=list)
    stops: list[float] = field(default_factory=list)
    exits: list[ExitLine] = field(default_factory=list)
    files: set[str] = field(default_factory=set)
    """The files its lines were read from (``""``: lines not read from a file)."""


@final
@dataclass
class Overview:
    """Pass 1: counts, and the rare lines, per node."""

    lines: int = 0
    malformed: int = 0
    other_version: int = 0
    incomplete: int = 0
    kinds: dict[str, int] = field(default_factory=dict)
    nodes: dict[str, NodeInfo] = field(default_factory=dict)

    @property
    def valid(self) -> int:
        return self.kinds_total

    @property
    def kinds_total(self) -> int:
        return sum(self.kinds.values())

    @property
    def start(self) -> float | None:
        return min((n.first_ts for n in self.nodes.values()), default=None)

    @property
    def end(self) -> float | None:
        return max((n.last_ts for n in self.nodes.values()), default=None)


@final
@dataclass(frozen=True)
class Segment:
    """A server in one state from ``start`` to ``end``."""

    node: str
    start: float
    end: float
    state: str
    end_reason: str
    """``state`` (a new state line), ``stop`` (node-stop), ``restart``
    (node-start under the same UUID) or ``last-line`` (the node wrote nothing
    more: killed, or the trace ends)."""

    @property
    def active(self) -> bool:
        return self.state.upper() == ACTIVE_STATE


def server_segments(info: NodeInfo) -> list[Segment]:
    """The states of one Binary Star server over time.

    A state lasts until the next ``bstar-state`` line, a ``node-stop``, a
    ``node-start`` (a restart under the same UUID), or else the node's last
    line: a server killed without a trace of it is presumed dead after the
    last line it wrote.
    """
    marks: list[tuple[float, int, str | None, str]] = []
    marks.extend((ts, 0, None, "restart") for ts in info.starts)
    marks.extend((ts, 0, None, "stop") for ts in info.stops)
    marks.extend((c.ts, 1, c.state, "state") for c in info.changes)
    marks.sort(key=lambda x: (x[0], x[1]))
    segments: list[Segment] = []
    current: tuple[float, str] | None = None
    for ts, _, state, reason in marks:
        if current is not None and ts > current[0]:
            segments.append(Segment(info.node, current[0], ts, current[1], reason))
        current = None if state is None else (ts, state)
    if current is not None:
        end = max(current[0], info.last_ts)
        segments.append(Segment(info.node, current[0], end, current[1], "last-line"))
    # Merge consecutive segments in the same state (a repeated state line).
    merged: list[Segment] = []
    for seg in segments:
        last = merged[-1] if merged else None
        if last is not None and last.state == seg.state and last.end == seg.start:
            merged[-1] = Segment(seg.node, last.start, seg.end, seg.state, seg.end_reason)
        else:
            merged.append(seg)
    return merged


@final
@dataclass(frozen=True)
class Failover:
    """A server becoming ACTIVE after the first activation of the trace."""

    at: float
    new: str
    old: str | None
    """The server whose ACTIVE period started last before ``at``."""
    after: float
    """The previous activation (lower bound for the old server's last answer)."""
    before: float
    """The next activation (upper bound for the new server's first answer)."""


def bstar_timeline(ov: Overview) -> tuple[BstarSummary, list[Failover]]:
    """Servers' states, no-ACTIVE intervals, dual-ACTIVE intervals, failovers.

    Pure Python over the collected ``bstar-state`` lines (see
    :func:`server_segments` for how a state ends).
    """
    servers = [info for info in ov.nodes.values() if info.changes]
    servers.sort(key=lambda i: (i.name or "", i.node))
    trace_end = ov.end
    segments = {info.node: server_segments(info) for info in servers}
    active = sorted(
        (seg for segs in segments.values() for seg in segs if seg.active),
        key=lambda s: (s.start, s.node),
    )
    out: BstarSummary = {
        "servers": [
            {
                "node": info.node,
                "name": info.name,
                "changes": len(info.changes),
                "last_ts": info.last_ts,
                "stopped": bool(info.stops),
                "segments": [
                    {"start": s.start, "end": s.end, "state": s.state, "end_reason": s.end_reason}
                    for s in segments[info.node]
                ],
            }
            for info in servers
        ],
        "first_active": None,
        "trace_end": trace_end,
        "no_active": [],
        "dual_active": [],
        "failovers": [],
    }
    if not active or trace_end is None:
        return out, []
    out["first_active"] = active[0].start

    # Sweep over the ACTIVE periods; at equal times an end comes before a start.
    events = [(seg.start, 1, seg) for seg in active if seg.end > seg.start]
    events += [(seg.end, -1, seg) for seg in active if seg.end > seg.start]
    events.sort(key=lambda e: (e[0], e[1], e[2].node))
    running: list[Segment] = []
    no_active: list[NoActive] = []
    dual: list[DualActive] = []
    gap: Segment | None = None  # the period whose end left no server ACTIVE
    dual_start = 0.0
    dual_nodes: set[str] = set()
    for ts, delta, seg in events:
        if delta > 0:
            if not running and gap is not None:
                if ts > gap.end:
                    no_active.append(_gap(gap, ts, trace_end))
                gap = None
            running.append(seg)
            if len(running) == 2:
                dual_start = ts
                dual_nodes = {s.node for s in running}
            elif len(running) > 2:
                dual_nodes.add(seg.node)
        else:
            if len(running) == 2 and ts > dual_start:
                dual.append(
                    {
                        "start": dual_start,
                        "end": ts,
                        "duration": ts - dual_start,
                        "servers": sorted(dual_nodes),
                    }
                )
            running.remove(seg)
            if not running:
                gap = seg
    if gap is not None and trace_end > gap.end:
        no_active.append(_gap(gap, trace_end, trace_end))
    if not events:  # only instantaneous ACTIVE periods: nobody was ever seen ACTIVE for long
        first = active[0]
        if trace_end > first.start:
            no_active.append(_gap(first, trace_end, trace_end))
    out["no_active"] = no_active
    out["dual_active"] = dual

    failovers: list[Failover] = []
    later = active[1:]
    previous = active[0].start
    for i, seg in enumerate(later):
        earlier = [s for s in active if s.start < seg.start and s.node != seg.node]
        old = max(earlier, key=lambda s: s.start).node if earlier else None
        nxt = later[i + 1].start if i + 1 < len(later) else _INF
        failovers.append(Failover(at=seg.start, new=seg.node, old=old, after=previous, before=nxt))
        previous = seg.start
    return out, failovers


def _gap(ended: Segment, until: float, trace_end: float) -> NoActive:
    return {
        "start": ended.end,
        "end": until,
        "duration": until - ended.end,
        "after": ended.node,
        "cause": ended.end_reason,
        "ends_at_trace_end": until >= trace_end,
    }


def nearest_rank(values: Sequence[float], p: float) -> float | None:
    """Nearest-rank percentile of sorted *values* (the same rule as Spark's)."""
    if not values:
        return None
    rank = max(1, math.ceil(p * len(values)))
    return values[rank - 1]
