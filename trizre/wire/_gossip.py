"""The ZeroMQ Gossip Protocol (ZGP) of czmq's ``zgossip``, sans I/O.

zyre's gossip discovery publishes ``uuid -> endpoint`` tuples (with CURVE,
``endpoint|public-key``) through a network of zgossip services.  Each
message is one frame (after the ROUTER's identity frame, for a server),
integers big-endian::

    %xAA %xA0  id(1)  version(1)=1  fields...

    HELLO   (1)  -
    PUBLISH (2)  key: string (1-octet length)  value: longstr (4-octet length)
                 ttl: number(4), milliseconds
    PING    (3)  -
    PONG    (4)  -
    INVALID (5)  -

Facts from czmq's ``src/zgossip_msg.xml`` and ``zgossip_msg.c``; the code
is ours.  Decoding is stricter than czmq's (which ignores trailing bytes):
a frame must be exactly one message.
"""

from __future__ import annotations

import enum
import struct
from typing import ClassVar, Final, TypeAlias, final

import attrs

from ._errors import DecodeError, EncodeError

__all__ = [
    "GOSSIP_SIGNATURE",
    "GossipCommand",
    "GossipHello",
    "GossipInvalid",
    "GossipMessage",
    "GossipPing",
    "GossipPong",
    "GossipPublish",
    "decode_gossip",
    "encode_gossip",
]

GOSSIP_SIGNATURE: Final = b"\xaa\xa0"
"""The first two octets of every ZGP frame."""

_VERSION: Final = 1
_HEADER: Final = struct.Struct(">2sBB")  # signature, id, version
_U32: Final = struct.Struct(">I")


class GossipCommand(enum.IntEnum):
    """ZGP message ids."""

    HELLO = 1
    PUBLISH = 2
    PING = 3
    PONG = 4
    INVALID = 5


@final
@attrs.frozen
class GossipHello:
    """A client greets a server; the server answers with every tuple it holds."""

    command: ClassVar[GossipCommand] = GossipCommand.HELLO


@final
@attrs.frozen
class GossipPublish:
    """A tuple, from a client or a server.

    Attributes:
        key: globally unique (zyre: the node's UUID), at most 255 UTF-8 bytes.
        value: printable text (zyre: the inbox endpoint, ``|`` its CURVE key).
        ttl: time to live in milliseconds, 0..2**32-1 (czmq sends 0).
    """

    command: ClassVar[GossipCommand] = GossipCommand.PUBLISH

    key: str
    value: str
    ttl: int = 0


@final
@attrs.frozen
class GossipPing:
    """A client shows it is alive."""

    command: ClassVar[GossipCommand] = GossipCommand.PING


@final
@attrs.frozen
class GossipPong:
    """A server answers a PING (any traffic counts as liveness)."""

    command: ClassVar[GossipCommand] = GossipCommand.PONG


@final
@attrs.frozen
class GossipInvalid:
    """A server rejects a command (a client that did not say HELLO first)."""

    command: ClassVar[GossipCommand] = GossipCommand.INVALID


GossipMessage: TypeAlias = GossipHello | GossipPublish | GossipPing | GossipPong | GossipInvalid
"""Any decoded ZGP message."""

_BARE: Final[dict[int, GossipMessage]] = {
    GossipCommand.HELLO: GossipHello(),
    GossipCommand.PING: GossipPing(),
    GossipCommand.PONG: GossipPong(),
    GossipCommand.INVALID: GossipInvalid(),
}


def encode_gossip(message: GossipMessage) -> bytes:
    """The one frame that carries ``message``.

    Raises:
        EncodeError: a key over 255 UTF-8 bytes, a value over 2**32-1, a
            ttl outside 0..2**32-1, text that is not UTF-8-encodable, or
            something that is not a ZGP message.
    """
    command = getattr(message, "command", None)
    if not isinstance(command, GossipCommand):
        raise EncodeError(f"not a ZGP message: {message!r}")
    head = _HEADER.pack(GOSSIP_SIGNATURE, command, _VERSION)
    if not isinstance(message, GossipPublish):
        return head
    try:
        key = message.key.encode("utf-8")
        value = message.value.encode("utf-8")
    except (AttributeError, UnicodeEncodeError) as exc:
        raise EncodeError(f"a ZGP key and value are UTF-8 text: {exc}") from exc
    if len(key) > 255:
        raise EncodeError(f"a ZGP key is at most 255 UTF-8 bytes, got {len(key)}")
    if len(value) > 0xFFFFFFFF:
        raise EncodeError("a ZGP value is at most 2**32-1 bytes")
    ttl = message.ttl
    if type(ttl) is not int or not 0 <= ttl <= 0xFFFFFFFF:
        raise EncodeError(f"a ZGP ttl is an int in 0..2**32-1 milliseconds, got {ttl!r}")
    return b"".join((head, bytes((len(key),)), key, _U32.pack(len(value)), value, _U32.pack(ttl)))


def decode_gossip(frame: bytes | bytearray | memoryview) -> GossipMessage:
    """Parse one ZGP frame.

    Raises:
        DecodeError: a wrong signature, an unknown id, a version other than
            1, a truncated or over-long frame, text that is not UTF-8, or a
            frame that is not bytes-like.  Nothing else escapes.
    """
    try:
        data = bytes(frame)
        if len(data) < _HEADER.size:
            raise DecodeError(f"a ZGP frame has at least 4 octets, got {len(data)}")
        signature, command, version = _HEADER.unpack_from(data)
        if signature != GOSSIP_SIGNATURE:
            raise DecodeError(f"not a ZGP frame: signature {signature!r}")
        if version != _VERSION:
            raise DecodeError(f"ZGP version must be 1, got {version}")
        bare = _BARE.get(command)
        if bare is not None:
            if len(data) != _HEADER.size:
                raise DecodeError(f"{GossipCommand(command).name}: trailing bytes")
            return bare
        if command != GossipCommand.PUBLISH:
            raise DecodeError(f"unknown ZGP command id {command}")
        pos = _HEADER.size
        if pos >= len(data):
            raise DecodeError("PUBLISH: the key is missing")
        end = pos + 1 + data[pos]
        key = data[pos + 1 : end]
        if end + 4 > len(data):
            raise DecodeError("PUBLISH: truncated after the key")
        (size,) = _U32.unpack_from(data, end)
        pos = end + 4
        value = data[pos : pos + size]
        pos += size
        if pos + 4 != len(data):
            raise DecodeError("PUBLISH: the value's length does not match the frame")
        (ttl,) = _U32.unpack_from(data, pos)
        return GossipPublish(key.decode("utf-8"), value.decode("utf-8"), ttl)
    except DecodeError:
        raise
    except UnicodeDecodeError as exc:
        raise DecodeError("a ZGP key or value is not UTF-8") from exc
    except Exception as exc:  # a non-bytes argument, never a peer's bytes
        raise DecodeError(f"cannot decode a ZGP frame: {exc}") from exc
