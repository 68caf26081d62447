"""The event fan-out: per-subscriber bounded buffers, overflow policies, endings.

No sockets, no node: events are published straight into a :class:`Fanout`.
Tasks are synchronised with ``wait_all_tasks_blocked``, never with sleeps.
"""

from __future__ import annotations

import contextlib
import gc
import uuid

import pytest
import trio
import trio.testing
from trio.testing import wait_all_tasks_blocked

from tests.support.events import drain, joins, subscribed
from tests.support.waiting import waiting
from trizre._concurrency import QueueStatistics
from trizre._errors import EventsOverflowed, NodeError
from trizre.node._fanout import RUN_UNBOUNDED, EventsIdle, EventStream, Fanout, Overflow
from trizre.sansio._events import Event, Join, Stop

# ------------------------------------------------------------ plain delivery


async def test_two_subscribers_get_every_event_in_order() -> None:
    with trio.fail_after(5):
        fanout, (a, b) = subscribed((10, "block"), (10, "raise"))
        events = joins(5)
        for event in events:
            assert fanout.publish_nowait(event)
        fanout.close()
        got_a = await drain(a)
        got_b = await drain(b)
        assert got_a == got_b == [*events, Stop()]
        assert all(x is y for x, y in zip(got_a, events, strict=False))


async def test_concurrent_consumers_get_every_event_in_order() -> None:
    with trio.fail_after(5):
        fanout = Fanout()
        streams = [fanout.subscribe(2, "block") for _ in range(3)]
        results: list[list[Event]] = [[] for _ in streams]
        events = joins(20)

        async def consume(stream: EventStream, out: list[Event]) -> None:
            async for event in stream:
                out.append(event)

        async with trio.open_nursery() as nursery:
            for stream, out in zip(streams, results, strict=True):
                nursery.start_soon(consume, stream, out)
            for event in events:
                await fanout.publish(event)
            fanout.close()
        assert results == [[*events, Stop()]] * 3


async def test_later_subscriber_gets_only_later_events() -> None:
    with trio.fail_after(5):
        fanout, (early,) = subscribed((10, "block"))
        e1, e2, e3 = joins(3)
        assert fanout.publish_nowait(e1)
        late = fanout.subscribe(10, "block")
        assert fanout.publish_nowait(e2)
        assert await fanout.publish(e3) is False
        fanout.close()
        assert await drain(early) == [e1, e2, e3, Stop()]
        assert await drain(late) == [e2, e3, Stop()]


async def test_receive_waits_for_the_next_event() -> None:
    with trio.fail_after(5):
        fanout, (stream,) = subscribed((1, "block"))
        (e1,) = joins(1)
        async with waiting(stream.receive) as reader:
            assert reader.results == []
            assert fanout.publish_nowait(e1)
        assert reader.results == [e1]


# ------------------------------------------------------------ "block" policy


async def test_block_publish_nowait_false_when_a_subscriber_is_full() -> None:
    with trio.fail_after(5):
        fanout, (small, roomy) = subscribed((1, "block"), (10, "block"))
        e1, e2 = joins(2)
        assert fanout.publish_nowait(e1) is True
        assert fanout.publish_nowait(e2) is False
        # All or nothing: neither subscriber got e2.
        fanout.close()
        assert await drain(small) == [e1, Stop()]
        assert await drain(roomy) == [e1, Stop()]


async def test_block_publish_waits_for_the_consumer_and_delivers_once() -> None:
    with trio.fail_after(5):
        fanout, (small, roomy) = subscribed((1, "block"), (10, "block"))
        e1, e2 = joins(2)
        assert await fanout.publish(e1) is False  # no wait needed
        async with waiting(fanout.publish, e2) as publisher:
            assert not publisher.done  # waiting for `small`
            # The roomy subscriber is not held back by the full one.
            assert await roomy.receive() is e1
            assert await roomy.receive() is e2
            await wait_all_tasks_blocked()
            assert not publisher.done
            assert await small.receive() is e1
            await wait_all_tasks_blocked()
            assert publisher.done
        assert publisher.result is True
        assert await small.receive() is e2
        fanout.close()
        assert await drain(small) == [Stop()]
        assert await drain(roomy) == [Stop()]  # no duplicate e2


async def test_block_publish_waits_for_each_full_subscriber_in_turn() -> None:
    with trio.fail_after(5):
        fanout, (a, b, c) = subscribed((1, "block"), (1, "block"), (10, "block"))
        e1, e2 = joins(2)
        assert fanout.publish_nowait(e1)
        async with waiting(fanout.publish, e2) as publisher:
            assert await b.receive() is e1
            await wait_all_tasks_blocked()
            assert not publisher.done  # b has e2 now, a is still full
            assert await a.receive() is e1
            await wait_all_tasks_blocked()
            assert publisher.done
        fanout.close()
        assert await drain(a) == [e2, Stop()]
        assert await drain(b) == [e2, Stop()]
        assert await drain(c) == [e1, e2, Stop()]


async def test_publish_after_failed_publish_nowait_delivers_once() -> None:
    with trio.fail_after(5):
        fanout, (small, roomy) = subscribed((1, "block"), (10, "block"))
        e1, e2 = joins(2)
        assert fanout.publish_nowait(e1)

        async def node_publish(event: Event) -> None:  # as trizre.node._node.Node._publish
            if fanout.publish_nowait(event):
                return
            await fanout.publish(event)

        async with waiting(node_publish, e2):
            assert await small.receive() is e1
        fanout.close()
        assert await drain(small) == [e2, Stop()]
        assert await drain(roomy) == [e1, e2, Stop()]


# ------------------------------------------------------------ "raise" policy


async def test_raise_cuts_off_only_the_full_subscriber() -> None:
    with trio.fail_after(5):
        fanout, (lagging, keeping_up) = subscribed((2, "raise"), (10, "block"))
        events = joins(5)
        for event in events:
            assert fanout.publish_nowait(event)  # "raise" never blocks
        assert await fanout.publish(Join(uuid.uuid4(), "n", "later")) is False
        assert await lagging.receive() is events[0]
        assert await lagging.receive() is events[1]
        with pytest.raises(EventsOverflowed):
            await lagging.receive()
        with pytest.raises(EventsOverflowed):  # stays cut off
            await lagging.receive()
        fanout.close()
        got = await drain(keeping_up)
        assert got[:5] == events
        assert got[-1] == Stop()
        assert len(got) == 7


async def test_raise_overflow_ends_async_for_with_the_error() -> None:
    with trio.fail_after(5):
        fanout, (stream,) = subscribed((1, "raise"))
        e1, e2 = joins(2)
        fanout.publish_nowait(e1)
        fanout.publish_nowait(e2)
        fanout.close()  # too late: already cut off, so no Stop either
        got: list[Event] = []
        with pytest.raises(EventsOverflowed):
            async for event in stream:
                got.append(event)
        assert got == [e1]


async def test_raise_overflow_wakes_a_waiting_reader() -> None:
    with trio.fail_after(5):
        fanout, (stream,) = subscribed((1, "raise"))
        e1, e2 = joins(2)
        got: list[object] = []

        async def reader() -> None:
            while True:
                got.append(await stream.receive())

        async with waiting(reader, catching=EventsOverflowed) as read:
            fanout.publish_nowait(e1)  # wakes the reader, which has not run yet
            fanout.publish_nowait(e2)  # so the buffer is still full: cut off
        got += read.errors
        assert got[0] is e1
        assert len(got) == 2
        assert isinstance(got[1], EventsOverflowed)


# ---------------------------------------------------- runs (the inbox's path)


def test_room_is_what_every_block_subscriber_can_still_take() -> None:
    fanout = Fanout()
    assert fanout.room() == RUN_UNBOUNDED  # nobody to wait for
    small = fanout.subscribe(4, "block")
    roomy = fanout.subscribe(10, "block")
    cut_off = fanout.subscribe(1, "raise")  # cut off, never waited for
    assert fanout.room() == 4
    assert fanout.publish_nowait(joins(1)[0])
    assert fanout.room() == 3
    small.close()
    assert fanout.room() == 9
    roomy.close()
    assert fanout.room() == RUN_UNBOUNDED
    del cut_off


async def test_a_run_reaches_every_subscriber_in_order_as_events_one_by_one() -> None:
    with trio.fail_after(5):
        fanout, (a, b) = subscribed((10, "block"), (3, "raise"))
        events = joins(5)
        assert fanout.room() == 10
        fanout.publish_run(events)
        fanout.close()
        assert await drain(a) == [*events, Stop()]
        # The "raise" subscriber is cut off at its limit, as by publish_nowait.
        got: list[object] = []
        with pytest.raises(EventsOverflowed):
            async for event in b:
                got.append(event)
        assert got == events[:3]


async def test_a_run_wakes_the_waiting_readers_once_each() -> None:
    with trio.fail_after(5):
        fanout, (stream,) = subscribed((10, "block"))
        got: list[Event] = []

        async def reader() -> None:
            got.append(await stream.receive())

        async with trio.open_nursery() as nursery:
            for _ in range(2):
                nursery.start_soon(reader)
            await wait_all_tasks_blocked()
            events = joins(3)
            fanout.publish_run(events)
        assert got == events[:2]  # each reader woke for one; the third is buffered
        assert await stream.receive() is events[2]


def test_a_run_past_the_room_is_refused() -> None:
    fanout, (_stream,) = subscribed((2, "block"))
    with pytest.raises(AssertionError):
        fanout.publish_run(joins(3))


# ------------------------------------------------------------------- close


@pytest.mark.parametrize("overflow", ["block", "raise"])
async def test_close_delivers_stop_even_when_full(overflow: Overflow) -> None:
    with trio.fail_after(5):
        fanout, (stream,) = subscribed((1, overflow))
        (e1,) = joins(1)
        assert fanout.publish_nowait(e1)
        fanout.close()
        assert await stream.receive() is e1
        assert await stream.receive() == Stop()
        with pytest.raises(StopAsyncIteration):
            await stream.__anext__()
        with pytest.raises(StopAsyncIteration):
            await stream.__anext__()


async def test_iteration_ends_after_stop() -> None:
    with trio.fail_after(5):
        fanout, (stream,) = subscribed((3, "block"))
        events = joins(2)
        for event in events:
            fanout.publish_nowait(event)
        fanout.close()
        assert fanout.publish_nowait(Join(uuid.uuid4(), "n", "after")) is True
        assert await drain(stream) == [*events, Stop()]
        assert await drain(stream) == []


async def test_close_wakes_a_waiting_reader_with_stop() -> None:
    with trio.fail_after(5):
        fanout, (stream,) = subscribed((1, "block"))
        async with waiting(drain, stream) as reader:
            fanout.close()
        assert reader.result == [Stop()]


async def test_close_releases_a_blocked_publisher() -> None:
    with trio.fail_after(5):
        fanout, (stream,) = subscribed((1, "block"))
        e1, e2 = joins(2)
        fanout.publish_nowait(e1)
        async with waiting(fanout.publish, e2) as publisher:
            assert not publisher.done
            fanout.close()
        assert publisher.done
        assert await drain(stream) == [e1, Stop()]


async def test_subscribe_after_close_yields_only_stop() -> None:
    with trio.fail_after(5):
        fanout = Fanout()
        fanout.close()
        overflows: tuple[Overflow, ...] = ("block", "raise")
        for overflow in overflows:
            stream = fanout.subscribe(1, overflow)
            assert await drain(stream) == [Stop()]
        assert fanout.publish_nowait(Join(uuid.uuid4(), "n", "g")) is True
        assert await fanout.publish(Join(uuid.uuid4(), "n", "g")) is False


async def test_receive_raises_end_of_channel_after_the_end() -> None:
    with trio.fail_after(5):
        fanout, (stream,) = subscribed((1, "block"))
        fanout.close()
        assert await stream.receive() == Stop()
        with pytest.raises(trio.EndOfChannel):
            await stream.receive()
        with pytest.raises(trio.EndOfChannel):
            await stream.receive()


# ------------------------------------------------------------- unsubscribing


async def test_async_with_unsubscribes() -> None:
    with trio.fail_after(5):
        fanout, (other,) = subscribed((10, "raise"))
        e1, e2, e3 = joins(3)
        async with fanout.subscribe(1, "block") as stream:
            assert stream.__aiter__() is stream
            fanout.publish_nowait(e1)
            assert await stream.receive() is e1
        # Gone: a full buffer of 1 no longer holds anyone back.
        assert fanout.publish_nowait(e2) is True
        assert fanout.publish_nowait(e3) is True
        assert await fanout.publish(e3) is False
        assert await drain(stream) == []
        with pytest.raises(trio.EndOfChannel):
            await stream.receive()
        fanout.close()
        assert await drain(stream) == []  # no Stop for an unsubscribed stream
        assert await drain(other) == [e1, e2, e3, e3, Stop()]


async def test_close_and_aclose_are_idempotent() -> None:
    with trio.fail_after(5):
        fanout, (stream,) = subscribed((1, "block"))
        stream.close()
        stream.close()
        await stream.aclose()
        assert fanout.publish_nowait(Join(uuid.uuid4(), "n", "g"))
        fanout.close()
        stream.close()
        assert await drain(stream) == []


async def test_close_wakes_a_reader_of_the_same_stream() -> None:
    with trio.fail_after(5):
        _fanout, (stream,) = subscribed((1, "block"))
        async with waiting(drain, stream) as reader:
            stream.close()
        assert reader.result == []


async def test_close_discards_buffered_events() -> None:
    with trio.fail_after(5):
        fanout, (stream,) = subscribed((10, "block"))
        for event in joins(2):
            fanout.publish_nowait(event)
        stream.close()
        assert await drain(stream) == []


async def test_dropped_stream_no_longer_blocks_a_waiting_publish() -> None:
    with trio.fail_after(5):
        fanout, (other, dropped) = subscribed((10, "block"), (1, "block"))
        e1, e2, e3 = joins(3)
        fanout.publish_nowait(e1)
        async with waiting(fanout.publish, e2) as publisher:
            assert not publisher.done
            del dropped
            gc.collect()
            await wait_all_tasks_blocked()
            assert publisher.done
        assert publisher.result is True
        # And later publishes do not wait for it either.
        assert fanout.publish_nowait(e3) is True
        fanout.close()
        assert await drain(other) == [e1, e2, e3, Stop()]


async def test_dropped_stream_is_unsubscribed() -> None:
    with trio.fail_after(5):
        fanout = Fanout()
        fanout.subscribe(1, "block")  # dropped at once
        gc.collect()
        for event in joins(3):
            assert fanout.publish_nowait(event) is True
            assert await fanout.publish(event) is False


# ---------------------------------------------------------------- cancelling


async def test_cancelled_anext_loses_no_event(autojump_clock: trio.testing.MockClock) -> None:
    with trio.fail_after(5):
        fanout, (stream,) = subscribed((10, "block"))
        e1, e2, e3 = joins(3)

        # Cancelled while parked on an empty buffer.
        with trio.move_on_after(1) as scope:
            await stream.__anext__()
        assert scope.cancelled_caught
        fanout.publish_nowait(e1)

        # Cancelled before starting, with an event waiting (fast path).
        with trio.CancelScope() as scope:
            scope.cancel()
            await stream.__anext__()
        assert scope.cancelled_caught
        assert await stream.__anext__() is e1

        # Woken by an event and cancelled in the same tick: the event is
        # either returned or left in the buffer, never lost.
        async with waiting(stream.__anext__) as reader:
            fanout.publish_nowait(e2)
            assert reader.nursery is not None
            reader.nursery.cancel_scope.cancel()
        fanout.publish_nowait(e3)
        fanout.close()
        assert reader.results + await drain(stream) == [e2, e3, Stop()]


async def test_cancelled_receive_loses_no_event(autojump_clock: trio.testing.MockClock) -> None:
    with trio.fail_after(5):
        fanout, (stream,) = subscribed((10, "block"))
        events = joins(4)
        got: list[Event] = []
        for event in events:
            with trio.move_on_after(0.5):
                got.append(await stream.receive())  # times out: nothing yet
            fanout.publish_nowait(event)
            with trio.move_on_after(0.5):
                got.append(await stream.receive())
        assert got == events


# -------------------------------------------------------------- idle timeout


async def test_idle_timeout_raises_after_exactly_that_long_and_the_stream_goes_on(
    autojump_clock: trio.testing.MockClock,
) -> None:
    with trio.fail_after(60):
        fanout, (stream,) = subscribed((10, "block", 2.5))
        start = trio.current_time()
        with pytest.raises(EventsIdle, match=r"2\.5 s"):
            await stream.receive()
        assert trio.current_time() - start == pytest.approx(2.5)
        # Nothing was lost and the subscription is still open.
        (event,) = joins(1)
        fanout.publish_nowait(event)
        assert await stream.receive() is event
        start = trio.current_time()
        with pytest.raises(EventsIdle):
            async for _ in stream:
                pass
        assert trio.current_time() - start == pytest.approx(2.5)


async def test_idle_timeout_counts_each_wait_from_its_start(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Events 2 s apart never trip a 2.5 s idle timeout, however many come."""
    with trio.fail_after(60):
        fanout, (stream,) = subscribed((10, "block", 2.5))
        events = joins(10)

        async def publish() -> None:
            for event in events:
                await trio.sleep(2)
                fanout.publish_nowait(event)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(publish)
            got = [await stream.receive() for _ in events]
        assert got == events


async def test_buffered_events_are_never_idle(autojump_clock: trio.testing.MockClock) -> None:
    """Events that waited in the buffer longer than the timeout come out, then it counts."""
    with trio.fail_after(60):
        fanout, (stream,) = subscribed((10, "block", 1))
        events = joins(3)
        for event in events:
            fanout.publish_nowait(event)
        await trio.sleep(10)
        assert [await stream.receive() for _ in events] == events
        with pytest.raises(EventsIdle):
            await stream.receive()


async def test_an_ended_stream_ends_rather_than_idles(
    autojump_clock: trio.testing.MockClock,
) -> None:
    with trio.fail_after(60):
        fanout, (stream,) = subscribed((10, "block", 1))

        async def close_soon() -> None:
            await trio.sleep(0.5)
            fanout.close()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(close_soon)
            assert await drain(stream) == [Stop()]


def test_events_idle_is_a_node_error_and_a_trio_timeout() -> None:
    assert issubclass(EventsIdle, NodeError)
    assert issubclass(EventsIdle, trio.TooSlowError)


# ------------------------------------------------- a trio.abc.ReceiveChannel


async def read_all(channel: trio.abc.ReceiveChannel[Event]) -> list[Event]:
    """Code written for any Trio channel."""
    got: list[Event] = []
    async with channel:
        async for event in channel:
            got.append(event)
    return got


async def test_a_stream_is_a_trio_receive_channel() -> None:
    with trio.fail_after(5):
        fanout = Fanout()
        stream = fanout.subscribe(10, "block")
        assert isinstance(stream, trio.abc.ReceiveChannel)
        events = joins(3)
        for event in events:
            fanout.publish_nowait(event)
        fanout.close()
        assert await read_all(stream) == [*events, Stop()]
        with pytest.raises(trio.EndOfChannel):
            await stream.receive()


async def test_a_stream_cannot_be_cloned() -> None:
    stream = Fanout().subscribe(1, "block")
    with pytest.raises(NotImplementedError, match=r"node\.events\(\)"):
        stream.clone()


async def test_statistics_tell_what_a_subscription_holds_and_who_waits() -> None:
    with trio.fail_after(5):
        fanout = Fanout()
        stream = fanout.subscribe(2, "block")
        assert stream.statistics() == QueueStatistics(0, 2, 0, 0, False)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(stream.receive)
            await wait_all_tasks_blocked()
            assert stream.statistics().tasks_waiting_get == 1
            fanout.publish_nowait(Join(uuid.uuid4(), "n", "g"))
        e1, e2, e3 = joins(3)
        fanout.publish_nowait(e1)
        fanout.publish_nowait(e2)
        async with waiting(fanout.publish, e3) as publisher:
            assert stream.statistics() == QueueStatistics(2, 2, 1, 0, False)
            assert await stream.receive() is e1
            assert await stream.receive() is e2
        assert publisher.result is True
        stream.close()
        assert stream.statistics() == QueueStatistics(0, 2, 0, 0, True)


async def test_aclose_in_a_cancelled_scope_still_unsubscribes() -> None:
    with trio.fail_after(5):
        fanout = Fanout()
        stream = fanout.subscribe(1, "block")
        with trio.CancelScope() as scope:
            scope.cancel()
            await stream.aclose()
        assert scope.cancelled_caught
        e1, e2 = joins(2)
        assert fanout.publish_nowait(e1) and fanout.publish_nowait(e2)  # nobody to wait for
        assert await drain(stream) == []


# ---------------------------------------------------------------- bad input


@pytest.mark.parametrize("max_buffer", [0, -1])
def test_bad_max_buffer_raises(max_buffer: int) -> None:
    with pytest.raises(ValueError, match="max_buffer"):
        Fanout().subscribe(max_buffer, "block")


@pytest.mark.parametrize("overflow", ["drop", "", "BLOCK", None])
def test_bad_overflow_raises(overflow: object) -> None:
    with pytest.raises(ValueError, match="overflow"):
        Fanout().subscribe(1, overflow)  # type: ignore[arg-type]


@pytest.mark.parametrize("idle", [0, -1, float("inf"), float("nan")])
def test_bad_idle_timeout_raises_value_error(idle: float) -> None:
    with pytest.raises(ValueError, match="idle_timeout"):
        Fanout().subscribe(1, "block", idle_timeout=idle)


@pytest.mark.parametrize("idle", ["5", True, [1.0]])
def test_idle_timeout_of_another_type_raises_type_error(idle: object) -> None:
    with pytest.raises(TypeError, match="idle_timeout"):
        Fanout().subscribe(1, "block", idle_timeout=idle)  # type: ignore[arg-type]


# ------------------------------------------------------------ the sole subscriber


async def test_sole_follows_every_change_of_the_subscribers() -> None:
    # The inbox's lead reads it on every message (an attribute, issue 28):
    # it must follow subscribing, unsubscribing, cutting off and closing.
    with trio.fail_after(5):
        fanout = Fanout()
        assert fanout.sole is None
        a = fanout.subscribe(10, "block")
        assert fanout.sole is a._queue
        b = fanout.subscribe(1, "raise")
        assert fanout.sole is None
        events = joins(2)
        assert fanout.publish_nowait(events[0])
        assert fanout.publish_nowait(events[1])  # b overflows: cut off, pruned
        assert fanout.sole is a._queue
        with pytest.raises(EventsOverflowed):
            await drain(b)
        c = fanout.subscribe(10, "block")
        assert fanout.sole is None
        await c.aclose()
        assert fanout.sole is a._queue
        fanout.close()
        assert fanout.sole is None
        assert await drain(a) == [*events, Stop()]


# ----------------------------------------------------------- reading in batches


async def test_receive_batch_takes_what_is_buffered_up_to_its_maximum_in_order() -> None:
    with trio.fail_after(5):
        fanout, (stream,) = subscribed((10, "block"))
        events = joins(7)
        for event in events:
            assert fanout.publish_nowait(event)
        assert await stream.receive_batch(3) == events[:3]
        assert await stream.receive_batch(10) == events[3:]
        assert stream.statistics().current_buffer_used == 0
        (e8,) = joins(1)
        assert fanout.publish_nowait(e8)
        assert await stream.receive() is e8  # one read mixes with the other


async def test_receive_batch_waits_for_the_first_event_and_returns_what_came() -> None:
    with trio.fail_after(5):
        fanout, (stream,) = subscribed((10, "block"))
        e1, e2 = joins(2)
        async with waiting(stream.receive_batch, 10) as reader:
            assert not reader.done
            assert fanout.publish_nowait(e1)
            assert fanout.publish_nowait(e2)  # before the reader runs: same batch
        assert reader.result == [e1, e2]


async def test_receive_batch_ends_with_stop_then_end_of_channel() -> None:
    with trio.fail_after(5):
        fanout, (stream, closed) = subscribed((10, "block"), (10, "block"))
        events = joins(2)
        for event in events:
            assert fanout.publish_nowait(event)
        fanout.close()
        assert await stream.receive_batch() == [*events, Stop()]
        with pytest.raises(trio.EndOfChannel):
            await stream.receive_batch()
        closed.close()  # unsubscribed: ends quietly, its buffer dropped
        with pytest.raises(trio.EndOfChannel):
            await closed.receive_batch()


async def test_receive_batch_of_a_raise_subscriber_cut_off_gives_what_it_held_then_raises() -> None:
    with trio.fail_after(5):
        fanout, (stream,) = subscribed((2, "raise"))
        events = joins(3)
        for event in events:
            assert fanout.publish_nowait(event)
        assert await stream.receive_batch() == events[:2]
        with pytest.raises(EventsOverflowed):
            await stream.receive_batch()


async def test_receive_batch_wakes_a_blocked_publisher_and_loses_nothing() -> None:
    with trio.fail_after(5):
        fanout, (stream,) = subscribed((4, "block"))
        events = joins(12)
        got: list[Event] = []

        async def publish() -> None:
            for event in events:
                await fanout.publish(event)
            fanout.close()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(publish)
            with contextlib.suppress(trio.EndOfChannel):
                while True:
                    batch = await stream.receive_batch(3)
                    assert 1 <= len(batch) <= 3
                    got += batch
        assert got == [*events, Stop()]


async def test_receive_batch_idles_as_receive_does(autojump_clock: trio.testing.MockClock) -> None:
    with trio.fail_after(60):
        fanout, (stream,) = subscribed((10, "block", 2.5))
        start = trio.current_time()
        with pytest.raises(EventsIdle):
            await stream.receive_batch()
        assert trio.current_time() - start == pytest.approx(2.5)
        events = joins(3)
        for event in events:
            fanout.publish_nowait(event)
        await trio.sleep(10)  # buffered events are never idle
        assert await stream.receive_batch(2) == events[:2]
        assert await stream.receive_batch(2) == events[2:]


async def test_cancelled_receive_batch_loses_no_event(
    autojump_clock: trio.testing.MockClock,
) -> None:
    with trio.fail_after(5):
        fanout, (stream,) = subscribed((10, "block"))
        e1, e2, e3, e4 = joins(4)

        # Cancelled while parked on an empty buffer.
        with trio.move_on_after(1) as scope:
            await stream.receive_batch()
        assert scope.cancelled_caught
        fanout.publish_nowait(e1)
        fanout.publish_nowait(e2)

        # Cancelled before starting, with events waiting.
        with trio.CancelScope() as scope:
            scope.cancel()
            await stream.receive_batch()
        assert scope.cancelled_caught
        assert await stream.receive_batch() == [e1, e2]

        # Woken by an event and cancelled in the same tick: the events are
        # either returned or left in the buffer, never lost.
        async with waiting(stream.receive_batch) as reader:
            fanout.publish_nowait(e3)
            assert reader.nursery is not None
            reader.nursery.cancel_scope.cancel()
        fanout.publish_nowait(e4)
        fanout.close()
        taken = [event for batch in reader.results for event in batch]
        assert taken + await drain(stream) == [e3, e4, Stop()]


async def test_receive_batch_without_waiting_passes_a_schedule_point_every_256_events() -> None:
    with trio.fail_after(5):
        fanout, (stream,) = subscribed((600, "block"))
        for event in joins(600):
            assert fanout.publish_nowait(event)
        task = trio.lowlevel.current_task()
        yielded = task._schedule_points
        with trio.testing.assert_checkpoints():
            assert len(await stream.receive_batch(300)) == 300  # 300 since the last
        assert task._schedule_points == yielded + 1
        for _ in range(21):
            assert len(await stream.receive_batch(12)) == 12  # 12 ... 252: none
        assert task._schedule_points == yielded + 1
        assert len(await stream.receive_batch(4)) == 4  # 256: one
        assert task._schedule_points == yielded + 2
        with trio.CancelScope() as scope:  # cancellation is checked on every call
            scope.cancel()
            await stream.receive_batch(1)
        assert scope.cancelled_caught
        assert stream.statistics().current_buffer_used == 600 - 300 - 21 * 12 - 4


async def test_iterating_buffered_events_passes_a_schedule_point_every_256() -> None:
    with trio.fail_after(5):
        fanout, (stream,) = subscribed((600, "block"))
        events = joins(600)
        for event in events:
            assert fanout.publish_nowait(event)
        task = trio.lowlevel.current_task()
        yielded = task._schedule_points
        got = [await stream.__anext__() for _ in range(255)]
        assert task._schedule_points == yielded  # none yet: all were buffered
        with trio.testing.assert_checkpoints():
            got.append(await stream.__anext__())  # the 256th
        assert task._schedule_points == yielded + 1
        got += [await stream.__anext__() for _ in range(256)]
        assert task._schedule_points == yielded + 2
        with trio.CancelScope() as scope:  # cancellation is checked on every call
            scope.cancel()
            await stream.__anext__()
        assert scope.cancelled_caught
        got += [await stream.__anext__() for _ in range(600 - 512)]
        assert got == events  # in order, none lost to the cancelled call


@pytest.mark.parametrize("bad", [0, -1])
async def test_receive_batch_of_fewer_than_one_raises_value_error(bad: int) -> None:
    stream = Fanout().subscribe(1, "block")
    with pytest.raises(ValueError, match="max_events"):
        await stream.receive_batch(bad)


@pytest.mark.parametrize("bad", [1.0, "3", True, None])
async def test_receive_batch_of_another_type_raises_type_error(bad: object) -> None:
    stream = Fanout().subscribe(1, "block")
    with pytest.raises(TypeError, match="max_events"):
        await stream.receive_batch(bad)  # type: ignore[arg-type]
