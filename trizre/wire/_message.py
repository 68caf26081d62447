"""ZRE TCP messages (36/ZRE v2, 43/ZRE v3 draft, zyre's ids 8-10): the message classes.

One frozen class per command, with its fields; the frames' layout, the
encoding and the decoding are ``_message_codec.py``'s.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from typing import ClassVar, Final, TypeAlias, final

import attrs

__all__ = [
    "DEFAULT_VERSION",
    "MESSAGE_VERSIONS",
    "SIGNATURE",
    "Command",
    "Elect",
    "Goodbye",
    "Hello",
    "Join",
    "Leader",
    "Leave",
    "Message",
    "Ping",
    "PingOk",
    "Shout",
    "Whisper",
]

SIGNATURE: Final = b"\xaa\xa1"
"""The two octets every ZRE TCP message starts with."""

DEFAULT_VERSION: Final = 2
"""The message version zyre and pyre speak (36/ZRE)."""

MESSAGE_VERSIONS: Final = (2, 3)
"""Message versions this codec can encode and decode: 2 (36/ZRE), 3 (43/ZRE)."""


class Command(enum.IntEnum):
    """ZRE command ids (octet 2 of frame 0).

    ``Command(n)`` raises :class:`ValueError` for an id outside 1..10; the
    decoder reports such ids as :class:`UnknownCommand` instead.
    """

    HELLO = 1
    WHISPER = 2
    SHOUT = 3
    JOIN = 4
    LEAVE = 5
    PING = 6
    PING_OK = 7
    ELECT = 8
    LEADER = 9
    GOODBYE = 10


# --------------------------------------------------------------------------
# converters (run at construction; they only reshape, never range-check)


def _to_frames(value: Iterable[bytes]) -> tuple[bytes, ...]:
    if type(value) is tuple:
        return value
    if isinstance(value, bytes | bytearray | memoryview | str):
        raise TypeError("content must be an iterable of frames, not a single bytes/str object")
    return tuple(value)


def _to_strings(value: Iterable[str]) -> tuple[str, ...]:
    if type(value) is tuple:
        return value
    if isinstance(value, str | bytes):
        raise TypeError("groups must be an iterable of str, not a single str")
    return tuple(value)


def _to_headers(
    value: Mapping[str, str] | Iterable[tuple[str, str]],
) -> tuple[tuple[str, str], ...]:
    pairs = value.items() if isinstance(value, Mapping) else value
    if isinstance(pairs, str | bytes):
        raise TypeError("headers must be a mapping or an iterable of (name, value) pairs")
    return tuple((name, text) for name, text in pairs)


# --------------------------------------------------------------------------
# message classes


@final
@attrs.frozen
class Hello:
    """HELLO (id 1): greet a peer so it can connect back to us.

    Construction reshapes but does not range-check; :func:`encode` does.

    Attributes:
        sequence: cyclic sequence number, 0..65535 (HELLO is always 1).
        endpoint: the ZeroMQ endpoint we accept connections on (``string``,
            at most 255 UTF-8 bytes).
        groups: the groups we are in (``strings``). Any iterable of ``str``
            is accepted and stored as a tuple; a bare ``str`` raises
            :class:`TypeError`.
        status: our group status sequence, 0..255.
        name: our public name (``string``, at most 255 UTF-8 bytes).
        headers: our header properties (``dictionary``) as a tuple of
            ``(name, value)`` pairs in wire order; names are ``string``,
            values ``longstr``. A :class:`~collections.abc.Mapping` or an
            iterable of pairs is accepted; anything else raises
            :class:`TypeError` or :class:`ValueError`. Duplicates are kept.
        version: message version, 2 (default) or 3; keyword-only.
    """

    command: ClassVar[Command] = Command.HELLO

    sequence: int
    endpoint: str
    groups: tuple[str, ...] = attrs.field(default=(), converter=_to_strings)
    status: int = 0
    name: str = ""
    headers: tuple[tuple[str, str], ...] = attrs.field(default=(), converter=_to_headers)
    version: int = attrs.field(default=DEFAULT_VERSION, kw_only=True)

    def headers_dict(self) -> dict[str, str]:
        """Return the headers as a dict; for a repeated name the last value wins."""
        return dict(self.headers)


@final
@attrs.frozen
class Whisper:
    """WHISPER (id 2): send a multipart message to one peer.

    Attributes:
        sequence: cyclic sequence number, 0..65535.
        content: zero or more frames, sent as frames 1..n. Any iterable of
            ``bytes`` is accepted and stored as a tuple; a bare
            ``bytes``/``str`` raises :class:`TypeError`. Frames are never
            copied or type-checked.
        version: message version, 2 (default) or 3; keyword-only.
    """

    command: ClassVar[Command] = Command.WHISPER

    sequence: int
    content: tuple[bytes, ...] = attrs.field(default=(), converter=_to_frames)
    version: int = attrs.field(default=DEFAULT_VERSION, kw_only=True)


@final
@attrs.frozen
class Shout:
    """SHOUT (id 3): send a multipart message to a group (unicast to each member).

    Attributes:
        sequence: cyclic sequence number, 0..65535.
        group: the group name (``string``, at most 255 UTF-8 bytes).
        content: zero or more frames, as for :class:`Whisper`.
        version: message version, 2 (default) or 3; keyword-only.
    """

    command: ClassVar[Command] = Command.SHOUT

    sequence: int
    group: str
    content: tuple[bytes, ...] = attrs.field(default=(), converter=_to_frames)
    version: int = attrs.field(default=DEFAULT_VERSION, kw_only=True)


@final
@attrs.frozen
class Join:
    """JOIN (id 4): we joined a group.

    Attributes:
        sequence: cyclic sequence number, 0..65535.
        group: the group name (``string``, at most 255 UTF-8 bytes).
        status: our group status sequence *after* joining, 0..255.
        version: message version, 2 (default) or 3; keyword-only.
    """

    command: ClassVar[Command] = Command.JOIN

    sequence: int
    group: str
    status: int
    version: int = attrs.field(default=DEFAULT_VERSION, kw_only=True)


@final
@attrs.frozen
class Leave:
    """LEAVE (id 5): we left a group.

    Attributes:
        sequence: cyclic sequence number, 0..65535.
        group: the group name (``string``, at most 255 UTF-8 bytes).
        status: our group status sequence *after* leaving, 0..255.
        version: message version, 2 (default) or 3; keyword-only.
    """

    command: ClassVar[Command] = Command.LEAVE

    sequence: int
    group: str
    status: int
    version: int = attrs.field(default=DEFAULT_VERSION, kw_only=True)


@final
@attrs.frozen
class Ping:
    """PING (id 6): are you still there?

    Attributes:
        sequence: cyclic sequence number, 0..65535.
        version: message version, 2 (default) or 3; keyword-only.
    """

    command: ClassVar[Command] = Command.PING

    sequence: int
    version: int = attrs.field(default=DEFAULT_VERSION, kw_only=True)


@final
@attrs.frozen
class PingOk:
    """PING-OK (id 7): the reply to :class:`Ping`.

    Attributes:
        sequence: cyclic sequence number, 0..65535.
        version: message version, 2 (default) or 3; keyword-only.
    """

    command: ClassVar[Command] = Command.PING_OK

    sequence: int
    version: int = attrs.field(default=DEFAULT_VERSION, kw_only=True)


@final
@attrs.frozen
class Elect:
    """ELECT (id 8, zyre extension, not in 36/ZRE or 43/ZRE): leader election.

    Its fields are not specified by the RFCs, so the codec keeps the rest of
    frame 0 after the 6-octet header as opaque bytes.

    Attributes:
        sequence: cyclic sequence number, 0..65535.
        body: the raw octets after the header (possibly empty).
        version: message version, 2 (default) or 3; keyword-only.
    """

    command: ClassVar[Command] = Command.ELECT

    sequence: int
    body: bytes = b""
    version: int = attrs.field(default=DEFAULT_VERSION, kw_only=True)


@final
@attrs.frozen
class Leader:
    """LEADER (id 9, zyre extension): election result; body kept opaque like :class:`Elect`.

    Attributes:
        sequence: cyclic sequence number, 0..65535.
        body: the raw octets after the header (possibly empty).
        version: message version, 2 (default) or 3; keyword-only.
    """

    command: ClassVar[Command] = Command.LEADER

    sequence: int
    body: bytes = b""
    version: int = attrs.field(default=DEFAULT_VERSION, kw_only=True)


@final
@attrs.frozen
class Goodbye:
    """GOODBYE (id 10, zyre extension): the sender is leaving the network.

    Attributes:
        sequence: cyclic sequence number, 0..65535.
        version: message version, 2 (default) or 3; keyword-only.
    """

    command: ClassVar[Command] = Command.GOODBYE

    sequence: int
    version: int = attrs.field(default=DEFAULT_VERSION, kw_only=True)


Message: TypeAlias = (
    Hello | Whisper | Shout | Join | Leave | Ping | PingOk | Elect | Leader | Goodbye
)
"""Any decoded ZRE message. ``isinstance(x, Message)`` works."""
