"""Binary Star failovers as clients saw them: the outage of each, from the
request table and the failovers :func:`~._timeline.bstar_timeline` found."""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from ..trace import _contract as T
from ._lines import _float
from ._summary import ClientGap, FailoverOutage
from ._timeline import Failover, nearest_rank


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
