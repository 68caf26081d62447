"""The audit's computations over trace lines (docs/audit.md says what each means).

Spark does the heavy lifting in three passes over the JSON lines:

1. an *overview* (lines per node and kind, first/last time of every node,
   and the rare lines collected to the driver: ``bstar-state``,
   ``node-start``, ``node-stop``, ``exit``);
2. the *request table*: one row per request, keyed by (client, rid), built
   by one grouped aggregation with conditional aggregates; it is written to
   Parquet and everything else about requests reads it back from there;
3. *presence*: the exits, broadcast, joined with the lines proving the
   observer had heard from that peer, to find the last of them; only the
   files holding the lines of nodes that saw an exit are read.

Binary Star intervals are computed on the driver by plain Python
(:func:`bstar_timeline`), because a fleet writes a handful of state changes,
not millions; the failover outage joins them back with the request table.

Times are in the clock chosen by the caller: ``m`` (monotonic, the default)
or ``t`` (wall clock).  ``m`` compares only lines written on one host; see
docs/audit.md.

Each pass has a module of its own: reading and tagging the lines in
:mod:`._lines`, pass 1 in :mod:`._overview`, pass 2 and the judgements read
from the request table in :mod:`._requests`, the failover outage in
:mod:`._failover`, pass 3 in :mod:`._presence`.  This module assembles the
summary from them, and still offers every name it held before the split
(tests and benchmarks import them from here).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final, final

from pyspark.sql import DataFrame, SparkSession

from ._failover import failover_outages
from ._lines import (
    _WHY,
    CLOCKS,
    UNJUDGED_LISTED,
    USED_COLUMNS,
    HiddenTraceFiles,
    _float,
    _int,
    _kind,
    _line_number,
    _line_status,
    _local_path,
    read_files,
    read_lines,
    tag_lines,
    trace_files,
    unjudged_lines,
    valid_lines,
)
from ._overview import _SMALL_KINDS, overview, overview_groups
from ._presence import observer_files, presence
from ._requests import (
    HISTOGRAM_BINS_PER_DECADE,
    PERCENTILE_ACCURACY,
    PERCENTILES,
    REQUEST_COLUMNS,
    _latency_row,
    _request_id,
    latency_histogram,
    latency_stats,
    request_summary,
    request_table,
)
from ._summary import Summary, failed
from ._timeline import bstar_timeline

__all__ = [
    "CLOCKS",
    "HISTOGRAM_BINS_PER_DECADE",
    "NODES_LISTED",
    "PERCENTILES",
    "PERCENTILE_ACCURACY",
    "REQUEST_COLUMNS",
    "UNJUDGED_LISTED",
    "USED_COLUMNS",
    "_SMALL_KINDS",
    "_WHY",
    "AuditResult",
    "HiddenTraceFiles",
    "_audit",
    "_float",
    "_int",
    "_kind",
    "_latency_row",
    "_line_number",
    "_line_status",
    "_local_path",
    "_request_id",
    "audit",
    "failover_outages",
    "latency_histogram",
    "latency_stats",
    "observer_files",
    "overview",
    "overview_groups",
    "presence",
    "read_files",
    "read_lines",
    "request_summary",
    "request_table",
    "tag_lines",
    "trace_files",
    "unjudged_lines",
    "valid_lines",
]

NODES_LISTED: Final = 1000


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


_OBJECT_HASH: Final = "spark.sql.execution.useObjectHashAggregateExec"


@contextlib.contextmanager
def _sorting_aggregations(spark: SparkSession) -> Iterator[None]:
    """Spark plans aggregations with list or struct buffers as sort aggregations.

    For the request table: its aggregation (a million groups, string and
    list buffers) outgrows an object hash map at once and falls back to
    sorting, and sorting from the start costs less CPU (docs/benchmarks.md).
    The small aggregations after it (percentiles over a few groups) are
    cheaper hashed, so the session's setting is restored on leaving.
    """
    before = spark.conf.get(_OBJECT_HASH)
    spark.conf.set(_OBJECT_HASH, "false")
    try:
        yield
    finally:
        if before is None:
            spark.conf.unset(_OBJECT_HASH)
        else:
            spark.conf.set(_OBJECT_HASH, before)


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
    with _sorting_aggregations(spark):
        if requests_path is not None:
            built.write.mode("overwrite").parquet(requests_path)
            table = spark.read.parquet(requests_path)
            written = Path(requests_path)
        else:
            table = built.cache()
            table.count()
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
        files = observer_files(ov)
        observers = (
            lines if files is None else valid_lines(tag_lines(read_files(spark, files), clock))
        )
        summary["presence"] = presence(spark, observers, ov, max_listed)
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
