"""End to end: a chaos run on loopback writes traces; the audit judges them.

Workers are killed mid-request and a Binary Star primary dies; every node
records a trace.  ``trizre audit`` (the real command, real PySpark) must
report nothing lost or duplicated, and the same traces with one reply line
removed must report exactly that loss.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import trio

import trizre
from tests.support.bstar import run_server
from tests.support.nodes import FAST, free_udp_port
from tests.support.workers import run_worker
from trizre import patterns
from trizre.audit import _java
from trizre.patterns import IncomingRequest, RetryPolicy, State

pytest.importorskip("pyspark")


def _no_java() -> str | None:
    try:
        _java.find_java()
    except _java.JavaError as exc:
        return str(exc)
    return None


pytestmark = [
    pytest.mark.spark,
    pytest.mark.skipif(_no_java() is not None, reason=f"no Java for PySpark: {_no_java()}"),
]


async def echo(request: IncomingRequest) -> tuple[bytes, ...]:
    await trio.sleep(0.02)
    return request.body


async def chaos(trace_dir: Path) -> dict[str, int]:
    """Services with a worker killed under load, then a Binary Star failover."""
    port = free_udp_port()
    answered = {"service": 0, "bstar": 0}
    traced = {"trace_dir": trace_dir, **FAST}
    async with (
        trizre.open_node("client", beacon_port=port, **traced) as cli,
        trio.open_nursery() as nursery,
    ):
        # Three workers with reply caches; one dies with requests in flight.
        workers = [
            await nursery.start(run_worker_traced, port, f"w{i}", trace_dir) for i in range(3)
        ]
        async with patterns.open_service_client(cli, RetryPolicy(2, 3)) as client:
            await client.wait_for_service("echo", 3)

            async def ask(i: int) -> None:
                assert await client.request("echo", b"%d" % i) == (b"%d" % i,)
                answered["service"] += 1

            async with trio.open_nursery() as requests:
                for i in range(60):
                    requests.start_soon(ask, i)
                await workers[0].busy.wait()
                await workers[0].kill()

        # A Binary Star pair; the primary dies halfway through.
        primary = await nursery.start(run_server_traced, port, "p", True, "b", trace_dir)
        backup = await nursery.start(run_server_traced, port, "b", False, "p", trace_dir)
        await backup.star.state.wait_value(State.PASSIVE)
        async with patterns.open_binary_star_client(cli, "p", "b", RetryPolicy(0.5, 10)) as bs:
            for i in range(20):
                if i == 8:
                    await primary.kill()
                assert await bs.request(b"%d" % i) == (b"ok:%d" % i,)
                answered["bstar"] += 1
        nursery.cancel_scope.cancel()
    return answered


async def run_worker_traced(
    port: int, name: str, trace_dir: Path, task_status: Any = trio.TASK_STATUS_IGNORED
) -> None:
    await run_worker(port, name, echo, "echo", task_status, trace_dir=trace_dir, cache=True)


async def run_server_traced(
    port: int,
    name: str,
    primary: bool,
    partner: str,
    trace_dir: Path,
    task_status: Any = trio.TASK_STATUS_IGNORED,
) -> None:
    await run_server(port, name, primary, partner, task_status, trace_dir=trace_dir)


def audit(traces: Path, out: Path) -> tuple[int, dict[str, Any]]:
    result = subprocess.run(
        [sys.executable, "-m", "trizre.audit", str(traces), "--out", str(out), "-q"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    summary = json.loads((out / "summary.json").read_text())
    return result.returncode, summary


def flag_count(summary: dict[str, Any], flag: str) -> int:
    count: int = summary["requests"]["flags"][flag]["count"]
    return count


def test_chaos_run_audits_clean_and_a_removed_reply_is_caught(tmp_path: Path) -> None:
    traces = tmp_path / "traces"
    answered = trio.run(chaos, traces)
    assert answered == {"service": 60, "bstar": 20}

    code, summary = audit(traces, tmp_path / "report")
    assert code == 0, json.dumps(summary["requests"]["flags"], indent=1)
    for flag in ("lost", "duplicate_execution", "double_reply", "out_of_order"):
        assert flag_count(summary, flag) == 0, flag
    assert summary["requests"]["counts"]["answered"] == 80
    assert summary["requests"]["flags"]["re_executed"]["count"] >= 0  # allowed, reported
    assert summary["bstar"]["failovers"], "the audit saw no failover"
    assert (tmp_path / "report" / "report.html").exists()

    # Remove one answer from the client's trace: exactly that request is lost.
    broken = tmp_path / "broken"
    shutil.copytree(traces, broken)
    (client_trace,) = [p for p in broken.glob("client-*.jsonl")]
    lines = client_trace.read_text().splitlines(keepends=True)
    victim = next(i for i, line in enumerate(lines) if '"kind":"request-answered"' in line)
    rid = json.loads(lines[victim])["rid"]
    del lines[victim]
    client_trace.write_text("".join(lines))
    code, summary = audit(broken, tmp_path / "broken-report")
    assert code == 1
    assert flag_count(summary, "lost") == 1
    assert [r["rid"] for r in summary["requests"]["flags"]["lost"]["requests"]] == [rid]
    assert flag_count(summary, "duplicate_execution") == 0
