"""The PySpark audit (trizre.audit) on small hand-made traces.

Skipped when pyspark or a usable Java is missing.  One local[2]
SparkSession serves the whole module; the expensive pieces (a request
table, a full audit run) are module fixtures shared by several tests.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.audit_requests import (
    ABANDONED,
    AFTER_ABANDON,
    C1,
    C2,
    CLEAN,
    CROSS,
    DOUBLE,
    DUP_IDEM,
    EARLY,
    LOST,
    ORPHAN,
    REEXEC,
    W1,
    W2,
    request_cases,
)
from tests.support.audit_traces import Node, Traces, flagged_rids, rid, rids, uuid_of
from tests.support.spark import require_java

pytest.importorskip("pyspark")

from trizre.audit import _java, _lines, cli
from trizre.audit._lines import driver_frame
from trizre.audit._rules import (
    HiddenTraceFiles,
    _sorting_aggregations,
    latency_histogram,
    latency_stats,
    observer_files,
    overview,
    overview_groups,
    presence,
    read_files,
    read_lines,
    request_summary,
    request_table,
    tag_lines,
    valid_lines,
)
from trizre.audit._timeline import bstar_timeline
from trizre.trace import _contract as kinds
from trizre.trace._writer import Tracer

require_java()

pytestmark = pytest.mark.spark

from pyspark.sql import DataFrame, SparkSession  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402
from pyspark.sql.types import (  # noqa: E402
    ArrayType,
    DoubleType,
    LongType,
    StringType,
    StructField,
    StructType,
)

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    session = cli.build_session("local[2]", app_name="trizre-audit-tests", shuffle_partitions=2)
    try:
        yield session
    finally:
        session.stop()


def _tagged(spark: SparkSession, directory: Path) -> DataFrame:
    return tag_lines(read_lines(spark, str(directory)), "m")


def _request_table(spark: SparkSession, directory: Path) -> DataFrame:
    tagged = _tagged(spark, directory)
    return request_table(valid_lines(tagged), overview(tagged))


def approx(value: float) -> Any:
    return pytest.approx(value, abs=1e-9)


# --------------------------------------------------------------------------
@pytest.fixture(scope="module")
def request_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return request_cases().write(tmp_path_factory.mktemp("requests"))


@pytest.fixture(scope="module")
def req(spark: SparkSession, request_dir: Path) -> Iterator[dict[str, Any]]:
    table = _request_table(spark, request_dir).cache()
    try:
        rows = {(r["client"], r["rid"]): r.asDict() for r in table.collect()}
        yield {"rows": rows, "summary": request_summary(table, 50)}
    finally:
        table.unpersist()


def row(req: dict[str, Any], client: Node, n: int) -> dict[str, Any]:
    result: dict[str, Any] = req["rows"][(client.uuid, rid(n))]
    return result


def test_request_table_keys_requests_by_client_and_rid(req: dict[str, Any]) -> None:
    assert len(req["rows"]) == 12
    assert row(req, C1, CLEAN)["workers"] == [W1.uuid]
    assert row(req, C2, CLEAN)["answered_by"] == W1.uuid
    clean = row(req, C1, CLEAN)
    assert clean["latency"] == approx(0.01)
    assert not any(clean[f] for f in ("lost", "duplicate_execution", "double_reply"))


def test_lost_request(req: dict[str, Any]) -> None:
    assert row(req, C1, LOST)["lost"]
    assert flagged_rids(req["summary"], "lost") == rids([LOST])
    assert req["summary"]["flags"]["lost"]["count"] == 1


def test_duplicate_execution_on_idempotent_server_is_flagged(req: dict[str, Any]) -> None:
    r = row(req, C1, DUP_IDEM)
    assert (r["executions"], r["idempotent_executions"]) == (2, 2)
    assert r["duplicate_execution"] and not r["re_executed"]
    assert flagged_rids(req["summary"], "duplicate_execution") == rids([DUP_IDEM])


def test_non_idempotent_reexecution_is_counted_not_flagged(req: dict[str, Any]) -> None:
    r = row(req, C1, REEXEC)
    assert r["re_executed"] and not r["duplicate_execution"]
    assert r["workers"] == sorted([W1.uuid, W2.uuid])
    flags = req["summary"]["flags"]
    assert flagged_rids(req["summary"], "re_executed") == rids([CROSS, REEXEC])
    assert flags["re_executed"]["fails_audit"] is False


def test_idempotent_runs_on_two_servers_are_re_executions(req: dict[str, Any]) -> None:
    r = row(req, C1, CROSS)
    assert (r["executions"], r["idempotent_executions"]) == (2, 2)
    assert r["re_executed"] and not r["duplicate_execution"]


def test_double_reply(req: dict[str, Any]) -> None:
    assert row(req, C1, DOUBLE)["answers"] == 2
    assert flagged_rids(req["summary"], "double_reply") == rids([DOUBLE])


def test_out_of_order_answer(req: dict[str, Any]) -> None:
    assert row(req, C1, EARLY)["out_of_order"]
    assert row(req, C1, AFTER_ABANDON)["out_of_order"]
    assert flagged_rids(req["summary"], "out_of_order") == rids([EARLY, AFTER_ABANDON])


def test_abandoned_request_is_not_lost(req: dict[str, Any]) -> None:
    r = row(req, C2, ABANDONED)
    assert not r["lost"] and not r["out_of_order"]
    assert (r["abandons"], r["abandon_attempts"], r["attempts"], r["retries"]) == (1, 3, 3, 2)


def test_orphan_and_retry_distribution(req: dict[str, Any]) -> None:
    summary = req["summary"]
    assert flagged_rids(summary, "orphan") == rids([ORPHAN])
    # Attempts: DUP_IDEM, REEXEC, RETRIED, CROSS 2; ABANDONED 3; the 6 others 1.
    assert summary["retries"] == {"0": 6, "1": 4, "2": 1}
    counts = summary["counts"]
    assert counts["requests"] == 12
    assert counts["sent"] == 11
    assert counts["abandoned"] == 2


def test_killed_client_leaves_its_requests_interrupted_not_lost(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Unanswered requests: lost if the client stopped cleanly, else its trace decides."""
    tr = Traces()
    server = tr.node("server", start=0.0)
    killed, restarted, clean, unknown = (
        tr.node(name) for name in ("killed", "restarted", "clean", "unknown")
    )
    for node in (killed, restarted, clean):
        tr.line(node, "node-start", 0.0, endpoint="tcp://127.0.0.1:5670")
    tr.request(killed, server, 1, 1.0)
    tr.sent(killed, server, 2, 2.0)  # kill -9: its trace just ends
    tr.sent(restarted, server, 1, 1.0)
    tr.line(restarted, "node-start", 3.0, endpoint="tcp://127.0.0.1:5670")  # same UUID again
    tr.sent(restarted, server, 2, 4.0)  # this life ends cleanly, unanswered
    tr.line(restarted, "node-stop", 9.0)
    tr.sent(clean, server, 1, 1.0)
    tr.line(clean, "node-stop", 9.0)
    tr.sent(unknown, server, 1, 1.0)  # no lifecycle lines at all: cannot tell
    table = _request_table(spark, tr.write(tmp_path))
    rows = {(r["client"], int(r["rid"], 16)): r for r in table.collect()}
    verdict = {
        (node.name, n): ("interrupted" if rows[node.uuid, n]["interrupted"] else "")
        + ("lost" if rows[node.uuid, n]["lost"] else "")
        for node, n in [
            (killed, 1),
            (killed, 2),
            (restarted, 1),
            (restarted, 2),
            (clean, 1),
            (unknown, 1),
        ]
    }
    assert verdict == {
        ("killed", 1): "",
        ("killed", 2): "interrupted",
        ("restarted", 1): "interrupted",
        ("restarted", 2): "lost",
        ("clean", 1): "lost",
        ("unknown", 1): "lost",
    }
    summary = request_summary(table, 10)
    assert summary["flags"]["interrupted"]["fails_audit"] is False
    assert summary["by_client"][killed.uuid]["interrupted"] == 1
    assert summary["by_client"][restarted.uuid] == {
        "requests": 2, "sent": 2, "answered": 0, "abandoned": 0, "lost": 1, "interrupted": 1,
    }  # fmt: skip


def test_a_request_sent_again_after_its_abandon_is_a_new_round(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Titanic resends a stored request under its id after giving up on it once."""
    tr = Traces()
    client, worker = tr.node("titanic", start=0.0), tr.node("worker", start=0.0)
    for n in (1, 2, 3):
        tr.sent(client, worker, n, float(n))
        tr.abandoned(client, n, n + 0.5, attempts=1)
    tr.sent(client, worker, 1, 5.0)  # round two, answered
    tr.executed(worker, client, 1, 5.01)
    tr.answered(client, worker, 1, 5.02, latency=0.02)
    tr.sent(client, worker, 2, 5.5)  # round two, never ended
    tr.answered(client, worker, 3, 6.0, latency=3.0)  # no new round: a late answer
    # A round that found no worker at all ends without a send; the next
    # round's send and answer come after its abandon (make scale, a kill -9
    # of the only worker's process outlasting Titanic's attempts).
    tr.abandoned(client, 4, 6.5, attempts=3)
    tr.sent(client, worker, 4, 7.0)
    tr.executed(worker, client, 4, 7.01)
    tr.answered(client, worker, 4, 7.02, latency=0.02)
    # Answered after its abandon, never sent at all.
    tr.abandoned(client, 5, 7.5, attempts=3)
    tr.answered(client, worker, 5, 7.6, latency=0.1)
    tr.line(client, "node-stop", 9.0)
    table = _request_table(spark, tr.write(tmp_path))
    rows = {int(r["rid"], 16): r for r in table.collect()}
    flags = ("lost", "out_of_order")
    assert {n: tuple(f for f in flags if rows[n][f]) for n in rows} == {
        1: (),
        2: ("lost",),
        3: ("out_of_order",),
        4: (),
        5: ("out_of_order",),
    }


def test_abandoned_before_any_send_is_the_clients_not_an_orphan(
    spark: SparkSession, tmp_path: Path
) -> None:
    """No server ever present: the client gave up without sending, and said so."""
    tr = Traces()
    client = tr.node("client", start=0.0)
    tr.abandoned(client, 1, 3.0, attempts=3)
    table = _request_table(spark, tr.write(tmp_path))
    (row,) = table.collect()
    assert (row["sends"], row["abandons"], row["orphan"], row["lost"]) == (0, 1, False, False)
    counts = request_summary(table, 10)["by_client"][client.uuid]
    assert (counts["requests"], counts["sent"], counts["abandoned"]) == (1, 0, 1)


def test_counts_per_client(req: dict[str, Any]) -> None:
    """What a client's own tally is checked against (make chaos)."""
    summary = req["summary"]
    by_client = summary["by_client"]
    assert sorted(by_client) == sorted([C1.uuid, C2.uuid])
    assert by_client[C1.uuid]["lost"] == 1 and by_client[C2.uuid]["lost"] == 0
    assert by_client[C2.uuid]["abandoned"] >= 1
    for client in (C1, C2):
        mine = [r for r in req["rows"].values() if r["client"] == client.uuid and r["sends"]]
        assert by_client[client.uuid] == {
            "requests": len(mine),
            "sent": len(mine),
            "answered": sum(1 for r in mine if r["answers"]),
            "abandoned": sum(1 for r in mine if r["abandons"]),
            "lost": sum(1 for r in mine if r["lost"]),
            "interrupted": 0,
        }
    for key in ("sent", "answered", "abandoned"):
        assert sum(c[key] for c in by_client.values()) == summary["counts"][key]


# --------------------------------------------------------------------------
# Latency percentiles


def test_latency_percentiles(spark: SparkSession, tmp_path: Path) -> None:
    tr = Traces()
    client, server = tr.node("client"), tr.node("server")
    for i in range(1, 101):  # 1 ms .. 100 ms
        odd = i % 2 == 1
        tr.request(
            client,
            server,
            i,
            float(i),
            latency=i / 1000,
            pattern="lazy-pirate" if odd else "service",
            service="" if odd else "echo",
        )
    table = _request_table(spark, tr.write(tmp_path))
    stats = latency_stats(table)
    overall = stats["overall"]
    assert overall["count"] == 100
    assert (overall["p50"], overall["p90"], overall["p99"], overall["max"]) == (
        approx(0.050),
        approx(0.090),
        approx(0.099),
        approx(0.100),
    )
    odd = stats["by_pattern"]["lazy-pirate"]  # 1, 3, ... 99 ms
    assert (odd["p50"], odd["p90"], odd["max"]) == (approx(0.049), approx(0.089), approx(0.099))
    even = stats["by_service"]["echo"]  # 2, 4, ... 100 ms
    assert (even["count"], even["p50"], even["max"]) == (50, approx(0.050), approx(0.100))
    assert set(stats["by_service"]) == {"", "echo"}
    histogram = latency_histogram(table)
    assert sum(b["count"] for b in histogram) == 100
    assert all(b["lo"] <= 0.0011 or b["count"] for b in histogram)


# --------------------------------------------------------------------------
# Binary Star


def test_dual_active_and_no_active_intervals(spark: SparkSession, tmp_path: Path) -> None:
    tr = Traces()
    a, b = tr.node("bstar-a", start=0.0), tr.node("bstar-b", start=0.0)
    tr.bstar(a, 1.0, "PRIMARY", "ACTIVE", "PEER_BACKUP")
    tr.bstar(b, 1.5, "BACKUP", "PASSIVE", "PEER_ACTIVE")
    tr.bstar(b, 5.0, "PASSIVE", "ACTIVE", "CLIENT_REQUEST")  # split brain
    tr.bstar(a, 7.0, "ACTIVE", "PASSIVE", "PEER_ACTIVE")
    tr.line(b, "node-stop", 10.0)
    tr.line(a, "node-stop", 20.0)
    ov = overview(_tagged(spark, tr.write(tmp_path)))
    bstar, failovers = bstar_timeline(ov)
    assert bstar["first_active"] == 1.0
    assert bstar["dual_active"] == [
        {"start": 5.0, "end": 7.0, "duration": 2.0, "servers": sorted([a.uuid, b.uuid])}
    ]
    [gap] = bstar["no_active"]
    assert (gap["start"], gap["end"], gap["after"], gap["cause"]) == (10.0, 20.0, b.uuid, "stop")
    assert gap["ends_at_trace_end"]
    assert [(f.at, f.old, f.new) for f in failovers] == [(5.0, a.uuid, b.uuid)]
    [sa, sb] = bstar["servers"]
    assert [s["state"] for s in sa["segments"]] == ["ACTIVE", "PASSIVE"]
    assert [s["state"] for s in sb["segments"]] == ["PASSIVE", "ACTIVE"]


P, B = Node("primary"), Node("backup")


def failover_trace() -> Traces:
    """Primary serves two clients, dies at ~9.5; the backup takes over at 12."""
    tr = Traces()
    for node in (P, B, C1, C2):
        tr.node(node.name, start=0.0)
    tr.bstar(P, 1.0, "PRIMARY", "ACTIVE", "PEER_BACKUP")
    tr.bstar(B, 1.2, "BACKUP", "PASSIVE", "PEER_ACTIVE")
    bs = {"pattern": "binary-star"}
    n = 0
    for second in range(2, 10):
        for client, offset in ((C1, 0.0), (C2, 0.5)):
            n += 1
            tr.request(client, P, n, second + offset, latency=0.005, idempotent=True, **bs)
    # Presence: the clients see each other.
    tr.enter(C1, C2, 0.1)
    tr.whisper_received(C1, C2, 1.5)
    # P is killed after its last line (9.5025). C1's request 100 times out.
    tr.sent(C1, P, 100, 10.0, **bs)
    tr.sent(C1, B, 100, 11.0, attempt=2, **bs)
    tr.line(B, "request-refused", 11.0, rid=rid(100), client=C1.uuid, status=503)
    tr.bstar(B, 12.0, "PASSIVE", "ACTIVE", "PEER_EXPIRED")
    tr.sent(C1, B, 100, 12.1, attempt=3, **bs)
    tr.executed(B, C1, 100, 12.12, idempotent=True)
    tr.answered(C1, B, 100, 12.15, latency=2.15, attempt=3, **bs)
    tr.request(C2, B, 101, 12.25, latency=0.05, idempotent=True, **bs)  # answered at 12.3
    tr.request(C1, B, 102, 13.0, latency=0.005, idempotent=True, **bs)
    tr.request(C2, B, 103, 13.5, latency=0.005, idempotent=True, **bs)
    tr.line(B, "node-stop", 14.0)
    tr.exit(C1, C2, 14.1, reason="goodbye")
    tr.line(C1, "node-stop", 14.2)
    tr.line(C2, "node-stop", 14.2)
    return tr


@pytest.fixture(scope="module")
def clean_run(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The failover trace audited by the command itself, in this process."""
    traces = failover_trace().write(tmp_path_factory.mktemp("failover"))
    out = tmp_path_factory.mktemp("failover-report")
    code = cli.main([str(traces), "--out", str(out), "--quiet"])
    summary = json.loads((out / "summary.json").read_text())
    return {"code": code, "out": out, "summary": summary}


def test_clean_run_has_no_flags(clean_run: dict[str, Any]) -> None:
    summary = clean_run["summary"]
    assert clean_run["code"] == 0
    assert summary["audit"]["passed"] is True
    flags = summary["requests"]["flags"]
    assert {name: flag["count"] for name, flag in flags.items()} == {
        "lost": 0,
        "duplicate_execution": 0,
        "double_reply": 0,
        "out_of_order": 0,
        "re_executed": 0,
        "interrupted": 0,
        "orphan": 0,
    }
    assert summary["requests"]["counts"]["refused"] == 1
    assert summary["bstar"]["dual_active"] == []


def test_failover_outage_and_no_active(clean_run: dict[str, Any]) -> None:
    bstar = clean_run["summary"]["bstar"]
    assert [s["name"] for s in bstar["servers"]] == ["backup", "primary"]
    killed, shutdown = bstar["no_active"]
    assert (killed["start"], killed["end"]) == (approx(9.5025), 12.0)
    assert (killed["after"], killed["cause"], killed["ends_at_trace_end"]) == (
        P.uuid,
        "last-line",
        False,
    )
    assert (shutdown["start"], shutdown["end"], shutdown["cause"]) == (14.0, 14.2, "stop")
    assert shutdown["ends_at_trace_end"]
    [failover] = bstar["failovers"]
    assert (failover["at"], failover["old"], failover["new"]) == (12.0, P.uuid, B.uuid)
    gaps = {g["client"]: g["gap"] for g in failover["gaps"]}
    # C1: last answer from P at 9.005, first from B at 12.15; C2: 9.505 -> 12.3.
    assert gaps == {C1.uuid: approx(3.145), C2.uuid: approx(2.795)}
    assert failover["max_gap"] == approx(3.145)
    assert failover["p50_gap"] == approx(2.795)
    # C1's request 100 was first sent at 10.0 and answered by B at 12.15.
    assert failover["max_first_new_latency"] == approx(2.15)


def test_cli_writes_report_files(spark: SparkSession, clean_run: dict[str, Any]) -> None:
    out: Path = clean_run["out"]
    page = (out / "report.html").read_text()
    assert page.startswith("<!DOCTYPE html>")
    assert page.count("<svg") == 2  # latency histogram and failover timeline
    assert "PASS" in page and "<script" not in page
    table = spark.read.parquet(str(out / "requests.parquet"))
    assert table.count() == clean_run["summary"]["requests"]["counts"]["requests"] == 20


# --------------------------------------------------------------------------
# Presence


def test_presence_churn_and_silence_before_exit(spark: SparkSession, tmp_path: Path) -> None:
    tr = Traces()
    o1, o2 = tr.node("observer-1"), tr.node("observer-2")
    p1, p2 = tr.node("peer-1"), tr.node("peer-2")
    tr.enter(o1, p1, 1.0)
    tr.whisper_received(o1, p1, 2.0)
    tr.whisper_received(o1, p1, 3.0)
    tr.line(o1, "whisper-sent", 4.0, peer=p1.uuid, seq=5)  # says nothing about p1
    tr.exit(o1, p1, 33.0, reason="expired")
    tr.enter(o1, p1, 40.0)
    tr.exit(o1, p1, 41.0, reason="goodbye")
    tr.enter(o2, p1, 1.0)
    tr.line(o2, "request-received", 4.5, rid=rid(1), client=p1.uuid, service="")
    tr.exit(o2, p1, 5.0, reason="goodbye")
    tr.exit(o2, p2, 6.0, reason="beacon")  # never heard from
    directory = tr.write(tmp_path)
    tagged = _tagged(spark, directory)
    result = presence(spark, valid_lines(tagged), overview(tagged), 10)
    assert (result["enters"], result["exits"]) == (3, 4)
    by_name = {o["name"]: (o["enters"], o["exits"]) for o in result["observers"]}
    assert by_name == {"observer-1": (2, 2), "observer-2": (1, 2)}
    silence = {(e["observer_name"], e["exit_ts"]): e["silence"] for e in result["exits_listed"]}
    assert silence == {
        ("observer-1", 33.0): approx(30.0),
        ("observer-1", 41.0): approx(1.0),
        ("observer-2", 5.0): approx(0.5),
        ("observer-2", 6.0): None,
    }
    reasons = result["silence_by_reason"]
    assert reasons["goodbye"] == {
        "exits": 2,
        "measured": 2,
        "p50": approx(0.5),
        "p90": approx(1.0),
        "max": approx(1.0),
    }
    assert (reasons["beacon"]["exits"], reasons["beacon"]["measured"]) == (1, 0)


def test_presence_reads_only_the_files_of_nodes_that_saw_an_exit(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Every file of such a node (here rotated: the exit and the last line
    heard are in different files), and no file of any other node."""
    tr = Traces()
    observer, peer, server = tr.node("observer"), tr.node("peer"), tr.node("server")
    tr.enter(observer, peer, 1.0)
    tr.whisper_received(observer, peer, 2.0)
    tr.line(observer, "whisper-sent", 3.0, peer=peer.uuid, seq=3)
    tr.line(observer, "whisper-sent", 4.0, peer=peer.uuid, seq=4)
    tr.exit(observer, peer, 9.0, reason="expired")
    tr.enter(server, peer, 1.0)
    tr.whisper_received(server, peer, 5.0)
    tr.enter(peer, observer, 1.0)
    directory = tr.write(tmp_path, rotate_every=2)
    ov = overview(_tagged(spark, directory))
    files = observer_files(ov)
    assert files is not None
    assert sorted(Path(f).name for f in files) == sorted(
        p.name for p in directory.glob("observer-*")
    )
    assert len(files) == 3
    lines = valid_lines(tag_lines(read_files(spark, files), "m"))
    [entry] = presence(spark, lines, ov, 10)["exits_listed"]
    assert (entry["observer_name"], entry["last_heard_ts"]) == ("observer", 2.0)
    assert entry["silence"] == approx(7.0)
    # When every node saw an exit, every file is read: no list.
    tr.exit(server, peer, 9.0)
    tr.exit(peer, observer, 9.0)
    assert observer_files(overview(_tagged(spark, tr.write(tmp_path / "all")))) is None


def test_only_the_request_table_is_planned_to_sort(spark: SparkSession, tmp_path: Path) -> None:
    """Its aggregation sorts from the start; percentiles over a few groups hash."""
    key = "spark.sql.execution.useObjectHashAggregateExec"
    tr = Traces()
    client, server = tr.node("client", start=0.0), tr.node("server", start=0.0)
    tr.request(client, server, 1, 1.0)
    tagged = _tagged(spark, tr.write(tmp_path))
    table = request_table(valid_lines(tagged), overview(tagged))
    before = spark.conf.get(key)
    with _sorting_aggregations(spark):
        plan = table._jdf.queryExecution().executedPlan().toString()
    assert "SortAggregate" in plan and "ObjectHashAggregate" not in plan, plan
    assert spark.conf.get(key) == before
    percentiles = (
        spark.range(100).groupBy((F.col("id") % 3).alias("g")).agg(F.percentile_approx("id", 0.5))
    )
    plan = percentiles._jdf.queryExecution().executedPlan().toString()
    assert "ObjectHashAggregate" in plan and "SortAggregate" not in plan, plan


def test_driver_frame_keeps_every_value(spark: SparkSession) -> None:
    schema = StructType(
        [
            StructField("name", StringType()),
            StructField("n", LongType()),
            StructField("ts", DoubleType()),
            StructField("times", ArrayType(DoubleType())),
        ]
    )
    rows = [
        ("quote ' \" \\ é", 2**62, 1217.214481, [0.1, 1e-9]),
        (None, None, None, []),
    ]
    frame = driver_frame(spark, schema, rows)
    assert frame.schema == schema
    assert [tuple(r) for r in frame.collect()] == rows
    assert driver_frame(spark, schema, []).collect() == []
    with pytest.raises(ValueError):
        driver_frame(spark, schema, [("short row",)])


def test_driver_frame_of_many_rows_is_no_literal(
    spark: SparkSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A literal travels inside every task: past a bound the rows go the usual way."""
    schema = StructType([StructField("n", LongType()), StructField("name", StringType())])
    rows = [(i, f"node-{i}") for i in range(2000)]

    def literal(frame: DataFrame) -> bool:
        return "from_json" in frame._jdf.queryExecution().analyzed().toString()

    assert literal(driver_frame(spark, schema, rows[:10]))
    monkeypatch.setattr(_lines, "DRIVER_FRAME_LITERAL", 1000)
    frame = driver_frame(spark, schema, rows)
    assert not literal(frame)
    assert sorted(tuple(r) for r in frame.collect()) == rows


# --------------------------------------------------------------------------
# Input handling


def test_rotated_files_are_read_together(spark: SparkSession, tmp_path: Path) -> None:
    tr = Traces()
    client, server = tr.node("client", start=0.0), tr.node("server", start=0.0)
    for i in range(1, 11):
        tr.request(client, server, i, float(i))
    directory = tr.write(tmp_path / "traces", rotate_every=4)
    (directory / "nested").mkdir()
    (directory / "nested" / "late.jsonl").write_text(
        "this is not json\n"
        + json.dumps({"v": 2, "m": 1.0, "t": 1.0, "node": "x", "name": "x", "kind": "enter"})
        + "\n"
    )
    (directory / "notes.txt").write_text("ignored\n")
    names = sorted(p.name for p in directory.glob("client-*"))
    assert len(names) == 6  # 21 lines, 4 per file: .jsonl, .1.jsonl ... .5.jsonl
    tagged = _tagged(spark, directory)
    ov = overview(tagged)
    assert (ov.lines, ov.valid, ov.malformed, ov.other_version) == (54, 52, 1, 1)
    summary = request_summary(request_table(valid_lines(tagged), ov), 5)
    assert summary["counts"]["answered"] == 10
    assert all(f["count"] == 0 for f in summary["flags"].values())


def test_overview_is_one_hash_aggregation_and_keeps_every_rare_line(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Pass 1 aggregates numbers only, so Spark hashes rather than sorts every
    line (docs/benchmarks.md); repeated rare lines and a renamed node survive."""
    tr = Traces()
    node = tr.node("server", start=1.0)
    tr.line(node, "node-start", 1.0, endpoint="tcp://127.0.0.1:5670")  # the same line again
    for _ in range(2):
        tr.line(node, "exit", 3.0, peer=uuid_of("gone"), peer_name="gone", reason="expired")
    tr.line(node, "node-stop", 4.0)
    directory = tr.write(tmp_path)
    renamed = next(directory.glob("server-*.jsonl"))
    with renamed.open("a") as f:  # the same node, restarted under another name
        f.write(json.dumps({**tr.lines[node][-1], "m": 5.0, "t": 5.0, "name": "zerver"}) + "\n")
    tagged = _tagged(spark, directory)
    plan = overview_groups(tagged)._jdf.queryExecution().executedPlan().toString()
    assert "HashAggregate" in plan, plan
    assert "SortAggregate" not in plan and "ObjectHashAggregate" not in plan, plan
    ov = overview(tagged)
    info = ov.nodes[node.uuid]
    assert (info.lines, info.starts, info.stops) == (6, [1.0, 1.0], [4.0, 5.0])
    assert [(e.ts, e.peer, e.reason) for e in info.exits] == [(3.0, uuid_of("gone"), "expired")] * 2
    assert (info.name, info.first_ts, info.last_ts) == ("zerver", 1.0, 5.0)


def test_no_trace_is_skipped_silently_whatever_its_name(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Spark skips files named ``_*`` or ``.*``: trizre never writes one, the audit refuses one."""
    # The writer: nodes named so get a prefix, and their traces are read.
    directory = tmp_path / "traces"
    for name in ("_cli", ".hidden"):
        tracer = Tracer(directory / "_archive" / ".old", uuid.uuid4(), name)
        tracer.record(kinds.NODE_START, endpoint="tcp://127.0.0.1:5670")
        tracer.close()
    assert sorted(p.name[:8] for p in directory.rglob("*.jsonl")) == ["node.hid", "node_cli"]
    # Folders named so are read; every line counts.
    tr = Traces()
    client, server = tr.node("client", start=0.0), tr.node("server", start=0.0)
    for i in range(1, 6):
        tr.request(client, server, i, float(i))
    tr.write(directory)
    tagged = _tagged(spark, directory)
    ov = overview(tagged)
    assert ov.valid == sum(len(lines) for lines in tr.lines.values()) + 2
    assert request_summary(request_table(valid_lines(tagged), ov), 5)["counts"]["answered"] == 5
    # A file renamed so (or written by something else) is refused, loudly.
    next(directory.glob("client-*")).rename(directory / "_client.jsonl")
    next(directory.glob("server-*")).rename(directory / ".server.jsonl")
    with pytest.raises(HiddenTraceFiles, match=r"2 trace file\(s\) have names Spark skips"):
        read_lines(spark, str(directory))
    out = tmp_path / "report"
    code = cli.main([str(directory), "--out", str(out)])
    assert code == cli.EXIT_USAGE


# --------------------------------------------------------------------------
# Java and the command


def test_a_local_session_is_tuned_for_one_machine(spark: SparkSession) -> None:
    """Uncompressed shuffle files and the parallel collector (docs/benchmarks.md)."""
    for key, value in cli.LOCAL_CONFIG.items():
        assert spark.conf.get(key) == value
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    beans = jvm.java.lang.management.ManagementFactory.getGarbageCollectorMXBeans()
    collectors = {str(bean.getName()) for bean in beans}
    assert "PS Scavenge" in collectors, collectors  # -XX:+UseParallelGC's young collector


def test_parse_java_version() -> None:
    assert _java.parse_java_version('openjdk version "17.0.15" 2025-04-15') == ("17.0.15", 17)
    assert _java.parse_java_version('openjdk version "21" 2023-09-19') == ("21", 21)
    assert _java.parse_java_version('java version "1.8.0_392"') == ("1.8.0_392", 8)
    with pytest.raises(ValueError):
        _java.parse_java_version("no java here")


def _no_spark(*args: object, **kwargs: object) -> None:
    raise AssertionError("Spark must not start")


def test_missing_java_exits_3_without_starting_spark(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    request_dir: Path,
) -> None:
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setattr(cli, "build_session", _no_spark)
    monkeypatch.setattr(cli, "run", _no_spark)
    assert cli.main([str(request_dir), "--out", str(tmp_path / "out")]) == 3
    err = capsys.readouterr().err
    assert "Java was not found" in err
    assert "apt-get install openjdk-17-jre-headless" in err
    assert not (tmp_path / "out").exists()


def test_old_java_exits_3(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    request_dir: Path,
) -> None:
    home = tmp_path / "jdk8"
    (home / "bin").mkdir(parents=True)
    java = home / "bin" / "java"
    java.write_text("#!/bin/sh\necho 'java version \"1.8.0_392\"' >&2\n")
    java.chmod(0o755)
    monkeypatch.setenv("JAVA_HOME", str(home))
    monkeypatch.setattr(cli, "build_session", _no_spark)
    assert cli.main([str(request_dir)]) == 3
    assert "Java 1.8.0_392 (major 8)" in capsys.readouterr().err


def test_cli_exit_1_when_flagged(request_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "report"
    assert cli.main([str(request_dir), "--out", str(out), "--max-listed", "1"]) == 1
    summary = json.loads((out / "summary.json").read_text())
    assert summary["audit"]["exit_code"] == 1
    assert summary["requests"]["flags"]["out_of_order"]["truncated"] is True
    assert (out / "report.html").read_text().count("FAIL") == 1


def test_cli_usage_errors_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main([]) == 2
    assert cli.main([str(tmp_path / "missing")]) == 2
    (tmp_path / "empty").mkdir()
    assert cli.main([str(tmp_path / "empty")]) == 2
    junk = tmp_path / "junk"
    junk.mkdir()
    (junk / "a.jsonl").write_text("not json\n{}\n")
    assert cli.main([str(junk), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "not a directory" in err
    assert "no *.jsonl trace file" in err
    assert "no usable trace line" in err


def test_importing_trizre_does_not_import_pyspark() -> None:
    code = "import sys, trizre, trizre.audit; assert 'pyspark' not in sys.modules, 'imported'"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
