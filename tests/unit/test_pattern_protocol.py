"""The pattern envelope: vectors from patterns/vectors/envelope.json, properties, fuzz.

The vectors are written by hand from ``patterns/README.md``; this file checks
that the codec in ``trizre.patterns._protocol`` agrees with them, then that
it round-trips, refuses what it must refuse, and never raises anything but
``PatternDecodeError`` on hostile input.
"""

from __future__ import annotations

import json
import random
import time
from pathlib import Path
from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from trizre.patterns._protocol import (
    MAX_REQUEST_ID,
    TAG,
    VERSION,
    VERSIONS,
    Accepted,
    Command,
    PatternDecodeError,
    PatternMessage,
    Reply,
    Request,
    State,
    Status,
    decode,
    encode,
    new_reply,
    reply_v2,
    request_head,
)

VECTORS_PATH = Path(__file__).resolve().parents[2] / "patterns" / "vectors" / "envelope.json"
VECTORS: dict[str, Any] = json.loads(VECTORS_PATH.read_text(encoding="utf-8"))


def _frames(hex_frames: list[str]) -> list[bytes]:
    return [bytes.fromhex(h) for h in hex_frames]


def _message(spec: dict[str, Any]) -> PatternMessage:
    kind = spec["type"]
    if kind == "request":
        return Request(spec["request_id"], spec["service"], tuple(_frames(spec["body"])))
    if kind == "reply":
        return Reply(spec["request_id"], spec["status"], tuple(_frames(spec["body"])))
    if kind == "state":
        return State(spec["state"], spec.get("seen", 0))
    if kind == "accepted":
        return Accepted(spec["request_id"])
    raise AssertionError(f"unknown message type in vectors: {kind!r}")


def _cases(section: str) -> list[Any]:
    return [pytest.param(v, id=v["name"]) for v in VECTORS[section]]


# ----------------------------------------------------------- the vector file


def test_vector_file_shape() -> None:
    assert VECTORS["version"] == 2
    for section in ("vectors", "invalid", "not_pattern"):
        names = [v["name"] for v in VECTORS[section]]
        assert len(names) == len(set(names)), f"duplicate names in {section}"
        for vector in VECTORS[section]:
            for frame in vector["frames"] + vector.get("frames_v1", []):
                assert frame == frame.lower() and len(frame) % 2 == 0, (vector["name"], frame)
    # Every message has both versions' frames; version 2 has one frame less
    # (ACCEPTED, the header alone, is one frame in both).
    for vector in VECTORS["vectors"]:
        fewer = 0 if vector["message"]["type"] == "accepted" else 1
        assert len(vector["frames"]) == len(vector["frames_v1"]) - fewer, vector["name"]


def test_vector_file_covers_the_brief() -> None:
    """The vectors cover every command, status, state and the id extremes."""
    messages = [_message(v["message"]) for v in VECTORS["vectors"]]
    requests = [m for m in messages if isinstance(m, Request)]
    replies = [m for m in messages if isinstance(m, Reply)]
    states = [m for m in messages if isinstance(m, State)]
    assert any(r.service and len(r.body) == 2 for r in requests)
    assert any(r.service == "" and r.body == () for r in requests)
    assert any(not r.service.isascii() for r in requests)
    assert any(len(r.service.encode()) == 255 for r in requests)
    assert {200, 404, 500, 501, 503} <= {r.status for r in replies}
    assert any(r.body == () for r in replies)
    assert any(len(r.body) > 1 for r in replies)
    assert {s.state for s in states} == {1, 2, 3, 4}
    assert {s.seen for s in states} >= {0, 1, 2, 3, 4}
    accepted = [m for m in messages if isinstance(m, Accepted)]
    assert MAX_REQUEST_ID in {m.request_id for m in accepted}
    ids = {m.request_id for m in requests + replies}
    assert MAX_REQUEST_ID in ids
    assert 0 in ids
    assert len(VECTORS["invalid"]) >= 8
    assert len(VECTORS["not_pattern"]) >= 3


def test_constants_match_the_contract() -> None:
    assert TAG == b"TZRP" == bytes.fromhex("545a5250")
    assert VERSION == 2
    assert sorted(VERSIONS) == [1, 2]
    assert (Command.REQUEST, Command.REPLY, Command.STATE, Command.ACCEPTED) == (1, 2, 3, 4)
    assert [int(s) for s in Status] == [200, 404, 500, 501, 503]
    assert MAX_REQUEST_ID == 2**64 - 1


@pytest.mark.parametrize("vector", _cases("vectors"))
def test_vector_encodes_to_its_frames(vector: dict[str, Any]) -> None:
    assert encode(_message(vector["message"])) == _frames(vector["frames"])


@pytest.mark.parametrize("vector", _cases("vectors"))
def test_vector_decodes_to_its_message(vector: dict[str, Any]) -> None:
    frames = _frames(vector["frames"])
    assert decode(frames) == _message(vector["message"])
    assert decode(tuple(frames)) == _message(vector["message"])  # any sequence


@pytest.mark.parametrize("vector", _cases("vectors"))
def test_vector_encodes_to_its_version_1_frames(vector: dict[str, Any]) -> None:
    message = attrs.evolve(_message(vector["message"]), version=1)
    assert encode(message) == _frames(vector["frames_v1"])


@pytest.mark.parametrize("vector", _cases("vectors"))
def test_vector_version_1_frames_decode_to_its_message(vector: dict[str, Any]) -> None:
    """README §4: a receiver decodes version 1 too, and the message says so."""
    message = decode(_frames(vector["frames_v1"]))
    assert message == _message(vector["message"])
    assert message is not None and message.version == 1
    assert decode(_frames(vector["frames"])).version == 2  # type: ignore[union-attr]


@pytest.mark.parametrize("vector", _cases("invalid"))
def test_invalid_is_rejected_as_malformed(vector: dict[str, Any]) -> None:
    with pytest.raises(PatternDecodeError):
        decode(_frames(vector["frames"]))


@pytest.mark.parametrize("vector", _cases("not_pattern"))
def test_not_pattern_decodes_to_none(vector: dict[str, Any]) -> None:
    assert decode(_frames(vector["frames"])) is None


def test_pattern_decode_error_is_a_value_error() -> None:
    assert issubclass(PatternDecodeError, ValueError)


def test_state_id_field_is_what_the_sender_has_seen() -> None:
    """README §5.3: any 64-bit value is well-formed; Binary Star uses 1..4."""
    header = bytes.fromhex("545a52500103") + (12345).to_bytes(8, "big")
    assert decode([header, b"\x03"]) == State(3, seen=12345)
    header = bytes.fromhex("545a52500203") + (12345).to_bytes(8, "big")
    assert decode([header + b"\x03"]) == State(3, seen=12345)
    assert State(3) == State(3, seen=0)  # seen nothing: the default


def test_every_state_octet_is_well_formed() -> None:
    header = bytes.fromhex("545a525001030000000000000000")
    for octet in range(256):
        assert decode([header, bytes([octet])]) == State(octet)
    header = bytes.fromhex("545a525002030000000000000000")
    for octet in range(256):
        assert decode([header + bytes([octet])]) == State(octet)


def test_reply_ok_property() -> None:
    assert Reply(1, 200).ok
    assert not Reply(1, 503).ok


# ------------------------------------------------------------- round trips

request_ids = st.integers(min_value=0, max_value=MAX_REQUEST_ID)
bodies = st.lists(st.binary(max_size=64), max_size=6).map(tuple)
# At most 63 characters of at most 4 UTF-8 octets each: always <= 255 octets.
services = st.text(max_size=63)


@given(request_ids, services, bodies)
def test_request_round_trip(request_id: int, service: str, body: tuple[bytes, ...]) -> None:
    message = Request(request_id, service, body)
    frames = encode(message)
    assert len(frames) == 1 + len(body)  # the service rides in frame 0
    assert frames[0][:6] == TAG + b"\x02\x01" and frames[0][14:] == service.encode()
    assert int.from_bytes(frames[0][6:14], "big") == request_id
    assert decode(frames) == message
    old = encode(attrs.evolve(message, version=1))
    assert len(old) == 2 + len(body)
    assert old[0][:4] == TAG and len(old[0]) == 14
    assert int.from_bytes(old[0][6:], "big") == request_id
    assert decode(old) == message


@given(request_ids, st.integers(min_value=0, max_value=0xFFFF), bodies)
def test_reply_round_trip(request_id: int, status: int, body: tuple[bytes, ...]) -> None:
    message = Reply(request_id, status, body)
    frames = encode(message)
    assert len(frames) == 1 + len(body) and frames[0][14:] == status.to_bytes(2, "big")
    assert decode(frames) == message
    old = encode(attrs.evolve(message, version=1))
    assert old[1] == status.to_bytes(2, "big")
    assert decode(old) == message


@given(st.integers(min_value=0, max_value=255), request_ids)
def test_state_round_trip(state: int, seen: int) -> None:
    frames = encode(State(state, seen))
    assert frames == [bytes.fromhex("545a52500203") + seen.to_bytes(8, "big") + bytes([state])]
    assert decode(frames) == State(state, seen)
    old = encode(State(state, seen, version=1))
    assert old == [bytes.fromhex("545a52500103") + seen.to_bytes(8, "big"), bytes([state])]
    assert decode(old) == State(state, seen)


@given(request_ids)
def test_accepted_round_trip(request_id: int) -> None:
    frames = encode(Accepted(request_id))
    assert frames == [b"TZRP\x02\x04" + request_id.to_bytes(8, "big")]
    assert decode(frames) == Accepted(request_id)
    old = encode(Accepted(request_id, version=1))
    assert old == [b"TZRP\x01\x04" + request_id.to_bytes(8, "big")]
    assert decode(old) == Accepted(request_id)


@given(st.text(min_size=1).filter(lambda s: len(s.encode()) <= 255))
def test_any_service_up_to_255_octets_round_trips(service: str) -> None:
    assert decode(encode(Request(1, service))) == Request(1, service)


# ------------------------------------------------------------ encode errors


@pytest.mark.parametrize(
    "message",
    [
        pytest.param(Request(2**64, "echo"), id="request-id-2**64"),
        pytest.param(Request(-1, "echo"), id="request-id-negative"),
        pytest.param(Reply(2**64, 200), id="reply-id-2**64"),
        pytest.param(Reply(-1, 200), id="reply-id-negative"),
        pytest.param(Request(1, "a" * 256), id="service-256-ascii"),
        pytest.param(Request(1, "é" * 128), id="service-256-octets-in-128-chars"),
        pytest.param(Reply(1, 65536), id="status-65536"),
        pytest.param(Reply(1, -1), id="status-negative"),
        pytest.param(State(256), id="state-256"),
        pytest.param(State(-1), id="state-negative"),
        pytest.param(State(3, seen=2**64), id="state-seen-2**64"),
        pytest.param(State(3, seen=-1), id="state-seen-negative"),
        pytest.param(Request(1, "echo", version=3), id="request-version-3"),
        pytest.param(Reply(1, 200, version=0), id="reply-version-0"),
        pytest.param(State(3, version=3), id="state-version-3"),
        pytest.param(Accepted(1, version=3), id="accepted-version-3"),
    ],
)
def test_encode_rejects_out_of_range(message: PatternMessage) -> None:
    with pytest.raises(ValueError):
        encode(message)


def test_encode_accepts_the_limits() -> None:
    assert decode(encode(Request(MAX_REQUEST_ID, "é" * 127 + "a"))) == Request(
        MAX_REQUEST_ID, "é" * 127 + "a"
    )
    assert decode(encode(Reply(0, 0xFFFF))) == Reply(0, 0xFFFF)
    assert decode(encode(State(0))) == State(0)


@pytest.mark.parametrize(
    "message",
    [
        pytest.param(Request(1, "echo", ("text",)), id="request-str-frame"),  # type: ignore[arg-type]
        pytest.param(Request(1, "", (b"ok", bytearray(b"no"))), id="request-bytearray"),  # type: ignore[arg-type]
        pytest.param(Reply(1, 200, (b"ok", 7)), id="reply-int-frame"),  # type: ignore[arg-type]
        pytest.param(Reply(1, 200, (memoryview(b"x"),)), id="reply-memoryview"),  # type: ignore[arg-type]
    ],
)
def test_encode_rejects_non_bytes_body(message: PatternMessage) -> None:
    with pytest.raises(TypeError):
        encode(message)


@pytest.mark.parametrize("thing", [b"TZRP", "request", None, (1, "echo")])
def test_encode_rejects_non_messages(thing: object) -> None:
    with pytest.raises(TypeError):
        encode(thing)  # type: ignore[arg-type]


# ---------------------------------------------------------------------- fuzz

FUZZ_SEED = 20240611
FUZZ_ROUNDS = 25_000


def _seeds() -> list[list[bytes]]:
    seeds = [_frames(v["frames"]) for v in VECTORS["vectors"]]
    seeds += [_frames(v["frames_v1"]) for v in VECTORS["vectors"]]
    seeds += [_frames(v["frames"]) for v in VECTORS["invalid"]]
    return seeds


def _mutate(rng: random.Random, frames: list[bytes]) -> list[bytes]:
    frames = list(frames)
    for _ in range(rng.randint(1, 3)):
        choice = rng.randrange(8)
        if choice == 0 and frames:  # drop trailing frames
            del frames[rng.randrange(len(frames)) :]
        elif choice == 1 and frames:  # truncate one frame
            i = rng.randrange(len(frames))
            frames[i] = frames[i][: rng.randrange(len(frames[i]) + 1)]
        elif choice == 2 and frames and any(frames):  # flip one bit
            i = rng.choice([j for j, f in enumerate(frames) if f])
            frame = bytearray(frames[i])
            bit = rng.randrange(len(frame) * 8)
            frame[bit // 8] ^= 1 << (bit % 8)
            frames[i] = bytes(frame)
        elif choice == 3 and frames and frames[0]:  # flip a bit in the header
            frame = bytearray(frames[0])
            bit = rng.randrange(min(len(frame), 14) * 8)
            frame[bit // 8] ^= 1 << (bit % 8)
            frames[0] = bytes(frame)
        elif choice == 4:  # extra frames
            for _ in range(rng.randint(1, 3)):
                frames.insert(rng.randint(0, len(frames)), rng.randbytes(rng.randint(0, 20)))
        elif choice == 5 and frames:  # extend one frame
            i = rng.randrange(len(frames))
            frames[i] += rng.randbytes(rng.randint(1, 4))
        elif choice == 6 and frames:  # set a header octet to a random value
            frame = bytearray(frames[0] or b"\x00")
            frame[rng.randrange(len(frame))] = rng.randrange(256)
            frames[0] = bytes(frame)
        elif choice == 7 and len(frames) > 1:  # drop one frame
            del frames[rng.randrange(len(frames))]
    return frames


def test_fuzz_decode_only_succeeds_returns_none_or_rejects() -> None:
    rng = random.Random(FUZZ_SEED)
    seeds = _seeds()
    outcomes = {"message": 0, "none": 0, "rejected": 0}
    started = time.perf_counter()
    for _ in range(FUZZ_ROUNDS):
        frames = _mutate(rng, rng.choice(seeds))
        try:
            message = decode(frames)
        except PatternDecodeError:
            outcomes["rejected"] += 1
            continue
        # Any other exception propagates and fails the test.
        if message is None:
            assert not frames or frames[0][:4] != TAG
            outcomes["none"] += 1
            continue
        outcomes["message"] += 1
        # Whatever decodes is canonical: it re-encodes to the same frames
        # (in the version it came in).
        assert encode(message) == frames
    assert time.perf_counter() - started < 5.0
    assert sum(outcomes.values()) == FUZZ_ROUNDS
    # The mutations must reach all three outcomes in useful numbers.
    assert min(outcomes.values()) > FUZZ_ROUNDS // 50, outcomes


# ------------------------------------------------- issue 28: the fast paths


@given(st.binary(max_size=300), st.lists(st.binary(max_size=8), max_size=3))
def test_request_head_agrees_with_decode(head: bytes, rest: list[bytes]) -> None:
    """The port's one-pass read of a version-2 REQUEST gives what decode gives, and
    None for everything else (decode then says what it is, malformed or not)."""
    found = request_head(head)
    try:
        message = decode([head, *rest])
    except PatternDecodeError:
        message = None
    if found is None:
        assert not (isinstance(message, Request) and message.version == VERSION)
    else:
        assert isinstance(message, Request) and message.version == VERSION
        assert found == (message.request_id, message.service)


def test_request_head_reads_every_version_2_request_vector() -> None:
    for request_id, service in [(0, ""), (MAX_REQUEST_ID, "echo"), (7, "\u00e9" * 127)]:
        frames = encode(Request(request_id, service, (b"x",)))
        assert request_head(frames[0]) == (request_id, service)
    assert request_head(encode(Request(1, "echo", version=1))[0]) is None
    assert request_head(encode(Reply(1, 200))[0]) is None
    assert request_head(TAG + bytes([VERSION, int(Command.REQUEST)]) + bytes(8) + b"\xff") is None


# Heads near a REPLY's: a tag, a version and a command that may each be
# wrong, an id and 0-3 octets more (a version-2 REPLY has exactly 2).
_NEAR_REPLY_HEADS = st.builds(
    lambda tag, version, command, rest: tag + bytes([version, command]) + rest,
    st.sampled_from([TAG, b"TZRQ", b"tzrp"]),
    st.sampled_from([1, 2, 3]),
    st.sampled_from([*(int(c) for c in Command), 0, 9]),
    st.binary(min_size=8, max_size=11),
)


@given(
    st.one_of(st.binary(max_size=40), _NEAR_REPLY_HEADS),
    st.lists(st.binary(max_size=8), max_size=3),
)
def test_reply_v2_agrees_with_decode(head: bytes, rest: list[bytes]) -> None:
    """The port's read of a version-2 REPLY gives what decode gives, and None for
    everything else (decode then says what it is, malformed or not)."""
    found = reply_v2([head, *rest])
    try:
        message = decode([head, *rest])
    except PatternDecodeError:
        message = None
    if found is None:
        assert not (isinstance(message, Reply) and message.version == VERSION)
    else:
        assert isinstance(message, Reply) and message.version == VERSION
        assert found == message and found.version == VERSION


def test_reply_v2_reads_version_2_replies_only() -> None:
    for request_id, status, body in [(0, 200, ()), (MAX_REQUEST_ID, 503, (b"a", b""))]:
        frames = encode(Reply(request_id, status, body))
        assert reply_v2(frames) == Reply(request_id, status, body)
    assert reply_v2(encode(Reply(1, 200, version=1))) is None
    assert reply_v2(encode(Request(1, "echo"))) is None
    assert reply_v2(encode(Accepted(1))) is None
    assert reply_v2([]) is None  # no frame at all: decode says None too
    head = encode(Reply(1, 200))[0]
    assert reply_v2([head[:-1]]) is None  # a short frame 0: decode says why
    assert reply_v2([head + b"\x00"]) is None  # a long one
    assert reply_v2([b"TZRQ" + head[4:]]) is None  # not pattern traffic: decode says so
    assert reply_v2([head[:4] + bytes([3]) + head[5:]]) is None  # another version
    assert reply_v2([head[:5] + bytes([int(Command.ACCEPTED)]) + head[6:]]) is None


def test_new_reply_makes_the_same_reply_as_the_class() -> None:
    made = new_reply(3, 200, (b"a",), 1)
    assert made == Reply(3, 200, (b"a",)) and made.version == 1 and type(made) is Reply
    assert hash(made) == hash(Reply(3, 200, (b"a",)))
    decoded = decode(encode(Reply(4, 503, (b"b",))))
    assert decoded == Reply(4, 503, (b"b",)) and isinstance(decoded, Reply)
    assert decoded.version == VERSION
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        made.status = 500  # type: ignore[misc]
