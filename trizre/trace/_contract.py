"""The trace contract: one JSON object per line, per node.

This module is the one home of the trace contract (schema version 1,
``docs/traces.md``): the schema version, every ``kind`` and every exit
``reason``.  The node, the patterns and the audit import these names, so a
renamed kind is an import error, never a line the audit silently misses.
"""

from __future__ import annotations

import enum
from typing import Final

__all__ = [
    "ACTIVE_STATE",
    "BINARY_STAR",
    "BSTAR_STATE",
    "CLIENT_SIDE_KINDS",
    "DEDUPE_HIT",
    "ENTER",
    "EVASIVE",
    "EXIT",
    "HEARD_FROM_KINDS",
    "JOIN",
    "KINDS",
    "FREELANCE",
    "LAZY_PIRATE",
    "LEAVE",
    "NODE_START",
    "NODE_STOP",
    "REPLY_SENT",
    "REQUEST_ABANDONED",
    "REQUEST_ANSWERED",
    "REQUEST_EXECUTED",
    "REQUEST_RECEIVED",
    "REQUEST_REFUSED",
    "REQUEST_RETRIED",
    "REQUEST_SENT",
    "SCHEMA_VERSION",
    "SERVER_SIDE_KINDS",
    "SERVICE",
    "SHOUT_RECEIVED",
    "SHOUT_SENT",
    "SILENT",
    "WHISPER_RECEIVED",
    "WHISPER_SENT",
    "WORKER_CHOSEN",
    "ExitReason",
]

SCHEMA_VERSION: Final = 1
"""The ``v`` of every line written here; the audit skips lines of another ``v``."""

# Kinds written by the node (docs/traces.md, "Node").
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
# Kinds written by the patterns, client side (``node`` is the client).
REQUEST_SENT: Final = "request-sent"
REQUEST_RETRIED: Final = "request-retried"
WORKER_CHOSEN: Final = "worker-chosen"
REQUEST_ANSWERED: Final = "request-answered"
REQUEST_ABANDONED: Final = "request-abandoned"
# Server side (``node`` is the server, ``client`` the requester).
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
(or ``client``): the audit's presence rule measures from the last of these
to an ``exit``.  Lines about what the observer *sent* prove nothing."""

# Values of the ``pattern`` field, and the Binary Star state the audit
# watches (``state`` is the state's name, compared case-insensitively).
LAZY_PIRATE: Final = "lazy-pirate"
SERVICE: Final = "service"
BINARY_STAR: Final = "binary-star"
FREELANCE: Final = "freelance"
ACTIVE_STATE: Final = "ACTIVE"

KINDS: Final = frozenset(
    {
        NODE_START,
        NODE_STOP,
        ENTER,
        EXIT,
        JOIN,
        LEAVE,
        EVASIVE,
        SILENT,
        WHISPER_SENT,
        WHISPER_RECEIVED,
        SHOUT_SENT,
        SHOUT_RECEIVED,
        BSTAR_STATE,
        *CLIENT_SIDE_KINDS,
        *SERVER_SIDE_KINDS,
    }
)
"""Every kind of schema version 1."""


class ExitReason(enum.StrEnum):
    """Why a peer exited: the ``reason`` of an ``exit`` line."""

    BEACON = "beacon"  # it sent a port-0 beacon
    EXPIRED = "expired"  # silent for expired_timeout
    GOODBYE = "goodbye"  # it said GOODBYE (or its in-process node stopped)
    SEQUENCE = "sequence"  # a sequence gap or repeat
    MALFORMED = "malformed"  # a ZRE message that does not decode
    HELLO = "hello"  # a second HELLO: it restarted its link to us
    HANDSHAKE = "handshake"  # no HELLO in time (never traced: it had not entered)
    KEY = "key"  # CURVE: its HELLO lacked the key it connected with (never traced either)
    LIMITS = "limits"  # over a per-peer limit: groups, headers, message size (issue 25)
    LINK = "link"  # our link to it broke: what we sent since may be lost (issue 25)
