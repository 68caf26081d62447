"""The Spark schema of a trace line (docs/traces.md).

The kinds, the schema version and the field values the rules compare
against are the trace contract's, defined once in :mod:`trizre.trace._contract`.


Spark is never asked to infer a schema: inference reads every file twice and
guesses types from whatever the first lines contain.  Every field any kind
may carry is declared here; a line lacking a field reads it as null.  A line
that is not a JSON object, or whose field has the wrong JSON type, lands in
``_corrupt_record`` and is counted as malformed by the audit.
"""

from __future__ import annotations

from typing import Final

from pyspark.sql.types import (
    BooleanType,
    DoubleType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

CORRUPT_COLUMN: Final = "_corrupt_record"
"""Where Spark puts the raw text of a line it could not read."""


def _str(name: str) -> StructField:
    return StructField(name, StringType(), nullable=True)


SCHEMA: Final = StructType(
    [
        # Common fields, on every line.
        StructField("v", IntegerType(), nullable=True),
        StructField("t", DoubleType(), nullable=True),
        StructField("m", DoubleType(), nullable=True),
        _str("node"),
        _str("name"),
        _str("kind"),
        # Optional fields, where the kind needs them.
        _str("peer"),
        _str("peer_name"),
        _str("group"),
        StructField("seq", LongType(), nullable=True),
        _str("rid"),
        _str("client"),
        _str("service"),
        _str("pattern"),
        StructField("attempt", IntegerType(), nullable=True),
        StructField("status", IntegerType(), nullable=True),
        StructField("latency", DoubleType(), nullable=True),
        StructField("idempotent", BooleanType(), nullable=True),
        _str("state"),
        _str("old_state"),
        _str("event"),
        _str("reason"),
        _str("endpoint"),
        # Spark's own: the raw line when it could not be parsed.
        _str(CORRUPT_COLUMN),
    ]
)
"""Explicit :class:`~pyspark.sql.types.StructType` of a schema-v1 line."""
