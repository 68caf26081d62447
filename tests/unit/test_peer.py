"""The ZRE peer protocol, sans I/O: every rule of 36/ZRE, with byte vectors and no sockets.

Times are plain floats: nothing here sleeps or reads a clock.
"""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from benchmarks.bench_peer_run import cost as run_cost
from trizre import Enter, Evasive, Join, Leave, Shout, Silent, Whisper, wire
from trizre.sansio import _peer as peer_module
from trizre.sansio._peer import Ballot, PeerLimits, PeerProtocol, hello_from_stranger
from trizre.trace._contract import ExitReason
from trizre.wire import OVERSIZE

PEER = uuid.UUID("0123456789abcdef0123456789abcdef")
IDENTITY = b"\x01" + PEER.bytes
ENDPOINT = "tcp://127.0.0.1:50000"
OUR_HELLO = wire.Hello(1, "tcp://127.0.0.1:50001", ("ours",), 3, "me", (("K", "V"),))
EVASIVE, EXPIRED = 5.0, 30.0


def protocol(now: float = 0.0, version: int = 2) -> PeerProtocol:
    hello = wire.Hello(1, OUR_HELLO.endpoint, ("ours",), 3, "me", (("K", "V"),), version=version)
    return PeerProtocol(PEER, ENDPOINT, hello, now=now, evasive=EVASIVE, expired=EXPIRED)


def frames_of(message: wire.Message) -> list[bytes]:
    """A message as a ROUTER delivers it: the sender's identity first."""
    return [IDENTITY, *wire.encode(message)]


def entered(groups: tuple[str, ...] = ()) -> PeerProtocol:
    peer = protocol()
    peer.receive(frames_of(wire.Hello(1, ENDPOINT, groups, 7, "bob", (("X", "1"),))), 0.0)
    assert peer.ready
    return peer


# ------------------------------------------------------------------ outbound


def test_hello_is_queued_first_and_numbered_one() -> None:
    peer = protocol()
    assert peer.has_queued
    frames = peer.queued()
    assert frames is not None
    # signature AA A1, command 1 (HELLO), version 2, sequence 1
    assert frames[0][:6] == b"\xaa\xa1\x01\x02\x00\x01"
    assert wire.decode(frames) == OUR_HELLO
    assert peer.queued() == frames  # offered again until taken
    assert peer.sent_queued() == 1
    assert not peer.has_queued
    assert peer.queued() is None


def test_a_hello_not_numbered_one_is_refused() -> None:
    with pytest.raises(ValueError, match="numbered 1"):
        PeerProtocol(PEER, ENDPOINT, wire.Hello(2, "e"), now=0, evasive=1, expired=2)


def test_data_takes_the_next_number_only_when_sent() -> None:
    peer = protocol()
    peer.sent_queued()
    assert peer.next_sequence == 2
    assert peer.next_sequence == 2  # asking does not use a number up (a full link)
    assert peer.sent() == 2
    assert peer.next_sequence == 3
    built = wire.encode_whisper(peer.next_sequence, (b"x",), 2)
    assert built[0] == b"\xaa\xa1\x02\x02\x00\x03"


def test_sequence_numbers_wrap_65535_to_0() -> None:
    peer = protocol()
    peer.sent_queued()
    peer.sent_seq = 65534
    assert peer.sent() == 65535
    assert peer.next_sequence == 0
    assert peer.sent() == 0
    assert peer.next_sequence == 1


def test_protocol_messages_keep_their_order_and_take_numbers_when_sent() -> None:
    peer = protocol()
    peer.queue(wire.Join(0, "g", 4))
    peer.queue(wire.Leave(0, "g", 5))
    taken = []
    while (frames := peer.queued()) is not None:
        taken.append(wire.decode(frames))
        peer.sent_queued()
    assert [type(m) for m in taken] == [wire.Hello, wire.Join, wire.Leave]
    assert [m.sequence for m in taken] == [1, 2, 3]
    assert taken[1] == wire.Join(2, "g", 4)
    assert not peer.has_queued and peer.next_sequence == 4
    peer.queue(wire.Join(0, "h", 6))  # queued again after the queue emptied
    assert peer.has_queued and peer.next_sequence == 4


def test_farewell_sends_what_is_queued_then_goodbye() -> None:
    peer = protocol()
    peer.queue(wire.Join(0, "g", 4))
    words = [wire.decode(frames) for frames in peer.farewell()]
    assert [type(m) for m in words] == [wire.Hello, wire.Join, wire.Goodbye]
    assert [m.sequence for m in words] == [1, 2, 3]
    assert words[2] == wire.Goodbye(3)
    assert not peer.has_queued
    assert peer.sent_seq == 3


def test_version_3_numbers_and_encodes_as_43_zre() -> None:
    peer = protocol(version=3)
    frames = peer.queued()
    assert frames is not None and frames[0][:4] == b"\xaa\xa1\x01\x03"


# ------------------------------------------------------------------- inbound


def test_commands_before_hello_are_ignored() -> None:
    peer = protocol()
    for message in (
        wire.Whisper(1, (b"early",)),
        wire.Join(1, "g", 1),
        wire.Ping(1),
        wire.Goodbye(1),
    ):
        assert peer.receive(frames_of(message), 0.0) == ()
    assert not peer.ready and peer.ended is None
    assert peer.queued() is not None and not isinstance(
        wire.decode(peer.queued() or []), wire.PingOk
    )


def test_hello_enters_the_peer_with_its_groups_headers_and_status() -> None:
    peer = protocol()
    hello = wire.Hello(1, ENDPOINT, ("b", "a"), 7, "Zoë", (("X-ROLE", "db"),))
    events = peer.receive(frames_of(hello), 1.5)
    assert events == (
        Enter(PEER, "Zoë", (("X-ROLE", "db"),), ENDPOINT),
        Join(PEER, "Zoë", "b"),
        Join(PEER, "Zoë", "a"),
    )
    assert peer.ready
    assert (peer.name, peer.status, peer.groups) == ("Zoë", 7, frozenset({"a", "b"}))
    assert peer.in_seq == 1
    assert peer.presence.last_heard == 1.5


def test_hello_must_be_numbered_one() -> None:
    peer = protocol()
    assert peer.receive(frames_of(wire.Hello(2, ENDPOINT, name="x")), 0.0) == ()
    assert not peer.ready and peer.ended is None


def test_hello_from_an_identity_that_is_not_a_zre_dealer_is_ignored() -> None:
    peer = protocol()
    hello = wire.encode(wire.Hello(1, ENDPOINT, name="x"))
    assert peer.receive([b"\x02" + PEER.bytes, *hello], 0.0) == ()
    assert peer.receive([PEER.bytes, *hello], 0.0) == ()
    assert not peer.ready


def test_whisper_in_sequence_from_the_header_bytes() -> None:
    peer = entered()
    # AA A1 | 02 WHISPER | 02 version | 00 02 sequence, then the content frames
    assert peer.receive([IDENTITY, b"\xaa\xa1\x02\x02\x00\x02", b"a", b"b"], 2.0) == (
        Whisper(PEER, "bob", (b"a", b"b")),
    )
    assert peer.receive([IDENTITY, b"\xaa\xa1\x02\x02\x00\x03"], 3.0) == (
        Whisper(PEER, "bob", ()),
    )  # zero content frames is a valid WHISPER
    assert peer.in_seq == 3
    assert peer.presence.last_heard == 3.0


def test_shout() -> None:
    peer = entered()
    events = peer.receive(frames_of(wire.Shout(2, "chat", ("grüß".encode(),))), 0.0)
    assert events == (Shout(PEER, "bob", "chat", ("grüß".encode(),)),)


def test_shout_in_sequence_from_the_header_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    """As a WHISPER: decided from frame 0, no message decoded (issue 28)."""

    def no_decode(*args: object) -> wire.Message:
        raise AssertionError("a SHOUT in sequence went through the generic decoder")

    peer = entered()
    monkeypatch.setattr(wire, "decode", no_decode)
    # AA A1 | 03 SHOUT | 02 version | 00 02 sequence | 04 "chat", then the content frames
    assert peer.receive([IDENTITY, b"\xaa\xa1\x03\x02\x00\x02\x04chat", b"a", b"b"], 2.0) == (
        Shout(PEER, "bob", "chat", (b"a", b"b")),
    )
    assert peer.receive([IDENTITY, b"\xaa\xa1\x03\x02\x00\x03\x02\xc3\xbc"], 3.0) == (
        Shout(PEER, "bob", "ü", ()),
    )
    assert peer.in_seq == 3
    assert peer.presence.last_heard == 3.0


shout_heads = st.one_of(
    st.builds(
        lambda seq, group, version: wire.encode(wire.Shout(seq, group, (), version=version))[0],
        st.sampled_from([2, 3, 0, 65535]) | st.integers(0, 65535),
        st.text(max_size=8),
        st.sampled_from(wire.MESSAGE_VERSIONS),
    ),
    st.binary(max_size=12).map(lambda tail: b"\xaa\xa1\x03\x02\x00\x02" + tail),
)


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(head=shout_heads, content=st.lists(st.binary(max_size=4), max_size=3))
def test_the_shout_fast_path_does_what_the_decoder_does(head: bytes, content: list[bytes]) -> None:
    """Same events, same state as the general path, whatever frame 0 holds."""
    fast, slow = entered(), entered()
    frames = [IDENTITY, head, *content]
    assert fast.receive(frames, 1.0) == slow._receive(frames, 1.0)
    assert (fast.in_seq, fast.ended, fast.detail) == (slow.in_seq, slow.ended, slow.detail)
    assert fast.presence.last_heard == slow.presence.last_heard


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(
    head=shout_heads | st.binary(max_size=12) | st.just(b"\xaa\xa1\x02\x02\x00\x02"),
    content=st.lists(st.binary(max_size=4), max_size=3),
    ready=st.booleans(),
)
def test_a_run_of_one_is_receive_or_changes_nothing(
    head: bytes, content: list[bytes], ready: bool
) -> None:
    """Issue 28: the fast path gives receive's one data event, or nothing and changes nothing."""
    fast, slow = (entered(), entered()) if ready else (protocol(), protocol())
    frames = [IDENTITY, head, *content]
    before = (fast.in_seq, fast.ended, fast.presence.last_heard)
    events, after = fast.receive_run([frames], 0, 1.0)
    if after == 0:
        assert events == []
        assert (fast.in_seq, fast.ended, fast.presence.last_heard) == before
        events = list(fast.receive(frames, 1.0))
    else:
        assert after == 1 and [type(event) for event in events] in ([Whisper], [Shout])
    assert tuple(events) == slow._receive(frames, 1.0)  # the general decoder's
    assert (fast.in_seq, fast.ended, fast.detail) == (slow.in_seq, slow.ended, slow.detail)
    assert fast.presence.last_heard == slow.presence.last_heard


OTHER = b"\x01" + uuid.UUID(int=7).bytes


def _batch(items: list[tuple[bool, str, bool]], first: int) -> tuple[list[list[bytes]], list[int]]:
    """Frames for ``items``, numbered as if every message before was taken from ``first``.

    Also the number each message follows (where a run from it must start).
    """
    batch, seq, before = [], first, []
    for other, kind, next_number in items:
        before.append(seq)
        number = (seq + 1) & 0xFFFF if next_number else (seq + 5) & 0xFFFF
        if kind == "whisper":
            frames = wire.encode(wire.Whisper(number, (b"w%d" % number,)))
        elif kind.startswith("shout"):  # "shout" to group g, "shout-h" to h
            group = kind.partition("-")[2] or "g"
            frames = wire.encode(wire.Shout(number, group, (b"s%d" % number,) * (number % 3)))
        elif kind == "ping":
            frames = wire.encode(wire.Ping(number))
        else:
            frames = [b"junk"]
        batch.append([OTHER if other else IDENTITY, *frames])
        seq = number
    return batch, before


@settings(max_examples=400, deadline=None, derandomize=True, database=None)
@given(
    items=st.lists(
        st.tuples(
            st.sampled_from([False, False, False, True]),
            st.sampled_from(["whisper", "whisper", "shout", "shout", "shout-h", "ping", "junk"]),
            st.sampled_from([True, True, True, False]),
        ),
        min_size=1,
        max_size=12,
    ),
    first=st.sampled_from([1, 65530]),
    start=st.integers(0, 11),
    most=st.integers(1, 13),
)
def test_a_run_is_receive_on_each_message_until_one_is_not_data(
    items: list[tuple[bool, str, bool]], first: int, start: int, most: int
) -> None:
    """Issue 28: a run takes what receive would, message by message, and stops where it must.

    It stops at ``most`` messages, at another sender's, and at the first
    that is not a WHISPER or SHOUT in sequence; what it took gives the
    events and the state that receive gives for each in turn.
    """
    start = min(start, len(items) - 1)
    batch, before = _batch(items, first)
    fast, slow = entered(), entered()
    fast.in_seq = slow.in_seq = before[start]
    events, after = fast.receive_run(batch, start, 3.0, most)
    assert start <= after <= min(len(batch), start + most)
    assert len(events) == after - start
    expected: list[object] = []
    for frames in batch[start:after]:  # the general decoder's verdict on each
        assert frames[0] == batch[start][0]
        expected += slow._receive(frames, 3.0)
    assert events == expected
    assert (fast.in_seq, fast.ended, fast.detail) == (slow.in_seq, slow.ended, slow.detail)
    assert fast.presence.last_heard == slow.presence.last_heard
    if after < len(batch) and after - start < most and batch[after][0] == batch[start][0]:
        # It stopped at a message that is not data in sequence: the general
        # decoder gives no data event for it (or ends the peer).
        probe = entered()
        probe.in_seq = fast.in_seq
        given = probe._receive(batch[after], 3.0)
        assert probe.ended or [type(event) for event in given] not in ([Whisper], [Shout])


def test_a_run_takes_a_burst_at_once_and_hears_the_peer_once() -> None:
    peer = entered()
    batch = [[IDENTITY, *wire.encode(wire.Whisper(seq, (b"%d" % seq,)))] for seq in range(2, 12)]
    batch[4] = [IDENTITY, *wire.encode(wire.Shout(6, "g", (b"6",)))]
    events, after = peer.receive_run(batch, 0, 5.0)
    assert after == 10 and peer.in_seq == 11
    assert events[4] == Shout(PEER, "bob", "g", (b"6",))
    assert [event.frames for event in events] == [(b"%d" % seq,) for seq in range(2, 12)]
    assert peer.presence.last_heard == 5.0
    # At most what the caller has room for; the rest is left in the batch.
    again = entered()
    assert again.receive_run(batch, 0, 5.0, most=3)[1] == 3 and again.in_seq == 4


def test_shouts_to_ever_new_groups_keep_the_decoded_groups_bounded() -> None:
    """Issue 28: groups decoded for the runs are kept process-wide, at most _SHOUT_GROUPS_KEPT."""
    peer = entered()
    kept = peer_module._SHOUT_GROUPS_KEPT
    for seq in range(2, 2 + kept + 500):
        frames = frames_of(wire.Shout(seq, f"g{seq}", (b"x",)))
        events, taken = peer.receive_run([frames], 0, 1.0)
        assert taken == 1 and events == [Shout(PEER, "bob", f"g{seq}", (b"x",))]
        assert len(peer_module._SHOUT_GROUPS) <= kept
    # Known again after a clear: the next SHOUT to it decodes it afresh.
    again = frames_of(wire.Shout(2 + kept + 500, "g2", (b"y",)))
    assert peer.receive_run([again], 0, 2.0)[0] == [Shout(PEER, "bob", "g2", (b"y",))]


@pytest.mark.parametrize("seq", [3, 1, 0, 65535])
def test_a_gap_or_repeat_ends_the_peer(seq: int) -> None:
    peer = entered()
    assert peer.receive(frames_of(wire.Whisper(seq, (b"x",))), 0.0) == ()
    assert peer.ended is ExitReason.SEQUENCE
    assert peer.detail == f"{seq}, expected 2"


def test_incoming_sequence_wraps_65535_to_0() -> None:
    peer = entered()
    peer.in_seq = 65534
    assert len(peer.receive(frames_of(wire.Whisper(65535, ())), 0.0)) == 1
    assert len(peer.receive(frames_of(wire.Whisper(0, ())), 0.0)) == 1
    assert len(peer.receive(frames_of(wire.Ping(1)), 0.0)) == 0
    assert peer.ended is None and peer.in_seq == 1


def test_join_and_leave_keep_groups_and_status() -> None:
    peer = entered(groups=("a",))
    assert peer.receive(frames_of(wire.Join(2, "b", 8)), 0.0) == (Join(PEER, "bob", "b"),)
    assert peer.groups == {"a", "b"} and peer.status == 8
    # Already in "a": no event, but the status still moves.
    assert peer.receive(frames_of(wire.Join(3, "a", 9)), 0.0) == ()
    assert peer.status == 9
    assert peer.receive(frames_of(wire.Leave(4, "a", 10)), 0.0) == (Leave(PEER, "bob", "a"),)
    assert peer.receive(frames_of(wire.Leave(5, "zzz", 11)), 0.0) == ()
    assert peer.groups == {"b"} and peer.status == 11
    # Group names are case-sensitive.
    assert peer.receive(frames_of(wire.Join(6, "B", 12)), 0.0) == (Join(PEER, "bob", "B"),)


def test_ping_is_answered_with_ping_ok_numbered_next() -> None:
    peer = entered()
    peer.sent_queued()  # our HELLO went
    assert peer.receive(frames_of(wire.Ping(2)), 4.0) == ()
    frames = peer.queued()
    assert frames is not None
    assert frames[0] == b"\xaa\xa1\x07\x02\x00\x02"  # PING-OK, sequence 2
    assert peer.presence.last_heard == 4.0


@pytest.mark.parametrize(
    "message",
    [
        wire.PingOk(2),
        # Not zyre's (group, candidate): counted, skipped, as an unknown command.
        wire.Elect(2, b"\x03abc"),
        wire.Leader(2, b"\x03abc" + b"\x01x" + b"!"),
    ],
)
def test_ping_ok_and_unreadable_ballots_only_prove_the_peer_alive(message: wire.Message) -> None:
    peer = entered()
    assert peer.receive(frames_of(message), 9.0) == ()
    assert peer.in_seq == 2 and peer.ended is None
    assert peer.presence.last_heard == 9.0


@pytest.mark.parametrize(("kind", "leader"), [(wire.Elect, False), (wire.Leader, True)])
def test_elect_and_leader_come_out_as_ballots(kind: type[wire.Elect], leader: bool) -> None:
    peer = entered()
    body = wire.election_body("g", "0123456789ABCDEF0123456789ABCDEF")
    assert peer.receive(frames_of(kind(2, body)), 9.0) == (
        Ballot("g", "0123456789ABCDEF0123456789ABCDEF", leader),
    )
    assert peer.in_seq == 2 and peer.presence.last_heard == 9.0


def test_goodbye_ends_the_peer() -> None:
    peer = entered()
    assert peer.receive([IDENTITY, b"\xaa\xa1\x0a\x02\x00\x02"], 0.0) == ()
    assert peer.ended is ExitReason.GOODBYE


def test_a_second_hello_ends_the_conversation() -> None:
    peer = entered()
    assert peer.receive(frames_of(wire.Hello(1, ENDPOINT, name="bob")), 0.0) == ()
    assert peer.ended is ExitReason.HELLO


def answering(groups: tuple[str, ...] = ()) -> PeerProtocol:
    """A conversation made on hearing the peer's HELLO, which it then took."""
    peer = PeerProtocol(
        PEER, ENDPOINT, OUR_HELLO, now=0.0, evasive=EVASIVE, expired=EXPIRED, answering=True
    )
    peer.receive(frames_of(wire.Hello(1, ENDPOINT, groups, 7, "bob", (("X", "1"),))), 0.0)
    assert peer.ready
    return peer


def test_a_hello_that_answers_ours_is_not_a_restart() -> None:
    """Both linked on hearing the other's HELLO: the second one is its answer.

    Taken as a restart, each side answered the other's answer for ever,
    one HELLO a round trip (make scale, 250 nodes overloaded).
    """
    peer = answering(("a", "b"))
    again = wire.Hello(1, ENDPOINT, ("b", "c"), 8, "bob", (("X", "1"),))
    events = peer.receive(frames_of(again), 3.0)
    assert peer.ended is None
    assert events == (Join(PEER, "bob", "c"), Leave(PEER, "bob", "a"))
    assert (peer.groups, peer.status, peer.in_seq) == (frozenset({"b", "c"}), 8, 1)
    assert peer.presence.last_heard == 3.0
    # Its new link numbers on from its HELLO.
    assert peer.receive(frames_of(wire.Whisper(2, (b"hi",))), 3.1) == (
        Whisper(PEER, "bob", (b"hi",)),
    )
    # Once: a further HELLO is a restart.
    peer.receive(frames_of(again), 4.0)
    assert peer.ended is ExitReason.HELLO


@pytest.mark.parametrize(
    "since", [wire.Whisper(2, (b"x",)), wire.Join(2, "g", 8), wire.Ping(2)], ids=repr
)
def test_a_hello_after_other_traffic_is_a_restart_even_when_answering(
    since: wire.Message,
) -> None:
    peer = answering()
    peer.receive(frames_of(since), 1.0)
    assert peer.ended is None
    peer.receive(frames_of(wire.Hello(1, ENDPOINT, name="bob")), 2.0)
    assert peer.ended is ExitReason.HELLO


def test_another_protocol_version_is_ignored_and_not_counted() -> None:
    peer = entered()
    assert peer.receive([IDENTITY, b"\xaa\xa1\x02\x03\x00\x02", b"v3"], 0.0) == ()
    assert peer.ended is None and peer.in_seq == 1
    assert peer.receive(frames_of(wire.Whisper(2, (b"v2",))), 0.0) == (
        Whisper(PEER, "bob", (b"v2",)),
    )


def test_an_unknown_command_is_skipped_but_its_number_counts() -> None:
    peer = entered()
    assert peer.receive([IDENTITY, b"\xaa\xa1\x2a\x02\x00\x02"], 0.0) == ()
    assert peer.ended is None and peer.in_seq == 2


def test_an_unknown_command_out_of_sequence_ends_the_peer() -> None:
    peer = entered()
    assert peer.receive([IDENTITY, b"\xaa\xa1\x2a\x02\x00\x05"], 0.0) == ()
    assert peer.ended is ExitReason.SEQUENCE


def test_malformed_zre_ends_an_entered_peer() -> None:
    peer = entered()
    # JOIN whose group is invalid UTF-8
    assert peer.receive([IDENTITY, b"\xaa\xa1\x04\x02\x00\x02\x02\xff\xfe\x01"], 0.0) == ()
    assert peer.ended is ExitReason.MALFORMED
    assert "UTF-8" in peer.detail or "utf" in peer.detail.lower()


@pytest.mark.parametrize("frame", [b"\x00\x01garbage", b"\xaa", b"", b"\xaa\xa1\x02"])
def test_bytes_without_a_whole_zre_header_are_ignored_or_end_an_entered_peer(
    frame: bytes,
) -> None:
    peer = entered()
    assert peer.receive([IDENTITY, frame], 0.0) == ()
    if frame.startswith(wire.SIGNATURE):
        assert peer.ended is ExitReason.MALFORMED  # the signature says it is ZRE
    else:
        assert peer.ended is None


def test_malformed_before_hello_is_ignored() -> None:
    peer = protocol()
    assert peer.receive([IDENTITY, b"\xaa\xa1\x04\x02\x00\x01\x02\xff\xfe\x01"], 0.0) == ()
    assert peer.ended is None


def test_a_message_without_content_frames_is_ignored() -> None:
    peer = entered()
    assert peer.receive([IDENTITY], 0.0) == ()
    assert peer.receive([], 0.0) == ()
    assert peer.ended is None


# ---------------------------------------------------------------------- CURVE

KEY = "rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7"  # a Z85 key (40 characters)


def curve_protocol() -> PeerProtocol:
    return PeerProtocol(PEER, ENDPOINT, OUR_HELLO, now=0.0, evasive=5.0, expired=30.0, key=KEY)


def test_a_curve_peer_is_known_by_its_key_and_uuid() -> None:
    peer = curve_protocol()
    assert peer.route == KEY.encode() + IDENTITY
    hello = wire.Hello(1, ENDPOINT, (), 0, "bob", (("X-PUBLICKEY", KEY),))
    # Without the key prefix the identity is not this peer's: ignored.
    assert peer.receive([IDENTITY, *wire.encode(hello)], 0.0) == ()
    assert not peer.ready and peer.ended is None
    (enter,) = peer.receive([peer.route, *wire.encode(hello)], 1.0)
    assert isinstance(enter, Enter) and peer.ready


def test_a_curve_hello_without_the_key_it_connected_with_ends_the_peer() -> None:
    wrong: list[tuple[tuple[str, str], ...]] = [
        (),
        (("X-PUBLICKEY", "x" * 40),),
        (("X-PUBLICKEY", KEY), ("X-PUBLICKEY", "")),  # the last of a repeated name counts
    ]
    for headers in wrong:
        peer = curve_protocol()
        hello = wire.Hello(1, ENDPOINT, (), 0, "bob", headers)
        assert peer.receive([peer.route, *wire.encode(hello)], 0.0) == ()
        assert not peer.ready and peer.ended is ExitReason.KEY, headers


# ------------------------------------------------------------------ strangers


def test_hello_from_stranger_accepts_only_a_hello_numbered_one() -> None:
    hello = wire.Hello(1, ENDPOINT, name="x")
    assert hello_from_stranger(frames_of(hello), 2) == (PEER, hello, None)
    assert hello_from_stranger(frames_of(wire.Hello(2, ENDPOINT)), 2) is None
    assert hello_from_stranger(frames_of(wire.Whisper(1, ())), 2) is None
    assert hello_from_stranger(frames_of(hello), 3) is None  # another version
    assert hello_from_stranger([b"\x02" + PEER.bytes, *wire.encode(hello)], 2) is None
    assert hello_from_stranger([IDENTITY, b"\xaa\xa1\x01"], 2) is None
    assert hello_from_stranger([IDENTITY], 2) is None


# ------------------------------------------------------------------- presence


def test_presence_timeline_on_exact_times() -> None:
    peer = entered()
    peer.sent_queued()
    assert peer.deadline() == 5.0
    assert peer.poll(4.999) == []
    assert peer.poll(5.0) == []  # pinged, not reported: it may answer
    assert wire.decode(peer.queued() or []) == wire.Ping(2)
    peer.sent_queued()
    assert peer.responsive
    assert peer.deadline() == 6.0
    assert peer.poll(5.999) == []
    assert peer.poll(6.0) == [Evasive(PEER, "bob")]  # its PING unanswered for 1 s
    assert peer.queued() is None  # no second PING for it
    assert not peer.responsive
    assert peer.deadline() == 10.0
    assert peer.poll(10.0) == [Silent(PEER, "bob")]
    peer.sent_queued()
    assert peer.poll(15.0) == []  # still silent: a PING every evasive period
    assert wire.decode(peer.queued() or []) == wire.Ping(4)
    peer.sent_queued()
    assert peer.deadline() == 20.0
    assert peer.poll(29.999) == []
    assert peer.ended is None
    assert peer.poll(30.0) == []
    assert peer.ended is ExitReason.EXPIRED


def test_beacons_keep_a_peer_present_but_not_a_link_that_stays_silent() -> None:
    """beacons_refresh: PINGs from 30 s of silence over the link; dropped at 60 s, saying why."""
    peer = entered()
    peer.sent_queued()
    for second in range(1, 60):
        peer.beacon_heard(float(second))
        assert peer.poll(float(second)) == []  # never Evasive: its beacons arrive
        if second < 30:
            assert peer.queued() is None
    assert wire.decode(peer.queued() or []) == wire.Ping(2)  # sent at 30 s
    assert peer.ended is None
    peer.beacon_heard(60.0)
    assert peer.poll(60.0) == []
    assert peer.ended is ExitReason.EXPIRED
    assert peer.detail == "nothing over its link for 60.0 s, though its beacons arrive"


def test_traffic_makes_a_silent_peer_alive_again() -> None:
    peer = entered()
    peer.poll(5.0)
    peer.poll(10.0)
    assert not peer.responsive
    peer.receive(frames_of(wire.PingOk(2)), 11.0)
    assert peer.responsive
    assert peer.deadline() == 16.0


def test_a_quiet_peer_that_answers_its_ping_is_never_reported_evasive() -> None:
    """zyre on a quiet link: pinged every evasive period, it answers; no event at all."""
    peer = entered()
    peer.sent_queued()
    now = 0.0
    for seq in range(2, 22):  # ours and its numbers both go on from HELLO's 1
        now = peer.deadline()
        assert peer.poll(now) == []
        assert wire.decode(peer.queued() or []) == wire.Ping(seq)
        peer.sent_queued()
        assert peer.responsive
        peer.receive(frames_of(wire.PingOk(seq)), now + 0.25)  # its answer
        assert peer.poll(now + 1.0) == []  # no Evasive once the answer was due
    assert now == 20 * 5.0 + 19 * 0.25
    assert peer.ended is None


def test_a_peer_that_never_said_hello_is_pinged_silently_then_expires() -> None:
    peer = protocol()
    peer.sent_queued()
    assert peer.poll(5.0) == []  # no Evasive for a peer that never entered
    assert isinstance(wire.decode(peer.queued() or []), wire.Ping)
    assert peer.poll(30.0) == []
    assert peer.ended is ExitReason.EXPIRED


def test_heard_by_other_means_postpones_presence() -> None:
    peer = entered()
    peer.heard(20.0)
    assert peer.poll(24.0) == []
    assert peer.deadline() == 25.0


# ------------------------------------------------------------------ properties


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.builds(lambda f: wire.Whisper(0, f), st.lists(st.binary(max_size=8), max_size=3)),
            st.builds(lambda g: wire.Shout(0, g, (b"x",)), st.text(min_size=1, max_size=5)),
            st.builds(lambda g: wire.Join(0, g, 1), st.sampled_from(["a", "b", "c"])),
            st.builds(lambda g: wire.Leave(0, g, 1), st.sampled_from(["a", "b", "c"])),
            st.just(wire.Ping(0)),
            st.just(wire.PingOk(0)),
        ),
        max_size=40,
    ),
    st.integers(0, 65535),
)
def test_a_well_behaved_peer_is_never_ended_and_groups_follow_its_joins(
    messages: list[wire.Message], start: int
) -> None:
    peer = entered()
    peer.in_seq = start
    seq, groups = start, set()
    for message in messages:
        seq = (seq + 1) & 0xFFFF
        numbered = type(message)(seq, *_fields(message))  # type: ignore[call-arg]
        peer.receive(frames_of(numbered), 0.0)
        if isinstance(message, wire.Join):
            groups.add(message.group)
        elif isinstance(message, wire.Leave):
            groups.discard(message.group)
    assert peer.ended is None
    assert peer.in_seq == seq
    assert peer.groups == groups


def _fields(message: wire.Message) -> tuple[object, ...]:
    if isinstance(message, wire.Whisper):
        return (message.content,)
    if isinstance(message, wire.Shout):
        return (message.group, message.content)
    if isinstance(message, wire.Join | wire.Leave):
        return (message.group, message.status)
    return ()


@settings(max_examples=500, deadline=None)
@given(st.lists(st.binary(max_size=40), min_size=0, max_size=4), st.booleans())
def test_any_bytes_from_a_peer_never_raise(frames: list[bytes], ready: bool) -> None:
    peer = entered() if ready else protocol()
    for _ in range(2):
        events = peer.receive([IDENTITY, *frames], 1.0)
        assert all(isinstance(e, Enter | Join | Leave | Whisper | Shout) for e in events)


def test_a_peer_that_does_not_say_hello_in_time_is_ended() -> None:
    hello = wire.Hello(1, "tcp://127.0.0.1:50001", name="me")
    peer = PeerProtocol(PEER, ENDPOINT, hello, now=10.0, evasive=5.0, expired=30.0, handshake=2.0)
    assert peer.deadline() == 12.0
    assert peer.poll(11.999) == []
    assert peer.ended is None
    assert peer.poll(12.0) == []
    assert peer.ended is ExitReason.HANDSHAKE


def test_the_handshake_timeout_stops_mattering_once_hello_arrived() -> None:
    hello = wire.Hello(1, "tcp://127.0.0.1:50001", name="me")
    peer = PeerProtocol(PEER, ENDPOINT, hello, now=0.0, evasive=5.0, expired=30.0, handshake=2.0)
    peer.receive(frames_of(wire.Hello(1, ENDPOINT, name="bob")), 1.0)
    assert peer.deadline() == 6.0  # presence only
    assert peer.poll(3.0) == [] and peer.ended is None


# ------------------------------------------------------- limits (issue 25)

SMALL = PeerLimits(groups=3, headers=2, header_bytes=10, message_size=100)


def limited(limits: PeerLimits = SMALL) -> PeerProtocol:
    return PeerProtocol(
        PEER, ENDPOINT, OUR_HELLO, now=0.0, evasive=EVASIVE, expired=EXPIRED, limits=limits
    )


def test_groups_are_a_live_read_only_view_that_joins_update_in_place() -> None:
    """A JOIN adds to the protocol's own set: no copy of every group per JOIN."""
    peer = entered(("a",))
    view = peer.groups
    assert not hasattr(view, "add") and not hasattr(view, "discard")
    peer.receive(frames_of(wire.Join(2, "b", 8)), 1.0)
    assert "b" in view and len(view) == 2  # the same view sees the JOIN
    peer.receive(frames_of(wire.Leave(3, "a", 9)), 1.0)
    assert view == {"b"}


def test_a_join_past_max_peer_groups_ends_the_peer() -> None:
    peer = limited()
    groups = ("a", "b", "c")
    events = peer.receive(frames_of(wire.Hello(1, ENDPOINT, groups, 0, "bob")), 0.0)
    assert [e.group for e in events if isinstance(e, Join)] == ["a", "b", "c"]
    # A JOIN of a group it is in, and a LEAVE then JOIN, stay within the limit.
    assert peer.receive(frames_of(wire.Join(2, "a", 1)), 0.0) == ()
    assert peer.receive(frames_of(wire.Leave(3, "a", 2)), 0.0) == (Leave(PEER, "bob", "a"),)
    assert peer.receive(frames_of(wire.Join(4, "d", 3)), 0.0) == (Join(PEER, "bob", "d"),)
    assert peer.ended is None
    assert peer.receive(frames_of(wire.Join(5, "e", 4)), 0.0) == ()
    assert peer.ended is ExitReason.LIMITS
    assert "max_peer_groups (3)" in peer.detail
    assert set(peer.groups) == {"b", "c", "d"}


@pytest.mark.parametrize(
    ("groups", "headers", "detail"),
    [
        (("a", "b", "c", "d"), (), "lists 4 groups, over max_peer_groups (3)"),
        ((), (("A", "1"), ("B", "2"), ("C", "3")), "3 headers, over max_headers (2)"),
        ((), (("A", "123456789"), ("B", "2")), "over max_header_bytes (10)"),
    ],
)
def test_a_hello_over_the_limits_ends_the_peer(
    groups: tuple[str, ...], headers: tuple[tuple[str, str], ...], detail: str
) -> None:
    peer = limited()
    hello = wire.Hello(1, ENDPOINT, groups, 0, "big", headers)
    assert peer.receive(frames_of(hello), 0.0) == ()
    assert not peer.ready and peer.ended is ExitReason.LIMITS
    assert detail in peer.detail
    assert hello_from_stranger(frames_of(hello), 2, limits=SMALL) is None


def test_a_hello_at_the_limits_enters() -> None:
    peer = limited()
    hello = wire.Hello(1, ENDPOINT, ("a", "b", "c"), 0, "big", (("A", "1234"), ("B", "1")))
    assert isinstance(peer.receive(frames_of(hello), 0.0)[0], Enter)
    assert peer.ended is None
    assert hello_from_stranger(frames_of(hello), 2, limits=SMALL) is not None


def test_a_huge_hello_is_refused_from_its_counts_before_it_is_decoded() -> None:
    """A count over the limit ends the peer though what follows is not even UTF-8."""
    head = wire.encode(wire.Hello(1, ENDPOINT, (), 0, "x"))[0]
    groups_at = 6 + 1 + len(ENDPOINT)
    forged = head[:groups_at] + (1_000_000).to_bytes(4, "big") + b"\x00\x00\x00\x02\xff\xfe" * 4
    with pytest.raises(wire.DecodeError):
        wire.decode([forged])
    peer = limited()
    assert peer.receive([IDENTITY, forged], 0.0) == ()
    assert peer.ended is ExitReason.LIMITS
    assert "lists 1000000 groups" in peer.detail


def test_a_hello_over_the_limits_from_another_identity_is_ignored() -> None:
    peer = limited()
    hello = wire.Hello(1, ENDPOINT, ("a", "b", "c", "d"), 0, "big")
    assert peer.receive([b"\x01" + uuid.uuid4().bytes, *wire.encode(hello)], 0.0) == ()
    assert peer.ended is None


def test_a_message_the_inbox_refused_as_oversize_ends_the_peer() -> None:
    peer = limited()
    peer.receive(frames_of(wire.Hello(1, ENDPOINT, (), 0, "bob")), 0.0)
    assert peer.receive([b"\x01" + uuid.uuid4().bytes, OVERSIZE], 0.0) == ()  # not its route
    assert peer.ended is None
    assert peer.receive([IDENTITY, b""], 0.0) == ()  # an empty frame a peer sent: ignored
    assert peer.ended is None
    assert peer.receive([IDENTITY, OVERSIZE], 0.0) == ()
    assert peer.ended is ExitReason.LIMITS
    assert "max_message_size (100 octets)" in peer.detail


def test_the_run_benchmark_takes_every_message_of_each_batch() -> None:
    """benchmarks/bench_peer_run.py measures whole runs (it raises if a run stops short)."""
    for kind in ("whisper", "shout, one group", "shout, two groups"):
        assert run_cost(kind, 5, 1) > 0
