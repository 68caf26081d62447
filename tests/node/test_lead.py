"""A lone subscriber reads the node's TCP inbox itself (issue 28, the receive path).

Two nodes over TCP on ``lo`` (beacons in memory, ``local_links=False``):
what the subscriber reads and what the reader task reads keep each peer's
order, a cancelled read loses nothing, several subscribers see everything,
and the buffers' bounds and overflow policies hold.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio
import trio.testing

import trizre
from tests.support.nodes import next_event, raw_peer
from trizre import Enter, EventsOverflowed, Join, Leave, Whisper
from trizre.node import _lead

TCP: dict[str, Any] = {"interface": "lo", "discovery": "memory", "local_links": False}


@asynccontextmanager
async def tcp_pair(**b_options: Any) -> AsyncIterator[tuple[trizre.Node, trizre.Node, uuid.UUID]]:
    """Nodes a and b linked over TCP; b's UUID as a knows it."""
    async with (
        trizre.open_node("a", **TCP) as a,
        trizre.open_node("b", **TCP, **b_options) as b,
    ):
        peer = await a.wait_for_peer("b")
        await b.wait_for_peer("a")
        yield a, b, peer


class _ReaderSteps(trio.abc.Instrument):
    """Counts the steps of the nodes' inbox reader tasks."""

    def __init__(self) -> None:
        self.steps = 0

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        if task.name.endswith("reader"):
            self.steps += 1


def _payloads(events: list[trizre.Event]) -> list[object]:
    """Whispers as their one frame, Join/Leave as (kind, group)."""
    out: list[object] = []
    for event in events:
        if isinstance(event, Whisper):
            out.append(event.frames[0])
        elif isinstance(event, Join | Leave):
            out.append((type(event).__name__, event.group))
    return out


async def test_a_lone_subscriber_gets_whispers_without_waking_the_reader(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The reader takes the lead back only when the subscriber stays away
    # this long: never, here, however slow the machine.
    monkeypatch.setattr(_lead, "GRACE", 60.0)
    with trio.fail_after(30):
        async with tcp_pair() as (a, b, peer):
            events = b.events()
            steps = _ReaderSteps()
            trio.lowlevel.add_instrument(steps)
            try:
                for i in range(100):
                    await a.whisper(peer, b"%d" % i)
                    event = await next_event(events, Whisper)
                    assert event.frames == (b"%d" % i,)
            finally:
                trio.lowlevel.remove_instrument(steps)
            # One WHISPER, one wake-up: the subscriber's.  (The reader read
            # the first, before the subscriber asked for the inbox.)
            assert steps.steps < 10


async def test_order_is_kept_across_the_subscriber_and_the_reader() -> None:
    # JOIN and LEAVE need the core: a leading subscriber hands them, and
    # what follows them in its batch, to the reader, then leads again.
    with trio.fail_after(30):
        async with tcp_pair() as (a, b, peer):
            events = b.events()
            expected: list[object] = []
            got: list[trizre.Event] = []
            for n in range(10):
                group = f"G{n}"
                words = [b"%d.%d" % (n, i) for i in range(9)]
                for word in words[:3]:
                    assert a.whisper_nowait(peer, word)
                await a.join(group)
                for word in words[3:6]:
                    assert a.whisper_nowait(peer, word)
                await a.leave(group)
                for word in words[6:]:
                    assert a.whisper_nowait(peer, word)
                expected += [*words[:3], ("Join", group), *words[3:6], ("Leave", group)]
                expected += words[6:]
                while len(_payloads(got)) < len(expected):
                    got.append(await events.receive())
            assert _payloads(got) == expected


async def test_a_cancelled_receive_loses_no_message() -> None:
    with trio.fail_after(30):
        async with tcp_pair() as (a, b, peer):
            events = b.events()
            got: list[bytes] = []
            for i in range(40):
                taken: list[trizre.Event] = []

                async def take(into: list[trizre.Event] = taken) -> None:
                    into.append(await events.receive())

                async with trio.open_nursery() as nursery:
                    nursery.start_soon(take)
                    await trio.testing.wait_all_tasks_blocked()  # it waits on the inbox
                    assert a.whisper_nowait(peer, b"%d" % i)
                    for _ in range(i % 4):  # sometimes the message is in by now
                        await trio.lowlevel.checkpoint()
                    nursery.cancel_scope.cancel()
                if not taken:
                    taken.append(await next_event(events, Whisper))
                got += [e.frames[0] for e in taken if isinstance(e, Whisper)]
            await a.whisper(peer, b"end")
            got.append((await next_event(events, Whisper)).frames[0])
            assert got == [b"%d" % i for i in range(40)] + [b"end"]  # once each, in order


def _awaiting(task: trio.lowlevel.Task) -> list[str]:
    """The qualified names of the coroutines a parked task is inside, outermost first."""
    names: list[str] = []
    coro: Any = task.coro
    while coro is not None and hasattr(coro, "cr_code"):
        names.append(coro.cr_code.co_qualname)
        coro = coro.cr_await
    return names


async def test_a_lone_subscriber_waits_on_the_inbox_two_coroutines_below_its_read() -> None:
    # Every coroutine between the read and the socket is resumed on each
    # wake-up (issue 28): the stream's read drives the lead, which waits
    # on the socket, with nothing forwarding in between.
    with trio.fail_after(30):
        async with tcp_pair() as (a, b, peer), trio.open_nursery() as nursery:
            events = b.events()
            for i in range(3):  # the reader hands the lead to the subscriber that asked
                await a.whisper(peer, b"%d" % i)
                await next_event(events, Whisper)
            got: list[trizre.Event] = []

            async def take() -> None:
                got.append(await events.__anext__())

            nursery.start_soon(take)
            await trio.testing.wait_all_tasks_blocked()  # it waits on the inbox
            (task,) = [t for t in nursery.child_tasks if t.name.endswith("take")]
            names = _awaiting(task)
            read = names.index("EventStream.__anext__")
            socket = names.index("ZSocket.receive_batch")
            assert names[read : socket + 1] == [
                "EventStream.__anext__",
                "InboxLead.drive",
                "ZSocket.receive_batch",
            ]
            await a.whisper(peer, b"x")
        assert isinstance(got[0], Whisper)


async def test_two_subscribers_see_everything_as_the_lead_changes_hands() -> None:
    with trio.fail_after(30):
        async with tcp_pair() as (a, b, peer):
            first = b.events()
            seen: list[bytes] = []

            async def read_first(count: int) -> None:
                for _ in range(count):
                    seen.append((await next_event(first, Whisper)).frames[0])

            # Alone: the first leads.
            for i in range(5):
                await a.whisper(peer, b"%d" % i)
                await read_first(1)
            # A second subscribes while the first waits on the inbox.
            async with trio.open_nursery() as nursery:
                nursery.start_soon(read_first, 5)
                await trio.testing.wait_all_tasks_blocked()
                second = b.events()
                for i in range(5, 10):
                    await a.whisper(peer, b"%d" % i)
                also = [(await next_event(second, Whisper)).frames[0] for _ in range(5)]
            assert also == [b"%d" % i for i in range(5, 10)]
            # The second leaves: the first leads again.
            second.close()
            for i in range(10, 15):
                await a.whisper(peer, b"%d" % i)
                await read_first(1)
            assert seen == [b"%d" % i for i in range(15)]


async def test_a_block_subscriber_away_holds_at_most_its_buffer_and_loses_nothing() -> None:
    with trio.fail_after(30):
        async with tcp_pair() as (a, b, peer):
            events = b.events(max_buffer=4)
            await a.whisper(peer, b"first")  # it leads from here
            assert (await next_event(events, Whisper)).frames == (b"first",)
            for i in range(200):
                await a.whisper(peer, b"%d" % i)  # while its subscriber is away
            got: list[bytes] = []
            while len(got) < 200:
                assert events.statistics().current_buffer_used <= 4
                got.append((await next_event(events, Whisper)).frames[0])
            assert got == [b"%d" % i for i in range(200)]


async def test_a_raise_subscriber_away_is_cut_off_after_its_buffer() -> None:
    with trio.fail_after(30):
        async with tcp_pair() as (a, b, peer):
            events = b.events(max_buffer=4, overflow="raise")
            await a.whisper(peer, b"first")
            assert (await next_event(events, Whisper)).frames == (b"first",)
            before = b.statistics().messages_in
            for i in range(20):
                await a.whisper(peer, b"%d" % i)
            # Away while the node reads them all (the reader takes the lead).
            while b.statistics().messages_in < before + 20:  # noqa: ASYNC110 -- a counter
                await trio.sleep(0.01)
            got = [(await events.receive()) for _ in range(4)]
            assert _payloads(got) == [b"0", b"1", b"2", b"3"]
            with pytest.raises(EventsOverflowed):
                await events.receive()


async def test_an_event_from_the_clock_wakes_a_subscriber_waiting_on_the_inbox() -> None:
    # A raw peer says HELLO and falls silent: the clock, not the inbox,
    # publishes its Evasive to the subscriber waiting on the inbox.
    with trio.fail_after(30):
        async with trizre.open_node("b", **TCP, evasive_timeout=0.3) as b:
            events = b.events()
            async with raw_peer(b) as peer:
                await peer.hello("silent")
                assert (await next_event(events, Enter)).name == "silent"
                evasive = await next_event(events, trizre.Evasive)
                assert evasive.peer == peer.uuid


async def test_a_subscriber_reading_the_inbox_as_its_node_stops_ends_with_stop() -> None:
    # Its peer goes on sending while the node stops: the subscriber reads
    # until Stop, and nothing it reads then reaches the stopped shell.
    with trio.fail_after(30):
        got: list[trizre.Event] = []
        async with trizre.open_node("a", **TCP) as a, trio.open_nursery() as nursery:
            sending = trio.CancelScope()
            async with trizre.open_node("b", **TCP) as b:
                events = b.events()
                peer = await a.wait_for_peer("b")
                await a.whisper(peer, b"first")
                await next_event(events, Whisper)

                async def read() -> None:
                    async for event in events:
                        got.append(event)

                async def send() -> None:
                    with sending, contextlib.suppress(trizre.NodeError):
                        while True:
                            a.whisper_nowait(peer, b"more")
                            await trio.lowlevel.checkpoint()

                nursery.start_soon(read)
                nursery.start_soon(send)
                while not got:  # noqa: ASYNC110 -- the subscriber is leading
                    await trio.sleep(0.001)
            # Only the sender is stopped: the reader drains what b queued
            # before it stopped and ends on its own, after Stop.  (Cancelling
            # it too raced that drain on a loaded machine.)
            sending.cancel()
        assert isinstance(got[-1], trizre.Stop)
        assert sum(isinstance(event, trizre.Stop) for event in got) == 1


async def test_a_node_with_in_process_peers_hears_both_inboxes_in_order() -> None:
    # c is linked to b in memory, a over TCP: b's subscriber does not lead
    # (it could not hear the in-memory inbox), and both peers' orders hold.
    with trio.fail_after(30):
        local = {**TCP, "local_links": True}
        async with (
            trizre.open_node("a", **TCP) as a,
            trizre.open_node("b", **local) as b,
            trizre.open_node("c", **local) as c,
        ):
            events = b.events()
            a_to_b = await a.wait_for_peer("b")
            c_to_b = await c.wait_for_peer("b")
            for name in ("a", "c"):
                await b.wait_for_peer(name)
            for i in range(50):
                assert a.whisper_nowait(a_to_b, b"a%d" % i)
                assert c.whisper_nowait(c_to_b, b"c%d" % i)
                if i % 10 == 9:
                    await trio.lowlevel.checkpoint()
            got: dict[str, list[bytes]] = {"a": [], "c": []}
            while len(got["a"]) + len(got["c"]) < 100:
                event = await next_event(events, Whisper)
                got[event.name].append(event.frames[0])
            assert got == {p: [b"%s%d" % (p.encode(), i) for i in range(50)] for p in got}


# -------------------------------------------------------- reading in batches


async def test_a_lone_subscriber_reading_batches_leads_and_keeps_order(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # receive_batch waits on the inbox as iteration does (the read drives
    # the lead, nothing in between) and hands out what one read brought.
    monkeypatch.setattr(_lead, "GRACE", 60.0)
    with trio.fail_after(30):
        async with tcp_pair() as (a, b, peer), trio.open_nursery() as nursery:
            events = b.events()
            await a.whisper(peer, b"first")  # the reader's: the subscriber then asks
            assert (await events.receive_batch())[-1] == Whisper(a.uuid, "a", (b"first",))
            got: list[trizre.Event] = []
            took = trio.Event()

            async def take() -> None:
                got.extend(await events.receive_batch())
                took.set()

            nursery.start_soon(take)
            await trio.testing.wait_all_tasks_blocked()  # it waits on the inbox
            (task,) = [t for t in nursery.child_tasks if t.name.endswith("take")]
            names = _awaiting(task)
            read = names.index("EventStream.receive_batch")
            assert names[read : read + 3] == [
                "EventStream.receive_batch",
                "InboxLead.drive",
                "ZSocket.receive_batch",
            ]
            steps = _ReaderSteps()
            trio.lowlevel.add_instrument(steps)
            try:
                for i in range(20):
                    assert a.whisper_nowait(peer, b"%d" % i)
                await a.whisper(peer, b"last")
                await took.wait()  # one reader at a time: each batch in its turn
                while got[-1] != Whisper(a.uuid, "a", (b"last",)):
                    got += await events.receive_batch()
            finally:
                trio.lowlevel.remove_instrument(steps)
            assert _payloads(got) == [b"%d" % i for i in range(20)] + [b"last"]
            assert steps.steps < 5  # the subscriber read them: the reader slept
            # Messages that need the core go through the reader, in order.
            await a.join("G")
            assert a.whisper_nowait(peer, b"after")
            got = []
            while len(_payloads(got)) < 2:
                got += await events.receive_batch()
            assert _payloads(got) == [("Join", "G"), b"after"]


async def test_a_cancelled_receive_batch_loses_no_message() -> None:
    with trio.fail_after(30):
        async with tcp_pair() as (a, b, peer):
            events = b.events()
            got: list[bytes] = []
            for i in range(40):
                taken: list[trizre.Event] = []

                async def take(into: list[trizre.Event] = taken) -> None:
                    into += await events.receive_batch()

                async with trio.open_nursery() as nursery:
                    nursery.start_soon(take)
                    await trio.testing.wait_all_tasks_blocked()  # it waits on the inbox
                    assert a.whisper_nowait(peer, b"%d" % i)
                    assert a.whisper_nowait(peer, b"%d+" % i)
                    for _ in range(i % 4):  # sometimes the messages are in by now
                        await trio.lowlevel.checkpoint()
                    nursery.cancel_scope.cancel()
                while len([e for e in taken if isinstance(e, Whisper)]) < 2:
                    taken += await events.receive_batch()
                got += [e.frames[0] for e in taken if isinstance(e, Whisper)]
            assert got == [w for i in range(40) for w in (b"%d" % i, b"%d+" % i)]


# ------------------------------------------------- the lead alone, virtual time


class _Inbox:
    """A TCP inbox as the lead sees it: each read returns one queued batch."""

    def __init__(self) -> None:
        self.send, self.receive = trio.open_memory_channel[list[list[bytes]]](100)

    async def receive_batch(self, max_messages: int, checked: bool = False) -> list[list[bytes]]:
        return await self.receive.receive()

    def interrupt(self) -> None:
        pass


class _Queue:
    """The sole subscriber's buffer, as the lead sees it."""

    limit = 64
    waker = None

    def wake_getters(self) -> None:
        pass


class _Fanout:
    def __init__(self, sole: _Queue) -> None:
        self.sole = sole


@pytest.mark.parametrize("away", [0.001, 0.004, 0.0049])
async def test_a_subscriber_coming_back_within_half_the_grace_never_wakes_the_reader(
    autojump_clock: trio.abc.Clock, away: float
) -> None:
    """And one that stays away is relieved exactly GRACE after its last release.

    Each expiry of the reader's wait is a task step and a Cancelled; a
    subscriber that reads a batch every few ms (a fan-out's receiver, a
    round trip's echo) used to cost ~100 of them a second.
    """
    queue = _Queue()
    inbox = _Inbox()
    lead = _lead.InboxLead(
        inbox,  # type: ignore[arg-type]
        _Fanout(queue),  # type: ignore[arg-type]
        None,
        lambda batch, now: None,
        64,
    )
    wakes: list[float] = []
    taken: list[float] = []

    async def reader() -> None:
        while not await lead.reader_turn():
            wakes.append(trio.current_time())
        taken.append(trio.current_time())

    with trio.fail_after(60):
        assert not await lead.drive(queue)  # the reader's to start with: asked for
        lead.reader_done()  # ... and given back
        async with trio.open_nursery() as nursery:
            nursery.start_soon(reader)
            await trio.testing.wait_all_tasks_blocked()
            for i in range(1000):  # 1 to 5 s of virtual time, 100 to 500 GRACEs
                inbox.send.send_nowait([[b"peer", b"%d" % i]])
                assert await lead.drive(queue)
                last = trio.current_time()  # released now
                await trio.sleep(away)
            assert not taken
            assert wakes == []
            await trio.sleep(1.0)  # now it stays away
    assert taken == [pytest.approx(last + _lead.GRACE, abs=1e-9)]
    # At most a pushed deadline, then GRACE after `last`, when it takes the lead.
    assert len(wakes) <= 2, [w - last for w in wakes]
