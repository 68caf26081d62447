"""UDP beacon codec: byte-exact vectors from 36/ZRE, 22/ZRE-DISC and 43/ZRE, errors, round trips."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from trizre.wire import (
    BEACON_VERSIONS,
    CURVE_KEY_SIZE,
    DISCOVERY_PORT,
    Beacon,
    DecodeError,
    EncodeError,
    VersionMismatch,
    decode_beacon,
    encode_beacon,
)

DETERMINISTIC = settings(
    derandomize=True,
    database=None,
    deadline=None,
    max_examples=500,
    suppress_health_check=[HealthCheck.too_slow],
)

UUID = uuid.UUID("0123456789abcdef0123456789abcdef")
UUID_BYTES = b"\x01\x23\x45\x67\x89\xab\xcd\xef\x01\x23\x45\x67\x89\xab\xcd\xef"
KEY = bytes(range(32))

# Written out by hand: "Z" "R" "E" version, 16-octet UUID, 2-octet port (network order)
V1 = b"ZRE\x01" + UUID_BYTES + b"\xc0\x00"  # port 49152
V3_SHORT = b"ZRE\x03" + UUID_BYTES + b"\xff\xff"  # port 65535
V3_LONG = (
    b"ZRE\x03"
    + UUID_BYTES
    + b"\x16\x26"  # port 5670
    + b"\x00\x01\x02\x03\x04\x05\x06\x07\x08\x09\x0a\x0b\x0c\x0d\x0e\x0f"
    + b"\x10\x11\x12\x13\x14\x15\x16\x17\x18\x19\x1a\x1b\x1c\x1d\x1e\x1f"
)
V1_LEAVING = b"ZRE\x01" + UUID_BYTES + b"\x00\x00"

VECTORS = [
    ("v1-22", V1, Beacon(UUID, 49152)),
    ("v3-22", V3_SHORT, Beacon(UUID, 65535, version=3)),
    ("v3-54", V3_LONG, Beacon(UUID, 5670, version=3, public_key=KEY)),
    ("v1-leaving", V1_LEAVING, Beacon(UUID, 0)),
]


def test_vector_sizes() -> None:
    assert len(V1) == len(V3_SHORT) == len(V1_LEAVING) == 22
    assert len(V3_LONG) == 54
    assert UUID.bytes == UUID_BYTES


@pytest.mark.parametrize(("data", "beacon"), [v[1:] for v in VECTORS], ids=[v[0] for v in VECTORS])
def test_vector_encode(data: bytes, beacon: Beacon) -> None:
    assert encode_beacon(beacon) == data


@pytest.mark.parametrize(("data", "beacon"), [v[1:] for v in VECTORS], ids=[v[0] for v in VECTORS])
def test_vector_decode(data: bytes, beacon: Beacon) -> None:
    got = decode_beacon(data)
    assert got == beacon
    assert type(got.public_key) is type(beacon.public_key)


def test_leaving() -> None:
    assert decode_beacon(V1_LEAVING).leaving
    assert not decode_beacon(V1).leaving
    assert Beacon(UUID, 0, version=3).leaving


def test_decode_bytes_like() -> None:
    assert decode_beacon(bytearray(V3_LONG)) == VECTORS[2][2]
    got = decode_beacon(memoryview(V3_LONG))
    assert got.public_key == KEY
    assert type(got.public_key) is bytes


def test_constants() -> None:
    assert DISCOVERY_PORT == 5670
    assert CURVE_KEY_SIZE == 32
    assert BEACON_VERSIONS == (1, 3)


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (b"", "empty"),
        (V1[:21], "21 octets"),
        (V1 + b"\x00", "23 octets"),
        (V3_LONG[:53], "53 octets"),
        (V3_LONG + b"\x00", "55 octets"),
        (b"ZRE\x01" + UUID_BYTES + b"\xc0\x00" + KEY, "54 octets but version 1"),
        (b"ZRX\x01" + UUID_BYTES + b"\xc0\x00", "bad magic"),
        (b"zre\x01" + UUID_BYTES + b"\xc0\x00", "lower-case magic"),
        (b"\xaa\xa1\x01\x02" + b"\x00" * 18, "a TCP message"),
    ],
)
def test_malformed(data: bytes, why: str) -> None:
    with pytest.raises(DecodeError):
        decode_beacon(data)


@pytest.mark.parametrize("version", [0, 2, 4, 255])
def test_unknown_version(version: int) -> None:
    data = b"ZRE" + bytes([version]) + UUID_BYTES + b"\xc0\x00"
    with pytest.raises(VersionMismatch) as info:
        decode_beacon(data)
    assert info.value.version == version
    assert info.value.expected == (1, 3)
    assert info.value.command_id is None


def test_long_form_zre_02_is_rejected() -> None:
    # 22/ZRE-DISC's "long beacon" (%x02, 24 octets) is not something any peer sends.
    data = b"ZRE\x02" + UUID_BYTES + b"\xc0\x00" + b"\x05\x01" + b"\x7f\x00\x00\x01"
    with pytest.raises(DecodeError):
        decode_beacon(data)


@pytest.mark.parametrize("data", [None, 42, "ZRE\x01" + "x" * 18, [1, 2, 3]])
def test_non_bytes_is_decode_error(data: object) -> None:
    with pytest.raises(DecodeError):
        decode_beacon(data)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("beacon", "match"),
    [
        (Beacon(UUID, 1, version=1, public_key=KEY), "version-3"),
        (Beacon(UUID, 1, version=3, public_key=KEY[:31]), "32 bytes"),
        (Beacon(UUID, 1, version=3, public_key=KEY + b"\x00"), "32 bytes"),
        (Beacon(UUID, 1, version=3, public_key=bytearray(KEY)), "32 bytes"),  # type: ignore[arg-type]
        (Beacon(UUID, 1, version=2), "version must be 1 or 3"),
        (Beacon(UUID, 1, version=0), "version must be 1 or 3"),
        (Beacon(UUID, -1), "port"),
        (Beacon(UUID, 65536), "port"),
        (Beacon(UUID, 1.0), "port"),  # type: ignore[arg-type]
        (Beacon(UUID_BYTES, 1), "uuid"),  # type: ignore[arg-type]
    ],
)
def test_encode_errors(beacon: Beacon, match: str) -> None:
    with pytest.raises(EncodeError, match=match):
        encode_beacon(beacon)


def test_beacon_is_hashable_and_frozen() -> None:
    assert len({Beacon(UUID, 1), Beacon(UUID, 1)}) == 1
    with pytest.raises(AttributeError):
        Beacon(UUID, 1).port = 2  # type: ignore[misc]


uuids = st.uuids() | st.sampled_from([uuid.UUID(int=0), uuid.UUID(int=2**128 - 1)])
ports = st.integers(0, 65535) | st.sampled_from([0, 1, 65535])
beacons = st.one_of(
    st.builds(Beacon, uuid=uuids, port=ports, version=st.just(1)),
    st.builds(Beacon, uuid=uuids, port=ports, version=st.just(3)),
    st.builds(
        Beacon,
        uuid=uuids,
        port=ports,
        version=st.just(3),
        public_key=st.binary(min_size=32, max_size=32),
    ),
)


@DETERMINISTIC
@given(beacon=beacons)
@example(beacon=Beacon(UUID, 0))
@example(beacon=Beacon(UUID, 65535, version=3, public_key=b"\x00" * 32))
def test_round_trip(beacon: Beacon) -> None:
    data = encode_beacon(beacon)
    assert len(data) == (54 if beacon.public_key is not None else 22)
    assert data[:4] == b"ZRE" + bytes([beacon.version])
    got = decode_beacon(data)
    assert got == beacon
    assert encode_beacon(got) == data
    assert got.leaving == (beacon.port == 0)
