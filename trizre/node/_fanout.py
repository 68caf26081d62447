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

import math
import weakref
from collections import deque
from typing import Final, Literal, final

import trio

from .._errors import EventsOverflowed, NodeError
from ..sansio._events import Event, Stop

__all__ = ["EventStream", "EventsIdle", "Fanout", "Overflow"]

Overflow = Literal["block", "raise"]

_YIELD_EVERY: Final = 32


class EventsIdle(NodeError, trio.TooSlowError):
    """No event came within a subscription's ``idle_timeout``.

    Raised by the subscription's iterator (or ``receive``) when it has
    waited ``idle_timeout`` seconds for the next event.  Nothing is lost and
    the subscription stays open: iterate it again to go on waiting.  A
    ``trio.TooSlowError``, so code written for ``trio.fail_after`` catches
    it too.
    """


@final
class _Queue:
    """One subscriber's bounded buffer (held by the fan-out, read by a stream)."""

    __slots__ = (
        "_idle",
        "_items",
        "_limit",
        "_readers",
        "_writers",
        "closed",
        "overflow",
        "overflowed",
    )

    def __init__(self, limit: int, overflow: Overflow, idle: float | None = None) -> None:
        self._items: deque[Event] = deque()
        self._limit = limit
        self._idle = idle
        self.overflow = overflow
        self.overflowed = False
        self.closed = False
        self._readers = trio.lowlevel.ParkingLot()
        self._writers = trio.lowlevel.ParkingLot()

    def has_room(self) -> bool:
        """Would :meth:`offer` take an event now without waiting?"""
        return self.closed or self.overflow == "raise" or len(self._items) < self._limit

    def offer(self, event: Event) -> bool:
        """Append if there is room (or cut off a ``raise`` subscriber); False: must wait."""
        if self.closed:
            return True
        if len(self._items) < self._limit:
            self._items.append(event)
            if self._readers:  # an empty ParkingLot's unpark still costs ~1 us
                self._readers.unpark()
            return True
        if self.overflow == "raise":
            self.overflowed = True
            self.close()
            return True
        return False

    async def wait_for_room(self) -> None:
        await self._writers.park()

    def discard(self) -> None:
        """Drop every buffered event (the subscriber unsubscribed)."""
        self._items.clear()
        self.overflowed = False

    def close(self, final: Event | None = None) -> None:
        """No more events; ``final`` (Stop) is appended even over the limit."""
        if self.closed:
            return
        if final is not None:
            self._items.append(final)
        self.closed = True
        self._readers.unpark_all()
        self._writers.unpark_all()

    async def get(self) -> Event:
        idle = self._idle
        deadline = math.inf if idle is None else trio.current_time() + idle
        while not self._items:
            if self.closed:
                if self.overflowed:
                    raise EventsOverflowed(
                        "this subscriber fell behind and was cut off; events were dropped for it"
                    )
                raise StopAsyncIteration
            if idle is None:
                await self._readers.park()
                continue
            with trio.move_on_at(deadline) as waiting:
                await self._readers.park()
            if waiting.cancelled_caught and not self._items and not self.closed:
                raise EventsIdle(f"no event for {idle:g} s (the subscription's idle_timeout)")
        return self.take()

    def take(self) -> Event:
        """The oldest buffered event (there must be one)."""
        event = self._items.popleft()
        # Wake a waiting publisher only once half the buffer is free: waking
        # it per event makes the two tasks swap places on every message.
        if self._writers and len(self._items) <= self._limit // 2:
            self._writers.unpark_all()
        return event


@final
class EventStream:
    """An async iterator over a node's events: one subscription.

    Obtain it from ``node.events()``.  Iterating yields every event
    published after the subscription was made, ending after
    :class:`~trizre.Stop`.  Use it as ``async with node.events() as events:``
    to unsubscribe deterministically; a stream that is garbage collected
    unsubscribes too (in CPython, when the ``async for`` that made it ends).

    Cancellation: a cancelled ``__anext__`` loses no event.  If the
    subscription was made with ``overflow="raise"`` and fell behind,
    iteration raises :class:`~trizre.EventsOverflowed` after the events it
    holds.  If it was made with an ``idle_timeout``, a wait that long for
    the next event raises :class:`~trizre.EventsIdle`; the stream stays
    open, and iterating it again waits again.
    """

    __slots__ = ("__weakref__", "_fanout", "_queue", "_unyielded")

    def __init__(self, fanout: Fanout, queue: _Queue) -> None:
        self._fanout = fanout
        self._queue = queue
        self._unyielded = 0  # events handed out since the last schedule point

    def __aiter__(self) -> EventStream:
        return self

    async def __anext__(self) -> Event:
        await trio.lowlevel.checkpoint_if_cancelled()
        queue = self._queue
        if queue._items:  # fast path: no parking, so no coroutine either
            event = queue.take()
            # Cancellation is honoured on every call; the schedule point
            # comes every _YIELD_EVERY buffered events, not on each one,
            # which is most of the cost of reading a flood.
            self._unyielded += 1
            if self._unyielded >= _YIELD_EVERY:
                self._unyielded = 0
                await trio.lowlevel.cancel_shielded_checkpoint()
            return event
        self._unyielded = 0
        return await self._queue.get()

    async def receive(self) -> Event:
        """The next event; raises ``trio.EndOfChannel`` after the stream ended.

        Raises as iteration does otherwise (:class:`~trizre.EventsOverflowed`,
        :class:`~trizre.EventsIdle`); cancelled, it loses no event.
        """
        try:
            return await self.__anext__()
        except StopAsyncIteration:
            raise trio.EndOfChannel from None

    def close(self) -> None:
        """Unsubscribe now; buffered events are discarded.  Idempotent."""
        self._queue.discard()
        self._queue.close()
        self._fanout._forget(self._queue)

    async def aclose(self) -> None:
        """Unsubscribe (see :meth:`close`)."""
        self.close()
        await trio.lowlevel.checkpoint()

    async def __aenter__(self) -> EventStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


@final
class Fanout:
    """The publishing side: the node owns one and publishes every event to it."""

    __slots__ = ("_queues", "closed")

    def __init__(self) -> None:
        self._queues: list[_Queue] = []
        self.closed = False

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
            queue.close(Stop())
        else:
            self._queues.append(queue)
        stream = EventStream(self, queue)
        # Unsubscribe when the stream is dropped, so a forgotten "block"
        # subscriber cannot stall the node forever.
        weakref.finalize(stream, self._forget, queue)
        return stream

    def _forget(self, queue: _Queue) -> None:
        queue.close()
        if queue in self._queues:
            self._queues.remove(queue)

    def publish_nowait(self, event: Event) -> bool:
        """Deliver to every subscriber at once, or to none.

        Returns ``False``, having delivered nothing, when a ``"block"``
        subscriber is full: the caller then awaits :meth:`publish`, which
        delivers exactly once to each.
        """
        queues = self._queues
        if len(queues) == 1:  # the common case, on the per-message path
            queue = queues[0]
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

    async def publish(self, event: Event) -> bool:
        """Deliver to every subscriber, waiting for those that are full.

        Returns ``True`` if it had to wait (the caller paused presence).
        The event is delivered to each subscriber exactly once: subscribers
        that took it at once are not offered it again.
        """
        pending = [q for q in self._queues if not q.offer(event)]
        for queue in pending:
            while not queue.offer(event):
                await queue.wait_for_room()
        self._prune()
        return bool(pending)

    def _prune(self) -> None:
        # Subscribers cut off for overflowing need no more offers.
        if any(queue.closed for queue in self._queues):
            self._queues = [queue for queue in self._queues if not queue.closed]

    def close(self) -> None:
        """Deliver :class:`Stop` to every subscriber (over any limit) and end them."""
        self.closed = True
        for queue in self._queues:
            queue.close(Stop())
        self._queues.clear()
