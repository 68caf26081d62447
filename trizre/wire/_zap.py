"""ZeroMQ authentication protocol (27/ZAP) requests and replies, sans I/O.

libzmq asks the ZAP handler bound at ``inproc://zeromq.zap.01`` whether a
client may connect; a CURVE node answers from its allow-list.  A request
is, after the socket's routing envelope::

    "1.0"  request-id  domain  address  identity  mechanism  credentials...

where ``identity`` is the *server* socket's routing id (libzmq's choice,
which lets one handler serve several nodes, each naming its inbox) and a
CURVE request carries one credential, the client's 32-octet public key.
The reply is::

    "1.0"  request-id  status-code  status-text  user-id  metadata

libzmq attaches ``user-id`` to every message the client then sends, as the
``User-Id`` property: that is how a node learns which key sent a message.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final, final

import attrs

from ._errors import DecodeError, EncodeError

__all__ = [
    "ZAP_ENDPOINT",
    "ZAP_VERSION",
    "ZapReply",
    "ZapRequest",
    "decode_zap_request",
    "encode_zap_reply",
]

ZAP_ENDPOINT: Final = "inproc://zeromq.zap.01"
"""Where libzmq looks for the ZAP handler of a context (27/ZAP)."""

ZAP_VERSION: Final = b"1.0"

_STATUS_CODES: Final = (200, 300, 400, 500)
_MAX_FRAME: Final = 255  # 27/ZAP frames are short strings; longer is hostile


@final
@attrs.frozen
class ZapRequest:
    """One authentication request from libzmq.

    Attributes:
        request_id: opaque, echoed in the reply.
        domain: the server socket's ZAP domain.
        address: the client's IP address, as text.
        identity: the *server* socket's routing id.
        mechanism: ``"NULL"``, ``"PLAIN"`` or ``"CURVE"`` (others are kept as sent).
        credentials: the mechanism's frames: for CURVE, the client's 32-octet key.
    """

    request_id: bytes
    domain: str
    address: str
    identity: bytes
    mechanism: str
    credentials: tuple[bytes, ...]

    @property
    def curve_key(self) -> bytes | None:
        """The client's CURVE public key, or ``None`` when this is not a CURVE request."""
        if self.mechanism != "CURVE" or len(self.credentials) != 1:
            return None
        key = self.credentials[0]
        return key if len(key) == 32 else None


@final
@attrs.frozen
class ZapReply:
    """The handler's answer.

    Attributes:
        request_id: the request's.
        status_code: 200 (allowed), 300 (try later), 400 (denied) or 500 (internal error).
        status_text: a short reason, for logs.
        user_id: what libzmq attaches to the client's messages as ``User-Id``
            (empty: none).
    """

    request_id: bytes
    status_code: int
    status_text: str = ""
    user_id: str = ""


def decode_zap_request(frames: Sequence[bytes]) -> ZapRequest:
    """Parse a ZAP request (without the routing envelope).

    Raises:
        DecodeError: fewer than 6 frames, a version other than ``1.0``, a
            frame over 255 octets, text that is not UTF-8, or frames that
            are not bytes.  No other exception escapes.
    """
    try:
        if len(frames) < 6:
            raise DecodeError(f"a ZAP request has at least 6 frames, got {len(frames)}")
        version, request_id, domain, address, identity, mechanism, *credentials = frames
        if version != ZAP_VERSION:
            raise DecodeError(f"ZAP version must be b'1.0', got {bytes(version)[:16]!r}")
        for frame in frames:
            if len(frame) > _MAX_FRAME:
                raise DecodeError(f"a ZAP request frame is over {_MAX_FRAME} octets")
        return ZapRequest(
            bytes(request_id),
            bytes(domain).decode("utf-8"),
            bytes(address).decode("utf-8"),
            bytes(identity),
            bytes(mechanism).decode("utf-8"),
            tuple(bytes(c) for c in credentials),
        )
    except DecodeError:
        raise
    except Exception as exc:
        raise DecodeError(f"cannot decode a ZAP request: {exc}") from exc


def encode_zap_reply(reply: ZapReply) -> list[bytes]:
    """The frames of ``reply`` (without the routing envelope).

    Raises:
        EncodeError: a status code other than 200, 300, 400 or 500, or a
            text or user id over 255 UTF-8 octets.
    """
    if reply.status_code not in _STATUS_CODES:
        raise EncodeError(f"ZAP status must be one of {_STATUS_CODES}, got {reply.status_code!r}")
    text = reply.status_text.encode("utf-8")
    user = reply.user_id.encode("utf-8")
    if len(text) > _MAX_FRAME or len(user) > _MAX_FRAME:
        raise EncodeError("ZAP status text and user id must be at most 255 UTF-8 octets")
    return [ZAP_VERSION, reply.request_id, str(reply.status_code).encode(), text, user, b""]
