"""Reading the trace lines and tagging each as usable or not (docs/audit.md).

Also the small column helpers every pass of the audit shares.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final
from urllib.parse import unquote, urlparse

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, StructType

from ..trace import _contract as T
from . import _schema as S
from ._errors import AuditError
from ._summary import UnjudgedLine

CLOCKS: Final = ("m", "t")
"""Which time field the audit orders and measures by."""


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
    return read_files(spark, files)


def read_files(spark: SparkSession, files: list[str]) -> DataFrame:
    """The lines of these trace files (paths or URIs), as :func:`read_lines` reads them."""
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


DRIVER_FRAME_LITERAL: Final = 4 << 20
"""Above this many characters of JSON, :func:`driver_frame` uses ``createDataFrame``."""


def driver_frame(
    spark: SparkSession, schema: StructType, rows: Sequence[Sequence[Any]]
) -> DataFrame:
    """A DataFrame of *rows* held by the driver (a few per node), in *schema*'s columns.

    The JVM parses them from one JSON literal: ``createDataFrame`` would
    hand them to a Python worker process, whose start costs about a second
    of the audit (docs/benchmarks.md).  A literal travels inside every
    task, so past :data:`DRIVER_FRAME_LITERAL` (tens of thousands of rows:
    a trace of unusual churn) the rows go through ``createDataFrame`` after
    all.  Raises :class:`ValueError` when a row's length is not the schema's.
    """
    text = json.dumps([dict(zip(schema.names, row, strict=True)) for row in rows])
    if len(text) > DRIVER_FRAME_LITERAL:
        return spark.createDataFrame(rows, schema)
    return spark.range(1).select(F.inline(F.from_json(F.lit(text), ArrayType(schema))))


def valid_lines(tagged: DataFrame) -> DataFrame:
    """The usable lines of a :func:`tag_lines` frame."""
    return tagged.where(F.col("line_status") == "ok")
