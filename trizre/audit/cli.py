"""``python -m trizre.audit TRACE_DIR [--master URL] [--out REPORT_DIR]``.

Exit codes: 0 the audit passed; 1 a request was lost, executed twice by an
idempotent server, answered twice or answered out of order, or a line could
not be judged (not JSON, cut short, another schema version); 2 usage error, no
usable trace line, or trace files named so that Spark would skip them (_* or .*);
3 no usable Java (or pyspark is not installed).

pyspark is imported only once the arguments and Java have been checked, so
``--help`` and every early error are instant and work without the extra.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Final, TextIO

from ._java import JavaError, find_java
from ._summary import Summary, unreadable, where_line

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from ._rules import AuditResult

EXIT_OK: Final = 0
EXIT_FLAGGED: Final = 1
EXIT_USAGE: Final = 2
EXIT_NO_JAVA: Final = 3

DEFAULT_OUT: Final = "audit-report"

DEFAULT_LOCAL_DRIVER_MEMORY: Final = "2g"
"""Heap of the local-mode JVM (Spark's own default, 1g, makes the cached lines
of a 10M-line trace spill to disk)."""

LOCAL_JVM_OPTIONS: Final = "-XX:+UseParallelGC"
"""JVM options of a local-mode audit: the throughput collector rather than
G1, whose concurrent work competes with the audit's own threads for the
cores (10 M lines on 2 cores: about 5 s less, docs/benchmarks.md)."""

LOCAL_CONFIG: Final = {
    "spark.shuffle.compress": "false",
    "spark.shuffle.spill.compress": "false",
    "spark.sql.sources.parallelPartitionDiscovery.threshold": "1000000",
}
"""Spark settings of a local-mode audit: shuffle files stay on this machine,
so compressing them costs CPU and saves no network (10 M lines on 2 cores:
about 4 s less, docs/benchmarks.md).  The trace files are listed by the
driver itself: above 32 paths Spark would run a job to list them in
parallel, which on one machine costs a second and saves nothing."""

_LOG4J2: Final = """\
rootLogger.level = warn
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n%ex
logger.nativecode.name = org.apache.hadoop.util.NativeCodeLoader
logger.nativecode.level = error
"""


def _is_local(master: str) -> bool:
    return master == "local" or master.startswith("local[") or master.startswith("local-")


def _is_remote_path(path: str) -> bool:
    return "://" in path and not path.startswith("file://")


@contextlib.contextmanager
def _log4j2_config() -> Iterator[Path]:
    """A temporary log4j2 file (WARN, stderr); the JVM reads it once at start."""
    fd, name = tempfile.mkstemp(prefix="trizre-audit-", suffix=".log4j2.properties")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(_LOG4J2)
        yield Path(name)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(name)


def build_session(
    master: str = "local[*]",
    *,
    app_name: str = "trizre-audit",
    shuffle_partitions: int | None = None,
    driver_memory: str | None = None,
) -> SparkSession:
    """Start (or reuse) a quiet SparkSession for the audit.

    No web UI, no progress bars, log level WARN.  For ``local`` masters the
    driver binds to 127.0.0.1 only and uses few shuffle partitions (the
    machine's core count, at least 4) unless *shuffle_partitions* says
    otherwise, and is tuned for one short batch job on one machine
    (:data:`LOCAL_JVM_OPTIONS`, :data:`LOCAL_CONFIG`); for a cluster master
    on loopback (``spark://127.0.0.1:7077``) the driver binds to 127.0.0.1
    too; for other cluster masters Spark's defaults stand.
    """
    from pyspark.sql import SparkSession  # noqa: PLC0415 (pyspark only when used)

    local = _is_local(master)
    # A cluster on this machine (spark://127.x or localhost): its executors
    # reach the driver on loopback, so it need listen nowhere else.
    on_loopback = local or master.startswith(("spark://127.", "spark://localhost:"))
    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        # The request aggregation has many columns: no "truncated plan" warning.
        .config("spark.sql.debug.maxToStringFields", "200")
    )
    if on_loopback:
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        builder = builder.config("spark.driver.host", "127.0.0.1").config(
            "spark.driver.bindAddress", "127.0.0.1"
        )
    java_options = ""
    if local:
        java_options = LOCAL_JVM_OPTIONS
        for key, value in LOCAL_CONFIG.items():
            builder = builder.config(key, value)
        if shuffle_partitions is None:
            shuffle_partitions = max(4, os.cpu_count() or 1)
        if driver_memory is None:
            driver_memory = DEFAULT_LOCAL_DRIVER_MEMORY
    if shuffle_partitions is not None:
        builder = builder.config("spark.sql.shuffle.partitions", str(shuffle_partitions))
    if driver_memory is not None:
        builder = builder.config("spark.driver.memory", driver_memory)
    with _log4j2_config() as log_config:
        builder = builder.config(
            "spark.driver.extraJavaOptions",
            f"-Dlog4j2.configurationFile={log_config} {java_options}".rstrip(),
        )
        spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark


def _parser(prog: str = "trizre audit") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=prog,
        description=(
            "Audit the traces a fleet of trizre nodes recorded (docs/traces.md) with PySpark: "
            "lost, duplicated, double-replied and out-of-order requests, latency percentiles, "
            "Binary Star failover windows, peer churn."
        ),
        epilog=(
            "exit codes: 0 passed; 1 lost/duplicate/double-reply/out-of-order requests, or lines "
            "that could not be judged; "
            "2 usage error, empty input or trace files Spark would skip; 3 no usable Java or no "
            "pyspark"
        ),
    )
    p.add_argument("trace_dir", metavar="TRACE_DIR", help="directory holding *.jsonl traces")
    p.add_argument(
        "--master",
        default="local[*]",
        metavar="URL",
        help="Spark master URL (default: local[*]; e.g. spark://host:7077, yarn)",
    )
    p.add_argument(
        "--out",
        default=DEFAULT_OUT,
        metavar="REPORT_DIR",
        help=(
            "where to write summary.json, requests.parquet/ and report.html"
            f" (default: ./{DEFAULT_OUT})"
        ),
    )
    p.add_argument(
        "--clock",
        choices=("m", "t"),
        default="m",
        help=(
            "time field to order by: m = monotonic (default; comparable across nodes of one host "
            "only), t = wall clock (use when Binary Star servers ran on different hosts)"
        ),
    )
    p.add_argument(
        "--max-listed",
        type=int,
        default=100,
        metavar="N",
        help="offending requests listed per flag in summary.json (default: 100)",
    )
    p.add_argument(
        "--shuffle-partitions",
        type=int,
        default=None,
        metavar="N",
        help="spark.sql.shuffle.partitions (default: core count for local masters)",
    )
    p.add_argument(
        "--driver-memory",
        default=None,
        metavar="SIZE",
        help=(
            "spark.driver.memory when this command starts the JVM"
            f" (default for local masters: {DEFAULT_LOCAL_DRIVER_MEMORY})"
        ),
    )
    p.add_argument("-q", "--quiet", action="store_true", help="print nothing on success")
    return p


def _fail(stream: TextIO, message: str) -> None:
    print(f"trizre audit: {message}", file=stream)


def _has_trace_files(root: Path) -> bool:
    for _dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if not d.startswith(("_", "."))]
        if any(f.endswith(".jsonl") and not f.startswith(("_", ".")) for f in filenames):
            return True
    return False


def run(
    spark: SparkSession,
    trace_dir: str,
    out_dir: Path,
    *,
    clock: str = "m",
    max_listed: int = 100,
) -> tuple[int, AuditResult]:
    """Audit *trace_dir* with an existing session and write the report.

    Returns the exit code (0, 1, or 2 when no line was usable) and the result.
    """
    from . import _report  # noqa: PLC0415 (imports pyspark)
    from ._rules import audit  # noqa: PLC0415

    out_dir.mkdir(parents=True, exist_ok=True)
    requests_path = out_dir / _report.REQUESTS_DIR
    trace_uri = trace_dir if _is_remote_path(trace_dir) else str(Path(trace_dir).resolve())
    started = time.monotonic()
    result = audit(
        spark,
        trace_uri,
        str(requests_path.resolve()),
        clock=clock,
        max_listed=max_listed,
    )
    code = EXIT_USAGE if result.empty else EXIT_FLAGGED if result.failed else EXIT_OK
    result.summary["audit"] = {
        "exit_code": code,
        "passed": code == EXIT_OK,
        "seconds": round(time.monotonic() - started, 3),
        "spark_version": spark.version,
        "master": spark.sparkContext.master or "",
    }
    _report.write_summary(result.summary, out_dir)
    _report.write_html(result.summary, out_dir, code)
    return code, result


def _print_summary(summary: Summary, out_dir: Path, stream: TextIO) -> None:
    inp = summary["input"]
    print(f"{inp['valid_lines']:,} lines from {inp['nodes']:,} nodes", file=stream)
    if unreadable(summary):
        print(
            f"FAIL: {unreadable(summary):,} line(s) could not be judged "
            f"({inp['malformed_lines']:,} not JSON or cut short, "
            f"{inp['other_version_lines']:,} of another schema version, "
            f"{inp['incomplete_lines']:,} without kind, node or time): "
            "the verdict does not cover them",
            file=stream,
        )
        for line in inp.get("unjudged") or []:
            print(f"  {where_line(line)}", file=stream)
    req = summary.get("requests")
    if req:
        c = req["counts"]
        print(
            f"{c['requests']:,} requests: {c['answered']:,} answered, "
            f"{c['abandoned']:,} abandoned, {c['retried']:,} retried",
            file=stream,
        )
        flagged = [
            f"{name.replace('_', ' ')}: {flag['count']:,}"
            for name, flag in req["flags"].items()
            if flag["count"]
        ]
        print("flags: " + (", ".join(flagged) if flagged else "none"), file=stream)
    lat = summary.get("latency", {}).get("overall")
    if lat and lat["count"]:
        print(
            f"latency p50 {lat['p50']:.6f} s, p90 {lat['p90']:.6f} s, p99 {lat['p99']:.6f} s, "
            f"max {lat['max']:.6f} s",
            file=stream,
        )
    bstar = summary.get("bstar")
    if bstar and bstar["servers"]:
        print(
            f"binary star: {len(bstar['failovers'])} failover(s), "
            f"{len(bstar['no_active'])} interval(s) without an ACTIVE server, "
            f"{len(bstar['dual_active'])} with two",
            file=stream,
        )
    print(f"report: {out_dir / 'report.html'}", file=stream)


def main(argv: Sequence[str] | None = None, *, prog: str = "trizre audit") -> int:
    """Run the command; return its exit code. ``prog`` names it in usage and help."""
    parser = _parser(prog)
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse: --help (0) or a usage error (2)
        return int(exc.code) if isinstance(exc.code, int) else EXIT_USAGE
    trace_dir: str = args.trace_dir
    out_dir = Path(args.out)
    if args.max_listed < 0:
        _fail(sys.stderr, "--max-listed must be >= 0")
        return EXIT_USAGE
    if not _is_remote_path(trace_dir):
        root = Path(trace_dir.removeprefix("file://"))
        if not root.is_dir():
            _fail(sys.stderr, f"{trace_dir}: not a directory")
            return EXIT_USAGE
        if not _has_trace_files(root):
            _fail(sys.stderr, f"{trace_dir}: no *.jsonl trace file in it")
            return EXIT_USAGE
        trace_dir = str(root)
    try:
        java = find_java()
    except JavaError as exc:
        _fail(sys.stderr, str(exc))
        return EXIT_NO_JAVA
    if not java.tested:
        _fail(
            sys.stderr,
            f"warning: {java.path} is Java {java.version}; Spark 4 is tested on 17 and 21",
        )
    try:
        import pyspark  # noqa: F401, PLC0415
    except ImportError:
        _fail(
            sys.stderr,
            "pyspark is not installed; install the extra: pip install 'trizre[spark]'",
        )
        return EXIT_NO_JAVA

    from pyspark.sql import SparkSession  # noqa: PLC0415

    # Inside a program (or a test) that already runs Spark, use its session.
    active = SparkSession.getActiveSession()
    owned = active is None
    spark = active or build_session(
        args.master,
        shuffle_partitions=args.shuffle_partitions,
        driver_memory=args.driver_memory,
    )
    from ._rules import HiddenTraceFiles  # noqa: PLC0415 (imports pyspark)

    try:
        code, result = run(spark, trace_dir, out_dir, clock=args.clock, max_listed=args.max_listed)
    except HiddenTraceFiles as exc:
        _fail(sys.stderr, f"{trace_dir}: {exc}")
        return EXIT_USAGE
    finally:
        if owned:
            spark.stop()
    if code == EXIT_USAGE:
        _fail(sys.stderr, f"{trace_dir}: no usable trace line (schema v1)")
        return code
    if not args.quiet or code != EXIT_OK:
        _print_summary(result.summary, out_dir, sys.stdout)
    return code
