"""ZRE sequence-number arithmetic (uint16, wrapping 65535 -> 0 like zyre).

Every ZRE message carries a 2-octet sequence number. A sender numbers its
messages to one peer 1, 2, 3, ... (HELLO is always 1), wrapping from 65535
to 0. A receiver remembers the last sequence it accepted from a peer and
checks that each new message carries exactly the next one; anything else
(a gap, a repeat, a reordering) makes the peer invalid.

The "last seen" value before any message has arrived is
:data:`INITIAL_SEQUENCE` (0), so ``is_next(INITIAL_SEQUENCE, 1)`` accepts
the HELLO.
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "HELLO_SEQUENCE",
    "INITIAL_SEQUENCE",
    "SEQUENCE_MODULUS",
    "is_next",
    "next_sequence",
    "sequence_distance",
]

SEQUENCE_MODULUS: Final = 0x10000
"""Sequence numbers are taken modulo this (65536): 65535 is followed by 0."""

INITIAL_SEQUENCE: Final = 0
"""The "last sent" / "last seen" value before the first message: HELLO is its successor."""

HELLO_SEQUENCE: Final = 1
"""The sequence number every HELLO must carry."""

_MASK: Final = 0xFFFF


def _check(value: int, what: str) -> None:
    if type(value) is not int or not 0 <= value <= _MASK:
        raise ValueError(f"{what} must be an int in 0..65535, got {value!r}")


def next_sequence(sequence: int) -> int:
    """Return the sequence number that follows *sequence* (65535 -> 0).

    Use it on the sending side: start from :data:`INITIAL_SEQUENCE` and the
    first call yields :data:`HELLO_SEQUENCE`.

    Raises:
        ValueError: *sequence* is not an ``int`` in 0..65535.
    """
    _check(sequence, "sequence")
    return (sequence + 1) & _MASK


def is_next(last_seen: int, received: int) -> bool:
    """Return whether *received* is exactly the successor of *last_seen*.

    ``is_next(INITIAL_SEQUENCE, HELLO_SEQUENCE)`` is true, and so is
    ``is_next(65535, 0)``. A ``False`` result is a gap or an out-of-order or
    repeated message: per 36/ZRE the peer is then invalid.

    Raises:
        ValueError: either argument is not an ``int`` in 0..65535.
    """
    _check(last_seen, "last_seen")
    _check(received, "received")
    return received == (last_seen + 1) & _MASK


def sequence_distance(last_seen: int, received: int) -> int:
    """Return how far *received* is ahead of *last_seen*, modulo 65536.

    1 means "the expected next message"; ``n > 1`` means ``n - 1`` messages
    are missing (or a reordering); 0 means a repeat. Useful for logging why a
    peer was dropped.

    Raises:
        ValueError: either argument is not an ``int`` in 0..65535.
    """
    _check(last_seen, "last_seen")
    _check(received, "received")
    return (received - last_seen) & _MASK
