"""The audit's computations over trace lines (docs/audit.md says what each means).

Spark does the heavy lifting in three passes over the JSON lines:

1. an *overview* (lines per node and kind, first/last time of every node,
   and the rare lines collected to the driver: ``bstar-state``,
   ``node-start``, ``node-stop``, ``exit``);
2. the *request table*: one row per request, keyed by (client, rid), built
   by one grouped aggregation with conditional aggregates; it is written to
   Parquet and everything else about requests reads it back from there;
3. *presence*: the exits, broadcast, joined with the lines proving the
   observer had heard from that peer, to find the last of them.

Binary Star intervals are computed on the driver by plain Python
(:func:`bstar_timeline`), because a fleet writes a handful of state changes,
not millions; the failover outage joins them back with the request table.

Times are in the clock chosen by the caller: ``m`` (monotonic, the default)
or ``t`` (wall clock).  ``m`` compares only lines written on one host; see
docs/audit.md.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, final
from urllib.parse import unquote, urlparse

from pyspark.sql import Column, DataFrame, Row, SparkSession
from pyspark.sql import functions as F

from ..trace import _contract as T
from . import _schema as S
from ._errors import AuditError
from ._summary import (
    FLAGS,
    INFO_FLAGS,
    REQUEST_COUNTS,
    ClientCounts,
    ClientGap,
    ExitEntry,
    FailoverOutage,
    Flag,
    HistogramBin,
    LatencyStats,
    LatencySummary,
    Observer,
    PresenceSummary,
    RequestId,
    RequestSummary,
    Summary,
    UnjudgedLine,
    failed,
)
from ._timeline import (
    ExitLine,
    Failover,
    NodeInfo,
    Overview,
    StateChange,
    bstar_timeline,
    nearest_rank,
)

CLOCKS: Final = ("m", "t")
"""Which time field the audit orders and measures by."""

PERCENTILES: Final = (0.5, 0.9, 0.99)
PERCENTILE_ACCURACY: Final = 10_000
"""``percentile_approx`` accuracy: rank error at most 1/10,000 of the count;
exact (nearest rank) below 10,000 values."""

HISTOGRAM_BINS_PER_DECADE: Final = 10

NODES_LISTED: Final = 1000

_SMALL_KINDS: Final = (T.BSTAR_STATE, T.NODE_START, T.NODE_STOP, T.EXIT)
"""Rare kinds whose lines the overview brings back to the driver."""

_INF: Final = float("inf")


def _float(value: Any) -> float | None:
    return None if value is None else float(value)


def _int(value: Any) -> int:
    return 0 if value is None else int(value)


def _kind(*kinds: str) -> Column:
    if len(kinds) == 1:
        return F.col("kind") == kinds[0]
    return F.col("kind").isin(*kinds)


# --------------------------------------------------------------------------
# Reading


class HiddenTraceFiles(AuditError, ValueError):
    """Trace files named so that Spark would skip them (``_*`` or ``.*``).

    trizre never names a trace so (see :class:`~trizre.trace._contract.Tracer`);
    such a file was renamed or written by something else.  The audit
    refuses to run rather than judge without it.
    """

    def __init__(self, files: list[str]) -> None:
        listed = ", ".join(files[:5]) + (f" and {len(files) - 5} more" if len(files) > 5 else "")
        super().__init__(
            f"{len(files)} trace file(s) have names Spark skips (starting with '_' or '.'): "
            f"{listed}; rename them (for example with a 'node' prefix) and audit again"
        )
        self.files = files


def trace_files(spark: SparkSession, path: str) -> list[str]:
    """Every ``*.jsonl`` file under *path* (recursively), whatever its name.

    Listed through Hadoop's file system API, as Spark itself lists
    (``file://``, ``hdfs://``, ``s3a://`` ... alike), but without Spark's
    rule that skips names starting with ``_`` or ``.`` (folders named so
    hold traces too, and files named so must be seen to be refused).  An
    empty list when *path* does not exist.
    """
    jvm = spark.sparkContext._jvm
    assert jvm is not None, "the audit needs a classic SparkSession (not Spark Connect)"
    root = jvm.org.apache.hadoop.fs.Path(path)
    fs = root.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
    if not fs.exists(root):
        return []
    found = []
    listing = fs.listFiles(root, True)
    while listing.hasNext():
        file = listing.next().getPath()
        if file.getName().endswith(".jsonl"):
            found.append(file.toString())
    return sorted(found)


def read_lines(spark: SparkSession, path: str) -> DataFrame:
    """The lines of every ``*.jsonl`` file under *path* (:func:`trace_files`), v1 schema.

    Never infers a schema.  Unreadable lines keep their text in
    ``_corrupt_record``.  Folders are read whatever their name; a file
    whose name starts with ``_`` or ``.`` raises :class:`HiddenTraceFiles`,
    since Spark reads no such file even when named explicitly.
    """
    files = trace_files(spark, path)
    hidden = [f for f in files if f.rsplit("/", 1)[-1].startswith(("_", "."))]
    if hidden:
        raise HiddenTraceFiles(hidden)
    if not files:
        return spark.createDataFrame([], S.SCHEMA)
    return (
        spark.read.schema(S.SCHEMA)
        .option("mode", "PERMISSIVE")
        .option("columnNameOfCorruptRecord", S.CORRUPT_COLUMN)
        .json(files)
    )


def _line_status(clock: str) -> Column:
    return (
        F.when(F.col(S.CORRUPT_COLUMN).isNotNull(), F.lit("malformed"))
        .when(
            F.col("v").isNull() | (F.col("v") != T.SCHEMA_VERSION),
            F.lit("other-version"),
        )
        .when(
            F.col("kind").isNull() | F.col("node").isNull() | F.col(clock).isNull(),
            F.lit("incomplete"),
        )
        .otherwise(F.lit("ok"))
    )


USED_COLUMNS: Final = (
    "node",
    "name",
    "kind",
    "peer",
    "peer_name",
    "rid",
    "client",
    "service",
    "pattern",
    "attempt",
    "status",
    "latency",
    "idempotent",
    "state",
    "old_state",
    "event",
    "reason",
)
"""The fields the rules read (besides the clock)."""


def tag_lines(raw: DataFrame, clock: str) -> DataFrame:
    """*raw* reduced to the fields the rules use, the chosen clock as ``ts``,
    and ``line_status``: ``ok``, ``malformed``, ``other-version`` or
    ``incomplete`` (no kind, node or time)."""
    if clock not in CLOCKS:
        raise ValueError(f"clock must be one of {CLOCKS}, not {clock!r}")
    return raw.select(
        _line_status(clock).alias("line_status"),
        F.col(clock).alias("ts"),
        *USED_COLUMNS,
    )


UNJUDGED_LISTED: Final = 5
"""How many lines the audit could not judge are named, by file and line."""

_WHY: Final = {
    "malformed": "not JSON or cut short",
    "other-version": "of another schema version",
    "incomplete": "without kind, node or time",
}


def unjudged_lines(raw: DataFrame, clock: str) -> list[UnjudgedLine]:
    """The first few lines the audit could not judge: file, line number, why.

    Spark reads files without line numbers, so it names the files and the
    text of the bad lines; the numbers come from reading those few local
    files again (``None`` for a file on a remote store or a line not found).
    """
    rows = (
        raw.select(
            F.input_file_name().alias("file"),
            _line_status(clock).alias("status"),
            F.col(S.CORRUPT_COLUMN).alias("text"),
        )
        .where(F.col("status") != "ok")
        .limit(UNJUDGED_LISTED)
        .collect()
    )
    found: list[UnjudgedLine] = []
    taken: dict[str, set[int]] = {}
    for row in rows:
        uri, status = str(row["file"]), str(row["status"])
        path = _local_path(uri)
        line = _line_number(path, status, row["text"], clock, taken.setdefault(uri, set()))
        found.append({"file": str(path or uri), "line": line, "why": _WHY[status]})
    return found


def _local_path(uri: str) -> Path | None:
    if uri.startswith("file:"):
        return Path(unquote(urlparse(uri).path))
    return Path(uri) if uri.startswith("/") else None


def _line_number(
    path: Path | None, status: str, text: str | None, clock: str, taken: set[int]
) -> int | None:
    """The 1-based number of the first line of *path* with this status, not yet named."""
    if path is None or not path.is_file():
        return None
    with path.open(encoding="utf-8", errors="replace") as lines:
        for number, line in enumerate(lines, 1):
            if number in taken:
                continue
            if status == "malformed":
                if text is not None and line.rstrip("\n") != text.rstrip("\n"):
                    continue
                if text is None:
                    try:
                        json.loads(line)
                        continue
                    except ValueError:
                        pass
            else:
                try:
                    record = json.loads(line)
                except ValueError:
                    continue
                if not isinstance(record, dict):
                    continue
                other = record.get("v") != T.SCHEMA_VERSION
                if (status == "other-version") != other:
                    continue
                if status == "incomplete" and all(
                    record.get(key) is not None for key in ("kind", "node", clock)
                ):
                    continue
            taken.add(number)
            return number
    return None


def valid_lines(tagged: DataFrame) -> DataFrame:
    """The usable lines of a :func:`tag_lines` frame."""
    return tagged.where(F.col("line_status") == "ok")


# --------------------------------------------------------------------------
# Pass 1: overview


def overview_groups(tagged: DataFrame) -> DataFrame:
    """The grouped aggregation :func:`overview` collects.

    One grouped aggregation whose buffers are numbers only (count, first and
    last time), so that Spark runs it as a hash aggregation: a string
    ``max(name)`` or a ``collect_list`` of the rare lines would make it sort
    every line instead (10 M lines on 2 cores: docs/benchmarks.md).  The
    name and the rare lines' fields are grouping keys instead: a node has
    one name or a few, and each rare line is a group of its own (``n``
    counts identical ones), every other line has a null ``small``.
    """
    small = F.struct(
        F.col("ts"),
        F.col("old_state"),
        F.col("state"),
        F.col("event"),
        F.col("peer"),
        F.col("peer_name"),
        F.col("reason"),
    )
    return (
        tagged.select(
            "line_status",
            "node",
            "name",
            "kind",
            "ts",
            F.when(_kind(*_SMALL_KINDS), small).alias("small"),
        )
        .groupBy("line_status", "node", "name", "kind", "small")
        .agg(
            F.count(F.lit(1)).alias("n"),
            F.min("ts").alias("first_ts"),
            F.max("ts").alias("last_ts"),
        )
    )


def overview(tagged: DataFrame) -> Overview:
    """Pass 1 over a :func:`tag_lines` frame (see :class:`Overview`)."""
    rows = overview_groups(tagged).collect()
    ov = Overview()
    names: dict[str, str] = {}
    for row in rows:
        n = int(row["n"])
        ov.lines += n
        status = row["line_status"]
        if status == "malformed":
            ov.malformed += n
            continue
        if status == "other-version":
            ov.other_version += n
            continue
        if status == "incomplete":
            ov.incomplete += n
            continue
        kind = str(row["kind"])
        node = str(row["node"])
        ov.kinds[kind] = ov.kinds.get(kind, 0) + n
        info = ov.nodes.setdefault(node, NodeInfo(node))
        info.lines += n
        info.kinds[kind] = info.kinds.get(kind, 0) + n
        if row["name"] is not None:
            # The greatest name a node wrote, whatever order the groups come in.
            names[node] = max(names.get(node, ""), str(row["name"]))
        info.first_ts = min(info.first_ts, float(row["first_ts"]))
        info.last_ts = max(info.last_ts, float(row["last_ts"]))
        item = row["small"]
        if item is None:
            continue
        ts = float(item["ts"])
        for _ in range(n):
            if kind == T.BSTAR_STATE and item["state"] is not None:
                info.changes.append(
                    StateChange(ts, item["old_state"], str(item["state"]), item["event"])
                )
            elif kind == T.NODE_START:
                info.starts.append(ts)
            elif kind == T.NODE_STOP:
                info.stops.append(ts)
            elif kind == T.EXIT and item["peer"] is not None:
                info.exits.append(
                    ExitLine(ts, str(item["peer"]), item["peer_name"], item["reason"])
                )
    for node, name in names.items():
        ov.nodes[node].name = name
    for info in ov.nodes.values():
        info.changes.sort(key=lambda c: c.ts)
        info.starts.sort()
        info.stops.sort()
        info.exits.sort(key=lambda e: e.ts)
    return ov


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
    # (Titanic does, so that a worker's reply cache still knows it).  An
    # answer after the last abandon is out of order unless a send came
    # between them.
    sent_ts = F.col("first_sent_ts")
    last_sent, last_abandon = F.col("last_sent_ts"), F.col("last_abandoned_ts")
    out_of_order = (
        (F.col("answered_ts") < sent_ts)
        | (F.col("abandoned_ts") < sent_ts)
        | ((F.col("last_answered_ts") > last_abandon) & ~(last_sent > last_abandon))
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
    lifecycle = lines.sparkSession.createDataFrame(
        [(n.node, n.starts, n.stops) for n in ov.nodes.values() if n.starts or n.stops],
        "client string, starts array<double>, stops array<double>",
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


def failover_outages(
    spark: SparkSession,
    table: DataFrame,
    failovers: Sequence[Failover],
    max_listed: int,
) -> list[FailoverOutage]:
    """Client-visible outage of each failover, per client.

    For failover at time T from server *old* to *new*: for each client, the
    gap between its last Binary Star answer from *old* (after the previous
    activation, at or before T) and its first from *new* (at or after T,
    before the next activation).  Answers with status 503 do not count.
    Both times are on the client, so ``m`` is comparable.

    Alongside, ``first_new_latency``: the latency of that first answer from
    *new* (from the request's first send), which shows the outage a request
    in flight suffered even when the client was idle before the failover.
    """
    if not failovers:
        return []
    rows: list[Column] = []
    for i, fo in enumerate(failovers):
        roles = [("new", fo.new)] + ([("old", fo.old)] if fo.old is not None else [])
        rows.extend(
            F.struct(
                F.lit(i).alias("fidx"),
                F.lit(server).alias("server"),
                F.lit(role).alias("role"),
                F.lit(fo.at).cast("double").alias("at"),
                F.lit(fo.after).cast("double").alias("lo"),
                F.lit(fo.before).cast("double").alias("hi"),
            )
            for role, server in roles
        )
    # A literal table built in the JVM (no Python worker needed).
    fo_df = spark.range(1).select(F.inline(F.array(*rows)))
    answers = table.where(
        (F.col("pattern") == T.BINARY_STAR)
        & F.col("answered_ts").isNotNull()
        & F.coalesce(F.col("status") != 503, F.lit(True))
    ).select("client", "answered_by", "answered_ts", "latency")
    ts = F.col("answered_ts")
    is_old = (F.col("role") == "old") & (ts <= F.col("at")) & (ts > F.col("lo"))
    is_new = (F.col("role") == "new") & (ts >= F.col("at")) & (ts < F.col("hi"))
    gaps = (
        answers.join(F.broadcast(fo_df), answers["answered_by"] == fo_df["server"])
        .groupBy("fidx", "client")
        .agg(
            F.max(F.when(is_old, ts)).alias("last_old"),
            F.min(
                F.when(is_new, F.struct(ts.alias("ts"), F.col("latency").alias("latency")))
            ).alias("first_new"),
        )
        .collect()
    )
    per: dict[int, list[ClientGap]] = {}
    for row in gaps:
        last_old = _float(row["last_old"])
        first = row["first_new"]
        first_new = None if first is None else _float(first["ts"])
        entry: ClientGap = {
            "client": row["client"],
            "last_old_answer": last_old,
            "first_new_answer": first_new,
            "gap": None if last_old is None or first_new is None else first_new - last_old,
            "first_new_latency": None if first is None else _float(first["latency"]),
        }
        per.setdefault(int(row["fidx"]), []).append(entry)
    out: list[FailoverOutage] = []
    for i, fo in enumerate(failovers):
        clients = per.get(i, [])
        gaps_of = [(c, gap) for c in clients if (gap := c["gap"]) is not None]
        measured = [c for c, _ in sorted(gaps_of, key=lambda cg: -cg[1])]
        values = sorted(gap for _, gap in gaps_of)
        latencies = sorted(lat for c in clients if (lat := c["first_new_latency"]) is not None)
        out.append(
            {
                "at": fo.at,
                "old": fo.old,
                "new": fo.new,
                "clients_measured": len(measured),
                "clients_without_both": len(clients) - len(measured),
                "max_gap": values[-1] if values else None,
                "p50_gap": nearest_rank(values, 0.5),
                "p90_gap": nearest_rank(values, 0.9),
                "max_first_new_latency": latencies[-1] if latencies else None,
                "p50_first_new_latency": nearest_rank(latencies, 0.5),
                "gaps": measured[:max_listed],
                "truncated": len(measured) > max_listed,
            }
        )
    return out


# --------------------------------------------------------------------------
# Pass 3: presence


def presence(
    spark: SparkSession, lines: DataFrame, ov: Overview, max_listed: int
) -> PresenceSummary:
    """Peer churn per observer, and silence before each ``exit``.

    The silence of an exit is the time from the last line on that observer
    proving it heard from that peer (:data:`~._schema.HEARD_FROM_KINDS`,
    after the previous exit of the same peer) to the ``exit`` line.  The
    exits (collected by the overview) are broadcast and joined with those
    lines in one pass.
    """
    observers: list[Observer] = []
    for info in sorted(ov.nodes.values(), key=lambda i: (i.name or "", i.node)):
        n_enters = info.kinds.get(T.ENTER, 0)
        n_exits = info.kinds.get(T.EXIT, 0)
        if n_enters or n_exits:
            observers.append(
                {"node": info.node, "name": info.name, "enters": n_enters, "exits": n_exits}
            )
    out: PresenceSummary = {
        "enters": ov.kinds.get(T.ENTER, 0),
        "exits": ov.kinds.get(T.EXIT, 0),
        "observers": observers,
        "silence_by_reason": {},
        "exits_listed": [],
        "truncated": False,
    }
    exits: list[tuple[NodeInfo, ExitLine, float | None]] = []
    for info in ov.nodes.values():
        previous: dict[str, float] = {}
        for line in info.exits:
            exits.append((info, line, previous.get(line.peer)))
            previous[line.peer] = line.ts
    if not exits:
        return out
    exit_df = spark.createDataFrame(
        [(i, info.node, line.peer, line.ts, prev) for i, (info, line, prev) in enumerate(exits)],
        "exit_id long, observer string, peer string, exit_ts double, prev_exit_ts double",
    )
    heard = lines.where(_kind(*T.HEARD_FROM_KINDS)).select(
        F.col("node").alias("h_observer"),
        F.coalesce(F.col("peer"), F.col("client")).alias("h_peer"),
        F.col("ts").alias("h_ts"),
    )
    e = F.broadcast(exit_df)
    last_heard = {
        int(r["exit_id"]): float(r["last_heard_ts"])
        for r in heard.join(
            e,
            (heard["h_observer"] == e["observer"])
            & (heard["h_peer"] == e["peer"])
            & (heard["h_ts"] <= e["exit_ts"])
            & (e["prev_exit_ts"].isNull() | (heard["h_ts"] > e["prev_exit_ts"])),
        )
        .groupBy("exit_id")
        .agg(F.max("h_ts").alias("last_heard_ts"))
        .collect()
    }
    entries: list[ExitEntry] = []
    for i, (info, line, _) in enumerate(exits):
        heard_ts = last_heard.get(i)
        entries.append(
            {
                "observer": info.node,
                "observer_name": info.name,
                "peer": line.peer,
                "peer_name": line.peer_name,
                "reason": line.reason,
                "exit_ts": line.ts,
                "last_heard_ts": heard_ts,
                "silence": None if heard_ts is None else line.ts - heard_ts,
            }
        )
    by_reason: dict[str, list[ExitEntry]] = {}
    for entry in entries:
        by_reason.setdefault(entry["reason"] or "?", []).append(entry)
    for reason in sorted(by_reason):
        group = by_reason[reason]
        values = sorted(float(e["silence"]) for e in group if e["silence"] is not None)
        out["silence_by_reason"][reason] = {
            "exits": len(group),
            "measured": len(values),
            "p50": nearest_rank(values, 0.5),
            "p90": nearest_rank(values, 0.9),
            "max": values[-1] if values else None,
        }
    # Longest silences first; exits never heard from (no silence) before them.
    entries.sort(
        key=lambda e: (
            e["silence"] is not None,
            -(e["silence"] or 0.0),
            e["observer"],
            e["peer"],
            e["exit_ts"],
        )
    )
    out["exits_listed"] = entries[:max_listed]
    out["truncated"] = len(entries) > max_listed
    return out


# --------------------------------------------------------------------------
# Everything


@final
@dataclass
class AuditResult:
    """The summary (JSON-ready) and where the request table was written."""

    summary: Summary
    requests_path: Path | None

    @property
    def failed(self) -> bool:
        """True when any request was lost, duplicated, double-replied or out of
        order, or two Binary Star servers were active at once."""
        return failed(self.summary)

    @property
    def empty(self) -> bool:
        return int(self.summary["input"]["valid_lines"]) == 0


def audit(
    spark: SparkSession,
    trace_path: str,
    requests_path: str | None,
    *,
    clock: str = "m",
    max_listed: int = 100,
) -> AuditResult:
    """Run every rule over the traces at *trace_path*.

    The request table is written as Parquet to *requests_path* (a directory,
    replaced if present) and read back from there; with ``None`` it is
    cached in memory instead (for small traces and tests).

    The JSON is parsed three times (overview, request table, presence):
    measured on 2 cores, persisting the parsed lines instead cost as much
    as it saved, and needs memory in proportion to the trace.
    """
    raw = read_lines(spark, trace_path)
    return _audit(
        spark,
        tag_lines(raw, clock),
        raw=raw,
        trace_path=trace_path,
        requests_path=requests_path,
        clock=clock,
        max_listed=max_listed,
    )


def _audit(
    spark: SparkSession,
    tagged: DataFrame,
    *,
    raw: DataFrame | None = None,
    trace_path: str,
    requests_path: str | None,
    clock: str,
    max_listed: int,
) -> AuditResult:
    timings: dict[str, float] = {}
    clock_start = time.monotonic()

    def lap(name: str) -> None:
        nonlocal clock_start
        now = time.monotonic()
        timings[name] = round(now - clock_start, 3)
        clock_start = now

    ov = overview(tagged)
    lap("read_and_overview")
    summary: Summary = {
        "timings": timings,
        "input": {
            "trace_path": trace_path,
            "clock": clock,
            "lines": ov.lines,
            "valid_lines": ov.valid,
            "malformed_lines": ov.malformed,
            "other_version_lines": ov.other_version,
            "incomplete_lines": ov.incomplete,
            "kinds": dict(sorted(ov.kinds.items())),
            "nodes": len(ov.nodes),
            "start": ov.start,
            "end": ov.end,
            "unjudged": [],
        },
    }
    if raw is not None and ov.malformed + ov.other_version + ov.incomplete:
        summary["input"]["unjudged"] = unjudged_lines(raw, clock)
        lap("unjudged")
    if ov.valid == 0:
        return AuditResult(summary, None)
    lines = valid_lines(tagged)
    built = request_table(lines, ov)
    written: Path | None = None
    if requests_path is not None:
        built.write.mode("overwrite").parquet(requests_path)
        table = spark.read.parquet(requests_path)
        written = Path(requests_path)
    else:
        table = built.cache()
    lap("request_table")
    try:
        summary["requests"] = request_summary(table, max_listed)
        lap("request_flags")
        summary["latency"] = latency_stats(table)
        summary["latency"]["histogram"] = latency_histogram(table)
        lap("latency")
        bstar, failovers = bstar_timeline(ov)
        bstar["failovers"] = failover_outages(spark, table, failovers, max_listed)
        summary["bstar"] = bstar
        lap("bstar")
        summary["presence"] = presence(spark, lines, ov, max_listed)
        lap("presence")
        nodes = sorted(ov.nodes.values(), key=lambda i: (i.name or "", i.node))
        summary["nodes"] = {
            "count": len(nodes),
            "truncated": len(nodes) > NODES_LISTED,
            "listed": [
                {
                    "node": n.node,
                    "name": n.name,
                    "lines": n.lines,
                    "first_ts": n.first_ts,
                    "last_ts": n.last_ts,
                }
                for n in nodes[:NODES_LISTED]
            ],
        }
    finally:
        if requests_path is None:
            table.unpersist()
    return AuditResult(summary, written)
