"""Exceptions raised by the wire codec.

Two families, kept apart on purpose:

* :class:`DecodeError` (and its subclasses) means *a peer* sent something
  malformed. Decoders raise nothing else, whatever bytes they are given, so
  a node can ``except DecodeError`` around every inbound packet and drop it.
* :class:`EncodeError` means *we* asked for something the wire cannot
  carry (a 256-byte name, a sequence of 70000, ...). It is also a
  :class:`ValueError`, because it is a local programming mistake.
"""

from __future__ import annotations

from typing import Any, final

from .._errors import TrizreError

__all__ = ["DecodeError", "EncodeError", "UnknownCommand", "VersionMismatch", "WireError"]


class WireError(TrizreError):
    """Base class of every exception raised by :mod:`trizre.wire`."""


class DecodeError(WireError):
    """A peer sent bytes that are not a valid ZRE beacon or message.

    The only exception the decoders raise. When the decoder met an
    unexpected internal failure (for example frames that are not bytes), the
    original exception is chained as ``__cause__``; malformed UTF-8 is chained
    to its :class:`UnicodeDecodeError`.
    """


class EncodeError(WireError, ValueError):
    """A value given to an encoder cannot be represented on the wire.

    Raised for local mistakes: a ``string`` over 255 UTF-8 bytes, a
    ``longstr`` over 2**32-1 bytes, a sequence outside 0..65535, a status
    outside 0..255, a port outside 0..65535, an unsupported version, a CURVE
    key that is not 32 bytes, or text that cannot be encoded as UTF-8 (lone
    surrogates).
    """


@final
class UnknownCommand(DecodeError):
    """A well-formed header carried a command id this codec does not know.

    The signature and version were valid, so :attr:`sequence` is meaningful:
    a node that ignores unknown commands can still advance its expected
    sequence number instead of seeing a false gap on the next message.

    Attributes:
        command_id: the command octet seen (0 or 11..255).
        version: the protocol version octet seen.
        sequence: the sequence number seen.
    """

    def __init__(self, command_id: int, version: int, sequence: int) -> None:
        super().__init__(
            f"unknown ZRE command id {command_id} (version {version}, sequence {sequence})"
        )
        self.command_id = command_id
        self.version = version
        self.sequence = sequence

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.command_id, self.version, self.sequence))


@final
class VersionMismatch(DecodeError):
    """A ZRE message or beacon carried a version this decoder does not accept.

    ZRE v2 (36/ZRE) and v3 (43/ZRE) peers must ignore each other; catching
    this distinct error lets a node log "wrong version" instead of "garbage".

    Attributes:
        version: the version octet seen on the wire.
        expected: the versions that would have been accepted, ascending.
        command_id: the command octet for TCP messages, ``None`` for beacons.
        sequence: the sequence number for TCP messages, ``None`` for beacons.
    """

    def __init__(
        self,
        version: int,
        expected: tuple[int, ...],
        command_id: int | None = None,
        sequence: int | None = None,
    ) -> None:
        wanted = " or ".join(str(v) for v in expected)
        super().__init__(f"ZRE version {version} seen, expected {wanted}")
        self.version = version
        self.expected = expected
        self.command_id = command_id
        self.sequence = sequence

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.version, self.expected, self.command_id, self.sequence))
