"""PeerSession: messages leave in the order they were numbered (over an in-memory link)."""

from __future__ import annotations

import uuid

import pytest
import trio
import trio.testing

from trizre import PeerDisconnected, wire
from trizre.sansio._peer import PeerProtocol
from trizre.transport._links import LocalInbox, LocalLink
from trizre.transport._session import PeerSession, Sent, send_each

PEER = uuid.uuid4()


def session(hwm: int) -> tuple[PeerSession, LocalInbox]:
    inbox = LocalInbox("tcp://127.0.0.1:1", 2)
    hello = wire.Hello(1, "tcp://127.0.0.1:2", name="me")
    protocol = PeerProtocol(PEER, "tcp://127.0.0.1:1", hello, now=0.0, evasive=1.0, expired=2.0)
    return PeerSession(protocol, LocalLink(inbox, b"\x01" + uuid.uuid4().bytes, hwm)), inbox


def whisper(text: bytes) -> object:
    return lambda seq: wire.encode_whisper(seq, (text,), 2)


async def received(inbox: LocalInbox) -> list[wire.Message]:
    return [wire.decode(frames[1:]) for frames in await inbox.receive_batch(100)]


async def test_queued_protocol_messages_go_before_data_with_consecutive_numbers() -> None:
    peer, inbox = session(hwm=10)
    peer.protocol.queue(wire.Join(0, "g", 1))
    assert peer.send_nowait(whisper(b"data")) == 3  # type: ignore[arg-type]
    messages = await received(inbox)
    assert [type(m) for m in messages] == [wire.Hello, wire.Join, wire.Whisper]
    assert [m.sequence for m in messages] == [1, 2, 3]


async def test_a_full_link_uses_up_no_number() -> None:
    peer, inbox = session(hwm=1)
    assert peer.send_nowait(whisper(b"x")) is None  # type: ignore[arg-type]  # HELLO fills it
    assert peer.protocol.next_sequence == 2
    await received(inbox)
    assert peer.send_nowait(whisper(b"x")) == 2  # type: ignore[arg-type]


async def test_a_waiting_sender_is_never_overtaken() -> None:
    peer, inbox = session(hwm=1)
    order: list[int] = []
    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:

            async def wait_and_send() -> None:
                order.append(await peer.send(whisper(b"first")))  # type: ignore[arg-type]

            nursery.start_soon(wait_and_send)
            await trio.testing.wait_all_tasks_blocked()
            assert peer.waiting == 1  # it sent our HELLO, then found the link full
            # Nobody overtakes it: not a data message, not a JOIN queued now.
            assert peer.send_nowait(whisper(b"second")) is None  # type: ignore[arg-type]
            peer.protocol.queue(wire.Join(0, "g", 1))
            assert not peer.flush()
            messages = await received(inbox)  # the HELLO: room for the waiter
            await trio.testing.wait_all_tasks_blocked()
        messages += await received(inbox)
        assert peer.flush()  # the JOIN, after the message that waited
        messages += await received(inbox)
    assert [type(m) for m in messages] == [wire.Hello, wire.Whisper, wire.Join]
    assert [m.sequence for m in messages] == [1, 2, 3]
    assert order == [2]


async def test_cancelled_waiting_send_sends_nothing_and_keeps_its_number() -> None:
    peer, inbox = session(hwm=1)
    peer.flush()
    with trio.move_on_after(0.01):  # a full link: it waits, then is cancelled
        await peer.send(whisper(b"never"))  # type: ignore[arg-type]
    assert peer.waiting == 0
    assert peer.protocol.next_sequence == 2
    assert [type(m) for m in await received(inbox)] == [wire.Hello]


async def test_a_closed_link_is_peer_disconnected() -> None:
    peer, _inbox = session(hwm=10)
    peer.link.close()
    with pytest.raises(PeerDisconnected):
        peer.send_nowait(whisper(b"x"))  # type: ignore[arg-type]
    with pytest.raises(PeerDisconnected):
        await peer.send(whisper(b"x"))  # type: ignore[arg-type]
    assert peer.waiting == 0


async def test_send_each_sends_to_every_session_with_room_and_lists_the_rest() -> None:
    """A SHOUT's pass: the session's rule for each, in one loop (issue 28)."""
    free, free_inbox = session(hwm=10)
    full, _ = session(hwm=1)  # its HELLO fills it
    behind, _ = session(hwm=10)
    behind.waiting = 1  # a sender waits there: nobody overtakes it
    gone, _ = session(hwm=10)
    gone.link.close()
    counted = Sent()
    later: list[PeerSession] = []
    numbered: list[tuple[PeerSession, int]] = []
    build = whisper(b"to all")
    taken = send_each([free, full, behind, gone], build, 9, counted, later, numbered=numbered)  # type: ignore[arg-type]
    assert taken == 1 and numbered == [(free, 2)]
    assert later == [full, behind]  # waited for by the caller, in order; gone is skipped
    assert (counted.messages, counted.octets) == (1, 9)
    assert [type(m) for m in await received(free_inbox)] == [wire.Hello, wire.Whisper]
    assert full.protocol.next_sequence == 2  # its HELLO went, no number used since
    assert behind.protocol.has_queued  # even its HELLO waits behind the waiting sender


async def test_send_each_counts_what_went_before_an_error() -> None:
    first, inbox = session(hwm=10)
    second, _ = session(hwm=10)
    counted = Sent()

    def build(seq: int) -> list[bytes]:
        if len(inbox._queue) > 1:  # the first took its HELLO and this message
            raise RuntimeError("boom")
        return wire.encode_whisper(seq, (b"x",), 2)

    with pytest.raises(RuntimeError, match="boom"):
        send_each([first, second], build, 5, counted, [])
    assert (counted.messages, counted.octets) == (1, 5)
    assert second.protocol.next_sequence == 2  # nothing sent, no number used
