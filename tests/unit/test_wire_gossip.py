"""ZGP (czmq's zgossip) frames: byte vectors, round trips, and every way to be malformed."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trizre import wire
from trizre.wire import GossipHello, GossipInvalid, GossipPing, GossipPong, GossipPublish

# What czmq's zgossip_msg_send writes (signature AA A0, id, version 1, fields).
VECTORS = [
    (GossipHello(), bytes.fromhex("aaa00101")),
    (GossipPing(), bytes.fromhex("aaa00301")),
    (GossipPong(), bytes.fromhex("aaa00401")),
    (GossipInvalid(), bytes.fromhex("aaa00501")),
    (
        GossipPublish("K", "tcp://127.0.0.1:5670", 0),
        bytes.fromhex("aaa00201" + "01" + "4b" + "00000014")
        + b"tcp://127.0.0.1:5670"
        + bytes.fromhex("00000000"),
    ),
    (
        GossipPublish("", "", 0xFFFFFFFF),
        bytes.fromhex("aaa00201" + "00" + "00000000" + "ffffffff"),
    ),
]


@pytest.mark.parametrize(("message", "frame"), VECTORS)
def test_byte_vectors(message: wire.GossipMessage, frame: bytes) -> None:
    assert wire.encode_gossip(message) == frame
    assert wire.decode_gossip(frame) == message


def test_zyre_tuples_round_trip() -> None:
    """What zyre publishes: its UUID, its endpoint and, with CURVE, ``|`` and its key."""
    tuple_ = GossipPublish(
        "0123456789ABCDEF0123456789ABCDEF",
        "tcp://10.0.0.1:49152|rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7",
        60_000,
    )
    assert wire.decode_gossip(wire.encode_gossip(tuple_)) == tuple_


@pytest.mark.parametrize(
    "frame",
    [
        b"",
        b"\xaa\xa0\x01",  # no version
        b"\xaa\xa1\x01\x01",  # ZRE's signature, not ZGP's
        b"\xaa\xa0\x01\x02",  # version 2
        b"\xaa\xa0\x06\x01",  # unknown id
        b"\xaa\xa0\x00\x01",
        b"\xaa\xa0\x01\x01\x00",  # trailing byte after HELLO
        b"\xaa\xa0\x02\x01",  # PUBLISH without a key
        b"\xaa\xa0\x02\x01\x05ab",  # key shorter than declared
        b"\xaa\xa0\x02\x01\x01k\x00\x00\x00\x09abc\x00\x00\x00\x00",  # value too short
        b"\xaa\xa0\x02\x01\x01k\x00\x00\x00\x00\x00\x00\x00",  # no full ttl
        b"\xaa\xa0\x02\x01\x01k\x00\x00\x00\x00\x00\x00\x00\x00\x00",  # trailing
        b"\xaa\xa0\x02\x01\x01\xff\x00\x00\x00\x00\x00\x00\x00\x00",  # key not UTF-8
    ],
)
def test_malformed_frames_raise_decode_error(frame: bytes) -> None:
    with pytest.raises(wire.DecodeError):
        wire.decode_gossip(frame)


def test_non_bytes_input_raises_decode_error() -> None:
    with pytest.raises(wire.DecodeError):
        wire.decode_gossip(42)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "message",
    [
        GossipPublish("k" * 256, "v"),
        GossipPublish("k", "v", -1),
        GossipPublish("k", "v", 2**32),
        GossipPublish("\ud800", "v"),
        "not a message",
    ],
)
def test_what_the_wire_cannot_carry_raises_encode_error(message: object) -> None:
    with pytest.raises(wire.EncodeError):
        wire.encode_gossip(message)  # type: ignore[arg-type]


@given(
    st.text(max_size=80).filter(lambda k: len(k.encode("utf-8", "surrogatepass")) <= 255),
    st.text(max_size=300),
    st.integers(0, 2**32 - 1),
)
def test_publish_round_trips(key: str, value: str, ttl: int) -> None:
    try:
        frame = wire.encode_gossip(GossipPublish(key, value, ttl))
    except wire.EncodeError:
        return  # lone surrogates: not UTF-8
    assert wire.decode_gossip(frame) == GossipPublish(key, value, ttl)


@given(st.binary(max_size=64))
def test_random_bytes_decode_or_raise_decode_error(data: bytes) -> None:
    try:
        message = wire.decode_gossip(data)
    except wire.DecodeError:
        return
    assert wire.encode_gossip(message) == data
