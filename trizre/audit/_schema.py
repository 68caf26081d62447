"""The Spark schema of a trace line, schema version 1 (docs/traces.md).

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

SCHEMA_VERSION: Final = 1
"""The ``v`` this schema describes; lines with another ``v`` are skipped."""

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

# Kinds, as written by the recorder (docs/traces.md).
NODE_START: Final = "node-start"
NODE_STOP: Final = "node-stop"
ENTER: Final = "enter"
EXIT: Final = "exit"
JOIN: Final = "join"
LEAVE: Final = "leave"
EVASIVE: Final = "evasive"
SILENT: Final = "silent"
WHISPER_SENT: Final = "whisper-sent"
WHISPER_RECEIVED: Final = "whisper-received"
SHOUT_SENT: Final = "shout-sent"
SHOUT_RECEIVED: Final = "shout-received"
REQUEST_SENT: Final = "request-sent"
REQUEST_RETRIED: Final = "request-retried"
WORKER_CHOSEN: Final = "worker-chosen"
REQUEST_ANSWERED: Final = "request-answered"
REQUEST_ABANDONED: Final = "request-abandoned"
REQUEST_RECEIVED: Final = "request-received"
REQUEST_EXECUTED: Final = "request-executed"
REPLY_SENT: Final = "reply-sent"
DEDUPE_HIT: Final = "dedupe-hit"
REQUEST_REFUSED: Final = "request-refused"
BSTAR_STATE: Final = "bstar-state"

CLIENT_SIDE_KINDS: Final = (
    REQUEST_SENT,
    REQUEST_RETRIED,
    WORKER_CHOSEN,
    REQUEST_ANSWERED,
    REQUEST_ABANDONED,
)
"""Request kinds whose ``node`` is the client."""

SERVER_SIDE_KINDS: Final = (
    REQUEST_RECEIVED,
    REQUEST_EXECUTED,
    REPLY_SENT,
    DEDUPE_HIT,
    REQUEST_REFUSED,
)
"""Request kinds whose ``client`` is the client (``node`` is the server)."""

HEARD_FROM_KINDS: Final = (
    ENTER,
    JOIN,
    LEAVE,
    WHISPER_RECEIVED,
    SHOUT_RECEIVED,
    REQUEST_ANSWERED,
    REQUEST_RECEIVED,
    DEDUPE_HIT,
    REQUEST_REFUSED,
)
"""Kinds proving the observer just heard from the peer named in ``peer``
(or ``client``): the presence rule measures from the last of these to an
``exit``.  Lines about what the observer *sent* prove nothing about the peer."""

ACTIVE_STATE: Final = "ACTIVE"
"""Binary Star state name (compared case-insensitively)."""

BINARY_STAR: Final = "binary-star"
"""``pattern`` of Binary Star requests."""
