"""Pass 3 of the audit: presence (peer churn per observer, and the silence
before each ``exit``)."""

from __future__ import annotations

from typing import Final

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import DoubleType, LongType, StringType, StructField, StructType

from ..trace import _contract as T
from ._lines import _kind, driver_frame
from ._summary import ExitEntry, Observer, PresenceSummary
from ._timeline import ExitLine, NodeInfo, Overview, nearest_rank

# --------------------------------------------------------------------------
# Pass 3: presence

_EXITS: Final = StructType(
    [
        StructField("exit_id", LongType()),
        StructField("observer", StringType()),
        StructField("peer", StringType()),
        StructField("exit_ts", DoubleType()),
        StructField("prev_exit_ts", DoubleType()),
    ]
)
"""The ``exit`` lines, from pass 1, each with the time of the observer's
previous exit of the same peer."""


def observer_files(ov: Overview) -> list[str] | None:
    """The files holding every line of the nodes that saw an exit.

    Presence needs only those nodes' lines, and a node's lines are in its
    own trace files: reading just these files skips the others (in the
    benchmark's trace, the servers': half of its bytes).  ``None`` when
    that would be every file, or a line's file is not known.
    """
    everywhere: set[str] = set()
    wanted: set[str] = set()
    for info in ov.nodes.values():
        everywhere |= info.files
        if info.exits:
            wanted |= info.files
    if "" in wanted or wanted == everywhere:
        return None
    return sorted(wanted)


def presence(
    spark: SparkSession, lines: DataFrame, ov: Overview, max_listed: int
) -> PresenceSummary:
    """Peer churn per observer, and silence before each ``exit``.

    *lines* must hold every line of the nodes that saw an exit (those of
    :func:`observer_files` will do).

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
    exit_df = driver_frame(
        spark,
        _EXITS,
        [(i, info.node, line.peer, line.ts, prev) for i, (info, line, prev) in enumerate(exits)],
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
