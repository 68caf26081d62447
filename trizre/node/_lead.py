"""Who reads the node's TCP inbox: its reader task, or the subscriber waiting for an event.

A message used to wake two tasks: the inbox reader, which read it and
queued its event, then the subscriber, which took the event.  The least
Trio program wakes one (issue 28).  So when a node has exactly one
subscriber and that subscriber waits with nothing buffered, it reads the
inbox itself: its wait for the next event is the wait for the socket, and
a WHISPER reaches the application in one wake-up.

The lead (the right to read the inbox) is held by one party at a time,
which keeps each peer's messages in order:

* *reader*: the reader task reads, as it always did, for a node with
  several subscribers, none, or in-process peers (their messages come
  through the in-memory inbox, whose reader a waiting subscriber could
  not hear), and while the subscriber is busy elsewhere;
* *driver*: the subscriber waits on the inbox (an event queued from
  elsewhere, by the clock or the in-memory inbox, ends that wait:
  :meth:`~trizre.transport._zsock.ZSocket.interrupt`) and handles what it
  read, but only what needs no waiting: a WHISPER or a SHOUT of a known
  peer, for which its buffer has room (the batch is never larger than
  the buffer).  At the first message that needs more (a stranger's
  HELLO, a PING, an election, a peer it ends, a full subscriber) it hands
  that message and the rest of the batch to the reader with the lead
  (:meth:`InboxLead.hand_over`): the core's verdict on a message it has
  read is taken at once, as the reader does; the reader carries it out;
* *free*: the subscriber went back to the application.  The reader does
  not take the lead at once, which would cost the very wake-up saved: it
  takes it if the subscriber has not come back within :data:`GRACE`, so
  that a node whose application is busy elsewhere still reads (and
  answers its peers) within 10 ms.  The reader hands the lead back
  after a batch if the sole subscriber asked for it meanwhile.

Deafness stays the reader's (``NodeShell._publish``): a subscriber never
waits to publish, so it is never the reason the node stops reading.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Final, final

import trio

from .._concurrency import Latch, cancel_shielded_checkpoint, clock_reader

if TYPE_CHECKING:
    from ..transport._links import LocalInbox
    from ..transport._zsock import ZSocket
    from ._fanout import Fanout, _Queue

__all__ = ["GRACE", "InboxLead"]

GRACE: Final = 0.01
"""Seconds the reader leaves the inbox to a subscriber that went back to the application.

Long enough for a subscriber that handles an event and comes back, on a
loaded run loop too (at 2 ms the reader of a client with 100 requests
in flight still woke 0.08 times a request, at 10 ms 0.04); short beside
anything a peer waits for (a PING's answer, 5 s by default).
"""

_READER: Final = 0
_FREE: Final = 1
_DRIVER: Final = 2


@final
class InboxLead:
    """The lead of one node's TCP inbox, between its reader task and its sole subscriber.

    ``take(batch, now)`` is the shell's handling of a batch a subscriber
    read: synchronous, and it calls :meth:`hand_over` where it stops.
    Made inside the Trio run it serves: it keeps that run's clock.
    """

    __slots__ = (
        "_batch",
        "_fanout",
        "_inbox",
        "_latch",
        "_local",
        "_now",
        "_park",
        "_park_due",
        "_released",
        "_state",
        "_take",
        "closed",
        "wanted",
    )

    def __init__(
        self,
        inbox: ZSocket,
        fanout: Fanout,
        local: LocalInbox | None,
        take: Callable[[list[list[bytes]], float], None],
        batch: int,
    ) -> None:
        self._inbox = inbox
        self._fanout = fanout
        # The run's clock, read directly: trio.current_time() is three
        # Python calls where this is one, on every wake-up of a round trip.
        self._now = clock_reader()
        self._local = local
        self._take = take
        self._batch = batch
        self._state = _READER
        self._released = -math.inf  # when a subscriber last gave the lead back
        self._park: trio.CancelScope | None = None  # the reader's wait, while it waits
        self._park_due = math.inf  # its deadline, kept here: a scope's is a property
        self._latch = Latch()  # wakes the reader
        self.wanted = False  # the sole subscriber asked for the lead the reader holds
        self.closed = False  # the inbox closed: the node stopped

    def _may_drive(self) -> bool:
        local = self._local
        return self._fanout.sole is not None and (local is None or not local.links)

    # ------------------------------------------------------------ subscriber

    async def drive(self, queue: _Queue, checked: bool = False) -> bool:
        """Read the inbox for ``queue``'s waiting reader, if the lead may be its.

        Returns ``False`` at once (no schedule point, nothing done) when it
        may not: ``queue`` is not the sole subscriber's, the node has
        in-process peers, or the reader holds the lead (which it hands back
        after its batch).  Otherwise ``True`` after one wait on the inbox
        and handling what it read (maybe nothing queued: a PING, or an
        event queued from elsewhere ended the wait).  Cancellation: nothing
        was read, or what was read is handled (queued, or the reader's).
        ``checked``: the caller saw no cancellation since its last schedule
        point, so the inbox need not look again.
        """
        if self.closed or self._fanout.sole is not queue:
            return False
        if self._local is not None and self._local.links:
            if self._state == _FREE:
                self._latch.wake()  # the reader's now, not in GRACE
            return False
        if self._state != _FREE:
            self.wanted = True
            return False
        inbox = self._inbox
        self._state = _DRIVER
        queue.waker = inbox.interrupt
        try:
            batch = await inbox.receive_batch(min(self._batch, queue.limit), checked=checked)
        except trio.ClosedResourceError:
            queue.waker = None
            self.closed = True  # the node stopped: its Stop comes through the queue
            self._release()
            await cancel_shielded_checkpoint()
            return True
        except BaseException:
            queue.waker = None
            self._release()
            raise
        queue.waker = None
        now = self._now()  # one clock read for the batch and the release
        try:
            # Closed meanwhile (the node is stopping, its reader gone): what
            # was read goes as what libzmq still holds at close does.
            if batch and not self.closed:
                self._take(batch, now)  # may hand over
        finally:
            if self._state == _DRIVER:
                self._release(now)
        return True

    def _release(self, now: float | None = None) -> None:
        self._state = _FREE
        if now is None:
            now = self._now()
        self._released = now
        if not self._may_drive():
            self._latch.wake()
        elif (park := self._park) is not None and (
            (due := self._park_due) == math.inf or due - now < GRACE / 2
        ):
            # Pushed on while the subscriber keeps coming back, not set once:
            # the reader's wait then never expires (each expiry was a task
            # step and a Cancelled, ~100 a second); a push is one setter
            # call, at most one per half GRACE.
            park.deadline = self._park_due = now + GRACE

    def hand_over(self) -> None:
        """The driver stops here: the lead is the reader's, with what the shell left it."""
        self._state = _READER
        self._latch.wake()

    def subscribers_changed(self) -> None:
        """Called by the fan-out: a free lead is the reader's at once if no subscriber may lead."""
        if self._state == _FREE and not self._may_drive():
            self._latch.wake()

    # ---------------------------------------------------------------- reader

    def reader_gone(self) -> None:
        """The reader task ended (the node is stopping): no subscriber reads from now on."""
        self.closed = True
        self._inbox.interrupt()

    async def reader_turn(self) -> bool:
        """The reader task's question: may it read the inbox now?

        ``True``: it holds the lead (it read before, or took the free lead).
        ``False``: it waited until woken (a hand-over, a change) or until
        the free lead's grace ran out, and should ask again.
        """
        state = self._state
        if state == _READER:
            return True
        due = math.inf
        if state == _FREE:
            due = self._released + GRACE
            if not self._may_drive() or self._now() >= due:
                self._state = _READER
                return True
        self._park_due = due
        with trio.move_on_at(due) as self._park:
            await self._latch.wait()
        self._park = None
        return False

    def reader_done(self) -> None:
        """After the reader's batch: the lead goes back to the sole subscriber if it asked."""
        if not self.wanted:
            return
        self.wanted = False
        queue = self._fanout.sole
        if queue is None or not self._may_drive():
            return
        self._state = _FREE
        self._released = self._now()
        queue.wake_getters()  # it waits for an event: it may read now
