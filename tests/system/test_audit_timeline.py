"""The Binary Star timeline rules, as plain Python: no pyspark, no Java.

Nodes are built by hand (what the overview pass would collect) and every
interval is checked on exact times.
"""

from __future__ import annotations

import subprocess
import sys

from trizre.audit._timeline import (
    Failover,
    NodeInfo,
    Overview,
    Segment,
    StateChange,
    bstar_timeline,
    nearest_rank,
    server_segments,
)


def server(
    node: str,
    changes: list[tuple[float, str]],
    *,
    last: float,
    starts: tuple[float, ...] = (),
    stops: tuple[float, ...] = (),
) -> NodeInfo:
    info = NodeInfo(node, name=node, first_ts=0.0, last_ts=last)
    info.changes = [StateChange(ts, None, state, None) for ts, state in changes]
    info.starts = list(starts)
    info.stops = list(stops)
    return info


def overview(*nodes: NodeInfo) -> Overview:
    return Overview(nodes={n.node: n for n in nodes})


def test_the_timeline_summary_and_report_modules_import_no_pyspark() -> None:
    code = (
        "import sys, trizre.audit._timeline, trizre.audit._summary, trizre.audit._report; "
        "sys.exit(any(m == 'pyspark' or m.startswith('pyspark.') for m in sys.modules))"
    )
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


def test_a_state_lasts_until_the_next_state_a_stop_or_the_last_line() -> None:
    info = server("p", [(1.0, "PRIMARY"), (2.0, "ACTIVE"), (5.0, "ACTIVE")], last=9.0, stops=(7.0,))
    assert server_segments(info) == [
        Segment("p", 1.0, 2.0, "PRIMARY", "state"),
        Segment("p", 2.0, 7.0, "ACTIVE", "stop"),  # the repeated ACTIVE merged in
    ]
    killed = server("k", [(1.0, "ACTIVE")], last=4.5)
    assert server_segments(killed) == [Segment("k", 1.0, 4.5, "ACTIVE", "last-line")]
    restarted = server("r", [(1.0, "ACTIVE"), (6.0, "BACKUP")], last=8.0, starts=(3.0,))
    assert server_segments(restarted) == [
        Segment("r", 1.0, 3.0, "ACTIVE", "restart"),
        Segment("r", 6.0, 8.0, "BACKUP", "last-line"),
    ]


def test_no_failover_no_interval() -> None:
    primary = server("p", [(0.0, "PRIMARY"), (1.0, "ACTIVE")], last=10.0)
    backup = server("b", [(0.0, "BACKUP"), (1.5, "PASSIVE")], last=10.0)
    out, failovers = bstar_timeline(overview(primary, backup))
    assert failovers == []
    assert out["first_active"] == 1.0
    assert out["trace_end"] == 10.0
    assert out["no_active"] == [] and out["dual_active"] == []
    assert [s["node"] for s in out["servers"]] == ["b", "p"]  # by name


def test_failover_after_the_active_server_is_killed() -> None:
    # The primary is killed at 4 (its last line); the backup takes over at 6.5.
    primary = server("p", [(0.0, "PRIMARY"), (1.0, "ACTIVE")], last=4.0)
    backup = server("b", [(0.0, "BACKUP"), (1.2, "PASSIVE"), (6.5, "ACTIVE")], last=10.0)
    out, failovers = bstar_timeline(overview(primary, backup))
    assert failovers == [Failover(at=6.5, new="b", old="p", after=1.0, before=float("inf"))]
    assert out["no_active"] == [
        {
            "start": 4.0,
            "end": 6.5,
            "duration": 2.5,
            "after": "p",
            "cause": "last-line",
            "ends_at_trace_end": False,
        }
    ]
    assert out["dual_active"] == []


def test_split_brain_is_a_dual_active_interval() -> None:
    primary = server("p", [(1.0, "ACTIVE")], last=10.0)
    backup = server("b", [(0.5, "PASSIVE"), (3.0, "ACTIVE"), (4.25, "PASSIVE")], last=10.0)
    out, failovers = bstar_timeline(overview(primary, backup))
    assert out["dual_active"] == [
        {"start": 3.0, "end": 4.25, "duration": 1.25, "servers": ["b", "p"]}
    ]
    assert [f.new for f in failovers] == ["b"]


def test_nobody_active_until_the_end_of_the_trace() -> None:
    primary = server("p", [(1.0, "ACTIVE")], last=2.0, stops=(2.0,))
    other = server("o", [(0.0, "PASSIVE")], last=9.0)
    out, _ = bstar_timeline(overview(primary, other))
    (gap,) = out["no_active"]
    assert (gap["start"], gap["end"], gap["cause"]) == (2.0, 9.0, "stop")
    assert gap["ends_at_trace_end"] is True


def test_a_trace_with_no_binary_star_server() -> None:
    out, failovers = bstar_timeline(overview(NodeInfo("client", last_ts=3.0, first_ts=0.0)))
    assert out["servers"] == [] and out["first_active"] is None and failovers == []


def test_nearest_rank_percentiles() -> None:
    assert nearest_rank([], 0.5) is None
    assert nearest_rank([1.0], 0.99) == 1.0
    values = [float(v) for v in range(1, 11)]
    assert nearest_rank(values, 0.5) == 5.0
    assert nearest_rank(values, 0.9) == 9.0
    assert nearest_rank(values, 0.91) == 10.0
