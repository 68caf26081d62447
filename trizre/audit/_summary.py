"""The audit's verdict as a typed document: what ``summary.json`` holds.

The rules (``_rules``) build a :class:`Summary`; the report (``_report``)
and the command (``cli``) read it; ``summary.json`` is it, written as is.
These are ``TypedDict`` classes rather than attrs classes on purpose: the
JSON document is the contract (other tools read it), the dicts are exactly
that document, and mypy checks every key the three modules read or write,
so a renamed field is a type error, not a ``KeyError`` in a report.

No pyspark here: the report and its tests use it without Spark.
"""

from __future__ import annotations

from typing import Final, NotRequired, TypedDict

__all__ = [
    "FLAGS",
    "INFO_FLAGS",
    "REQUEST_COUNTS",
    "AuditRun",
    "BstarServer",
    "BstarSummary",
    "ClientGap",
    "DualActive",
    "ExitEntry",
    "FailoverOutage",
    "Flag",
    "HistogramBin",
    "InputSummary",
    "LatencyStats",
    "LatencySummary",
    "NoActive",
    "NodeListed",
    "NodesSummary",
    "Observer",
    "PresenceSummary",
    "RequestId",
    "RequestSummary",
    "SegmentSummary",
    "Silence",
    "Summary",
    "failed",
]

FLAGS: Final = ("lost", "duplicate_execution", "double_reply", "out_of_order")
"""Request flags that fail the audit."""

INFO_FLAGS: Final = ("re_executed", "interrupted", "orphan")
"""Request flags that are reported but do not fail the audit."""

REQUEST_COUNTS: Final = {
    "requests": "requests",
    "sent": "sent",
    "answered": "answered",
    "abandoned": "abandoned",
    "retried": "retried",
    "executions": "executions",
    "dedupe_hits": "dedupe hits",
    "refused": "refused (503)",
}
"""The keys of :attr:`RequestSummary.counts`, with their labels in the report."""


class UnjudgedLine(TypedDict):
    """A line the audit could not judge; ``line`` is 1-based, ``None`` when unknown."""

    file: str
    line: int | None
    why: str


class InputSummary(TypedDict):
    """What was read; ``unjudged`` names the first lines that could not be judged."""

    trace_path: str
    clock: str
    lines: int
    valid_lines: int
    malformed_lines: int
    other_version_lines: int
    incomplete_lines: int
    kinds: dict[str, int]
    nodes: int
    start: float | None
    end: float | None
    unjudged: NotRequired[list[UnjudgedLine]]


class RequestId(TypedDict):
    """One request named by a flag."""

    client: str | None
    rid: str | None
    service: str | None
    pattern: str | None
    workers: list[str]
    executions: int
    answers: int
    abandons: int
    attempts: int | None


class Flag(TypedDict):
    """How many requests carry a flag, and the first of them."""

    count: int
    requests: list[RequestId]
    truncated: bool
    fails_audit: bool


class ClientCounts(TypedDict):
    """One client's requests as the audit counted them (orphans aside)."""

    requests: int
    sent: int
    answered: int
    abandoned: int
    lost: int
    interrupted: int


class RequestSummary(TypedDict):
    """Counts (keys of :data:`REQUEST_COUNTS`), flags, retries, and counts per client."""

    counts: dict[str, int]
    flags: dict[str, Flag]
    retries: dict[str, int]
    by_client: dict[str, ClientCounts]


class LatencyStats(TypedDict):
    """Latency of the first answer, seconds."""

    count: int
    p50: float | None
    p90: float | None
    p99: float | None
    max: float | None
    mean: float | None


class HistogramBin(TypedDict):
    """Answers with a latency in [lo, hi) seconds (bin ``None``: zero or less)."""

    lo: float
    hi: float
    count: int
    bin: int | None


class LatencySummary(TypedDict):
    """Latency overall, per pattern and per service, and its histogram."""

    overall: LatencyStats
    by_pattern: dict[str, LatencyStats]
    by_service: dict[str, LatencyStats]
    histogram: NotRequired[list[HistogramBin]]


class SegmentSummary(TypedDict):
    """A Binary Star server in one state from ``start`` to ``end``."""

    start: float
    end: float
    state: str
    end_reason: str


class BstarServer(TypedDict):
    """One Binary Star server's states."""

    node: str
    name: str | None
    changes: int
    last_ts: float
    stopped: bool
    segments: list[SegmentSummary]


class NoActive(TypedDict):
    """An interval with no ACTIVE server."""

    start: float
    end: float
    duration: float
    after: str
    cause: str
    ends_at_trace_end: bool


class DualActive(TypedDict):
    """An interval with two ACTIVE servers: split brain."""

    start: float
    end: float
    duration: float
    servers: list[str]


class ClientGap(TypedDict):
    """What one client saw of a failover."""

    client: str
    last_old_answer: float | None
    first_new_answer: float | None
    gap: float | None
    first_new_latency: float | None


class FailoverOutage(TypedDict):
    """One failover, and the outage its clients saw."""

    at: float
    old: str | None
    new: str
    clients_measured: int
    clients_without_both: int
    max_gap: float | None
    p50_gap: float | None
    p90_gap: float | None
    max_first_new_latency: float | None
    p50_first_new_latency: float | None
    gaps: list[ClientGap]
    truncated: bool


class BstarSummary(TypedDict):
    """The Binary Star timeline."""

    servers: list[BstarServer]
    first_active: float | None
    trace_end: float | None
    no_active: list[NoActive]
    dual_active: list[DualActive]
    failovers: list[FailoverOutage]


class Observer(TypedDict):
    """A node that saw peers enter or exit."""

    node: str
    name: str | None
    enters: int
    exits: int


class Silence(TypedDict):
    """Silence before the exits of one reason, seconds."""

    exits: int
    measured: int
    p50: float | None
    p90: float | None
    max: float | None


class ExitEntry(TypedDict):
    """One exit, and how long the observer had not heard from the peer."""

    observer: str
    observer_name: str | None
    peer: str
    peer_name: str | None
    reason: str | None
    exit_ts: float
    last_heard_ts: float | None
    silence: float | None


class PresenceSummary(TypedDict):
    """Peer churn and silence before exits."""

    enters: int
    exits: int
    observers: list[Observer]
    silence_by_reason: dict[str, Silence]
    exits_listed: list[ExitEntry]
    truncated: bool


class NodeListed(TypedDict):
    """One node that wrote a trace."""

    node: str
    name: str | None
    lines: int
    first_ts: float
    last_ts: float


class NodesSummary(TypedDict):
    """The nodes that wrote traces (at most 1,000 listed)."""

    count: int
    truncated: bool
    listed: list[NodeListed]


class AuditRun(TypedDict):
    """How the audit itself ran (added by the command)."""

    exit_code: int
    passed: bool
    seconds: float
    spark_version: str
    master: str


class Summary(TypedDict):
    """``summary.json``: the input always; the verdicts when any line was valid."""

    timings: dict[str, float]
    input: InputSummary
    requests: NotRequired[RequestSummary]
    latency: NotRequired[LatencySummary]
    bstar: NotRequired[BstarSummary]
    presence: NotRequired[PresenceSummary]
    nodes: NotRequired[NodesSummary]
    audit: NotRequired[AuditRun]


def unreadable(summary: Summary) -> int:
    """Lines the audit could not judge: malformed, of another schema version, or incomplete."""
    inp = summary["input"]
    return inp["malformed_lines"] + inp["other_version_lines"] + inp["incomplete_lines"]


def failure_reasons(summary: Summary) -> list[str]:
    """Why the audit fails, one short phrase per reason (empty when it passes)."""
    reasons = []
    if n := unreadable(summary):
        where = summary["input"].get("unjudged") or []
        first = f" (first: {where_line(where[0])})" if where else ""
        reasons.append(f"{n:,} line(s) could not be judged{first}")
    requests = summary.get("requests")
    flags = requests["flags"] if requests is not None else {}
    for name in FLAGS:
        if name in flags and (count := flags[name]["count"]):
            reasons.append(f"{name.replace('_', ' ')}: {count:,}")
    bstar = summary.get("bstar")
    if bstar is not None and (dual := len(bstar["dual_active"])):
        reasons.append(f"two Binary Star servers ACTIVE at once: {dual:,} interval(s)")
    return reasons


def where_line(line: UnjudgedLine) -> str:
    """``file line N: why``, for a person to open the file at that line."""
    at = f" line {line['line']}" if line["line"] is not None else ""
    return f"{line['file']}{at}: {line['why']}"


def failed(summary: Summary) -> bool:
    """True when a request was lost, run twice on one server, answered twice or
    out of order, two Binary Star servers were ACTIVE at once, or a line could
    not be read (a verdict that does not cover every line is no pass)."""
    if unreadable(summary):
        return True
    requests = summary.get("requests")
    flags = requests["flags"] if requests is not None else {}
    bstar = summary.get("bstar")
    dual_active = bstar["dual_active"] if bstar is not None else []
    return any(flags[name]["count"] for name in FLAGS if name in flags) or bool(dual_active)
