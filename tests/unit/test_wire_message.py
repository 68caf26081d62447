"""ZRE TCP message codec: byte-exact vectors from 36/ZRE & 43/ZRE, errors, round trips."""

from __future__ import annotations

import pickle

import attrs
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from trizre import wire
from trizre.wire import (
    DEFAULT_VERSION,
    MESSAGE_VERSIONS,
    SIGNATURE,
    Command,
    DecodeError,
    Elect,
    EncodeError,
    Goodbye,
    Hello,
    Join,
    Leader,
    Leave,
    Message,
    Ping,
    PingOk,
    Shout,
    UnknownCommand,
    VersionMismatch,
    Whisper,
    WireError,
    decode,
    election_body,
    encode,
    encode_whisper,
    group_string,
    hello_excess,
    parse_election_body,
    shout_builder,
    shout_encoder,
    shout_header,
    whisper_sequence,
)

DETERMINISTIC = settings(
    derandomize=True,
    database=None,
    deadline=None,
    max_examples=300,
    suppress_health_check=[HealthCheck.too_slow],
)

# --------------------------------------------------------------------------
# Byte-exact vectors, written out by hand from the 36/ZRE grammar:
#   %xAA %xA1, command, version, sequence(2, big-endian), fields...
#   string = 1-octet length + UTF-8; longstr = 4-octet length + UTF-8;
#   strings = 4-octet count + longstr*; dictionary = 4-octet count + (string, longstr)*

HELLO_FRAME = (
    b"\xaa\xa1"  # signature
    b"\x01"  # HELLO
    b"\x02"  # version 2
    b"\x00\x01"  # sequence 1
    b"\x15"
    b"tcp://127.0.0.1:49152"  # endpoint, 21 bytes
    b"\x00\x00\x00\x02"  # groups: 2 entries
    b"\x00\x00\x00\x06"
    b"GLOBAL"
    b"\x00\x00\x00\x04"
    b"chat"
    b"\x02"  # status 2
    b"\x04"
    b"Zo\xc3\xab"  # name "Zoë": 3 characters, 4 bytes
    b"\x00\x00\x00\x02"  # headers: 2 entries
    b"\x06"
    b"X-TYPE"
    b"\x00\x00\x00\x04"
    b"peer"
    b"\x06"
    b"X-CITY"
    b"\x00\x00\x00\x07"
    b"Z\xc3\xbcrich"  # "Zürich": 6 chars, 7 bytes
)
HELLO_MSG = Hello(
    sequence=1,
    endpoint="tcp://127.0.0.1:49152",
    groups=("GLOBAL", "chat"),
    status=2,
    name="Zoë",
    headers=(("X-TYPE", "peer"), ("X-CITY", "Zürich")),
)

VECTORS: list[tuple[str, list[bytes], Message]] = [
    ("hello", [HELLO_FRAME], HELLO_MSG),
    (
        "hello-empty-v3",
        [b"\xaa\xa1\x01\x03\x00\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"],
        Hello(1, "", (), 0, "", (), version=3),
    ),
    (
        "whisper-3-frames",
        [b"\xaa\xa1\x02\x02\x12\x34", b"hello", b"", b"\x00\xff"],
        Whisper(0x1234, (b"hello", b"", b"\x00\xff")),
    ),
    ("whisper-0-frames", [b"\xaa\xa1\x02\x02\x00\x00"], Whisper(0, ())),
    ("shout-0-frames", [b"\xaa\xa1\x03\x02\xff\xff\x04chat"], Shout(65535, "chat", ())),
    (
        "shout-2-frames-v3",
        [b"\xaa\xa1\x03\x03\x00\x09\x02\xc3\xbc", b"one", b"two"],  # group "ü"
        Shout(9, "ü", (b"one", b"two"), version=3),
    ),
    ("join", [b"\xaa\xa1\x04\x02\x00\x03\x06GLOBAL\x01"], Join(3, "GLOBAL", 1)),
    ("leave", [b"\xaa\xa1\x05\x02\x01\x00\x04chat\xff"], Leave(256, "chat", 255)),
    ("ping", [b"\xaa\xa1\x06\x02\x00\x2a"], Ping(42)),
    ("ping-ok", [b"\xaa\xa1\x07\x02\x00\x2b"], PingOk(43)),
    ("elect", [b"\xaa\xa1\x08\x02\x00\x05\x03abc"], Elect(5, b"\x03abc")),
    ("leader-empty", [b"\xaa\xa1\x09\x02\x00\x06"], Leader(6, b"")),
    ("goodbye", [b"\xaa\xa1\x0a\x02\x00\x07"], Goodbye(7)),
    ("goodbye-v3", [b"\xaa\xa1\x0a\x03\x00\x07"], Goodbye(7, version=3)),
]


@pytest.mark.parametrize(("frames", "msg"), [v[1:] for v in VECTORS], ids=[v[0] for v in VECTORS])
def test_vector_encode(frames: list[bytes], msg: Message) -> None:
    assert encode(msg) == frames


@pytest.mark.parametrize(("frames", "msg"), [v[1:] for v in VECTORS], ids=[v[0] for v in VECTORS])
def test_vector_decode(frames: list[bytes], msg: Message) -> None:
    got = decode(frames, version=msg.version)
    assert got == msg
    assert type(got) is type(msg)
    assert decode(frames, version=None) == msg


def test_hello_vector_fields() -> None:
    msg = decode([HELLO_FRAME])
    assert isinstance(msg, Hello)
    assert msg.command is Command.HELLO
    assert msg.name == "Zoë"
    assert msg.headers_dict() == {"X-TYPE": "peer", "X-CITY": "Zürich"}
    assert msg.version == DEFAULT_VERSION == 2


def test_decode_accepts_bytes_like_frame0() -> None:
    assert decode([bytearray(HELLO_FRAME)]) == HELLO_MSG  # type: ignore[list-item]
    assert decode([memoryview(HELLO_FRAME)]) == HELLO_MSG  # type: ignore[list-item]
    assert decode((b"\xaa\xa1\x02\x02\x00\x01", b"x")) == Whisper(1, (b"x",))


def test_command_ids() -> None:
    assert [c.value for c in Command] == list(range(1, 11))
    classes: list[type[Message]] = [
        Hello,
        Whisper,
        Shout,
        Join,
        Leave,
        Ping,
        PingOk,
        Elect,
        Leader,
        Goodbye,
    ]
    assert [cls.command for cls in classes] == list(Command)


# --------------------------------------------------------------------------
# Versions


def test_version_2_decoder_rejects_version_3() -> None:
    frames = encode(Ping(5, version=3))
    with pytest.raises(VersionMismatch) as info:
        decode(frames)
    assert info.value.version == 3
    assert info.value.expected == (2,)
    assert info.value.command_id == Command.PING
    assert info.value.sequence == 5


def test_version_3_decoder_rejects_version_2() -> None:
    with pytest.raises(VersionMismatch) as info:
        decode([b"\xaa\xa1\x02\x02\x00\x01", b"x"], version=3)  # also covers the WHISPER fast path
    assert info.value.version == 2
    assert info.value.expected == (3,)


@pytest.mark.parametrize("seen", [0, 1, 4, 255])
def test_either_version_rejects_others(seen: int) -> None:
    with pytest.raises(VersionMismatch) as info:
        decode([b"\xaa\xa1\x06" + bytes([seen]) + b"\x00\x01"], version=None)
    assert info.value.version == seen
    assert info.value.expected == MESSAGE_VERSIONS


@pytest.mark.parametrize("version", [2, 3])
def test_either_version_accepts_both(version: int) -> None:
    msg = decode([b"\xaa\xa1\x02" + bytes([version]) + b"\x00\x01", b"x"], version=None)
    assert msg == Whisper(1, (b"x",), version=version)


def test_version_checked_before_command() -> None:
    # A future protocol may add commands: report the version, not the command.
    with pytest.raises(VersionMismatch):
        decode([b"\xaa\xa1\x63\x04\x00\x01"])


# --------------------------------------------------------------------------
# Decode errors


def test_unknown_command_carries_id_and_sequence() -> None:
    for command_id in (0, 11, 200, 255):
        with pytest.raises(UnknownCommand) as info:
            decode([b"\xaa\xa1" + bytes([command_id]) + b"\x02\xab\xcd", b"extra"])
        assert info.value.command_id == command_id
        assert info.value.version == 2
        assert info.value.sequence == 0xABCD
        assert isinstance(info.value, DecodeError)


@pytest.mark.parametrize(
    ("frames", "why"),
    [
        ([], "no frames"),
        ([b""], "empty frame 0"),
        ([b"\xaa"], "half a signature"),
        ([b"\xaa\xa0\x06\x02\x00\x01"], "36/ZRE v1 signature"),
        ([b"ZRE\x01\x00\x01"], "a beacon"),
        ([b"\xaa\xa1\x06\x02\x00"], "truncated sequence"),
        ([b"\xaa\xa1\x06\x02\x00\x01\x00"], "PING with a trailing byte"),
        ([b"\xaa\xa1\x07\x02\x00\x01\x00"], "PING-OK with a trailing byte"),
        ([b"\xaa\xa1\x0a\x02\x00\x01\x00"], "GOODBYE with a trailing byte"),
        ([b"\xaa\xa1\x02\x02\x00\x01\x00", b"x"], "WHISPER with a trailing byte"),
        ([b"\xaa\xa1\x03\x02\x00\x01"], "SHOUT without group"),
        ([b"\xaa\xa1\x03\x02\x00\x01\x05chat"], "SHOUT group truncated"),
        ([b"\xaa\xa1\x03\x02\x00\x01\x04chat!"], "SHOUT trailing byte"),
        ([b"\xaa\xa1\x04\x02\x00\x01\x04chat"], "JOIN without status"),
        ([b"\xaa\xa1\x04\x02\x00\x01\x04chat\x01\x02"], "JOIN trailing byte"),
        ([b"\xaa\xa1\x05\x02\x00\x01\x04cha"], "LEAVE group truncated"),
        ([b"\xaa\xa1\x04\x02\x00\x01\x04chat\x01", b"extra"], "JOIN with two frames"),
        ([b"\xaa\xa1\x06\x02\x00\x01", b""], "PING with two frames"),
        ([b"\xaa\xa1\x01\x02\x00\x01", b""], "HELLO with two frames"),
        ([HELLO_FRAME, b""], "valid HELLO plus a frame"),
        ([HELLO_FRAME + b"\x00"], "HELLO trailing byte"),
        ([HELLO_FRAME[:-1]], "HELLO truncated"),
        ([b"\xaa\xa1\x01\x02\x00\x01"], "HELLO without fields"),
    ],
)
def test_malformed(frames: list[bytes], why: str) -> None:
    with pytest.raises(DecodeError):
        decode(frames)


def test_signature_first_even_with_bad_version() -> None:
    with pytest.raises(DecodeError) as info:
        decode([b"\x00\x00\x01\x09\x00\x01"])
    assert type(info.value) is DecodeError


@pytest.mark.parametrize(
    "frame",
    [
        b"\xaa\xa1\x03\x02\x00\x01\x02\xc3\x28",  # SHOUT group: invalid continuation byte
        b"\xaa\xa1\x04\x02\x00\x01\x01\xff\x01",  # JOIN group: 0xff never valid
        b"\xaa\xa1\x04\x02\x00\x01\x03\xed\xa0\x80\x01",  # JOIN group: UTF-8 encoded surrogate
        b"\xaa\xa1\x05\x02\x00\x01\x02\xc0\xaf\x01",  # LEAVE group: overlong "/"
    ],
)
def test_invalid_utf8_is_decode_error(frame: bytes) -> None:
    with pytest.raises(DecodeError) as info:
        decode([frame])
    assert isinstance(info.value.__cause__, UnicodeDecodeError)


def test_invalid_utf8_in_hello_header_value() -> None:
    frame = HELLO_FRAME.replace(b"Z\xc3\xbcrich", b"Z\xbc\xc3rich")
    with pytest.raises(DecodeError) as info:
        decode([frame])
    assert isinstance(info.value.__cause__, UnicodeDecodeError)


def test_pyre_character_count_is_decode_error() -> None:
    # pyre writes len(str) instead of the UTF-8 byte length: "Zoë" as 3, not 4.
    # The frame is then misaligned; we must reject it, not crash or misparse.
    frame = HELLO_FRAME.replace(b"\x04Zo\xc3\xab", b"\x03Zo\xc3\xab")
    with pytest.raises(DecodeError):
        decode([frame])


@pytest.mark.parametrize(
    "frame",
    [
        # groups count 2**32-1 with nothing behind it
        b"\xaa\xa1\x01\x02\x00\x01\x00\xff\xff\xff\xff",
        # groups count 2**32-1 followed by some bytes
        b"\xaa\xa1\x01\x02\x00\x01\x00\xff\xff\xff\xff" + b"\x00" * 64,
        # one group, longstr length 2**32-1
        b"\xaa\xa1\x01\x02\x00\x01\x00\x00\x00\x00\x01\xff\xff\xff\xff" + b"a" * 32,
        # empty groups, status, empty name, headers count 2**32-1
        b"\xaa\xa1\x01\x02\x00\x01\x00\x00\x00\x00\x00\x00\x00\xff\xff\xff\xff" + b"\x00" * 40,
        # a count of 13 needs at least 65 bytes of headers: 64 are there
        b"\xaa\xa1\x01\x02\x00\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x0d" + b"\x00" * 64,
    ],
)
def test_huge_counts_fail_fast(frame: bytes) -> None:
    with pytest.raises(DecodeError, match=r"cannot fit|truncated"):
        decode([frame])


@pytest.mark.parametrize(
    "frames",
    [
        None,
        42,
        ["\xaa\xa1\x06\x02\x00\x01"],  # str, not bytes
        [None],
        [42],
        [b"\xaa\xa1\x06\x02\x00\x01", None],
    ],
)
def test_non_bytes_input_is_decode_error(frames: object) -> None:
    with pytest.raises(DecodeError):
        decode(frames)  # type: ignore[arg-type]


def test_error_hierarchy() -> None:
    assert issubclass(DecodeError, WireError)
    assert issubclass(EncodeError, WireError)
    assert issubclass(EncodeError, ValueError)
    assert not issubclass(DecodeError, ValueError)
    assert issubclass(UnknownCommand, DecodeError)
    assert issubclass(VersionMismatch, DecodeError)


def test_errors_pickle() -> None:
    unknown = pickle.loads(pickle.dumps(UnknownCommand(11, 2, 7)))
    assert (unknown.command_id, unknown.version, unknown.sequence) == (11, 2, 7)
    mismatch = pickle.loads(pickle.dumps(VersionMismatch(3, (2,), 6, 9)))
    assert (mismatch.version, mismatch.expected, mismatch.command_id, mismatch.sequence) == (
        3,
        (2,),
        6,
        9,
    )
    assert str(mismatch) == "ZRE version 3 seen, expected 2"


# --------------------------------------------------------------------------
# Encode errors

E_ACUTE_128 = "é" * 128  # 128 characters, 256 UTF-8 bytes
E_ACUTE_127_A = "é" * 127 + "a"  # 128 characters, 255 UTF-8 bytes


def test_name_limit_counts_utf8_bytes() -> None:
    assert len(E_ACUTE_128) == 128
    assert len(E_ACUTE_128.encode()) == 256
    with pytest.raises(EncodeError, match="256 UTF-8 bytes"):
        encode(Hello(1, "tcp://h:1", name=E_ACUTE_128))
    ok = Hello(1, "tcp://h:1", name=E_ACUTE_127_A)
    frames = encode(ok)
    assert b"\xff" + E_ACUTE_127_A.encode() in frames[0]
    assert decode(frames) == ok


@pytest.mark.parametrize(
    "msg",
    [
        Hello(1, "x" * 256),
        Hello(1, "e", headers={"k" * 256: "v"}),
        Shout(1, "g" * 256),
        Join(1, "€" * 86, 0),  # 258 bytes
        Leave(1, "g" * 256, 0),
    ],
)
def test_string_too_long(msg: Message) -> None:
    with pytest.raises(EncodeError, match="at most 255"):
        encode(msg)


def test_string_limit_255_ok() -> None:
    for msg in (
        Hello(1, "x" * 255, headers={"k" * 255: "v" * 1000}),
        Shout(1, "g" * 255),
        Join(1, "g" * 255, 0),
        Leave(1, "g" * 255, 0),
    ):
        assert decode(encode(msg)) == msg


def test_longstr_can_exceed_255() -> None:
    msg = Hello(1, "e", groups=["g" * 70000], headers={"k": "ü" * 40000})
    assert decode(encode(msg)) == msg


@pytest.mark.parametrize("sequence", [-1, 65536, 2**40, 1.0, None])
@pytest.mark.parametrize(
    "make",
    [
        lambda s: Hello(s, "e"),
        lambda s: Whisper(s, (b"x",)),
        lambda s: Shout(s, "g"),
        lambda s: Join(s, "g", 0),
        lambda s: Leave(s, "g", 0),
        Ping,
        PingOk,
        Goodbye,
        Elect,
        Leader,
    ],
)
def test_bad_sequence(make: object, sequence: object) -> None:
    msg = make(sequence)  # type: ignore[operator]
    with pytest.raises(EncodeError, match=r"sequence must be an int in 0\.\.65535"):
        encode(msg)


@pytest.mark.parametrize("status", [-1, 256, 1000, 1.5, True])
@pytest.mark.parametrize("cls", [Join, Leave])
def test_bad_status(cls: type[Join | Leave], status: object) -> None:
    with pytest.raises(EncodeError, match=r"status must be an int in 0\.\.255"):
        encode(cls(1, "g", status))  # type: ignore[arg-type]


@pytest.mark.parametrize("status", [-1, 256])
def test_bad_hello_status(status: int) -> None:
    with pytest.raises(EncodeError, match="status"):
        encode(Hello(1, "e", status=status))


@pytest.mark.parametrize("version", [0, 1, 4, 255, None])
@pytest.mark.parametrize(
    "msg",
    [
        Hello(1, "e"),
        Whisper(1),
        Shout(1, "g"),
        Join(1, "g", 0),
        Leave(1, "g", 0),
        Ping(1),
        PingOk(1),
        Elect(1),
        Leader(1),
        Goodbye(1),
    ],
)
def test_bad_version(msg: Message, version: object) -> None:
    with pytest.raises(EncodeError, match="version must be 2 or 3"):
        encode(attrs.evolve(msg, version=version))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "msg",
    [
        Hello(1, "\ud800"),
        Hello(1, "e", groups=["\udfff"]),
        Hello(1, "e", headers={"k": "\ud800"}),
        Shout(1, "\ud800"),
        Join(1, "\ud800", 0),
    ],
)
def test_lone_surrogate_is_encode_error(msg: Message) -> None:
    with pytest.raises(EncodeError, match="UTF-8"):
        encode(msg)


def test_encode_wrong_types() -> None:
    with pytest.raises(TypeError):
        encode("PING")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        encode(Hello(1, b"tcp://h:1"))  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        encode(Elect(1, "body"))  # type: ignore[arg-type]


# --------------------------------------------------------------------------
# Construction


def test_constructor_reshapes_to_hashable_tuples() -> None:
    msg = Hello(1, "e", groups=["a", "b"], headers={"k": "v", "k2": "v2"})
    assert msg.groups == ("a", "b")
    assert msg.headers == (("k", "v"), ("k2", "v2"))
    assert Hello(1, "e", headers=[["k", "v"]]).headers == (("k", "v"),)  # type: ignore[list-item]
    assert Whisper(1, [b"a", b"b"]).content == (b"a", b"b")
    assert Shout(1, "g", iter([b"a"])).content == (b"a",)
    assert len({msg, Hello(1, "e", ("a", "b"), headers=(("k", "v"), ("k2", "v2")))}) == 1


def test_constructor_rejects_bare_strings() -> None:
    with pytest.raises(TypeError):
        Whisper(1, b"abc")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        Shout(1, "g", "abc")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        Hello(1, "e", groups="abc")
    with pytest.raises(TypeError):
        Hello(1, "e", headers="ab")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        Hello(1, "e", headers=[("a", "b", "c")])  # type: ignore[list-item]


def test_messages_are_frozen() -> None:
    msg = Ping(1)
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        msg.sequence = 2  # type: ignore[misc]


def test_version_is_keyword_only() -> None:
    with pytest.raises(TypeError):
        Ping(1, 3)  # type: ignore[call-arg]


def test_duplicate_headers_round_trip() -> None:
    msg = Hello(1, "e", headers=[("k", "1"), ("k", "2")])
    assert decode(encode(msg)) == msg
    assert msg.headers_dict() == {"k": "2"}


def test_signature_constant() -> None:
    assert SIGNATURE == b"\xaa\xa1"
    for _, frames, _msg in VECTORS:
        assert frames[0].startswith(SIGNATURE)


# --------------------------------------------------------------------------
# Property tests: every message type, both versions

sequences = st.one_of(st.sampled_from([0, 1, 65534, 65535]), st.integers(0, 65535))
statuses = st.integers(0, 255)
versions = st.sampled_from(MESSAGE_VERSIONS)
# Up to 63 code points is at most 252 UTF-8 bytes; also mix in exact-limit strings.
short_text = st.one_of(
    st.text(max_size=63),
    st.sampled_from(["", "x" * 255, E_ACUTE_127_A, "€" * 85, "𝄞" * 63 + "abc"]),
)
long_text = st.text(max_size=200)
frames_st = st.lists(st.binary(max_size=64), max_size=5)

hellos = st.builds(
    Hello,
    sequence=sequences,
    endpoint=short_text,
    groups=st.lists(long_text, max_size=5).map(tuple),
    status=statuses,
    name=short_text,
    headers=st.lists(st.tuples(short_text, long_text), max_size=5).map(tuple),
    version=versions,
)
whispers = st.builds(Whisper, sequence=sequences, content=frames_st, version=versions)
shouts = st.builds(Shout, sequence=sequences, group=short_text, content=frames_st, version=versions)
joins = st.builds(Join, sequence=sequences, group=short_text, status=statuses, version=versions)
leaves = st.builds(Leave, sequence=sequences, group=short_text, status=statuses, version=versions)
pings = st.builds(Ping, sequence=sequences, version=versions)
ping_oks = st.builds(PingOk, sequence=sequences, version=versions)
elects = st.builds(Elect, sequence=sequences, body=st.binary(max_size=64), version=versions)
leaders = st.builds(Leader, sequence=sequences, body=st.binary(max_size=64), version=versions)
goodbyes = st.builds(Goodbye, sequence=sequences, version=versions)

ALL_STRATEGIES = {
    "hello": hellos,
    "whisper": whispers,
    "shout": shouts,
    "join": joins,
    "leave": leaves,
    "ping": pings,
    "ping_ok": ping_oks,
    "elect": elects,
    "leader": leaders,
    "goodbye": goodbyes,
}


def check_round_trip(msg: Message) -> None:
    frames = encode(msg)
    assert all(type(f) is bytes for f in frames)
    assert frames[0][:2] == SIGNATURE
    assert frames[0][2] == msg.command
    assert frames[0][3] == msg.version
    assert int.from_bytes(frames[0][4:6], "big") == msg.sequence
    if not isinstance(msg, Whisper | Shout):
        assert len(frames) == 1
    got = decode(frames, version=msg.version)
    assert got == msg
    assert decode(frames, version=None) == msg
    other = 5 - msg.version  # 2 <-> 3
    with pytest.raises(VersionMismatch):
        decode(frames, version=other)
    assert encode(got) == frames


@pytest.mark.parametrize("strategy", ALL_STRATEGIES.values(), ids=ALL_STRATEGIES.keys())
@DETERMINISTIC
@given(data=st.data())
def test_round_trip(strategy: st.SearchStrategy[Message], data: st.DataObject) -> None:
    check_round_trip(data.draw(strategy))


@DETERMINISTIC
@given(msg=hellos)
@example(msg=Hello(0, "", (), 0, "", ()))
@example(msg=Hello(65535, "tcp://[::1]:1", ("", "ü"), 255, "ñ", (("", ""),), version=3))
def test_hello_round_trip(msg: Hello) -> None:
    check_round_trip(msg)


@DETERMINISTIC
@given(msg=st.one_of(whispers, shouts))
@example(msg=Whisper(0, ()))
@example(msg=Whisper(65535, (b"",)))
@example(msg=Shout(65535, "", ()))
@example(msg=Shout(0, "é", (b"a", b"", b"c" * 1000), version=3))
def test_content_round_trip(msg: Whisper | Shout) -> None:
    check_round_trip(msg)
    got = decode(encode(msg), version=msg.version)
    assert isinstance(got, Whisper | Shout)
    assert got.content == msg.content


# ------------------------------------------------- the WHISPER fast paths


@DETERMINISTIC
@given(msg=whispers)
def test_encode_whisper_matches_encode(msg: Whisper) -> None:
    assert encode_whisper(msg.sequence, msg.content, msg.version) == encode(msg)


def test_encode_whisper_refuses_what_encode_refuses() -> None:
    with pytest.raises(EncodeError, match="sequence"):
        encode_whisper(65536, (), 2)
    with pytest.raises(EncodeError, match="sequence"):
        encode_whisper(-1, (), 2)
    with pytest.raises(EncodeError, match="version"):
        encode_whisper(1, (), 4)


@pytest.mark.parametrize("strategy", ALL_STRATEGIES.values(), ids=ALL_STRATEGIES.keys())
@DETERMINISTIC
@given(data=st.data())
def test_whisper_sequence_agrees_with_decode(
    strategy: st.SearchStrategy[Message], data: st.DataObject
) -> None:
    """It names exactly the WHISPERs of the version asked, and their sequence."""
    msg = data.draw(strategy)
    head = encode(msg)[0]
    for version in MESSAGE_VERSIONS:
        expected = msg.sequence if isinstance(msg, Whisper) and msg.version == version else None
        assert whisper_sequence(head, version) == expected


@pytest.mark.parametrize("strategy", ALL_STRATEGIES.values(), ids=ALL_STRATEGIES.keys())
@DETERMINISTIC
@given(data=st.data())
def test_header_packs_the_first_six_octets_every_message_starts_with(
    strategy: st.SearchStrategy[Message], data: st.DataObject
) -> None:
    """wire.HEADER: signature (as an int), command id, version, sequence, as encode writes them."""
    msg = data.draw(strategy)
    head = encode(msg)[0]
    signature = int.from_bytes(wire.SIGNATURE, "big")
    command = int(msg.command)
    # 36/ZRE's layout, written out: %xAA %xA1, the command id, the version,
    # the sequence in network order.
    six = b"\xaa\xa1" + bytes((command, msg.version)) + msg.sequence.to_bytes(2, "big")
    assert head[:6] == six == wire.HEADER.pack(signature, command, msg.version, msg.sequence)
    assert wire.HEADER.unpack(six) == (signature, command, msg.version, msg.sequence)


@DETERMINISTIC
@given(head=st.binary(max_size=12))
def test_whisper_sequence_never_raises_and_never_claims_garbage(head: bytes) -> None:
    seq = whisper_sequence(head, 2)
    if seq is not None:
        assert decode([head], version=2) == Whisper(seq, ())


# ------------------------------------- the SHOUT fast paths (issue 28)


@DETERMINISTIC
@given(msg=shouts, others=st.lists(sequences, max_size=3))
@example(msg=Shout(65535, "x" * 255, (b"a", b"", b"c" * 1000), version=3), others=[0])
def test_shout_encoder_matches_encode_for_every_sequence(msg: Shout, others: list[int]) -> None:
    """One encoder, many peers: each call is byte for byte what encode gives."""
    build = shout_encoder(msg.group, msg.content, msg.version)
    for sequence in [msg.sequence, *others]:
        frames = build(sequence)
        assert frames == encode(attrs.evolve(msg, sequence=sequence))
        # The content frames are the caller's, shared by every peer.
        assert all(a is b for a, b in zip(frames[1:], msg.content, strict=True))


def test_shout_encoder_refuses_what_encode_refuses() -> None:
    with pytest.raises(EncodeError, match="255"):
        shout_encoder("g" * 256, (), 2)
    with pytest.raises(EncodeError, match="UTF-8"):
        shout_encoder("\udfff", (), 2)
    with pytest.raises(EncodeError, match="version"):
        shout_encoder("g", (), 4)
    build = shout_encoder("g", (b"x",), 2)
    for bad in (65536, -1):
        with pytest.raises(EncodeError, match="sequence"):
            build(bad)


@DETERMINISTIC
@given(msg=shouts)
def test_a_group_encoded_once_builds_what_encode_gives(msg: Shout) -> None:
    """group_string is the group as a ZRE string; shout_builder from it is shout_encoder."""
    tail = group_string(msg.group)
    raw = msg.group.encode()
    assert tail == bytes([len(raw)]) + raw
    build = shout_builder(tail, msg.content, msg.version)
    assert build(msg.sequence) == encode(msg)


def test_group_string_refuses_what_a_zre_string_cannot_hold() -> None:
    with pytest.raises(EncodeError, match="255"):
        group_string("g" * 256)
    with pytest.raises(EncodeError, match="UTF-8"):
        group_string("\udfff")
    with pytest.raises(EncodeError, match="sequence"):
        shout_builder(group_string("g"), (b"x",), 2)(65536)


@pytest.mark.parametrize("strategy", ALL_STRATEGIES.values(), ids=ALL_STRATEGIES.keys())
@DETERMINISTIC
@given(data=st.data())
def test_shout_header_agrees_with_decode(
    strategy: st.SearchStrategy[Message], data: st.DataObject
) -> None:
    """It names exactly the SHOUTs of the version asked, their sequence and group."""
    msg = data.draw(strategy)
    head = encode(msg)[0]
    for version in MESSAGE_VERSIONS:
        expected = None
        if isinstance(msg, Shout) and msg.version == version:
            expected = (msg.sequence, msg.group)
        assert shout_header(head, version) == expected


@DETERMINISTIC
@given(head=st.binary(max_size=16))
@example(head=b"\xaa\xa1\x03\x02\x00\x01\x02\xc3\x28")  # invalid UTF-8 group
@example(head=b"\xaa\xa1\x03\x02\x00\x01\x01gg")  # a trailing byte
@example(head=b"\xaa\xa1\x03\x02\x00\x01")  # no group at all
def test_shout_header_never_raises_and_never_claims_garbage(head: bytes) -> None:
    found = shout_header(head, 2)
    try:
        decoded: Message | None = decode([head], version=2)
    except DecodeError:
        decoded = None
    if found is not None:
        assert decoded == Shout(found[0], found[1], ())
    else:
        assert not isinstance(decoded, Shout)


# ------------------------------------------------------- election bodies


def test_an_election_body_is_two_zre_strings_as_zyre_writes_them() -> None:
    body = election_body("G", "0123456789ABCDEF0123456789ABCDEF")
    assert body == b"\x01G\x20" + b"0123456789ABCDEF0123456789ABCDEF"
    assert parse_election_body(body) == ("G", "0123456789ABCDEF0123456789ABCDEF")
    assert parse_election_body(election_body("g", "")) == ("g", "")


@pytest.mark.parametrize("body", [b"", b"\x01G", b"\x05G", b"\x01G\x01x!", b"\x01\xffG\x00"])
def test_an_election_body_that_is_not_two_strings_is_a_decode_error(body: bytes) -> None:
    with pytest.raises(DecodeError):
        parse_election_body(body)


def test_an_election_string_over_255_bytes_is_an_encode_error() -> None:
    with pytest.raises(EncodeError):
        election_body("g" * 256, "x")


# ------------------------------------------------- hello_excess (issue 25)

LIMITS = {"max_groups": 2, "max_headers": 2, "max_header_bytes": 8}


def test_hello_excess_reads_counts_and_lengths_exactly() -> None:
    # endpoint "e", groups ["ab", "c"], status 5, name "n", headers {"K": "1234567"}
    head = (
        b"\xaa\xa1\x01\x02\x00\x01"
        + b"\x01e"
        + b"\x00\x00\x00\x02"
        + b"\x00\x00\x00\x02ab"
        + b"\x00\x00\x00\x01c"
        + b"\x05"
        + b"\x01n"
        + b"\x00\x00\x00\x01"
        + b"\x01K\x00\x00\x00\x071234567"
    )
    assert decode([head]) == Hello(1, "e", ("ab", "c"), 5, "n", (("K", "1234567"),))
    assert hello_excess(head, **LIMITS) is None  # 2 groups, 1 header of 8 octets: at the limits
    assert hello_excess(head, **{**LIMITS, "max_groups": 1}) == (
        "lists 2 groups, over max_peer_groups (1)"
    )
    assert hello_excess(head, **{**LIMITS, "max_headers": 0}) == (
        "carries 1 headers, over max_headers (0)"
    )
    assert hello_excess(head, **{**LIMITS, "max_header_bytes": 7}) == (
        "carries headers of over 8 octets, over max_header_bytes (7)"
    )
    # Not a HELLO, or truncated anywhere: None (decode explains it).
    assert hello_excess(encode(Ping(3))[0], **LIMITS) is None
    for cut in range(len(head)):
        assert hello_excess(head[:cut], **{**LIMITS, "max_header_bytes": 0}) in (
            None,
            "carries headers of over 8 octets, over max_header_bytes (0)",
        )


@given(st.binary(max_size=200))
def test_hello_excess_never_raises(head: bytes) -> None:
    hello_excess(b"\xaa\xa1\x01\x02\x00\x01" + head, **LIMITS)
    hello_excess(head, **LIMITS)
