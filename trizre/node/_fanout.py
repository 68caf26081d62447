"""Fan-out of node events to any number of subscribers, each with its own buffer.

Every subscriber sees every event published after it subscribed; none
steals from another.  A subscriber that falls behind is handled by its own
policy, chosen when it subscribes:

* ``"block"`` (default): the publisher waits until the subscriber has room.
  The node then stops reading its inbox, TCP flow control pushes back on
  the peers, and their sends wait: nothing is lost, everything slows down.
* ``"raise"``: the subscriber is cut off: it gets the events it holds, then
  :class:`EventsOverflowed`.  Nobody else is slowed down.

A subscriber may also ask for an idle timeout: :class:`EventsIdle` when it
has waited that long for the next event.  Only a reader that has to wait
can be idle, so the timer is set only then, never for an event already
buffered: a timeout around every read would cost that read a cancel
scope and a deadline, more than the read itself.
"""

from __future__ import annotations

import contextlib
import math
import sys
import weakref
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Final, Literal, final

import trio

from .._concurrency import (
    BoundedQueue,
    QueueStatistics,
    cancel_shielded_checkpoint,
    checkpoint,
    checkpoint_if_cancelled,
)
from .._errors import EventsOverflowed, NodeError
from ..sansio._events import Event, Stop

if TYPE_CHECKING:
    from ._lead import InboxLead

__all__ = ["EventStream", "EventsIdle", "Fanout", "Overflow"]

Overflow = Literal["block", "raise"]

RUN_UNBOUNDED: Final = sys.maxsize
"""What :meth:`Fanout.room` says when no subscriber would make a publisher wait."""

BATCH: Final = 256
"""What :meth:`EventStream.receive_batch` hands out at most by default."""

# Buffered events handed out between two schedule points: a batch's worth,
# as one receive_batch() call hands out and as the inbox reads off its
# socket without yielding.  Each one with nothing else runnable is a turn
# of the run loop (an epoll_wait); at 32, a receiver of 90-message SHOUT
# batches took three turns a batch (docs/benchmarks.md, issue 28).
_YIELD_EVERY: Final = BATCH


class EventsIdle(NodeError, trio.TooSlowError):
    """No event came within a subscription's ``idle_timeout``.

    Raised by the subscription's iterator (or ``receive``) when it has
    waited ``idle_timeout`` seconds for the next event.  Nothing is lost and
    the subscription stays open: iterate it again to go on waiting.  A
    ``trio.TooSlowError``, so code written for ``trio.fail_after`` catches
    it too.
    """


@final
class _Queue(BoundedQueue[Event]):
    """One subscriber's bounded buffer (held by the fan-out, read by a stream).

    Closed (by the fan-out, or by its stream unsubscribing), it takes no
    more events and drops any offered: its reader drains it, then ends.
    """

    __slots__ = ("idle", "limit", "overflow", "overflowed", "waker")

    def __init__(self, limit: int, overflow: Overflow, idle: float | None = None) -> None:
        # Wake a waiting publisher only once half the buffer is free: waking
        # it per event makes the two tasks swap places on every message.
        super().__init__(limit, low_water=limit // 2)
        self.limit: Final = limit  # an attribute, not a property: read on every drive
        self.idle = idle
        self.overflow = overflow
        self.overflowed = False
        # While its reader waits on the node's inbox instead (see _lead.py):
        # what ends that wait when an event comes from elsewhere.
        self.waker: Callable[[], None] | None = None

    def wake_getters(self) -> None:
        """Wake its waiting readers to look again (the inbox is theirs to read)."""
        self._getters.wake_all()

    def has_room(self) -> bool:
        """Would :meth:`offer` take an event now without waiting?"""
        return self.closed or self.overflow == "raise" or len(self._items) < self._limit

    def offer(self, event: Event) -> bool:
        """Append if there is room (or cut off a ``raise`` subscriber); False: must wait."""
        if self.closed:
            return True
        # put_nowait, inline: this is the per-event, per-subscriber path.
        items = self._items
        if len(items) < self._limit:
            items.append(event)
            if self._getters._waiters:
                self._getters.wake_one()
            elif self.waker is not None:
                self.waker()
            return True
        if self.overflow == "raise":
            self.overflowed = True
            self.close()
            if self.waker is not None:
                self.waker()
            return True
        return False

    def take(self, max_items: int) -> list[Event]:
        """Up to ``max_items`` buffered events, oldest first (none if empty); never blocks.

        As :meth:`get_nowait` for each: a publisher waiting for room wakes
        once the buffer has drained to its low-water mark.
        """
        items = self._items
        if len(items) <= max_items:
            batch = list(items)
            items.clear()
        else:
            popleft = items.popleft
            batch = [popleft() for _ in range(max_items)]
        if self._putters._waiters and len(items) <= self._low_water:
            self._putters.wake_all()
        return batch

    def discard(self) -> None:
        """Drop every buffered event (the subscriber unsubscribed)."""
        self.clear()
        self.overflowed = False

    def end(self, final: Event | None = None) -> None:
        """No more events; ``final`` (Stop) is appended even over the limit."""
        if self.closed:
            return
        if final is not None:
            self.push(final)
        self.close()
        if self.waker is not None:
            self.waker()

    def ended(self) -> BaseException:
        """What a reader of the drained, closed buffer gets."""
        if self.overflowed:
            return EventsOverflowed(
                "this subscriber fell behind and was cut off; events were dropped for it"
            )
        return trio.EndOfChannel()

    async def wait_get(self, lead: InboxLead | None = None) -> Event:
        """The next event, waiting for it; see :class:`EventStream`.

        With the node's ``lead``, the sole subscriber's reader reads the
        node's inbox itself while it waits (see :mod:`trizre.node._lead`).
        Raises ``trio.EndOfChannel`` at the end (or :class:`EventsOverflowed`).
        """
        idle = self.idle
        try:
            if idle is None:
                return await (self.get() if lead is None else self._led_get(lead))
            with trio.move_on_after(idle):
                return await (self.get() if lead is None else self._led_get(lead))
        except trio.EndOfChannel:
            raise self.ended() from None
        # Timed out, having taken nothing; an event may have come just then.
        try:
            return self.get_nowait()
        except trio.WouldBlock:
            raise EventsIdle(f"no event for {idle:g} s (the subscription's idle_timeout)") from None
        except trio.EndOfChannel:
            raise self.ended() from None

    async def _led_get(self, lead: InboxLead) -> Event:
        """:meth:`get`, reading the node's inbox while this queue is empty and may lead.

        Every way out passes a schedule point (the inbox's wait, or the
        getters' wait), as :meth:`get`; cancelled, nothing was taken: what
        the lead read before is in this queue.
        """
        items = self._items
        while not items:
            if self.closed:
                await cancel_shielded_checkpoint()
                raise trio.EndOfChannel
            if not await lead.drive(self):
                await self._getters.wait()
        return self.get_nowait()

    def statistics(self) -> QueueStatistics:
        stats = super().statistics()
        if self.waker is None:
            return stats
        # Its reader waits on the node's inbox: still a reader that waits.
        return stats._replace(tasks_waiting_get=stats.tasks_waiting_get + 1)


@final
class EventStream(trio.abc.ReceiveChannel[Event]):
    """A node's events: one subscription, a ``trio.abc.ReceiveChannel``.

    Obtain it from ``node.events()``.  Iterating (or :meth:`receive`)
    yields every event published after the subscription was made, ending
    after :class:`~trizre.Stop`.  Use it as ``async with node.events() as
    events:`` to unsubscribe deterministically; a stream that is garbage
    collected unsubscribes too (in CPython, when the ``async for`` that made
    it ends).

    Cancellation: a cancelled ``receive`` or ``__anext__`` loses no event.
    If the subscription was made with ``overflow="raise"`` and fell behind,
    reading raises :class:`~trizre.EventsOverflowed` after the events it
    holds.  If it was made with an ``idle_timeout``, a wait that long for
    the next event raises :class:`~trizre.EventsIdle`; the stream stays
    open, and reading it again waits again.

    Where it differs from the ``ReceiveChannel`` contract, on purpose: once
    closed (by :meth:`aclose` or :meth:`close`, from any task), reading
    ends as at the end of the stream (``trio.EndOfChannel``; iteration
    stops) rather than raising ``trio.ClosedResourceError``, so that
    closing a subscription ends its reader quietly; and :meth:`clone` is
    not supported.  Several tasks may read one stream: each event goes to
    one of them.
    """

    __slots__ = ("__weakref__", "_fanout", "_queue", "_unyielded")

    def __init__(self, fanout: Fanout, queue: _Queue) -> None:
        self._fanout = fanout
        self._queue = queue
        self._unyielded = 0  # events handed out since the last schedule point

    def __aiter__(self) -> EventStream:
        return self

    async def __anext__(self) -> Event:
        await checkpoint_if_cancelled()
        queue = self._queue
        if not queue._items:
            # Empty (or ended): asked before, not through get_nowait's
            # WouldBlock, whose raise cost a round trip's reader ~0.4 us.
            self._unyielded = 0
            lead = self._fanout.lead
            try:
                if lead is None or queue.idle is not None:
                    return await queue.wait_get(lead)
                # The common wait (a lead, no idle timeout): _led_get's loop
                # here, not two coroutines deeper, since every frame of the
                # chain is resumed on each wake-up (issue 28).
                items = queue._items
                checked = True  # cancellation, just above: the first drive skips it
                while not items:
                    if queue.closed:
                        await cancel_shielded_checkpoint()
                        raise queue.ended()
                    if not await lead.drive(queue, checked):
                        await queue._getters.wait()
                    checked = False
                return queue.get_nowait()
            except trio.EndOfChannel:
                raise StopAsyncIteration from None
        # The fast path: no waiting, so no coroutine either; get_nowait,
        # inline (a call an event), the buffer known not to be empty.
        items = queue._items
        event = items.popleft()
        if queue._putters._waiters and len(items) <= queue._low_water:
            queue._putters.wake_all()  # a publisher waits for room: half is free
        # Cancellation is honoured on every call; the schedule point comes
        # every _YIELD_EVERY buffered events, not on each one, which is most
        # of the cost of reading a flood.
        self._unyielded += 1
        if self._unyielded >= _YIELD_EVERY:
            self._unyielded = 0
            await cancel_shielded_checkpoint()
        return event

    async def receive_batch(self, max_events: int = BATCH) -> list[Event]:
        """Every event buffered now, oldest first, up to ``max_events``; waits for the first.

        :meth:`receive` for a consumer that handles events in a loop of its
        own: one call (one cancellation check, one coroutine) for as many
        events as have come, where :meth:`receive` and iteration cost that
        per event.  It waits only when nothing is buffered, then returns
        what the wait brought (at least one event).  Order, the buffer's
        bound, the overflow policy and the idle timeout are as for
        :meth:`receive`; several tasks reading one stream each get whole
        batches, every event going to one of them.  :class:`~trizre.Stop`
        is the last event of the last batch; the call after it raises
        ``trio.EndOfChannel``.

        Schedule points: a call that waited passed one; calls that did not
        wait pass one once they have handed out 256 events since the last
        (as :meth:`receive`), so a loop over them still lets other tasks
        run, and ``max_events`` bounds what one call hands out between two
        of them.  Cancellation is checked on every call; a cancelled call
        took nothing (the events stay buffered, in order, for the next
        read).  Raises :class:`~trizre.EventsOverflowed` (a ``"raise"``
        subscriber cut off, after the events it held) and
        :class:`~trizre.EventsIdle` as :meth:`receive` does; after
        :meth:`close`, ``trio.EndOfChannel``.  Bad input: ``max_events``
        that is not an ``int`` raises ``TypeError``; below 1, ``ValueError``.
        """
        if type(max_events) is not int or max_events < 1:
            raise _bad_max_events(max_events)
        await checkpoint_if_cancelled()
        queue = self._queue
        items = queue._items
        if items:
            batch = queue.take(max_events)
            self._unyielded += len(batch)
            if self._unyielded >= _YIELD_EVERY:
                self._unyielded = 0
                await cancel_shielded_checkpoint()  # shielded: nothing taken is lost
            return batch
        # Nothing buffered: wait as __anext__ does (its loop, inline, for
        # the same reason), taking nothing until something came.
        self._unyielded = 0
        lead = self._fanout.lead
        if lead is None or queue.idle is not None:
            batch = [await queue.wait_get(lead)]
            batch += queue.take(max_events - 1)
            return batch
        checked = True
        while not items:
            if queue.closed:
                await cancel_shielded_checkpoint()
                raise queue.ended()
            if not await lead.drive(queue, checked):
                await queue._getters.wait()
            checked = False
        return queue.take(max_events)

    async def receive(self) -> Event:
        """The next event; raises ``trio.EndOfChannel`` after the stream ended.

        Raises as iteration does otherwise (:class:`~trizre.EventsOverflowed`,
        :class:`~trizre.EventsIdle`); cancelled, it loses no event.
        """
        try:
            return await self.__anext__()
        except StopAsyncIteration:
            raise trio.EndOfChannel from None

    def clone(self) -> EventStream:
        """Not supported: raises ``NotImplementedError``.

        A clone would share this subscription's buffer, each event going to
        one of the clones, which is not what a second reader of a node's
        events usually wants; call ``node.events()`` again for a
        subscription of its own that sees every event.
        """
        raise NotImplementedError(
            "an EventStream cannot be cloned; call node.events() for another subscription"
        )

    def statistics(self) -> QueueStatistics:
        """This subscription's buffer: events held, its limit, tasks waiting, whether it ended.

        ``tasks_waiting_put`` counts publishers waiting for room (a
        ``"block"`` subscriber that fell behind holds the node's reader).
        """
        return self._queue.statistics()

    def close(self) -> None:
        """Unsubscribe now; buffered events are discarded.  Idempotent."""
        self._queue.discard()
        self._queue.end()
        self._fanout._forget(self._queue)

    async def aclose(self) -> None:
        """Unsubscribe (see :meth:`close`).  Always a checkpoint; done even if cancelled."""
        self.close()
        await checkpoint()

    async def __aenter__(self) -> EventStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def _bad_max_events(max_events: object) -> Exception:
    if type(max_events) is not int:
        return TypeError(f"max_events must be an int, not {type(max_events).__name__}")
    return ValueError(f"max_events must be at least 1, got {max_events}")


@final
class Fanout:
    """The publishing side: the node owns one and publishes every event to it."""

    __slots__ = ("_queues", "closed", "lead", "sole")

    def __init__(self) -> None:
        self._queues: list[_Queue] = []
        self.closed = False
        # The node's inbox lead, if its sole subscriber may read the inbox.
        self.lead: InboxLead | None = None
        # The one subscriber's buffer, if there is exactly one: kept with
        # _queues (_counted), since the lead asks on every message.
        self.sole: _Queue | None = None

    def _counted(self) -> None:
        queues = self._queues
        self.sole = queues[0] if len(queues) == 1 else None

    def subscribe(
        self, max_buffer: int, overflow: Overflow, idle_timeout: float | None = None
    ) -> EventStream:
        if max_buffer < 1:
            raise ValueError(f"max_buffer must be at least 1, got {max_buffer}")
        if overflow not in ("block", "raise"):
            raise ValueError(f"overflow must be 'block' or 'raise', got {overflow!r}")
        if idle_timeout is not None:
            if isinstance(idle_timeout, bool) or not isinstance(idle_timeout, int | float):
                raise TypeError(
                    f"idle_timeout must be seconds (a float) or None, "
                    f"not {type(idle_timeout).__name__}"
                )
            if not (idle_timeout > 0 and math.isfinite(idle_timeout)):
                raise ValueError(
                    f"idle_timeout must be a positive number of seconds, got {idle_timeout!r}"
                )
        queue = _Queue(max_buffer, overflow, idle_timeout)
        if self.closed:
            queue.end(Stop())
        else:
            self._queues.append(queue)
            self._counted()
            if self.lead is not None:
                self.lead.subscribers_changed()
        stream = EventStream(self, queue)
        # Unsubscribe when the stream is dropped, so a forgotten "block"
        # subscriber cannot stall the node forever.
        weakref.finalize(stream, self._forget, queue)
        return stream

    def _forget(self, queue: _Queue) -> None:
        # Not the lead's business: this may run in a finalizer, where no
        # task may be woken; a free lead is the reader's within its grace.
        queue.end()
        if queue in self._queues:
            self._queues.remove(queue)
            self._counted()

    def publish_nowait(self, event: Event) -> bool:
        """Deliver to every subscriber at once, or to none.

        Returns ``False``, having delivered nothing, when a ``"block"``
        subscriber is full: the caller then awaits :meth:`publish`, which
        delivers exactly once to each.
        """
        queues = self._queues
        if len(queues) == 1:  # the common case, on the per-message path
            queue = queues[0]
            items = queue._items
            if len(items) < queue.limit and not queue.closed:
                # offer(), inline: a call less on every message.
                items.append(event)
                if queue._getters._waiters:
                    queue._getters.wake_one()
                elif queue.waker is not None:
                    queue.waker()
                return True
            if not queue.offer(event):
                return False
            if queue.closed:
                self._prune()
            return True
        if not all(queue.has_room() for queue in queues):
            return False
        for queue in queues:
            queue.offer(event)
        self._prune()
        return True

    def room(self) -> int:
        """How many events :meth:`publish_run` may deliver now: every ``"block"`` subscriber's room.

        ``RUN_UNBOUNDED`` when no subscriber would make a publisher wait
        (none, closed ones, ``"raise"`` ones: those are cut off instead).
        """
        room = RUN_UNBOUNDED
        for queue in self._queues:
            if queue.overflow == "block" and not queue.closed:
                left = queue.limit - len(queue._items)
                room = min(room, left)
        return room

    def publish_run(self, events: Sequence[Event]) -> None:
        """Deliver ``events`` in order to every subscriber, as :meth:`publish_nowait` each.

        At most :meth:`room` events, asked with nothing published since:
        none of them waits (raises ``AssertionError`` otherwise).  The
        inbox's runs of messages come this way, one call a run.
        """
        queues = self._queues
        if len(queues) == 1:  # the common case: the run in one extend
            queue = queues[0]
            items = queue._items
            left = len(events)
            if not queue.closed and len(items) + left <= queue.limit:
                items.extend(events)
                getters = queue._getters
                while left and getters._waiters:
                    getters.wake_one()
                    left -= 1
                if left and queue.waker is not None:
                    queue.waker()
                return
        for event in events:
            if not self.publish_nowait(event):
                raise AssertionError("publish_run past the room the fan-out had")

    async def publish(self, event: Event) -> bool:
        """Deliver to every subscriber, waiting for those that are full.

        Returns ``True`` if it had to wait (the caller paused presence).
        The event is delivered to each subscriber exactly once: subscribers
        that took it at once are not offered it again.
        """
        pending = [q for q in self._queues if not q.offer(event)]
        for queue in pending:
            # Closed meanwhile (it unsubscribed): nothing to deliver to.
            with contextlib.suppress(trio.ClosedResourceError):
                await queue.put(event)
        self._prune()
        return bool(pending)

    def _prune(self) -> None:
        # Subscribers cut off for overflowing need no more offers.
        if any(queue.closed for queue in self._queues):
            self._queues = [queue for queue in self._queues if not queue.closed]
            self._counted()
            if self.lead is not None:
                self.lead.subscribers_changed()

    def close(self) -> None:
        """Deliver :class:`Stop` to every subscriber (over any limit) and end them."""
        self.closed = True
        for queue in self._queues:
            queue.end(Stop())
        self._queues.clear()
        self._counted()
