"""What every pattern shares: retry policy, errors, and the reply router."""

from __future__ import annotations

import bisect
import heapq
import logging
import math
import random
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from typing import Any, Final, final
from uuid import UUID

import trio
from trio_util import RepeatedEvent

from .. import EventStream, Exit, Leave, Node, Silent, Whisper
from .._concurrency import (
    Latch,
    Wakeup,
    checkpoint_if_cancelled,
    clock_reader,
    unwrap_single_exception_group,
)
from ..trace._writer import Tracer
from . import _protocol as proto
from ._errors import PatternError
from ._port import open_port
from ._retry import RetryPolicy

__all__ = [
    "LATENCY_BUCKETS",
    "ClientStats",
    "PatternError",
    "RemoteError",
    "ReplyRouter",
    "RequestAbandoned",
    "RetryPolicy",
    "new_request_id",
    "open_reply_router",
]

log = logging.getLogger("trizre.patterns")

LATENCY_BUCKETS: Final = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
)
"""Upper bounds (seconds) of the time histograms servers and clients keep."""

MAX_STATS_SERVICES: Final = 64
"""Services a client counts apart; requests for more are counted under ``"(other)"``."""


@final
class _Counts:
    __slots__ = ("abandoned", "errors", "latency", "latency_sum", "refused", "requests", "retries")

    def __init__(self) -> None:
        self.requests = self.retries = self.refused = self.errors = self.abandoned = 0
        self.latency = [0] * (len(LATENCY_BUCKETS) + 1)
        self.latency_sum = 0.0


@final
class ClientStats:
    """What a client's requests met, per service (the client's ``statistics()``).

    Per service (``""`` for a Lazy Pirate or Binary Star client, which
    name a server, not a service): ``requests`` made, ``retries`` (attempts
    after the first), ``refused`` 503 answers, ``errors`` (answered with
    another error status), ``abandoned`` (every attempt unanswered), and a
    histogram of the time to an answer, OK or error.  At most
    :data:`MAX_STATS_SERVICES` services are told apart: bounded memory.
    """

    def __init__(self) -> None:
        self._services: dict[str, _Counts] = {}

    def of(self, service: str) -> _Counts:
        """The counters of ``service`` (created on first use)."""
        counts = self._services.get(service)
        if counts is None:
            if len(self._services) >= MAX_STATS_SERVICES:
                service = "(other)"
            counts = self._services.setdefault(service, _Counts())
        return counts

    @staticmethod
    def answered(counts: _Counts, seconds: float, ok: bool) -> None:
        """A request got its answer after ``seconds``."""
        counts.latency[bisect.bisect_left(LATENCY_BUCKETS, seconds)] += 1
        counts.latency_sum += seconds
        if not ok:
            counts.errors += 1

    def snapshot(self) -> dict[str, dict[str, Any]]:
        """The counters as JSON-able data, by service."""
        return {
            service: {
                "requests": c.requests,
                "retries": c.retries,
                "refused": c.refused,
                "errors": c.errors,
                "abandoned": c.abandoned,
                "latency": {
                    "le": list(LATENCY_BUCKETS),
                    "counts": list(c.latency),
                    "sum": c.latency_sum,
                },
            }
            for service, c in self._services.items()
        }


class RequestAbandoned(PatternError):
    """Every attempt of a request went unanswered; the client gave up.

    The request may or may not have been executed (a server may have
    answered after we stopped listening): make requests idempotent, or use
    a server with a reply cache, if that matters.

    ``sent`` counts the attempts that reached a peer and ``waited`` the
    seconds the request waited in all; when ``sent`` is 0 nothing was ever
    sent (no server, no worker in the service's group), and the message
    says so instead of blaming silence.
    """

    def __init__(
        self,
        request_id: int,
        attempts: int,
        target: str,
        *,
        sent: int | None = None,
        waited: float | None = None,
    ) -> None:
        within = f" within {waited:.1f} s" if waited is not None else ""
        if sent == 0:
            nobody = (
                f"no worker joined {target}"
                if target.startswith("service ")
                else f"{target} never appeared"
            )
            why = f"{nobody}{within}: nothing was sent ({attempts} attempts found nobody)"
        elif sent is not None and sent < attempts:
            why = (
                f"no reply after {attempts} attempts{within} "
                f"({sent} sent, {attempts - sent} found nobody to send to)"
            )
        else:
            why = f"no reply after {attempts} attempts{within}"
        super().__init__(f"request {request_id:#x} to {target}: {why}")
        self.request_id = request_id
        self.attempts = attempts
        self.target = target
        self.sent = sent
        self.waited = waited


class RemoteError(PatternError):
    """The server answered with an error status (not retried: it would fail again).

    ``status`` and ``body`` are the reply's.  For a 500 from a trizre
    server, ``error_type`` and ``error_message`` are the handler's
    exception type name and message (``None`` when the server hides them,
    or for other statuses).
    """

    def __init__(self, status: int, body: tuple[bytes, ...]) -> None:
        self.status = status
        self.body = body
        self.error_type: str | None = None
        self.error_message: str | None = None
        if status == 500 and len(body) == 2:
            self.error_type, self.error_message = (f.decode("utf-8", "replace") for f in body)
            detail = f"{self.error_type}: {self.error_message}"
        else:
            detail = b" ".join(body).decode("utf-8", "replace")
        super().__init__(f"status {status}: {detail}" if detail else f"status {status}")


def new_request_id() -> int:
    """A random 64-bit id: unique enough across clients without coordination."""
    return random.getrandbits(64)


@final
class _Pending:
    """One request in flight: who has it, and its answer when it comes."""

    __slots__ = (
        "_wakeup",
        "accepted",
        "current",
        "deadline",
        "expired",
        "loaded",
        "lost",
        "memo",
        "replied_by",
        "reply",
        "request_id",
        "sent_to",
        "service",
    )

    def __init__(self, request_id: int = 0, service: str = "") -> None:
        self.request_id = request_id
        self.service = service  # a worker leaving this group drops the request
        self.replied_by: UUID | None = None
        self.loaded = False  # counted in the router's load of ``current``
        self.memo: object = None  # for the client's own bookkeeping
        # The peers it went to, by UUID as an int (as the router's load):
        # a UUID is hashed by a Python call, an int is not.
        self.sent_to: set[int] = set()
        self.current: UUID | None = None
        self.reply: proto.Reply | None = None
        self.lost = False  # the current target exited or went silent
        self.accepted = False  # the current target said ACCEPTED: it holds the request
        # When the current attempt ends (ReplyRouter.set_deadline), and
        # whether the router's clock found it passed.
        self.deadline = math.inf
        self.expired = False
        self._wakeup = Latch()

    def wake(self) -> None:
        self._wakeup.wake()

    def wait(self) -> Coroutine[Any, Any, None]:
        """Wait for a reply, the loss of the current target, or the end of the attempt.

        ``await pending.wait()``: the latch's own wait, returned rather than
        awaited in a coroutine of this method's, so that the request's
        task resumes through one frame less on every reply.  Cancellation
        as :meth:`Latch.wait <trizre._concurrency.Latch.wait>`'s: a wake-up
        is not consumed.
        """
        # A latch (one waiter: the request's own task), not
        # trio_util.RepeatedEvent, whose wait() sees only sets made after it
        # is called: a wake() made while the task was elsewhere, say in
        # node.whisper, is kept (see trizre._concurrency.Latch).
        return self._wakeup.wait()


@final
class InFlight:
    """At most ``total`` requests in flight at once: ``async with`` takes a place.

    Waits only when every place is taken (backpressure on the caller), and
    then in arrival order: a freed place is handed to the longest waiter,
    never taken by a newcomer.  With room it is no schedule point, only a
    cancellation point: a request's wait for its reply is its schedule
    point, and skipping this one lets the requests a burst of replies
    starts again leave in the same turn of the run loop, back to back.
    Cancelled while waiting, it took no place.
    """

    __slots__ = ("_free", "_waiters")

    def __init__(self, total: int) -> None:
        # A counter and a parking lot rather than a trio.CapacityLimiter,
        # which tracks a borrower per place: a third of this path's cost.
        self._free = total
        self._waiters = Wakeup()

    async def __aenter__(self) -> None:
        await self.acquire()

    async def __aexit__(self, *exc_info: object) -> None:
        self.release()

    async def acquire(self) -> None:
        """Take a place (``async with``'s entry); a cancellation point, and a
        schedule point only when it must wait."""
        await checkpoint_if_cancelled()
        # .waiting, not bool(lot): every request enters and leaves, and
        # asking the lot is a call each time.
        if self._free and not self._waiters.waiting:
            self._free -= 1
            return
        # Unparked means a place was handed over (see release); a cancelled
        # park leaves the lot without one.
        await self._waiters.wait()

    def release(self) -> None:
        """Give a place back (``async with``'s exit): to the longest waiter, if any."""
        if not (self._waiters.waiting and self._waiters.wake_one()):
            self._free += 1  # else the place passes straight to the waiter


@final
class ReplyRouter:
    """Routes replies to the requests waiting for them, by request id.

    Replies whose id is not pending (stale or duplicate) or that come from
    a peer the request was never sent to (foreign) are dropped.  It also
    tells a pending request when its current target exits or goes silent,
    so that it can be resent at once instead of after its timeout (also
    when a worker leaves the group of the service the request is for).
    """

    def __init__(self, node: Node, max_in_flight: int = 1000) -> None:
        if not isinstance(max_in_flight, int) or max_in_flight < 1:
            raise ValueError(f"max_in_flight must be a whole number >= 1: {max_in_flight!r}")
        self.node = node
        # Requests a client may have in flight; more wait in request() (backpressure).
        self.in_flight = InFlight(max_in_flight)
        # Request id -> the request waiting for its answer.  Read-only
        # outside (the port reads it to route answers).
        self.pending: dict[int, _Pending] = {}
        # Requests awaiting a reply, per peer (absent: none), keyed by the
        # peer's UUID as an int: a UUID key is hashed by a Python call on
        # every lookup, and the worker choice looks up each worker's load
        # for every request.  Read-only outside (see outstanding()).
        self.load: dict[int, int] = {}
        self.dropped = 0  # replies dropped as stale, duplicate or foreign
        # Attempts that timed out per peer since its last reply: a peer that
        # answers PINGs but not requests (a stuck worker) is "suspect".
        self.suspicion: dict[UUID, int] = {}
        self._membership = RepeatedEvent()
        self.stats = ClientStats()  # what the client's requests met (its statistics())
        # The attempts' deadlines, one heap for every request, watched by one
        # task (run_clock): a trio.CancelScope per attempt cost more than the
        # rest of a request's bookkeeping.  Entries are (deadline, request id):
        # one whose request is gone or has another deadline since is stale,
        # skipped.  Not the _Pending itself: a stale entry would keep an
        # answered request's objects alive until pruned, and the garbage
        # collector would keep finding them young (numbers and a float: the
        # collector stops tracking such a tuple).
        self._deadlines: list[tuple[float, int]] = []
        self._clock_due = math.inf  # when run_clock wakes next
        # The clock the router and its requests read: open_reply_router sets
        # the run's own reader, one Python call a read where
        # trio.current_time() makes three (a router made outside a run, a
        # test's, reads it the long way).
        self.now: Callable[[], float] = trio.current_time
        # The node's tracer, set by open_reply_router (it is fixed for the
        # node's life): every request asks it, and the node's property is a
        # Python call.  A router run by itself (run(), tests') traces nothing.
        self.tracer: Tracer | None = None
        self._clock_scope: trio.CancelScope | None = None

    def open(self, request_id: int, service: str = "") -> _Pending:
        if request_id in self.pending:
            raise ValueError(f"request id {request_id:#x} is already in flight")
        pending = _Pending(request_id, service)
        self.pending[request_id] = pending
        return pending

    def close(self, request_id: int) -> None:
        pending = self.pending.pop(request_id, None)
        if pending is not None:
            pending.deadline = math.inf  # its heap entries are stale now
            if pending.loaded:  # unloaded already when answered: no call
                self._unload(pending)

    def set_deadline(self, pending: _Pending, deadline: float) -> None:
        """The current attempt of ``pending`` ends at ``deadline`` (``math.inf``: never).

        Once it passes, :meth:`run_clock` sets ``pending.expired`` and wakes
        the request.  A new deadline clears ``expired``; the same one again
        changes nothing.  The heap holds at most about twice as many
        entries as requests are pending (stale entries are pruned): bounded
        memory however many requests come and go.
        """
        if deadline == pending.deadline:
            return
        pending.deadline = deadline
        pending.expired = False
        if deadline == math.inf:
            return  # its earlier entry, if any, is stale now
        heap = self._deadlines
        heapq.heappush(heap, (deadline, pending.request_id))
        if deadline < self._clock_due:
            self._clock_due = deadline
            if self._clock_scope is not None:
                self._clock_scope.deadline = deadline
        if len(heap) > 2 * len(self.pending) + 64:
            # Mostly entries of answered requests: drop them now, long before
            # they are due, so that the clock wakes only for live deadlines.
            live = self.pending
            heap[:] = [
                (due, rid)
                for due, rid in heap
                if (now_open := live.get(rid)) is not None and now_open.deadline == due
            ]
            heapq.heapify(heap)

    async def run_clock(self) -> None:
        """End each attempt at its deadline (:meth:`set_deadline`); runs until cancelled.

        :func:`open_reply_router` runs it for the router's life.  The
        attempts it ends wake with ``expired`` set; their requests decide
        what follows (``_attempts._request``).
        """
        heap, live = self._deadlines, self.pending
        while True:
            now = self.now()
            while heap and heap[0][0] <= now:
                deadline, request_id = heapq.heappop(heap)
                pending = live.get(request_id)
                if pending is not None and pending.deadline == deadline and not pending.expired:
                    pending.expired = True
                    pending.wake()
            self._clock_due = heap[0][0] if heap else math.inf
            with trio.CancelScope(deadline=self._clock_due) as scope:
                self._clock_scope = scope
                await trio.sleep_forever()
            self._clock_scope = None

    def send_to(self, pending: _Pending, peer: UUID) -> None:
        """Record that ``pending`` is about to go to ``peer``."""
        if pending.loaded:  # a first attempt is not: no call
            self._unload(pending)
        pending.current, pending.lost, pending.loaded = peer, False, True
        pending.accepted = False
        pending.sent_to.add(peer.int)
        key = peer.int
        self.load[key] = self.load.get(key, 0) + 1

    def _unload(self, pending: _Pending) -> None:
        if pending.loaded and pending.current is not None:
            pending.loaded = False
            key = pending.current.int
            left = self.load[key] - 1
            if left:
                self.load[key] = left
            else:
                del self.load[key]

    def outstanding(self, peer: UUID) -> int:
        """How many pending requests await a reply from ``peer``."""
        return self.load.get(peer.int, 0)

    async def membership_changed(self) -> None:
        """Wait for the next change after this call: a peer enters, exits,
        joins or leaves a group, its presence changes, or the node stops.

        Only changes after the call count (a ``RepeatedEvent``): check the
        state first with no checkpoint in between, as both callers do.
        """
        await self._membership.wait()

    async def run(self, events: EventStream) -> None:
        """Read ``events`` and route them (a router with a subscription of its own).

        :func:`open_reply_router` does not use it: there the node's
        :class:`~trizre.patterns._port.PatternPort` decodes once and calls
        :meth:`on_message` and :meth:`on_event`.  It runs :meth:`run_clock`
        beside, until the events end.
        """
        with unwrap_single_exception_group():
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self.run_clock)
                async for event in events:
                    if isinstance(event, Whisper):
                        try:
                            message = proto.decode(event.frames)
                        except proto.PatternDecodeError as exc:
                            log.debug(
                                "dropping malformed pattern traffic from %s: %s", event.peer, exc
                            )
                            continue
                        if isinstance(message, proto.Reply | proto.Accepted):
                            self.on_message(event.peer, message)
                        continue
                    self.on_event(event)
                nursery.cancel_scope.cancel()

    def on_message(self, peer: UUID, message: proto.Reply | proto.Accepted) -> None:
        """A REPLY or ACCEPTED from ``peer``: to the request waiting for it, or dropped."""
        if isinstance(message, proto.Reply):
            self.on_reply(peer, message)
        else:
            self._on_accepted(peer, message)

    def on_event(self, event: object) -> None:
        """A node event other than a WHISPER: presence changes wake the requests they concern."""
        if isinstance(event, Exit):
            self.suspicion.pop(event.peer, None)
        if isinstance(event, Exit | Silent | Leave):
            group = event.group if isinstance(event, Leave) else None
            for pending in self.pending.values():
                if (
                    pending.current == event.peer
                    and pending.reply is None
                    and (group is None or (group and group == pending.service))
                ):
                    self._unload(pending)
                    pending.lost = True
                    pending.wake()
        self._membership.set()

    def timed_out(self, pending: _Pending) -> None:
        """An attempt to ``pending.current`` went unanswered: suspect it."""
        if pending.current is not None:
            self.suspicion[pending.current] = self.suspicion.get(pending.current, 0) + 1

    def _on_accepted(self, peer: UUID, accepted: proto.Accepted) -> None:
        """The current target holds the request: its attempt stops being timed."""
        # Suspicion stays: its server reads, but its handlers may still hang.
        pending = self.pending.get(accepted.request_id)
        if (
            pending is not None
            and pending.current == peer
            and pending.reply is None
            and not pending.accepted
        ):
            pending.accepted = True
            pending.wake()

    def on_reply(self, peer: UUID, reply: proto.Reply) -> None:
        """A REPLY from ``peer``: to the request waiting for it, or dropped."""
        if self.suspicion:  # usually empty: a UUID key costs a Python-level hash
            self.suspicion.pop(peer, None)  # any reply, even a late one, proves it works
        pending = self.pending.get(reply.request_id)
        if (
            pending is None
            or pending.reply is not None
            # The current target's reply, by identity (the node hands out one
            # UUID object per peer), saves a Python-level UUID hash.
            or (peer is not pending.current and peer.int not in pending.sent_to)
        ):
            self.dropped += 1
            log.debug("dropping a stale, duplicate or foreign reply %#x", reply.request_id)
            return
        current = pending.current
        if pending.loaded and current is not None:  # _unload, inline: every reply comes here
            pending.loaded = False
            key = current.int
            left = self.load[key] - 1
            if left:
                self.load[key] = left
            else:
                del self.load[key]
        pending.reply = reply
        pending.replied_by = peer
        pending.wake()


@asynccontextmanager
async def open_reply_router(node: Node, max_in_flight: int = 1000) -> AsyncIterator[ReplyRouter]:
    """A reply router fed by the node's pattern port (one decode per envelope per node)."""
    router = ReplyRouter(node, max_in_flight)
    router.now = clock_reader()
    router.tracer = node.tracer
    async with open_port(node) as port:
        port.add_router(router)
        try:
            with unwrap_single_exception_group():
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(router.run_clock)
                    try:
                        yield router
                    finally:
                        nursery.cancel_scope.cancel()
        finally:
            port.remove_router(router)
