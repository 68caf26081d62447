"""The ZRE TCP messages' encoding and decoding (36/ZRE v2, 43/ZRE v3 draft, zyre's ids 8-10).

A ZRE message is one ZeroMQ multipart message. Frame 0 is::

    %xAA %xA1  command(1)  version(1)  sequence(2)  fields...

WHISPER and SHOUT carry their content in the frames after frame 0 (zero or
more); every other command is exactly one frame. Field types, integers
big-endian, lengths in UTF-8 *bytes*::

    string      length(1) + UTF-8
    longstr     length(4) + UTF-8
    strings     count(4) + count * longstr
    dictionary  count(4) + count * (string name, longstr value)

:func:`decode` is canonical: whenever it succeeds, :func:`encode` of the
result gives back exactly the frames it was given.  The message classes
are ``_message.py``'s.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from typing import Any, Final, TypeAlias

from ._errors import DecodeError, EncodeError, UnknownCommand, VersionMismatch
from ._message import (
    DEFAULT_VERSION,
    MESSAGE_VERSIONS,
    SIGNATURE,
    Command,
    Elect,
    Goodbye,
    Hello,
    Join,
    Leader,
    Leave,
    Message,
    Ping,
    PingOk,
    Shout,
    Whisper,
)

__all__ = [
    "decode",
    "election_body",
    "encode",
    "encode_whisper",
    "hello_excess",
    "parse_election_body",
    "group_string",
    "shout_builder",
    "shout_encoder",
    "shout_header",
    "whisper_sequence",
    "HEADER",
]


_SIG: Final = 0xAAA1
HEADER: Final = struct.Struct(">HBBH")
"""Frame 0's first six octets: signature (:data:`SIGNATURE` as an int), command, version, sequence.

For a receiver that recognises a data message by packing the frame 0 it
expects (the peer protocol's runs), rather than unpacking the one it got.
"""
_HEADER_SIZE: Final = HEADER.size  # 6
_U32: Final = struct.Struct(">I")
_U32_MAX: Final = 0xFFFFFFFF
_STRING_MAX: Final = 0xFF
_OCTETS: Final = tuple(bytes((i,)) for i in range(256))  # a string's length octet, made once


# --------------------------------------------------------------------------
# encoding


def _check_version(version: int) -> None:
    if version not in MESSAGE_VERSIONS:
        raise EncodeError(f"message version must be 2 or 3, got {version!r}")


def _check_status(status: int) -> None:
    if type(status) is not int or not 0 <= status <= 0xFF:
        raise EncodeError(f"status must be an int in 0..255, got {status!r}")


def _put_string(out: bytearray, text: str, what: str) -> None:
    raw = text.encode()
    size = len(raw)
    if size > _STRING_MAX:
        raise EncodeError(f"{what} is {size} UTF-8 bytes; a ZRE string holds at most 255")
    out.append(size)
    out += raw


def _put_longstr(out: bytearray, text: str, what: str) -> None:
    raw = text.encode()
    size = len(raw)
    if size > _U32_MAX:
        raise EncodeError(f"{what} is {size} UTF-8 bytes; a ZRE longstr holds at most 2**32-1")
    out += _U32.pack(size)
    out += raw


def _encode_hello(msg: Hello) -> list[bytes]:
    _check_version(msg.version)
    _check_status(msg.status)
    out = bytearray(HEADER.pack(_SIG, 1, msg.version, msg.sequence))
    _put_string(out, msg.endpoint, "endpoint")
    groups = msg.groups
    out += _U32.pack(len(groups))
    for group in groups:
        _put_longstr(out, group, "group name")
    out.append(msg.status)
    _put_string(out, msg.name, "name")
    headers = msg.headers
    out += _U32.pack(len(headers))
    for key, value in headers:
        _put_string(out, key, "header name")
        _put_longstr(out, value, "header value")
    return [bytes(out)]


def _encode_whisper(msg: Whisper) -> list[bytes]:
    version = msg.version
    if version not in MESSAGE_VERSIONS:
        _check_version(version)
    return [HEADER.pack(_SIG, 2, version, msg.sequence), *msg.content]


def _encode_shout(msg: Shout) -> list[bytes]:
    version = msg.version
    if version not in MESSAGE_VERSIONS:
        _check_version(version)
    raw = msg.group.encode()
    if len(raw) > _STRING_MAX:
        raise EncodeError(f"group is {len(raw)} UTF-8 bytes; a ZRE string holds at most 255")
    head = HEADER.pack(_SIG, 3, version, msg.sequence) + bytes((len(raw),)) + raw
    return [head, *msg.content]


def _encode_group_status(msg: Join | Leave) -> list[bytes]:
    _check_version(msg.version)
    _check_status(msg.status)
    out = bytearray(HEADER.pack(_SIG, msg.command, msg.version, msg.sequence))
    _put_string(out, msg.group, "group")
    out.append(msg.status)
    return [bytes(out)]


def _encode_bare(msg: Ping | PingOk | Goodbye) -> list[bytes]:
    _check_version(msg.version)
    return [HEADER.pack(_SIG, msg.command, msg.version, msg.sequence)]


def _encode_opaque(msg: Elect | Leader) -> list[bytes]:
    _check_version(msg.version)
    body = msg.body
    if not isinstance(body, bytes):
        raise TypeError(f"{type(msg).__name__}.body must be bytes, got {type(body).__name__}")
    return [HEADER.pack(_SIG, msg.command, msg.version, msg.sequence) + body]


_ENCODERS: Final[dict[type, Callable[[Any], list[bytes]]]] = {
    Hello: _encode_hello,
    Whisper: _encode_whisper,
    Shout: _encode_shout,
    Join: _encode_group_status,
    Leave: _encode_group_status,
    Ping: _encode_bare,
    PingOk: _encode_bare,
    Goodbye: _encode_bare,
    Elect: _encode_opaque,
    Leader: _encode_opaque,
}


def _explain_struct_error(msg: Message, exc: struct.error) -> str:
    sequence = msg.sequence
    if type(sequence) is not int or not 0 <= sequence <= 0xFFFF:
        return f"sequence must be an int in 0..65535, got {sequence!r}"
    return f"cannot encode {type(msg).__name__}: {exc}"


def encode(message: Message) -> list[bytes]:
    """Return the ZeroMQ frames for *message* (frame 0 first).

    WHISPER and SHOUT content frames are appended as they are (not copied).

    Raises:
        EncodeError: a field cannot be represented on the wire: sequence not
            in 0..65535, status not in 0..255, version not 2 or 3, a
            ``string`` (endpoint, name, group, header name) over 255 UTF-8
            bytes, a ``longstr`` (group in HELLO, header value) over 2**32-1
            bytes, or text that is not encodable as UTF-8 (lone surrogates).
        TypeError: *message* is not one of the :data:`Message` classes, or
            a field has the wrong Python type (e.g. a ``bytes`` name).
    """
    encoder = _ENCODERS.get(type(message))
    if encoder is None:
        raise TypeError(f"not a ZRE message: {message!r}")
    try:
        return encoder(message)
    except struct.error as exc:
        raise EncodeError(_explain_struct_error(message, exc)) from exc
    except UnicodeEncodeError as exc:
        raise EncodeError(f"text is not encodable as UTF-8: {exc}") from exc
    except AttributeError as exc:  # e.g. bytes where str was expected
        raise TypeError(f"cannot encode {type(message).__name__}: {exc}") from exc


def encode_whisper(sequence: int, content: Sequence[bytes], version: int) -> list[bytes]:
    """``encode(Whisper(sequence, content, version=version))`` without the object.

    The hot path of a sender that already checked its content frames (the
    node does): about half the cost.  Raises :class:`EncodeError` as
    :func:`encode` does for a sequence outside 0..65535 or a version that
    is not 2 or 3.
    """
    if version not in MESSAGE_VERSIONS:
        _check_version(version)
    try:
        return [HEADER.pack(_SIG, 2, version, sequence), *content]
    except struct.error:
        raise EncodeError(f"sequence must be an int in 0..65535, got {sequence!r}") from None


def shout_encoder(
    group: str, content: Sequence[bytes], version: int
) -> Callable[[int], list[bytes]]:
    """``encode(Shout(sequence, group, content, version=version))`` as a function of ``sequence``.

    For a sender of one SHOUT to many peers, each numbering it its own way:
    the group is checked and encoded once, here, and each call packs frame
    0 (the header and that group) and shares the ``content`` frames as
    they are (not copied).  Raises :class:`EncodeError` as :func:`encode`
    does for a version that is not 2 or 3, a group over 255 UTF-8 bytes
    or not encodable as UTF-8; the function it returns raises it for a
    sequence outside 0..65535.
    """
    if version not in MESSAGE_VERSIONS:
        _check_version(version)
    return shout_builder(group_string(group), content, version)


def group_string(group: str) -> bytes:
    """``group`` as a SHOUT's frame 0 ends with it: a ZRE ``string`` (length octet, UTF-8).

    For a sender that keeps it per group (see :func:`shout_builder`).
    Raises :class:`EncodeError` for a group over 255 UTF-8 bytes or not
    encodable as UTF-8.
    """
    try:
        raw = group.encode()
    except UnicodeEncodeError as exc:
        raise EncodeError(f"text is not encodable as UTF-8: {exc}") from exc
    if len(raw) > _STRING_MAX:
        raise EncodeError(f"group is {len(raw)} UTF-8 bytes; a ZRE string holds at most 255")
    return _OCTETS[len(raw)] + raw


def shout_builder(
    tail: bytes, content: Sequence[bytes], version: int
) -> Callable[[int], list[bytes]]:
    """:func:`shout_encoder` for a group already encoded by :func:`group_string` (``tail``).

    Unchecked: ``tail`` must come from :func:`group_string` and ``version``
    be 2 or 3 (the node checks its own once); the function it returns raises
    :class:`EncodeError` for a sequence outside 0..65535.
    """
    frames = tuple(content)

    def build(sequence: int, pack: Callable[..., bytes] = HEADER.pack) -> list[bytes]:
        try:
            return [pack(_SIG, 3, version, sequence) + tail, *frames]
        except struct.error:
            raise EncodeError(f"sequence must be an int in 0..65535, got {sequence!r}") from None

    return build


def shout_header(head: bytes, version: int) -> tuple[int, str] | None:
    """``(sequence, group)`` if frame 0 ``head`` is a well-formed SHOUT of ``version``.

    The hot path of a receiver of SHOUTs, as :func:`whisper_sequence` is
    of WHISPERs: no message object is built.  ``None`` for anything else;
    :func:`decode` then explains what is wrong.  Never raises for bytes
    input.
    """
    if len(head) <= _HEADER_SIZE or len(head) != _HEADER_SIZE + 1 + head[_HEADER_SIZE]:
        return None
    sig, command, seen, sequence = HEADER.unpack_from(head)
    if sig != _SIG or command != 3 or seen != version:
        return None
    try:
        group = head[_HEADER_SIZE + 1 :].decode()
    except UnicodeDecodeError:
        return None
    return sequence, group


def whisper_sequence(head: bytes, version: int) -> int | None:
    """The sequence number if frame 0 ``head`` is a WHISPER of ``version``, else ``None``.

    The hot path of a receiver: a WHISPER's frame 0 is its header alone, so
    this decides it without building a message; for ``None`` call
    :func:`decode`, which also explains what is wrong.  Never raises for
    bytes input.
    """
    if len(head) != _HEADER_SIZE:
        return None
    sig, command, seen, sequence = HEADER.unpack(head)
    if sig != _SIG or command != 2 or seen != version:
        return None
    return sequence  # type: ignore[no-any-return]


def hello_excess(
    head: bytes, *, max_groups: int, max_headers: int, max_header_bytes: int
) -> str | None:
    """What of the HELLO whose frame 0 is ``head`` exceeds the limits; ``None`` if nothing.

    Reads only the counts and lengths of its ``groups`` and ``headers``, never
    their text, and stops at the first limit passed: at most ``max_groups +
    max_headers`` steps, whatever the frame's size, so a HELLO of a million
    groups costs no more to refuse than one of ``max_groups``.  Header bytes
    are the names' and values' UTF-8 octets together.  ``head`` that is not
    a well-formed HELLO gives ``None`` (:func:`decode` explains it).  Never
    raises for bytes input.
    """
    size = len(head)
    if size < _HEADER_SIZE + 1 or head[2] != Command.HELLO:
        return None
    pos = _HEADER_SIZE + 1 + head[_HEADER_SIZE]  # past the endpoint string
    if pos + 4 > size:
        return None
    groups = _U32.unpack_from(head, pos)[0]
    if groups > max_groups:
        return f"lists {groups} groups, over max_peer_groups ({max_groups})"
    pos += 4
    for _ in range(groups):
        if pos + 4 > size:
            return None
        pos += 4 + _U32.unpack_from(head, pos)[0]
    pos += 1  # status
    if pos >= size:
        return None
    pos += 1 + head[pos]  # name
    if pos + 4 > size:
        return None
    headers = _U32.unpack_from(head, pos)[0]
    if headers > max_headers:
        return f"carries {headers} headers, over max_headers ({max_headers})"
    pos += 4
    total = 0
    for _ in range(headers):
        if pos >= size:
            return None
        name = head[pos]
        pos += 1 + name
        if pos + 4 > size:
            return None
        value = _U32.unpack_from(head, pos)[0]
        pos += 4 + value
        total += name + value
        if total > max_header_bytes:
            limit = max_header_bytes
            return f"carries headers of over {total} octets, over max_header_bytes ({limit})"
    return None


# --------------------------------------------------------------------------
# decoding


def _read_string(buf: bytes, pos: int, what: str) -> tuple[str, int]:
    if pos >= len(buf):
        raise DecodeError(f"truncated: {what} is missing")
    end = pos + 1 + buf[pos]
    if end > len(buf):
        raise DecodeError(f"truncated: {what} declares {buf[pos]} bytes, {len(buf) - pos - 1} left")
    try:
        return buf[pos + 1 : end].decode(), end
    except UnicodeDecodeError as exc:
        raise DecodeError(f"{what} is not valid UTF-8") from exc


def _read_u32(buf: bytes, pos: int, what: str) -> int:
    if pos + 4 > len(buf):
        raise DecodeError(f"truncated: {what} is missing")
    value: int = _U32.unpack_from(buf, pos)[0]
    return value


def _read_longstr(buf: bytes, pos: int, what: str) -> tuple[str, int]:
    size = _read_u32(buf, pos, what)
    start = pos + 4
    end = start + size
    if end > len(buf):
        raise DecodeError(f"truncated: {what} declares {size} bytes, {len(buf) - start} left")
    try:
        return buf[start:end].decode(), end
    except UnicodeDecodeError as exc:
        raise DecodeError(f"{what} is not valid UTF-8") from exc


def _read_strings(buf: bytes, pos: int, what: str) -> tuple[tuple[str, ...], int]:
    count = _read_u32(buf, pos, f"{what} count")
    pos += 4
    # Each entry needs at least its 4-octet length: refuse absurd counts
    # before allocating anything.
    if count * 4 > len(buf) - pos:
        raise DecodeError(f"{what}: {count} entries cannot fit in {len(buf) - pos} bytes")
    items: list[str] = []
    for _ in range(count):
        item, pos = _read_longstr(buf, pos, what)
        items.append(item)
    return tuple(items), pos


def _read_dictionary(buf: bytes, pos: int, what: str) -> tuple[tuple[tuple[str, str], ...], int]:
    count = _read_u32(buf, pos, f"{what} count")
    pos += 4
    # Each entry needs at least 1 + 4 octets of lengths.
    if count * 5 > len(buf) - pos:
        raise DecodeError(f"{what}: {count} entries cannot fit in {len(buf) - pos} bytes")
    items: list[tuple[str, str]] = []
    for _ in range(count):
        key, pos = _read_string(buf, pos, f"{what} name")
        value, pos = _read_longstr(buf, pos, f"{what} value")
        items.append((key, value))
    return tuple(items), pos


def _expect_end(buf: bytes, pos: int, command: str) -> None:
    if pos != len(buf):
        raise DecodeError(f"{command}: {len(buf) - pos} trailing bytes in frame 0")


def _decode_hello(head: bytes, frames: Sequence[bytes], version: int, sequence: int) -> Hello:
    endpoint, pos = _read_string(head, _HEADER_SIZE, "HELLO endpoint")
    groups, pos = _read_strings(head, pos, "HELLO groups")
    if pos >= len(head):
        raise DecodeError("truncated: HELLO status is missing")
    status = head[pos]
    name, pos = _read_string(head, pos + 1, "HELLO name")
    headers, pos = _read_dictionary(head, pos, "HELLO headers")
    _expect_end(head, pos, "HELLO")
    return Hello(sequence, endpoint, groups, status, name, headers, version=version)


def _decode_whisper(head: bytes, frames: Sequence[bytes], version: int, sequence: int) -> Whisper:
    _expect_end(head, _HEADER_SIZE, "WHISPER")
    return Whisper(sequence, tuple(frames[1:]), version=version)


def _decode_shout(head: bytes, frames: Sequence[bytes], version: int, sequence: int) -> Shout:
    group, pos = _read_string(head, _HEADER_SIZE, "SHOUT group")
    _expect_end(head, pos, "SHOUT")
    return Shout(sequence, group, tuple(frames[1:]), version=version)


def _decode_join(head: bytes, frames: Sequence[bytes], version: int, sequence: int) -> Join:
    group, pos = _read_string(head, _HEADER_SIZE, "JOIN group")
    if pos >= len(head):
        raise DecodeError("truncated: JOIN status is missing")
    _expect_end(head, pos + 1, "JOIN")
    return Join(sequence, group, head[pos], version=version)


def _decode_leave(head: bytes, frames: Sequence[bytes], version: int, sequence: int) -> Leave:
    group, pos = _read_string(head, _HEADER_SIZE, "LEAVE group")
    if pos >= len(head):
        raise DecodeError("truncated: LEAVE status is missing")
    _expect_end(head, pos + 1, "LEAVE")
    return Leave(sequence, group, head[pos], version=version)


def _decode_ping(head: bytes, frames: Sequence[bytes], version: int, sequence: int) -> Ping:
    _expect_end(head, _HEADER_SIZE, "PING")
    return Ping(sequence, version=version)


def _decode_ping_ok(head: bytes, frames: Sequence[bytes], version: int, sequence: int) -> PingOk:
    _expect_end(head, _HEADER_SIZE, "PING-OK")
    return PingOk(sequence, version=version)


def _decode_elect(head: bytes, frames: Sequence[bytes], version: int, sequence: int) -> Elect:
    return Elect(sequence, head[_HEADER_SIZE:], version=version)


def _decode_leader(head: bytes, frames: Sequence[bytes], version: int, sequence: int) -> Leader:
    return Leader(sequence, head[_HEADER_SIZE:], version=version)


def election_body(group: str, candidate: str) -> bytes:
    """The body of an ELECT or LEADER as zyre sends it: ``group`` then the candidate's id.

    Both are ZRE ``string``s; zyre's ids are UUIDs as 32 upper-case hex
    digits, which is how candidates compare.  Raises :class:`EncodeError`
    for a string over 255 UTF-8 bytes.
    """
    out = bytearray()
    _put_string(out, group, "election group")
    _put_string(out, candidate, "election candidate")
    return bytes(out)


def parse_election_body(body: bytes) -> tuple[str, str]:
    """``(group, candidate)`` from an ELECT's or LEADER's body (see :func:`election_body`).

    Raises :class:`DecodeError` when it is not exactly two ZRE strings.
    """
    group, pos = _read_string(body, 0, "election group")
    candidate, pos = _read_string(body, pos, "election candidate")
    _expect_end(body, pos, "ELECT/LEADER")
    return group, candidate


def _decode_goodbye(head: bytes, frames: Sequence[bytes], version: int, sequence: int) -> Goodbye:
    _expect_end(head, _HEADER_SIZE, "GOODBYE")
    return Goodbye(sequence, version=version)


_Decoder: TypeAlias = Callable[[bytes, Sequence[bytes], int, int], Message]

# Indexed by command id; None for ids we do not know.
_DECODERS: Final[tuple[_Decoder | None, ...]] = (
    None,
    _decode_hello,
    _decode_whisper,
    _decode_shout,
    _decode_join,
    _decode_leave,
    _decode_ping,
    _decode_ping_ok,
    _decode_elect,
    _decode_leader,
    _decode_goodbye,
)
_MULTIFRAME: Final = frozenset({Command.WHISPER, Command.SHOUT})


def _decode(frames: Sequence[bytes], version: int | None) -> Message:
    count = len(frames)
    if count == 0:
        raise DecodeError("a ZRE message needs at least one frame")
    head = frames[0]
    if type(head) is not bytes:
        head = bytes(head)
    if head[:2] != SIGNATURE:
        raise DecodeError(f"bad signature {head[:2]!r}, expected {SIGNATURE!r}")
    if len(head) < _HEADER_SIZE:
        raise DecodeError(f"truncated header: {len(head)} octets, need {_HEADER_SIZE}")
    command: int
    seen: int
    sequence: int
    _, command, seen, sequence = HEADER.unpack_from(head)
    if version is None:
        if seen not in MESSAGE_VERSIONS:
            raise VersionMismatch(seen, MESSAGE_VERSIONS, command, sequence)
    elif seen != version:
        raise VersionMismatch(seen, (version,), command, sequence)
    if command >= len(_DECODERS) or (decoder := _DECODERS[command]) is None:
        raise UnknownCommand(command, seen, sequence)
    if count != 1 and command not in _MULTIFRAME:
        raise DecodeError(f"{Command(command).name} must be one frame, got {count}")
    return decoder(head, frames, seen, sequence)


def decode(frames: Sequence[bytes], version: int | None = DEFAULT_VERSION) -> Message:
    """Parse the frames of one ZRE message (without the ROUTER identity frame).

    Args:
        frames: frame 0 (signature, header, fields) then, for WHISPER and
            SHOUT only, the content frames. Frame 0 may be any bytes-like
            object; content frames are kept as given (not copied).
        version: the message version to accept: 2 (default, zyre), 3
            (43/ZRE), or ``None`` for either. The decoded message's
            ``version`` attribute tells which one arrived. Any other value
            makes every message a :class:`VersionMismatch`.

    Raises:
        VersionMismatch: signature and header are fine but the version octet
            is not the one accepted.
        UnknownCommand: the header is fine but the command id is not 1..10.
        DecodeError: anything else: no frames; bad signature; truncated
            header or field; a declared count or length larger than what
            remains; invalid UTF-8; trailing bytes after the last field of
            frame 0; more than one frame for a command other than WHISPER
            and SHOUT; frames that are not bytes-like. No other exception
            escapes, whatever the input.
    """
    try:
        # The hot case, a WHISPER of the expected version, by the one parser
        # of its header.
        if frames and version is not None:
            sequence = whisper_sequence(frames[0], version)
            if sequence is not None:
                return Whisper(sequence, tuple(frames[1:]), version=version)
        return _decode(frames, version)
    except DecodeError:
        raise
    except Exception as exc:  # only reachable with non-bytes input
        raise DecodeError(f"cannot decode ZRE message: {exc!r}") from exc
