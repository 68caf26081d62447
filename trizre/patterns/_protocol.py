"""The pattern envelope: what travels inside WHISPER frames (sans-I/O).

Frame 0 of every pattern message starts with a 14-octet header::

    "TZRP"  version(1)  command(1)  request-id(8, big-endian)

Version 2 (what this side sends) carries the command's one field in frame 0
after the header, and the body in the frames after it:

    REQUEST  (1)  frame 0: header, service (UTF-8, 0..255 octets,
                  empty = "whoever I sent it to"); frames 1+: body
    REPLY    (2)  frame 0: header, status (2 octets, big-endian); frames 1+: body
    STATE    (3)  frame 0: header, state (1 octet: a Binary Star state); the
                  id field says which state the sender last heard from the receiver
    ACCEPTED (4)  frame 0: the header alone: the server holds the request and
                  will reply

Version 1 put the service, status or state in a frame of its own (frame 1),
one more frame a message for libzmq to send and receive.  Both versions are
decoded; a decoded message remembers its version, and a server answers a
request in the version it came in, so a version-1 client is still served.

Anything whose frame 0 does not start with ``TZRP`` is application traffic
and not ours: :func:`decode` returns ``None`` for it.  Pattern traffic that
is malformed raises :class:`PatternDecodeError`; receivers drop it.  The
written contract is ``patterns/README.md``; byte vectors are in
``patterns/vectors/envelope.json``.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Sequence
from typing import Final, TypeAlias, final

import attrs

from ._errors import PatternError

__all__ = [
    "HEADER_SIZE",
    "TAG",
    "VERSION",
    "VERSIONS",
    "Accepted",
    "Command",
    "PatternDecodeError",
    "PatternMessage",
    "Reply",
    "Request",
    "State",
    "Status",
    "decode",
    "encode",
    "encode_request",
]

TAG: Final = b"TZRP"
VERSION: Final = 2  # what this side sends
VERSIONS: Final = frozenset({1, 2})  # what it decodes
_HEADER: Final = struct.Struct(">4sBBQ")
_REPLY_HEAD: Final = struct.Struct(">4sBBQH")  # version 2: the status in frame 0
_STATUS: Final = struct.Struct(">H")
MAX_REQUEST_ID: Final = 2**64 - 1


class Command(enum.IntEnum):
    """Pattern command ids (octet 5 of the header)."""

    REQUEST = 1
    REPLY = 2
    STATE = 3
    ACCEPTED = 4


class Status(enum.IntEnum):
    """Reply status codes, in the spirit of HTTP and the Guide's MMI."""

    OK = 200
    NOT_FOUND = 404  # no such service (MMI)
    ERROR = 500  # the handler raised; the body holds a short description
    NOT_IMPLEMENTED = 501  # an mmi.* query nobody knows
    UNAVAILABLE = 503  # refused, not executed: a passive Binary Star server


class PatternDecodeError(PatternError, ValueError):
    """Pattern traffic (it starts with ``TZRP``) that is malformed."""


@final
@attrs.frozen
class Request:
    """A request for ``service`` ("" when addressed to one peer directly)."""

    request_id: int
    service: str
    body: tuple[bytes, ...] = ()
    version: int = attrs.field(default=VERSION, eq=False, kw_only=True)
    """The envelope version it came in (decoded) or goes in (encoded); not compared."""


@final
@attrs.frozen
class Reply:
    """The answer to the request with the same ``request_id``."""

    request_id: int
    status: int
    body: tuple[bytes, ...] = ()
    version: int = attrs.field(default=VERSION, eq=False, kw_only=True)
    """The envelope version it came in (decoded) or goes in (encoded); not compared."""

    @property
    def ok(self) -> bool:
        """True for status 200."""
        return self.status == Status.OK


@final
@attrs.frozen
class State:
    """A Binary Star server's state heartbeat (``state`` is a State value, 1..4).

    ``seen`` travels in the header's id field: the state the sender last
    heard from the receiver (1..4), or 0 if it has heard none.
    """

    state: int
    seen: int = 0
    version: int = attrs.field(default=VERSION, eq=False, kw_only=True)
    """The envelope version it came in (decoded) or goes in (encoded); not compared."""


@final
@attrs.frozen
class Accepted:
    """The server holds the request ``request_id``: it runs it, or will, and will reply.

    A client stops timing the attempt and waits for the reply as long as
    the server is present (``patterns/README.md`` §5.4).
    """

    request_id: int
    version: int = attrs.field(default=VERSION, eq=False, kw_only=True)
    """The envelope version it came in (decoded) or goes in (encoded); not compared."""


PatternMessage: TypeAlias = Request | Reply | State | Accepted

# A Reply is made for every answer a server sends and every one a client
# reads (issue 28): attrs' __init__ for a frozen class sets each field
# through object.__setattr__; the slots' own descriptors do it faster.
_new = object.__new__
_set_reply_id = Reply.__dict__["request_id"].__set__
_set_reply_status = Reply.__dict__["status"].__set__
_set_reply_body = Reply.__dict__["body"].__set__
_set_reply_version = Reply.__dict__["version"].__set__


def new_reply(request_id: int, status: int, body: tuple[bytes, ...], version: int) -> Reply:
    """``Reply(request_id, status, body, version=version)``, made faster; no checks
    (:func:`encode` checks what goes out)."""
    reply: Reply = _new(Reply)
    _set_reply_id(reply, request_id)
    _set_reply_status(reply, status)
    _set_reply_body(reply, body)
    _set_reply_version(reply, version)
    return reply


# The command octets as plain ints: an IntEnum member costs an attribute
# lookup on its class, several per message on the request path.
_REQUEST: Final = int(Command.REQUEST)
REQUEST_OCTET: Final = _REQUEST
"""A REQUEST's command octet (frame 0's sixth), for a cheap look before :func:`request_head`."""
_REPLY: Final = int(Command.REPLY)
REPLY_OCTET: Final = _REPLY
"""A REPLY's command octet, for a cheap look before :func:`reply_v2`."""
_STATE: Final = int(Command.STATE)
_ACCEPTED: Final = int(Command.ACCEPTED)
# The statuses a client and a server test or send on every request, as
# plain ints for the same reason: Status.OK is a lookup on the enum's class
# (about ten times a module global's).
STATUS_OK: Final = int(Status.OK)
"""200, :attr:`Status.OK` as a plain int."""
STATUS_UNAVAILABLE: Final = int(Status.UNAVAILABLE)
"""503, :attr:`Status.UNAVAILABLE` as a plain int."""
HEADER_SIZE: Final = _HEADER.size  # frame 0 begins with it: "TZRP", version, command, id
_HEADER_SIZE: Final = HEADER_SIZE


def _header(version: int, command: int, request_id: int) -> bytes:
    if not 0 <= request_id <= MAX_REQUEST_ID:
        raise ValueError(f"request_id must fit in 64 bits, got {request_id}")
    if version not in VERSIONS:
        raise ValueError(f"pattern version {version}: this side speaks {sorted(VERSIONS)}")
    return _HEADER.pack(TAG, version, command, request_id)


def encode(message: PatternMessage) -> list[bytes]:
    """The frames for ``message``, in its ``version`` (2 unless it says otherwise).

    Bad input raises ``ValueError`` (a request id outside 64 bits, a
    service name over 255 UTF-8 bytes, a status outside 0..65535, a state
    outside 0..255, a version not in :data:`VERSIONS`) or ``TypeError``
    (body frames that are not bytes).
    """
    if isinstance(message, Reply):  # the commonest, from every server
        return encode_reply(message.request_id, message.status, message.body, message.version)
    if isinstance(message, Request):
        return encode_request(message.request_id, message.service, message.body, message.version)
    if isinstance(message, State):
        if not 0 <= message.state <= 255:
            raise ValueError(f"state must fit in one octet, got {message.state}")
        if not 0 <= message.seen <= MAX_REQUEST_ID:
            raise ValueError(f"seen must fit in 64 bits, got {message.seen}")
        head = _header(message.version, _STATE, message.seen)
        if message.version == 1:
            return [head, bytes([message.state])]
        return [head + bytes([message.state])]
    if isinstance(message, Accepted):
        return [_header(message.version, _ACCEPTED, message.request_id)]
    raise TypeError(f"not a pattern message: {type(message).__name__}")


def encode_reply(
    request_id: int, status: int, body: Sequence[bytes], version: int = VERSION
) -> list[bytes]:
    """``encode(Reply(request_id, status, tuple(body), version=version))`` without the object.

    Bad input raises as :func:`encode` does.
    """
    if not 0 <= status <= 0xFFFF:
        raise ValueError(f"status must fit in 16 bits, got {status}")
    for frame in body:  # _check_body, inline: every reply comes here
        if not isinstance(frame, bytes):
            raise TypeError(f"body frames must be bytes, got {type(frame).__name__}")
    if version == VERSION and 0 <= request_id <= MAX_REQUEST_ID:
        return [_REPLY_HEAD.pack(TAG, VERSION, _REPLY, request_id, status), *body]
    return [_header(version, _REPLY, request_id), _STATUS.pack(status), *body]


def encode_request(
    request_id: int, service: str, body: Sequence[bytes], version: int = VERSION
) -> list[bytes]:
    """``encode(Request(request_id, service, tuple(body), version=version))`` without the object.

    For a client's every request.  Bad input raises as :func:`encode` does.
    """
    encoded = service.encode("utf-8")
    if len(encoded) > 255:
        raise ValueError(f"service name over 255 UTF-8 bytes: {service[:20]!r}...")
    for frame in body:  # _check_body, inline: every request comes here
        if not isinstance(frame, bytes):
            raise TypeError(f"body frames must be bytes, got {type(frame).__name__}")
    if version == VERSION and 0 <= request_id <= MAX_REQUEST_ID:
        return [_HEADER.pack(TAG, VERSION, _REQUEST, request_id) + encoded, *body]
    head = _header(version, _REQUEST, request_id)  # raises for a bad id or version
    return [head, encoded, *body]


def is_pattern_traffic(frames: Sequence[bytes]) -> bool:
    """True when frame 0 carries the ``TZRP`` tag."""
    return bool(frames) and frames[0][:4] == TAG


def request_head(head: bytes) -> tuple[int, str] | None:
    """The request id and service of a version-2 REQUEST's frame 0; ``None`` otherwise.

    For the pattern port's request path: a server's request is decoded
    straight into what the server keeps, with no :class:`Request` made in
    between.  ``None`` for anything else, malformed too (a service name
    that is not UTF-8, an oversize one): :func:`decode` then says what.
    """
    if (
        _HEADER_SIZE <= len(head) <= _HEADER_SIZE + 255
        and head[5] == _REQUEST
        and head[4] == VERSION
        and head.startswith(TAG)
    ):
        try:
            return _HEADER.unpack_from(head)[3], head[14:].decode("utf-8")
        except UnicodeDecodeError:
            return None
    return None


def reply_v2(frames: Sequence[bytes]) -> Reply | None:
    """A version-2 REPLY (frames a client reads); ``None`` for anything else.

    For the pattern port's reply path, as :func:`request_head` is for
    requests: ``None`` for every other message, malformed ones too
    (:func:`decode` then says what).
    """
    if (
        frames
        and len(head := frames[0]) == _HEADER_SIZE + 2
        and head[5] == _REPLY
        and head[4] == VERSION
        and head.startswith(TAG)
    ):
        _, _, _, request_id, status = _REPLY_HEAD.unpack(head)
        return new_reply(request_id, status, tuple(frames[1:]), VERSION)
    return None


def decode(frames: Sequence[bytes]) -> PatternMessage | None:
    """Parse WHISPER/SHOUT frames; ``None`` if they are not pattern traffic.

    Either version (:data:`VERSIONS`) is decoded; the message's
    ``version`` says which.  Raises :class:`PatternDecodeError` for pattern
    traffic that is malformed: a short header, another version, an
    unknown command, missing, extra or oversize fields, or invalid UTF-8.
    """
    # is_pattern_traffic, inline: this runs for every WHISPER a pattern reads.
    if not frames or not (head := frames[0]).startswith(TAG):
        return None
    size = len(head)
    if size < _HEADER_SIZE:
        raise PatternDecodeError(f"header must be {_HEADER_SIZE} octets, got {size}")
    _, version, command, request_id = _HEADER.unpack_from(head)
    if version == VERSION:
        if command == _REPLY:
            if size != _HEADER_SIZE + 2:
                raise PatternDecodeError(f"REPLY's frame 0 must be 16 octets, got {size}")
            return new_reply(request_id, (head[14] << 8) | head[15], tuple(frames[1:]), VERSION)
        if command == _REQUEST:
            if size > _HEADER_SIZE + 255:
                raise PatternDecodeError("REQUEST service name over 255 octets")
            try:
                service = head[14:].decode("utf-8")
            except UnicodeDecodeError as exc:
                raise PatternDecodeError(f"REQUEST service is not UTF-8: {exc}") from None
            return Request(request_id, service, tuple(frames[1:]))
        if command == _STATE:
            if len(frames) != 1 or size != _HEADER_SIZE + 1:
                raise PatternDecodeError("STATE is one 15-octet frame")
            return State(head[14], seen=request_id)
        if command == _ACCEPTED:
            if len(frames) != 1 or size != _HEADER_SIZE:
                raise PatternDecodeError("ACCEPTED is the header alone")
            return Accepted(request_id)
        raise PatternDecodeError(f"unknown pattern command {command}")
    if version != 1:
        raise PatternDecodeError(f"pattern version {version}, this side speaks 1 and 2")
    if size != _HEADER_SIZE:
        raise PatternDecodeError(f"version 1 header must be {_HEADER_SIZE} octets, got {size}")
    if command == _REPLY:
        if len(frames) < 2 or len(frames[1]) != 2:
            raise PatternDecodeError("REPLY needs a 2-octet status frame")
        status = frames[1]
        return Reply(request_id, (status[0] << 8) | status[1], tuple(frames[2:]), version=1)
    if command == _REQUEST:
        if len(frames) < 2:
            raise PatternDecodeError("REQUEST without a service frame")
        raw = frames[1]
        if len(raw) > 255:
            raise PatternDecodeError("REQUEST service name over 255 octets")
        return Request(request_id, _service(raw), tuple(frames[2:]), version=1)
    if command == _STATE:
        if len(frames) != 2 or len(frames[1]) != 1:
            raise PatternDecodeError("STATE carries exactly one 1-octet frame")
        return State(frames[1][0], seen=request_id, version=1)
    if command == _ACCEPTED:
        if len(frames) != 1:
            raise PatternDecodeError("ACCEPTED is the header alone")
        return Accepted(request_id, version=1)
    raise PatternDecodeError(f"unknown pattern command {command}")


def _service(raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PatternDecodeError(f"REQUEST service is not UTF-8: {exc}") from None
