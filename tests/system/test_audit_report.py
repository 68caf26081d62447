"""The audit's report from a hand-made summary: no pyspark, no Java."""

from __future__ import annotations

import json
import math
from pathlib import Path

from trizre.audit import _report
from trizre.audit._summary import (
    FLAGS,
    INFO_FLAGS,
    REQUEST_COUNTS,
    Flag,
    LatencyStats,
    SegmentSummary,
    Summary,
    failed,
)


def segment(start: float, end: float, state: str, end_reason: str) -> SegmentSummary:
    return {"start": start, "end": end, "state": state, "end_reason": end_reason}


def stats(count: int, p50: float | None = None) -> LatencyStats:
    return {"count": count, "p50": p50, "p90": p50, "p99": p50, "max": p50, "mean": p50}


def summary(*, lost: int = 0, dual_active: bool = False, unreadable: int = 0) -> Summary:
    """A hand-made summary: 118 valid lines, and ``unreadable`` malformed ones."""
    flags: dict[str, Flag] = {
        name: {"count": 0, "requests": [], "truncated": False, "fails_audit": name in FLAGS}
        for name in (*FLAGS, *INFO_FLAGS)
    }
    if lost:
        flags["lost"] = {
            "count": lost,
            "requests": [
                {
                    "client": "c" * 32,
                    "rid": "00000000000000ab",
                    "service": "echo",
                    "pattern": "service",
                    "workers": [],
                    "executions": 0,
                    "answers": 0,
                    "abandons": 0,
                    "attempts": 3,
                }
            ],
            "truncated": lost > 1,
            "fails_audit": True,
        }
    return {
        "timings": {"read_and_overview": 0.5},
        "input": {
            "trace_path": "/traces/<run> & co",
            "clock": "m",
            "lines": 118 + unreadable,
            "valid_lines": 118,
            "malformed_lines": unreadable,
            "other_version_lines": 0,
            "incomplete_lines": 0,
            "kinds": {"enter": 2},
            "nodes": 3,
            "start": 100.0,
            "end": 110.0,
        },
        "requests": {
            "counts": dict.fromkeys(REQUEST_COUNTS, 7),
            "flags": flags,
            "retries": {"0": 6, "2": 1},
            "by_client": {},
        },
        "latency": {
            "overall": stats(7, 0.002),
            "by_pattern": {"service": stats(7, 0.002)},
            "by_service": {"": stats(2, float("nan")), "echo": stats(5, 0.003)},
            "histogram": [
                {"lo": 10**-2.7, "hi": 10**-2.6, "count": 5, "bin": -27},
                {"lo": 0.0, "hi": 0.0, "count": 2, "bin": None},
            ],
        },
        "bstar": {
            "servers": [
                {
                    "node": "p" * 32,
                    "name": "primary<1>",
                    "changes": 2,
                    "last_ts": 104.0,
                    "stopped": False,
                    "segments": [
                        {"start": 100.0, "end": 101.0, "state": "PRIMARY", "end_reason": "state"},
                        {
                            "start": 101.0,
                            "end": 104.0,
                            "state": "ACTIVE",
                            "end_reason": "last-line",
                        },
                    ],
                },
                {
                    "node": "b" * 32,
                    "name": "backup",
                    "changes": 2,
                    "last_ts": 110.0,
                    "stopped": False,
                    "segments": [
                        {"start": 100.0, "end": 106.0, "state": "PASSIVE", "end_reason": "state"},
                        {
                            "start": 106.0,
                            "end": 110.0,
                            "state": "ACTIVE",
                            "end_reason": "last-line",
                        },
                    ],
                },
            ],
            "first_active": 101.0,
            "trace_end": 110.0,
            "no_active": [
                {
                    "start": 104.0,
                    "end": 106.0,
                    "duration": 2.0,
                    "after": "p" * 32,
                    "cause": "last-line",
                    "ends_at_trace_end": False,
                }
            ],
            "dual_active": (
                [{"start": 105.0, "end": 105.5, "duration": 0.5, "servers": ["b" * 32, "p" * 32]}]
                if dual_active
                else []
            ),
            "failovers": [
                {
                    "at": 106.0,
                    "old": "p" * 32,
                    "new": "b" * 32,
                    "clients_measured": 1,
                    "clients_without_both": 0,
                    "max_gap": 2.25,
                    "p50_gap": 2.25,
                    "p90_gap": 2.25,
                    "max_first_new_latency": 0.5,
                    "p50_first_new_latency": 0.5,
                    "gaps": [],
                    "truncated": False,
                }
            ],
        },
        "presence": {
            "enters": 2,
            "exits": 1,
            "observers": [{"node": "c" * 32, "name": "client", "enters": 2, "exits": 1}],
            "silence_by_reason": {
                "expired": {"exits": 1, "measured": 1, "p50": 30.0, "p90": 30.0, "max": 30.0}
            },
            "exits_listed": [
                {
                    "observer": "c" * 32,
                    "observer_name": "client",
                    "peer": "p" * 32,
                    "peer_name": "primary<1>",
                    "reason": "expired",
                    "exit_ts": 108.0,
                    "last_heard_ts": 78.0,
                    "silence": 30.0,
                }
            ],
            "truncated": False,
        },
    }


def test_a_clean_summary_passes_and_a_flagged_one_fails() -> None:
    assert not failed(summary())
    assert failed(summary(lost=1))
    assert failed(summary(dual_active=True))
    assert failed(summary(unreadable=1))  # a verdict that does not cover every line
    assert not failed({"timings": {}, "input": summary()["input"]})  # nothing valid to judge


def test_the_report_shows_the_verdict_input_flags_and_latency() -> None:
    html = _report.render_html(summary(lost=3), exit_code=1)
    assert '<span class="bad">FAIL</span>' in html and "exit code 1" in html
    assert '<span class="bad">FAIL</span> — lost: 3 (exit code 1)' in html  # the why, at once
    assert "see the flags below" not in html
    assert "/traces/&lt;run&gt; &amp; co" in html  # names are escaped
    assert "118 valid" in html
    assert '<span class="bad">lost</span>' in html and "fails the audit" in html
    assert "00000000000000ab" in html
    assert all(label in html for label in REQUEST_COUNTS.values())
    assert "<svg" in html and "p50" in html
    assert "service &#x27;echo&#x27;" in html and "service &#x27;&#x27; (direct)" in html


def test_the_timeline_shows_each_server_and_the_gap_and_failover() -> None:
    html = _report.render_html(summary(dual_active=True), exit_code=1)
    assert "primary&lt;1&gt;" in html and "primary<1>" not in html
    assert "no ACTIVE server" in html and "two ACTIVE servers" in html
    assert "after pppppppp" in html and "(last-line)" in html
    assert "Failovers: client-visible outage" in html


def test_an_empty_timeline_and_no_latency_say_so() -> None:
    bare = summary()
    bare["bstar"]["servers"] = []
    bare["latency"]["histogram"] = []
    html = _report.render_html(bare, exit_code=0)
    assert '<span class="ok">PASS</span>' in html
    assert "No Binary Star server in these traces." in html
    assert "No answered request carries a latency." in html


def test_summary_json_has_no_nan_or_inf(tmp_path: Path) -> None:
    path = _report.write_summary(summary(), tmp_path)
    text = path.read_text("utf-8")
    assert "NaN" not in text and "Infinity" not in text
    loaded = json.loads(text)
    assert loaded["latency"]["by_service"][""]["p50"] is None  # NaN became null
    assert loaded["input"] == summary()["input"]
    html_path = _report.write_html(summary(), tmp_path, 0)
    assert html_path.read_text("utf-8").startswith("<!DOCTYPE html>")
    assert not math.isnan(loaded["latency"]["overall"]["p50"])
