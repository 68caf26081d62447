"""UDP discovery beacons (36/ZRE, 22/ZRE-DISC short form, 43/ZRE).

Layouts, all integers big-endian::

    version 1:  "ZRE" %x01  UUID(16)  port(2)                    22 octets
    version 3:  "ZRE" %x03  UUID(16)  port(2)                    22 octets
    version 3:  "ZRE" %x03  UUID(16)  port(2)  CURVE key(32)     54 octets

zyre and pyre send version 1; zyre sends the 54-octet version-3 form only
when CURVE is on. Port 0 is valid here and means "this peer is leaving";
whether to act on it is the node's decision, not the codec's.
"""

from __future__ import annotations

import struct
import uuid
from typing import Final, final

import attrs

from ._errors import DecodeError, EncodeError, VersionMismatch

__all__ = [
    "BEACON_VERSIONS",
    "CURVE_KEY_SIZE",
    "DISCOVERY_PORT",
    "Beacon",
    "decode_beacon",
    "encode_beacon",
]

DISCOVERY_PORT: Final = 5670
"""The IANA-assigned ZRE-DISC UDP port."""

CURVE_KEY_SIZE: Final = 32
"""Size in octets of a CURVE public key carried by a version-3 beacon."""

BEACON_VERSIONS: Final = (1, 3)
"""Beacon versions this codec can encode and decode."""

_SHORT: Final = struct.Struct(">3sB16sH")  # "ZRE", version, UUID, port
_SHORT_SIZE: Final = _SHORT.size  # 22
_LONG_SIZE: Final = _SHORT_SIZE + CURVE_KEY_SIZE  # 54


@final
@attrs.frozen
class Beacon:
    """One ZRE discovery beacon.

    Construction does not validate; :func:`encode_beacon` does (see there
    for what raises). Decoded beacons are always valid.

    Attributes:
        uuid: the sender's node UUID.
        port: the sender's mailbox TCP port; 0 means the sender is leaving.
        version: beacon version, 1 (36/ZRE, the default) or 3 (43/ZRE).
        public_key: the sender's 32-octet CURVE public key (version 3 only),
            or ``None``.
    """

    uuid: uuid.UUID
    port: int
    version: int = 1
    public_key: bytes | None = None

    @property
    def leaving(self) -> bool:
        """``True`` when the port is 0: the sender is disconnecting."""
        return self.port == 0


def encode_beacon(beacon: Beacon) -> bytes:
    """Return the 22- or 54-octet UDP payload for *beacon*.

    Raises:
        EncodeError: the version is not 1 or 3; the port is not an int in
            0..65535; ``uuid`` is not a :class:`uuid.UUID`; a public key is
            given with version 1, or is not exactly 32 bytes.
    """
    version = beacon.version
    if version not in BEACON_VERSIONS:
        raise EncodeError(f"beacon version must be 1 or 3, got {version!r}")
    port = beacon.port
    if type(port) is not int or not 0 <= port <= 0xFFFF:
        raise EncodeError(f"beacon port must be an int in 0..65535, got {port!r}")
    if not isinstance(beacon.uuid, uuid.UUID):
        raise EncodeError(f"beacon uuid must be a uuid.UUID, got {beacon.uuid!r}")
    data = _SHORT.pack(b"ZRE", version, beacon.uuid.bytes, port)
    key = beacon.public_key
    if key is None:
        return data
    if version != 3:
        raise EncodeError("a CURVE public key can only be sent in a version-3 beacon")
    if not isinstance(key, bytes) or len(key) != CURVE_KEY_SIZE:
        raise EncodeError(f"a CURVE public key must be {CURVE_KEY_SIZE} bytes, got {key!r}")
    return data + key


def decode_beacon(data: bytes | bytearray | memoryview) -> Beacon:
    """Parse one UDP payload into a :class:`Beacon`.

    Accepts exactly: 22 octets with header ``ZRE\\x01`` or ``ZRE\\x03``, or
    54 octets with header ``ZRE\\x03`` (the last 32 octets become
    ``public_key``). Port 0 is accepted (see :attr:`Beacon.leaving`).

    Raises:
        VersionMismatch: the header is ``ZRE`` followed by a version other
            than 1 or 3 (a :class:`DecodeError`).
        DecodeError: anything else malformed: wrong size, wrong header, a
            54-octet beacon that is not version 3, or *data* that is not
            bytes-like. No other exception escapes.
    """
    try:
        size = len(data)
        if size not in (_SHORT_SIZE, _LONG_SIZE):
            raise DecodeError(f"beacon must be 22 or 54 octets, got {size}")
        magic, version, raw_uuid, port = _SHORT.unpack_from(data)
        if magic != b"ZRE":
            raise DecodeError(f"beacon header must start with b'ZRE', got {magic!r}")
        if version not in (1, 3):
            raise VersionMismatch(version, BEACON_VERSIONS)
        if size == _SHORT_SIZE:
            return Beacon(uuid.UUID(bytes=raw_uuid), port, version)
        if version != 3:
            raise DecodeError(f"a 54-octet beacon must be version 3, got version {version}")
        return Beacon(uuid.UUID(bytes=raw_uuid), port, 3, bytes(data[_SHORT_SIZE:]))
    except DecodeError:
        raise
    except Exception as exc:  # a non-bytes argument, never a peer's bytes
        raise DecodeError(f"cannot decode beacon from {type(data).__name__}: {exc}") from exc
