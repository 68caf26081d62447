"""Mutation fuzzing of the decoders: success or DecodeError, nothing else.

Inputs are derived from valid encodings: every truncation, every single bit
flip, then seeded random extensions, multi-bit flips, byte substitutions,
insertions, deletions, splices and frame splits/merges. For every input the
only allowed outcomes are:

* a successful decode, which must be canonical: re-encoding the result gives
  back exactly the input frames (so the decoder accepted nothing the encoder
  would not produce), or
* a DecodeError raised by an explicit check (its ``__cause__`` is ``None``,
  or a UnicodeDecodeError for bad UTF-8); a DecodeError chained to any other
  exception means the decoder's last-resort safety net fired, i.e. a check is
  missing, and fails the test.
"""

from __future__ import annotations

import itertools
import os
import random
import uuid
from collections.abc import Callable, Sequence

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import trizre
from tests.support.fuzz import Tally, fuzzing
from trizre import wire
from trizre.patterns import _protocol as proto
from trizre.sansio._peer import PeerProtocol
from trizre.transport._curve import CurvePolicy
from trizre.wire import (
    Beacon,
    DecodeError,
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
    decode,
    decode_beacon,
    encode,
    encode_beacon,
)

SEED = 0x5EED_2E
# make fuzz raises the counts tenfold (TRIZRE_FUZZ_SCALE=10): over a million inputs.
SCALE = float(os.environ.get("TRIZRE_FUZZ_SCALE", "1"))
MESSAGE_RANDOM_INPUTS = int(110_000 * SCALE)
BEACON_RANDOM_INPUTS = int(25_000 * SCALE)
PEER_RANDOM_INPUTS = int(60_000 * SCALE)
ENVELOPE_RANDOM_INPUTS = int(40_000 * SCALE)
ZAP_RANDOM_INPUTS = int(20_000 * SCALE)
GOSSIP_RANDOM_INPUTS = int(20_000 * SCALE)
MIN_TOTAL_INPUTS = 100_000
DECODE_VERSIONS = (None, 2, 3)
# Mostly "either version", so few inputs are spent on VersionMismatch.
VERSION_CYCLE = (None, None, None, 2, None, None, None, 3)

EVENT_TYPES = (trizre.Enter, trizre.Join, trizre.Leave, trizre.Shout, trizre.Whisper)

CORPUS_MESSAGES: list[Message] = [
    Hello(1, "tcp://127.0.0.1:49152", ("GLOBAL", "chat"), 2, "Zoë", {"X": "1", "Y": "Zürich"}),
    Hello(1, "", (), 0, "", ()),
    Hello(1, "tcp://[::1]:5555", ("é" * 3,), 255, "n", {"k": ""}, version=3),
    Hello(0xFFFF, "ipc:///tmp/x", ("a", "", "b"), 7, "€", (("", "v"), ("k", "€€"))),
    Whisper(2, (b"hello",)),
    Whisper(0, ()),
    Whisper(65535, (b"a", b"", b"\xaa\xa1\x02\x02\x00\x01"), version=3),
    Shout(3, "chat", (b"payload",)),
    Shout(65535, "", ()),
    Shout(9, "groupé", (b"x", b"y"), version=3),
    Join(4, "GLOBAL", 1),
    Join(4, "", 0, version=3),
    Leave(5, "chat", 255),
    Ping(6),
    PingOk(7, version=3),
    Elect(8, b"\x05abcde\x03xyz"),
    Leader(9, b""),
    Goodbye(10),
]

CORPUS_BEACONS: list[Beacon] = [
    Beacon(uuid.UUID(int=0x0123456789ABCDEF0123456789ABCDEF), 49152),
    Beacon(uuid.UUID(int=0), 0),
    Beacon(uuid.UUID(int=2**128 - 1), 65535, version=3),
    Beacon(uuid.UUID(int=42), 5670, version=3, public_key=bytes(range(32))),
]

INTERESTING_BYTES = (0x00, 0x01, 0x02, 0x03, 0x7F, 0x80, 0xAA, 0xA1, 0xC3, 0xFE, 0xFF)


def assert_explicit(exc: DecodeError) -> None:
    cause = exc.__cause__
    assert cause is None or isinstance(cause, UnicodeDecodeError), (
        f"decoder safety net fired: {cause!r}"
    )


def feed_message(frames: Sequence[bytes], version: int | None, tally: Tally) -> None:
    try:
        msg = decode(frames, version=version)
    except DecodeError as exc:
        assert_explicit(exc)
        tally.rejected += 1
    else:
        assert version is None or msg.version == version
        assert encode(msg) == list(frames), (frames, msg)
        tally.ok += 1


def feed_beacon(data: bytes, tally: Tally) -> None:
    try:
        beacon = decode_beacon(data)
    except DecodeError as exc:
        assert_explicit(exc)
        tally.rejected += 1
    else:
        assert encode_beacon(beacon) == data
        tally.ok += 1


# --------------------------------------------------------------------------
# mutation operators on one byte string


def flip_bits(rng: random.Random, data: bytes) -> bytes:
    if not data:
        return data
    buf = bytearray(data)
    for _ in range(rng.randint(1, 8)):
        bit = rng.randrange(len(buf) * 8)
        buf[bit >> 3] ^= 1 << (bit & 7)
    return bytes(buf)


def set_bytes(rng: random.Random, data: bytes) -> bytes:
    if not data:
        return data
    buf = bytearray(data)
    for _ in range(rng.randint(1, 3)):
        value = rng.choice(INTERESTING_BYTES) if rng.random() < 0.7 else rng.randrange(256)
        buf[rng.randrange(len(buf))] = value
    return bytes(buf)


def extend(rng: random.Random, data: bytes) -> bytes:
    return data + rng.randbytes(rng.randint(1, 40))


def insert(rng: random.Random, data: bytes) -> bytes:
    pos = rng.randint(0, len(data))
    return data[:pos] + rng.randbytes(rng.randint(1, 8)) + data[pos:]


def delete(rng: random.Random, data: bytes) -> bytes:
    if not data:
        return data
    start = rng.randrange(len(data))
    return data[:start] + data[start + rng.randint(1, 8) :]


def truncate(rng: random.Random, data: bytes) -> bytes:
    return data[: rng.randint(0, len(data))]


BYTE_OPS: list[Callable[[random.Random, bytes], bytes]] = [
    flip_bits,
    set_bytes,
    extend,
    insert,
    delete,
    truncate,
]

# --------------------------------------------------------------------------
# mutation operators on a list of frames


def mutate_frame0(rng: random.Random, frames: list[bytes]) -> list[bytes]:
    return [rng.choice(BYTE_OPS)(rng, frames[0]), *frames[1:]]


def mutate_any_frame(rng: random.Random, frames: list[bytes]) -> list[bytes]:
    out = list(frames)
    i = rng.randrange(len(out))
    out[i] = rng.choice(BYTE_OPS)(rng, out[i])
    return out


def resplit(rng: random.Random, frames: list[bytes]) -> list[bytes]:
    blob = b"".join(frames)
    cuts = sorted(rng.randint(0, len(blob)) for _ in range(rng.randint(0, 4)))
    bounds = [0, *cuts, len(blob)]
    return [blob[a:b] for a, b in itertools.pairwise(bounds)]


def merge(rng: random.Random, frames: list[bytes]) -> list[bytes]:
    if len(frames) < 2:
        return [*frames, rng.randbytes(rng.randint(0, 4))]
    i = rng.randrange(len(frames) - 1)
    return [*frames[:i], frames[i] + frames[i + 1], *frames[i + 2 :]]


def drop_or_add_frame(rng: random.Random, frames: list[bytes]) -> list[bytes]:
    out = list(frames)
    if len(out) > 1 and rng.random() < 0.5:
        del out[rng.randrange(len(out))]
    else:
        out.insert(rng.randint(1, len(out)), rng.randbytes(rng.randint(0, 8)))
    return out


def splice(rng: random.Random, frames: list[bytes]) -> list[bytes]:
    other = encode(rng.choice(CORPUS_MESSAGES))
    head, tail = frames[0], other[0]
    return [head[: rng.randint(0, len(head))] + tail[rng.randint(0, len(tail)) :], *frames[1:]]


FRAME_OPS: list[Callable[[random.Random, list[bytes]], list[bytes]]] = [
    mutate_frame0,
    mutate_frame0,
    mutate_frame0,
    mutate_any_frame,
    resplit,
    merge,
    drop_or_add_frame,
    splice,
]


# --------------------------------------------------------------------------
# the tests


def exhaustive_message_inputs(frames: list[bytes]) -> list[list[bytes]]:
    head, rest = frames[0], frames[1:]
    inputs: list[list[bytes]] = []
    for n in range(len(head)):  # every truncation of frame 0, with and without the rest
        inputs.append([head[:n], *rest])
        inputs.append([head[:n]])
    for bit in range(len(head) * 8):  # every single bit flip of frame 0
        buf = bytearray(head)
        buf[bit >> 3] ^= 1 << (bit & 7)
        inputs.append([bytes(buf), *rest])
    for n in range(1, 9):  # short extensions of frame 0
        inputs.append([head + b"\x00" * n, *rest])
    return inputs


def test_mutated_messages() -> None:
    rng, tally = fuzzing(SEED)
    versions = itertools.cycle(VERSION_CYCLE)
    valid = [encode(m) for m in CORPUS_MESSAGES]
    for frames in valid:
        feed_message(frames, None, tally)
        for mutated in exhaustive_message_inputs(frames):
            feed_message(mutated, next(versions), tally)
    for _ in range(MESSAGE_RANDOM_INPUTS):
        frames = rng.choice(valid)
        for _ in range(rng.choice((1, 1, 1, 2, 3))):
            frames = rng.choice(FRAME_OPS)(rng, frames)
            if not frames:
                frames = [b""]
        feed_message(frames, next(versions), tally)
    tally.report("ZRE messages")
    # On its own this test feeds more than the 100,000 inputs asked for.
    assert tally.total >= MIN_TOTAL_INPUTS, tally
    # Both outcomes are well represented: the mutations reach past the header.
    assert tally.ok > 5_000, tally
    assert tally.rejected > 50_000, tally


def test_mutated_messages_through_the_peer_protocol() -> None:
    """A peer sending anything at all: the protocol returns events or ends it, never raises."""
    rng, tally = fuzzing(SEED + 2)
    identity = b"\x01" + uuid.UUID(int=7).bytes
    ours = Hello(1, "tcp://127.0.0.1:50001", name="me")

    def entered() -> PeerProtocol:
        peer = PeerProtocol(
            uuid.UUID(int=7), "tcp://127.0.0.1:1", ours, now=0, evasive=1, expired=2
        )
        peer.receive([identity, *encode(Hello(1, "tcp://127.0.0.1:1", name="p"))], 0.0)
        return peer

    peer = entered()
    valid = [encode(m) for m in CORPUS_MESSAGES]
    for _ in range(PEER_RANDOM_INPUTS):
        frames = rng.choice(valid)
        for _ in range(rng.choice((0, 1, 1, 2))):
            frames = rng.choice(FRAME_OPS)(rng, frames) or [b""]
        events = peer.receive([identity, *frames], 0.0)
        assert all(isinstance(e, EVENT_TYPES) for e in events)
        if peer.ended is None:
            tally.ok += 1
        else:
            tally.rejected += 1
            peer = entered()
    tally.report_both_ways("peer protocol")


def test_mutated_pattern_envelopes() -> None:
    """The patterns' envelope decoder: a message, None, or PatternDecodeError only."""
    rng, tally = fuzzing(SEED + 3)
    corpus = [
        proto.Request(1, "echo", (b"body",)),
        proto.Request(2**64 - 1, "é" * 10, ()),
        proto.Reply(3, 200, (b"a", b"")),
        proto.Reply(0, 503),
        proto.State(4),
    ]
    valid = [proto.encode(m) for m in corpus]
    for _ in range(ENVELOPE_RANDOM_INPUTS):
        frames = rng.choice(valid)
        for _ in range(rng.choice((1, 1, 2, 3))):
            frames = rng.choice(FRAME_OPS[:1] + FRAME_OPS[3:-1])(rng, frames) or [b""]
        try:
            message = proto.decode(frames)
        except proto.PatternDecodeError:
            tally.rejected += 1
            continue
        if isinstance(message, proto.State):
            # The one field a receiver MUST ignore (patterns/README.md 5.3): the request id.
            encoded = proto.encode(message)
            assert encoded[0][:6] == frames[0][:6] and encoded[1:] == frames[1:], frames
        elif message is not None:
            assert proto.encode(message) == list(frames), (frames, message)
        tally.ok += 1
    tally.report_both_ways("pattern envelopes")


def test_mutated_zap_requests() -> None:
    """What libzmq hands a CURVE node's ZAP handler: a request, or DecodeError only.

    Every request that decodes is judged by a policy without raising, and
    only a CURVE request with an allowed 32-octet key is admitted.
    """
    rng, tally = fuzzing(SEED + 4)
    allowed = bytes(range(32))
    policy = CurvePolicy("global", frozenset({allowed}))
    valid = [
        [b"1.0", b"1", b"global", b"127.0.0.1", b"trizre-zap-x", b"CURVE", allowed],
        [b"1.0", b"2", b"global", b"10.0.0.1", b"", b"NULL"],
        [b"1.0", b"3", b"", b"::1", b"id", b"PLAIN", b"user", b"password"],
    ]
    for _ in range(ZAP_RANDOM_INPUTS):
        frames = rng.choice(valid)
        for _ in range(rng.choice((1, 1, 2, 3))):
            frames = rng.choice(FRAME_OPS[:1] + FRAME_OPS[3:-1])(rng, frames) or [b""]
        try:
            request = wire.decode_zap_request(frames)
        except wire.DecodeError:
            tally.rejected += 1
            continue
        reply = policy.judge(request)
        assert (reply.status_code == 200) == (
            request.curve_key == allowed and request.domain == "global"
        ), (frames, reply)
        wire.encode_zap_reply(reply)
        tally.ok += 1
    tally.report_both_ways("ZAP requests")


def test_mutated_gossip_frames() -> None:
    """czmq's ZGP (zyre's gossip discovery): a message that re-encodes exactly, or DecodeError."""
    rng, tally = fuzzing(SEED + 5)
    valid = [
        wire.encode_gossip(m)
        for m in (
            wire.GossipHello(),
            wire.GossipPing(),
            wire.GossipPong(),
            wire.GossipInvalid(),
            wire.GossipPublish("0123456789ABCDEF0123456789ABCDEF", "tcp://10.0.0.1:49152", 0),
            wire.GossipPublish("k", "ipc:///tmp/x|" + "z" * 40, 60_000),
        )
    ]
    for _ in range(GOSSIP_RANDOM_INPUTS):
        frames = [rng.choice(valid)]
        for _ in range(rng.choice((1, 1, 2, 3))):
            frames = rng.choice(FRAME_OPS[:3])(rng, frames) or [b""]
        try:
            message = wire.decode_gossip(frames[0])
        except wire.DecodeError:
            tally.rejected += 1
            continue
        assert wire.encode_gossip(message) == frames[0], frames
        tally.ok += 1
    tally.report("ZGP frames")
    # Strict frames: most mutations break them, enough survive to reach the fields.
    assert tally.ok > 300 and tally.rejected > 1_000, tally


def test_mutated_beacons() -> None:
    rng, tally = fuzzing(SEED + 1)
    valid = [encode_beacon(b) for b in CORPUS_BEACONS]
    for data in valid:
        feed_beacon(data, tally)
        for n in range(len(data)):
            feed_beacon(data[:n], tally)
        for n in range(1, 40):
            feed_beacon(data + rng.randbytes(n), tally)
        for bit in range(len(data) * 8):
            buf = bytearray(data)
            buf[bit >> 3] ^= 1 << (bit & 7)
            feed_beacon(bytes(buf), tally)
    for _ in range(BEACON_RANDOM_INPUTS):
        data = rng.choice(valid)
        for _ in range(rng.choice((1, 1, 2, 3))):
            data = rng.choice(BYTE_OPS)(rng, data)
        feed_beacon(data, tally)
    tally.report("beacons")
    assert tally.total >= BEACON_RANDOM_INPUTS
    assert tally.ok > 1_000, tally
    assert tally.rejected > 5_000, tally


# --------------------------------------------------------------------------
# hypothesis: arbitrary bytes

RANDOM = settings(
    derandomize=True,
    database=None,
    deadline=None,
    max_examples=2_000,
    suppress_health_check=[HealthCheck.too_slow],
)

valid_heads = st.sampled_from(
    [
        b"",
        b"\xaa\xa1",
        *(b"\xaa\xa1" + bytes([c, v]) for c in range(12) for v in (2, 3)),
        *(encode(m)[0][:n] for m in CORPUS_MESSAGES[:4] for n in (7, 12, 20)),
    ]
)


@RANDOM
@given(data=st.binary(max_size=80))
def test_random_beacon_bytes(data: bytes) -> None:
    feed_beacon(data, Tally())
    feed_beacon(b"ZRE\x01" + data, Tally())
    feed_beacon(b"ZRE\x03" + data, Tally())


@RANDOM
@given(frames=st.lists(st.binary(max_size=80), max_size=4))
def test_random_frames(frames: list[bytes]) -> None:
    for version in DECODE_VERSIONS:
        feed_message(frames, version, Tally())


@RANDOM
@given(
    head=valid_heads,
    body=st.binary(max_size=80),
    rest=st.lists(st.binary(max_size=16), max_size=3),
)
def test_random_bodies_after_valid_headers(head: bytes, body: bytes, rest: list[bytes]) -> None:
    for version in DECODE_VERSIONS:
        feed_message([head + body, *rest], version, Tally())
        feed_message([head + body], version, Tally())
