"""Pass 2 of the audit: the request table (one row per request) and the
judgements read from it: flags, retries, per-client counts, latency."""

from __future__ import annotations

import math
from typing import Final

from pyspark.sql import Column, DataFrame, Row
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, DoubleType, StringType, StructField, StructType

from ..trace import _contract as T
from ._lines import _float, _int, _kind, driver_frame
from ._summary import (
    FLAGS,
    INFO_FLAGS,
    REQUEST_COUNTS,
    ClientCounts,
    Flag,
    HistogramBin,
    LatencyStats,
    LatencySummary,
    RequestId,
    RequestSummary,
)
from ._timeline import Overview

PERCENTILES: Final = (0.5, 0.9, 0.99)
PERCENTILE_ACCURACY: Final = 10_000
"""``percentile_approx`` accuracy: rank error at most 1/10,000 of the count;
exact (nearest rank) below 10,000 values."""

HISTOGRAM_BINS_PER_DECADE: Final = 10

_LIFECYCLE: Final = StructType(
    [
        StructField("client", StringType()),
        StructField("starts", ArrayType(DoubleType())),
        StructField("stops", ArrayType(DoubleType())),
    ]
)
"""Each client's ``node-start`` and ``node-stop`` times, from pass 1."""

# --------------------------------------------------------------------------
# Pass 2: the request table

REQUEST_COLUMNS: Final = (
    "client",
    "rid",
    "pattern",
    "service",
    "first_sent_ts",
    "last_sent_ts",
    "sends",
    "attempts",
    "retries",
    "workers",
    "executions",
    "idempotent_executions",
    "received",
    "dedupe_hits",
    "refused",
    "replies_sent",
    "answers",
    "answered_ts",
    "last_answered_ts",
    "answered_by",
    "status",
    "latency",
    "abandons",
    "abandoned_ts",
    "last_abandoned_ts",
    "abandon_attempts",
    *FLAGS,
    *INFO_FLAGS,
)
"""Columns of ``requests.parquet``, in order (docs/audit.md describes them)."""


def request_table(lines: DataFrame, ov: Overview) -> DataFrame:
    """One row per request (client, rid), from the valid lines.

    A single grouped aggregation: every request line is keyed by its client
    (``node`` on client-side kinds, ``client`` on server-side ones); then
    each row is joined with its client's ``node-start``/``node-stop`` times
    (a few per node, from pass 1's *ov*: reading them from *lines* again
    would parse the whole trace once more) to tell a request lost by the
    system from one whose client was killed with it in flight.
    """
    kinds = (*T.CLIENT_SIDE_KINDS, *T.SERVER_SIDE_KINDS)
    keyed = lines.where(_kind(*kinds) & F.col("rid").isNotNull()).select(
        F.when(_kind(*T.CLIENT_SIDE_KINDS), F.col("node")).otherwise(F.col("client")).alias("key"),
        "rid",
        "kind",
        "ts",
        "node",
        "peer",
        "pattern",
        "service",
        "attempt",
        "status",
        "latency",
        "idempotent",
    )
    sent = _kind(T.REQUEST_SENT)
    executed = _kind(T.REQUEST_EXECUTED)
    answered = _kind(T.REQUEST_ANSWERED)
    abandoned = _kind(T.REQUEST_ABANDONED)
    first_answer = F.min(
        F.when(
            answered,
            F.struct(
                F.col("ts").alias("ts"),
                F.col("peer").alias("peer"),
                F.col("status").alias("status"),
                F.col("latency").alias("latency"),
            ),
        )
    )
    table = (
        keyed.where(F.col("key").isNotNull())
        .groupBy(F.col("key").alias("client"), "rid")
        .agg(
            F.max("pattern").alias("pattern"),
            F.max("service").alias("service"),
            F.min(F.when(sent, F.col("ts"))).alias("first_sent_ts"),
            F.max(F.when(sent, F.col("ts"))).alias("last_sent_ts"),
            F.count(F.when(sent, 1)).alias("sends"),
            F.max(F.when(_kind(T.REQUEST_SENT, T.REQUEST_RETRIED), F.col("attempt"))).alias(
                "attempts"
            ),
            F.array_sort(F.collect_set(F.when(executed, F.col("node")))).alias("workers"),
            F.count(F.when(executed, 1)).alias("executions"),
            F.count(F.when(executed & F.col("idempotent"), 1)).alias("idempotent_executions"),
            # The servers whose reply cache ran it: a cache promises once per server.
            F.collect_list(F.when(executed & F.col("idempotent"), F.col("node"))).alias(
                "idempotent_runs"
            ),
            F.count(F.when(_kind(T.REQUEST_RECEIVED), 1)).alias("received"),
            F.count(F.when(_kind(T.DEDUPE_HIT), 1)).alias("dedupe_hits"),
            F.count(F.when(_kind(T.REQUEST_REFUSED), 1)).alias("refused"),
            F.count(F.when(_kind(T.REPLY_SENT), 1)).alias("replies_sent"),
            F.count(F.when(answered, 1)).alias("answers"),
            first_answer.alias("first_answer"),
            F.max(F.when(answered, F.col("ts"))).alias("last_answered_ts"),
            F.count(F.when(abandoned, 1)).alias("abandons"),
            F.count(F.when(_kind(*T.CLIENT_SIDE_KINDS), 1)).alias("client_lines"),
            F.min(F.when(abandoned, F.col("ts"))).alias("abandoned_ts"),
            F.max(F.when(abandoned, F.col("ts"))).alias("last_abandoned_ts"),
            F.max(F.when(abandoned, F.col("attempt"))).alias("abandon_attempts"),
        )
    )
    # A client may send a request id again after abandoning it: a new round
    # (Titanic does, so that a worker's reply cache still knows it), and a
    # round that found no worker ends without any send: an abandon before
    # the first send is no fault.  An answer before the first send is, and
    # so is an answer after the last abandon with no send between them.
    sent_ts = F.col("first_sent_ts")
    last_sent, last_abandon = F.col("last_sent_ts"), F.col("last_abandoned_ts")
    out_of_order = (F.col("answered_ts") < sent_ts) | (
        (F.col("last_answered_ts") > last_abandon)
        & ~F.coalesce(last_sent > last_abandon, F.lit(False))
    )
    # A duplicate execution: one server with a reply cache ran the request
    # twice.  Runs on different servers (a worker killed mid-request, a
    # Binary Star failover) are at-least-once behaviour: "re_executed".
    runs = F.col("idempotent_runs")
    duplicate = F.size(runs) > F.size(F.array_distinct(runs))
    # Unfinished: sent, and never answered nor abandoned, or sent again in a
    # new round after an abandon and not ended since.
    ended = F.greatest(F.col("last_answered_ts"), last_abandon)
    new_round = last_abandon.isNotNull() & (last_sent > ended)
    unanswered = (F.col("sends") > 0) & (ended.isNull() | new_round)
    # Unanswered and the client's own trace shows it started before sending
    # and never stopped cleanly before its next start (or the trace's end):
    # killed (kill -9, a crash) with the request in flight.  Its client can
    # no longer be answered; nothing says the system lost it.
    lifecycle = driver_frame(
        lines.sparkSession,
        _LIFECYCLE,
        [(n.node, n.starts, n.stops) for n in ov.nodes.values() if n.starts or n.stops],
    )
    sent_at = last_sent
    next_start = F.array_min(F.filter("starts", lambda x: x > sent_at))
    started = F.exists("starts", lambda x: x <= sent_at)
    stopped = F.exists("stops", lambda x: (x >= sent_at) & (next_start.isNull() | (x < next_start)))
    killed = F.coalesce(started & ~stopped, F.lit(False))
    return (
        table.join(F.broadcast(lifecycle), "client", "left")
        .withColumn("answered_ts", F.col("first_answer.ts"))
        .withColumn("answered_by", F.col("first_answer.peer"))
        .withColumn("status", F.col("first_answer.status"))
        .withColumn("latency", F.col("first_answer.latency"))
        .withColumn("retries", F.col("attempts") - 1)
        .withColumn("lost", unanswered & ~killed)
        .withColumn("interrupted", unanswered & killed)
        .withColumn("duplicate_execution", duplicate)
        .withColumn("double_reply", F.col("answers") > 1)
        .withColumn("out_of_order", F.coalesce(out_of_order, F.lit(False)))
        .withColumn("re_executed", (F.col("executions") > 1) & ~duplicate)
        .withColumn("orphan", F.col("client_lines") == 0)
        .select(*REQUEST_COLUMNS)
    )


def _request_id(row: Row) -> RequestId:
    return {
        "client": row["client"],
        "rid": row["rid"],
        "service": row["service"],
        "pattern": row["pattern"],
        "workers": list(row["workers"] or []),
        "executions": _int(row["executions"]),
        "answers": _int(row["answers"]),
        "abandons": _int(row["abandons"]),
        "attempts": row["attempts"],
    }


def request_summary(table: DataFrame, max_listed: int) -> RequestSummary:
    """Counts, flags (with up to *max_listed* offending requests each), retries."""

    def count_of(column: str) -> Column:
        return F.count(F.when(F.col(column), 1)).alias(column)

    totals = table.agg(
        F.count(F.lit(1)).alias("requests"),
        F.count(F.when(F.col("sends") > 0, 1)).alias("sent"),
        F.count(F.when(F.col("answers") > 0, 1)).alias("answered"),
        F.count(F.when(F.col("abandons") > 0, 1)).alias("abandoned"),
        F.count(F.when(F.col("retries") > 0, 1)).alias("retried"),
        F.coalesce(F.sum("executions"), F.lit(0)).alias("executions"),
        F.coalesce(F.sum("dedupe_hits"), F.lit(0)).alias("dedupe_hits"),
        F.coalesce(F.sum("refused"), F.lit(0)).alias("refused"),
        *(count_of(name) for name in (*FLAGS, *INFO_FLAGS)),
    ).collect()[0]
    order: list[Column | str] = [F.col("first_sent_ts").asc_nulls_last(), "client", "rid"]
    flags: dict[str, Flag] = {}
    for name in (*FLAGS, *INFO_FLAGS):
        count = _int(totals[name])
        listed = (
            [
                _request_id(r)
                for r in table.where(F.col(name)).orderBy(*order).limit(max_listed).collect()
            ]
            if count
            else []
        )
        flags[name] = {
            "count": count,
            "requests": listed,
            "truncated": count > len(listed),
            "fails_audit": name in FLAGS,
        }
    retries = {
        str(_int(r["retries"])): _int(r["count"])
        for r in table.where(F.col("sends") > 0)
        .groupBy(F.coalesce(F.col("retries"), F.lit(0)).alias("retries"))
        .count()
        .orderBy("retries")
        .collect()
    }
    counts = {key: _int(totals[key]) for key in REQUEST_COUNTS}
    # One row per client node (a fleet has thousands at most), so that a
    # client's own tally can be checked against the traces.
    by_client: dict[str, ClientCounts] = {
        r["client"]: {
            "requests": _int(r["requests"]),
            "sent": _int(r["sent"]),
            "answered": _int(r["answered"]),
            "abandoned": _int(r["abandoned"]),
            "lost": _int(r["lost"]),
            "interrupted": _int(r["interrupted"]),
        }
        for r in table.where(~F.col("orphan"))
        .groupBy("client")
        .agg(
            F.count(F.lit(1)).alias("requests"),
            F.count(F.when(F.col("sends") > 0, 1)).alias("sent"),
            F.count(F.when(F.col("answers") > 0, 1)).alias("answered"),
            F.count(F.when(F.col("abandons") > 0, 1)).alias("abandoned"),
            F.count(F.when(F.col("lost"), 1)).alias("lost"),
            F.count(F.when(F.col("interrupted"), 1)).alias("interrupted"),
        )
        .orderBy("client")
        .collect()
    }
    return {"counts": counts, "flags": flags, "retries": retries, "by_client": by_client}


def _latency_row(row: Row) -> LatencyStats:
    p50, p90, p99 = row["q"] or [None] * len(PERCENTILES)
    return {
        "count": _int(row["n"]),
        "p50": _float(p50),
        "p90": _float(p90),
        "p99": _float(p99),
        "max": _float(row["max"]),
        "mean": _float(row["mean"]),
    }


def latency_stats(table: DataFrame) -> LatencySummary:
    """p50/p90/p99/max of the first answer's ``latency``: overall, per pattern, per service."""
    answered = table.where(F.col("latency").isNotNull())
    aggs = (
        F.count(F.lit(1)).alias("n"),
        F.percentile_approx("latency", list(PERCENTILES), PERCENTILE_ACCURACY).alias("q"),
        F.max("latency").alias("max"),
        F.avg("latency").alias("mean"),
    )

    def by(key: str) -> dict[str, LatencyStats]:
        rows = answered.groupBy(key).agg(*aggs).orderBy(key).collect()
        return {str(r[key]): _latency_row(r) for r in rows}

    overall = answered.agg(*aggs).collect()[0]
    return {
        "overall": _latency_row(overall),
        "by_pattern": by("pattern"),
        "by_service": by("service"),
    }


def latency_histogram(table: DataFrame) -> list[HistogramBin]:
    """Answered requests per latency bin, 10 log-spaced bins per decade.

    Bin ``k`` holds latencies in [10^(k/10), 10^((k+1)/10)) seconds;
    latencies of zero or less get ``lo = hi = 0``.
    """
    per = HISTOGRAM_BINS_PER_DECADE
    rows = (
        table.where(F.col("latency").isNotNull())
        .select(
            F.when(
                F.col("latency") > 0, F.floor(F.log10(F.col("latency")) * per).cast("int")
            ).alias("bin")
        )
        .groupBy("bin")
        .count()
        .collect()
    )
    bins: list[HistogramBin] = []
    for row in rows:
        b = row["bin"]
        if b is None:
            bins.append({"lo": 0.0, "hi": 0.0, "count": _int(row["count"]), "bin": None})
        else:
            bins.append(
                {
                    "lo": 10 ** (int(b) / per),
                    "hi": 10 ** ((int(b) + 1) / per),
                    "count": _int(row["count"]),
                    "bin": int(b),
                }
            )
    bins.sort(key=lambda d: -math.inf if d["bin"] is None else float(d["bin"]))
    return bins
