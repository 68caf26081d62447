"""Pass 1 of the audit: the overview (lines per node and kind, first and last
time of every node, and the rare lines brought back to the driver)."""

from __future__ import annotations

from typing import Final

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from ..trace import _contract as T
from ._lines import _kind
from ._timeline import ExitLine, NodeInfo, Overview, StateChange

_SMALL_KINDS: Final = (T.BSTAR_STATE, T.NODE_START, T.NODE_STOP, T.EXIT)
"""Rare kinds whose lines the overview brings back to the driver."""

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
    counts identical ones), every other line has a null ``small``.  The
    file (``input_file_name``) is a key too, so that presence can read
    only the files it needs (:func:`~._presence.observer_files`).
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
            F.input_file_name().alias("file"),
            "node",
            "name",
            "kind",
            "ts",
            F.when(_kind(*_SMALL_KINDS), small).alias("small"),
        )
        .groupBy("line_status", "file", "node", "name", "kind", "small")
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
        info.files.add(str(row["file"] or ""))
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
