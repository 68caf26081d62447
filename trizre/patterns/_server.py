"""The serving side shared by every pattern: requests in, handler, replies out.

:class:`Server` is one server at work; :func:`~trizre.patterns._open_server.open_server`
checks its arguments, makes one and runs it for a block.
"""

from __future__ import annotations

import bisect
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final, final
from uuid import UUID

import attrs
import trio

from .. import Join, Node, NodeError, Whisper
from .._concurrency import Wakeup, checkpoint, clock_reader
from ..trace import _contract as kinds
from . import _admission as adm
from . import _protocol as proto
from ._admission import (
    _IN_PROGRESS,  # noqa: F401 -- where tests and older code find it
    Gate,
    IncomingRequest,
    ReplyCache,
)
from ._common import LATENCY_BUCKETS
from ._status import STATUS_GROUP, encode_status

__all__ = [
    "Handler",
    "IncomingRequest",
    "ReplyCache",
    "ReplyWith",
    "Server",
    "check_service_name",
]

log = logging.getLogger("trizre.patterns")

STATS_INTERVAL: Final = 5.0
"""Seconds between a busy server's announcements of its counters to watchers.

Counters go out at most this often, and only while they change and a
watcher is in the status group: an idle server, or one nobody watches,
sends nothing and its announcing task sleeps."""


class ReplyWith(Exception):
    """Raise it in a handler to answer with ``status`` and ``frames`` instead of 200.

    For statuses the application defines (Titanic's 300 "pending", 404 for
    a record that does not exist, ...).  Not logged as a failure.  Bad
    input: a status outside 0..65535 or a frame that is not ``bytes``
    raises ``ValueError`` or ``TypeError`` here.
    """

    def __init__(self, status: int, *frames: bytes) -> None:
        if not (isinstance(status, int) and 0 <= status <= 0xFFFF):
            raise ValueError(f"a status is 0..65535, got {status!r}")
        if not all(isinstance(f, bytes) for f in frames):
            raise TypeError("reply frames are bytes")
        super().__init__(status)
        self.status = status
        self.frames = frames


Handler = Callable[[IncomingRequest], Awaitable[bytes | Sequence[bytes]]]
"""An async function answering a request with one frame or a sequence of frames."""


def check_service_name(service: str) -> None:
    """Raise ``ValueError`` for a name that cannot be a service.

    Service names are ZRE group names (1..255 UTF-8 bytes); ``mmi.*`` is
    reserved for the management interface and cannot be offered.
    """
    if not isinstance(service, str) or not service:
        raise ValueError(f"a service name is a non-empty str, got {service!r}")
    if len(service.encode("utf-8")) > 255:
        raise ValueError(f"service name over 255 UTF-8 bytes: {service[:20]!r}...")
    if service.startswith("mmi."):
        raise ValueError(f"{service!r}: mmi.* names are reserved for the management interface")


# A runner lets the other tasks run at least this often (seconds) while it
# runs requests back to back: a handler need not yield.
_RUN_SLICE: Final = 0.001


@final
class Server:
    """A running server: what :func:`open_server` yields.

    Create it with :func:`open_server`, never directly: the constructor
    checks nothing (bad input is :func:`open_server`'s to reject).

    Its counters are for tests and monitoring: ``received`` requests for
    it, ``executed`` handler runs, ``replied`` replies sent (cached resends
    included), ``retried`` requests asked again while held or after they
    were answered (the reply cache), ``accepted`` ACCEPTED answers sent,
    ``refused`` requests refused by the gate (a passive Binary Star
    server), ``shed`` requests refused because ``max_queued`` were already
    waiting; ``held`` is the number of requests it holds now, running or
    waiting; ``unsent`` counts answers that ran nothing (a 503, an
    ACCEPTED again, a cached reply) dropped because as many answers as the
    server may hold were already waiting for slow clients (their clients
    retry after their attempt timeout).  Watchers get them, with a
    histogram of handler times, in the status's ``stats`` (at most every
    :data:`STATS_INTERVAL` seconds).

    The rules are :class:`~trizre.patterns._admission.Admission`'s; requests
    come from the node's :class:`~trizre.patterns._port.PatternPort`
    through :meth:`deliver`.
    """

    def __init__(
        self,
        node: Node,
        service: str | None,
        handler: Handler,
        *,
        reply_cache: ReplyCache | None = None,
        max_concurrency: int = 64,
        max_queued: int = 10_000,
        accept_after: float = 0.1,
        gate: Gate | None = None,
        hide_errors: bool = False,
    ) -> None:
        self.node = node
        self._tracer = node.tracer  # set for the node's life before it is yielded
        self.service = service
        # The admission rules and their counters (pure); the trace watches its decisions.
        self._core = adm.Admission(
            capacity=max_concurrency + max_queued,
            accept_after=accept_after,
            cache=reply_cache,
            gate=gate,
            observer=self._observe if self._tracer is not None else None,
        )
        self.unsent = 0  # answers not run (refusals, ...) dropped: the outbox was full
        self._failure: BaseException | None = None  # the gate raised: the server stops
        self._failed = Wakeup()
        # Handler times: a count per LATENCY_BUCKETS bound (and one above), and their sum.
        self._latency = [0] * (len(LATENCY_BUCKETS) + 1)
        self._latency_sum = 0.0
        # What else the status's stats carry (Titanic's queue), read when they go out.
        self.stats_source: Callable[[], dict[str, Any]] | None = None
        self._stats_sent: dict[str, Any] | None = None
        self._stats_idle = True  # the announcing task waits for a change to count
        self._handler = handler
        # The run's clock, for every read the server makes (three a
        # request): one Python call a read where trio.current_time() makes
        # three (made inside the run: open_server is).
        self._now = clock_reader()
        self._cache = reply_cache
        self._hide_errors = hide_errors
        self._wanted = service or ""
        # Held requests wait here for a runner: a pool of tasks, started as
        # requests need them (up to max_concurrency) and kept, because a task
        # per request costs more to start and end than a fast handler takes.
        # One runner at a time is summoned to the queue (see _runner).
        self._waiting: deque[IncomingRequest] = deque()
        self._work_ready = Wakeup()  # idle runners
        self._runners = 0
        self._summoned = False  # a runner is on its way to the queue
        self._nursery: trio.Nursery | None = None  # where runners start (set by _serve)
        self._max_concurrency = max_concurrency
        self._capacity = max_concurrency + max_queued
        # Answers that could not go at once (the client's queue was full)
        # wait here, in order, for one task that waits for room.  Replies
        # to held requests always wait; answers that ran nothing (refusals,
        # ACCEPTED again, cached replies) wait only while fewer than
        # _capacity are waiting, beyond which they are counted unsent.
        self._outbox: deque[tuple[IncomingRequest, proto.Reply | proto.Accepted, bool]] = deque()
        self._outbox_ready = Wakeup()
        self._accept_due = Wakeup()
        # What watchers are told (trizre.patterns._status); None in the targets: the group.
        self.status: dict[str, Any] = (
            {"key": f"service:{service}", "kind": "service", "service": service}
            if service
            else {"key": "server", "kind": "server"}
        )
        self._status_to: set[UUID | None] = {None}
        self._status_due = Wakeup()

    def set_status(self, **fields: Any) -> None:
        """Update what this server tells watchers, and tell them (``trizre watch``).

        Fields must be JSON-encodable; ``key`` and ``kind`` are the server's.
        """
        fields.pop("key", None)
        fields.pop("kind", None)
        self.status.update(fields)
        self._announce(None)

    def _announce(self, to: UUID | None) -> None:
        self._status_to.add(to)
        self._status_due.wake_one()

    def stats_changed(self) -> None:
        """Say a counter changed, so that watchers hear of it within :data:`STATS_INTERVAL`.

        Requests wake it by themselves; call it for ``stats_source``'s
        counters that change without a request (Titanic's completions).
        """
        if self._stats_idle:
            self._stats_idle = False
            self._status_due.wake_one()

    def stats(self) -> dict[str, Any]:
        """The counters watchers are told (the status's ``stats``), as JSON-able data."""
        stats: dict[str, Any] = {
            "received": self.received,
            "executed": self.executed,
            "replied": self.replied,
            "retried": self.retried,
            "accepted": self.accepted,
            "refused": self.refused,
            "shed": self.shed,
            "unsent": self.unsent,
            "held": self.held,
            "latency": {
                "le": list(LATENCY_BUCKETS),
                "counts": list(self._latency),
                "sum": self._latency_sum,
            },
        }
        if self.stats_source is not None:
            stats.update(self.stats_source())
        return stats

    async def _send_status(self) -> None:
        """Send the status to each watcher due it: all of them (a SHOUT) or one that joined.

        Counters that changed go to the group at most every
        :data:`STATS_INTERVAL` seconds; with no change it parks until one.
        """
        while True:
            while not self._status_to:
                if self._stats_idle:
                    await self._status_due.wait()
                    continue
                with trio.move_on_after(STATS_INTERVAL):
                    await self._status_due.wait()  # or a watcher arriving: it is due now
                if self._status_to:
                    break
                if self.stats() != self._stats_sent and self._watched():
                    self._status_to.add(None)
                else:
                    # Nothing new, or nobody to tell (a watcher that joins is
                    # sent the status then): wait for the next request.
                    self._stats_idle = True
            targets, self._status_to = self._status_to, set()
            self.status["stats"] = self._stats_sent = self.stats()
            frames = encode_status(self.status)
            for target in targets:
                try:
                    if target is None:
                        await self.node.shout(STATUS_GROUP, *frames)
                    else:
                        await self.node.whisper(target, *frames)
                except (NodeError, trio.ClosedResourceError) as exc:
                    log.debug("status not sent to %s: %s", target or STATUS_GROUP, exc)

    def _watched(self) -> bool:
        """Is any watcher in the status group? (No one to tell: no message to build.)"""
        try:
            return bool(self.node.peers_by_group(STATUS_GROUP))
        except trio.ClosedResourceError:
            return False

    # Counters (see the class docstring), kept by the admission core.
    @property
    def received(self) -> int:
        return self._core.received

    @property
    def executed(self) -> int:
        return self._core.executed

    @property
    def replied(self) -> int:
        return self._core.replied

    @property
    def retried(self) -> int:
        return self._core.retried

    @property
    def accepted(self) -> int:
        return self._core.accepted

    @property
    def refused(self) -> int:
        return self._core.refused

    @property
    def shed(self) -> int:
        return self._core.shed

    @property
    def held(self) -> int:
        """Requests held now: running, or waiting for a free handler."""
        return self._core.held

    def _observe(self, decision: adm.Decision) -> None:
        """The trace of the admission core's decisions (``docs/traces.md``, server side)."""
        tracer = self._tracer
        assert tracer is not None
        kind: str
        fields: dict[str, object] = {}
        if isinstance(decision, adm.Received):
            kind = kinds.REQUEST_RECEIVED
        elif isinstance(decision, adm.Refused):
            kind, fields = kinds.REQUEST_REFUSED, {"status": decision.status}
        elif isinstance(decision, adm.CachedReply):
            kind = kinds.DEDUPE_HIT
        elif isinstance(decision, adm.Executed):
            kind, fields = kinds.REQUEST_EXECUTED, {"idempotent": decision.idempotent}
        elif isinstance(decision, adm.Replied) and decision.status is not None:
            kind, fields = kinds.REPLY_SENT, {"status": decision.status}
        else:
            return  # held again, running elsewhere, admitted, ACCEPTED: not traced
        request = decision.request
        tracer.record(
            kind,
            rid=f"{request.request_id:016x}",
            client=request.peer,
            service=request.service,
            **fields,
        )

    def deliver(self, peer: UUID, name: str, message: proto.Request) -> None:
        """A request for this server arrived (from the port, or :meth:`_serve`); never waits.

        The admission core decides; this carries it out: a held request
        goes to a runner, a refusal or a cached reply to the outbox.  It
        never waits for a free handler: a request held here is answered
        ACCEPTED by :meth:`_accept` if it is not answered within
        ``accept_after``, so its client stops timing it (README §5.4).
        A gate that raises stops the server with its exception.
        """
        self.receive(
            adm.new_incoming(
                peer,
                name,
                message.request_id,
                message.service,
                body=message.body,
                version=message.version,
            )
        )

    def receive(self, request: IncomingRequest) -> None:
        """:meth:`deliver`, for a request the port decoded straight into an
        :class:`IncomingRequest` (one object a request, shared by every server
        of its service); never waits."""
        if self._failure is not None:
            return
        try:
            verdict = self._core.admit(request, self._now())
        except Exception as exc:
            self._failure = exc
            self._failed.wake_all()
            return
        if self._stats_idle:
            self.stats_changed()
        if isinstance(verdict, adm.Admitted):
            if self._accept_due.waiting:  # else it is awake, or sleeps until the oldest is due
                self._accept_due.wake_one()
            self._waiting.append(request)
            if not self._summoned:  # one on its way already: no call
                self._summon()
        elif isinstance(verdict, adm.Refused):
            # Not executed: the client tries another worker (README §7).
            self._answer(request, proto.Reply(request.request_id, verdict.status), record=False)
        elif isinstance(verdict, adm.HeldAgain):
            self._answer(request, proto.Accepted(request.request_id))
        elif isinstance(verdict, adm.CachedReply):
            self._answer(request, verdict.reply)
        # RunningElsewhere: no answer; the client asks again and finds it stored.

    def watcher_joined(self, peer: UUID) -> None:
        """A watcher joined the status group: it is sent the status."""
        self._announce(peer)

    async def _watch_failure(self) -> None:
        """Raise what the gate raised, out of the server's block."""
        while self._failure is None:
            await self._failed.wait()
        raise self._failure

    async def _serve(self, nursery: trio.Nursery) -> None:
        """Read the node's events with a subscription of its own, and serve.

        :func:`open_server` does not use it (the node's port reads for
        every pattern there); it is for a server run by itself.
        """
        self._nursery = nursery
        async for event in self.node.events():
            if not isinstance(event, Whisper):
                if isinstance(event, Join) and event.group == STATUS_GROUP:
                    self.watcher_joined(event.peer)
                continue
            try:
                message = proto.decode(event.frames)
            except proto.PatternDecodeError as exc:
                log.debug("dropping malformed pattern traffic from %s: %s", event.peer, exc)
                continue
            if isinstance(message, proto.Request) and message.service == self._wanted:
                self.deliver(event.peer, event.name, message)
                if self._failure is not None:
                    raise self._failure

    async def _accept(self) -> None:
        """Say ACCEPTED for each request held ``accept_after`` without a reply.

        A request answered sooner costs no ACCEPTED: fast handlers pay
        nothing for it.
        """
        core = self._core
        while True:
            due = core.next_accept()
            if due is None:
                await self._accept_due.wait()
            elif self._now() < due:
                await trio.sleep_until(due)  # the oldest first: the rest are due later
            else:
                for accept in core.accepts_due(self._now()):
                    self._queue(accept.request, proto.Accepted(accept.request.request_id))

    def _answer(
        self,
        request: IncomingRequest,
        message: proto.Reply | proto.Accepted,
        *,
        record: bool = True,
    ) -> None:
        """Send an answer that ran nothing; counted unsent if the outbox is full."""
        if len(self._outbox) >= self._capacity:
            self.unsent += 1
            self.stats_changed()  # no request woke the announcer for this one
            log.debug(
                "outbox full: answer to %#x from %s not sent", request.request_id, request.peer
            )
            return
        self._queue(request, message, record=record)

    def _queue(
        self,
        request: IncomingRequest,
        message: proto.Reply | proto.Accepted,
        *,
        record: bool = True,
    ) -> None:
        """Send a reply (or an ACCEPTED) now if the client has room, else queue it.

        ``record``: count it (and trace a reply) once sent; refusals are not.
        """
        if not self._outbox:
            sent = _reply_nowait(self.node, request, message)
            if sent is not None:
                if sent and record:
                    self._core.sent(request, message)
                return
        self._outbox.append((request, message, record))
        self._outbox_ready.wake_one()

    def _summon(self) -> None:
        """Send a runner to the queue, unless one is on its way or none is free.

        One at a time: a runner whose handlers finish without waiting takes
        the next request itself, so a batch of fast requests costs one task
        step, not one per request; a runner that takes a request while more
        wait summons the next, so a handler that waits holds up nothing.
        """
        if self._summoned:
            return
        if self._work_ready:
            self._work_ready.wake_one()
        elif self._runners < self._max_concurrency and self._nursery is not None:
            self._runners += 1
            self._nursery.start_soon(self._runner)
        else:
            return  # every runner is busy: the first one free takes it
        self._summoned = True

    async def _runner(self) -> None:
        """Run held requests one after another, oldest first; park while there are none."""
        waiting = self._waiting
        while True:
            self._summoned = False  # started or unparked by _summon: the summons is answered
            due = self._now() + _RUN_SLICE
            while waiting:
                request = waiting.popleft()
                if waiting and not self._summoned:
                    self._summon()  # should this handler wait, the next one need not
                # _run_one's own clock reading: one less per request.
                if await self._run_one(request) >= due and waiting:
                    await checkpoint()
                    due = self._now() + _RUN_SLICE
            # Parking is this task's schedule point.
            await self._work_ready.wait()

    def _drop_waiting(self) -> None:
        """Forget the requests no runner took (the server is stopping): none ran."""
        while self._waiting:
            self._core.abandoned(self._waiting.popleft())  # a retry must run it

    async def _run_one(self, request: IncomingRequest) -> float:
        """Run ``request``'s handler and send its reply; the time it finished."""
        core = self._core
        try:
            core.started(request)
            started = self._now()
            try:
                frames = _as_frames(await self._handler(request))
                # In the request's version: sent as it is, no copy (_encode).
                reply = proto.new_reply(
                    request.request_id, proto.STATUS_OK, frames, request.version
                )
            except ReplyWith as answer:
                reply = proto.Reply(request.request_id, answer.status, answer.frames)
            except Exception as exc:
                log.error(
                    "handler failed on request %#x from %s",
                    request.request_id,
                    request.name or request.peer,
                    exc_info=exc,
                )
                reply = proto.Reply(request.request_id, proto.Status.ERROR, self._error(exc))
            now = self._now()
            took = now - started
            self._latency[bisect.bisect_left(LATENCY_BUCKETS, took)] += 1
            self._latency_sum += took
            core.finished(request, reply, now)
            self._queue(request, reply)
            return now
        except BaseException:
            core.abandoned(request)  # not finished: a retry must run it
            raise

    def _error(self, exc: Exception) -> tuple[bytes, ...]:
        """A 500's body: the exception's type and message, unless hidden."""
        if self._hide_errors:
            return ()
        return (type(exc).__name__.encode(), str(exc).encode("utf-8", "replace")[:4096])

    async def _send_replies(self) -> None:
        """Send the queued replies in order, waiting for room at each client."""
        outbox = self._outbox
        while True:
            while not outbox:
                await self._outbox_ready.wait()
            # Empty again after this loop: parking is this task's schedule point.
            while outbox:
                request, message, record = outbox[0]
                if await _reply(self.node, request, message) and record:
                    self._core.sent(request, message)
                outbox.popleft()


def _reply_nowait(
    node: Node, request: IncomingRequest, reply: proto.Reply | proto.Accepted
) -> bool | None:
    """Send a reply (or an ACCEPTED) to ``request``'s client if it has room now; never waits.

    True: sent.  False: dropped, the client is gone or the node has stopped
    (see :func:`_reply`).  None: no room now, nothing sent.
    """
    try:
        return True if node.whisper_nowait(request.peer, *_encode(request, reply)) else None
    except (NodeError, trio.ClosedResourceError) as exc:
        log.debug("could not reply to %s: %s", request.peer, exc)
        return False


def _encode(request: IncomingRequest, reply: proto.Reply | proto.Accepted) -> list[bytes]:
    """``reply``'s frames in the envelope version ``request`` came in (README §4)."""
    if type(reply) is proto.Reply:  # every request's: encoded as it is, in that version
        return proto.encode_reply(reply.request_id, reply.status, reply.body, request.version)
    if request.version != reply.version:
        reply = attrs.evolve(reply, version=request.version)
    return proto.encode(reply)


async def _reply(node: Node, request: IncomingRequest, reply: proto.Reply | proto.Accepted) -> bool:
    """Send a reply (or an ACCEPTED) to ``request``'s client; no checkpoint when it can go at once.

    False: the client is gone, or the node has stopped.
    """
    if (sent := _reply_nowait(node, request, reply)) is not None:
        return sent
    peer = request.peer
    try:
        await node.whisper(peer, *_encode(request, reply))
    except (NodeError, trio.ClosedResourceError) as exc:
        # NodeError: the client is gone; if it comes back it will ask again.
        # ClosedResourceError: the node's block ended before this server's (a
        # handler finished after it): no reply can go through it, and its
        # peers saw it exit, so clients retry elsewhere.  Not the server's
        # failure: it must not end the server's block with an error.
        log.debug("could not reply to %s: %s", peer, exc)
        return False
    return True


def _as_frames(result: bytes | Sequence[bytes]) -> tuple[bytes, ...]:
    if isinstance(result, bytes):
        return (result,)
    frames = tuple(result)
    for frame in frames:  # a loop, not all() over a generator: every reply comes here
        if not isinstance(frame, bytes):
            raise TypeError("a handler must return bytes or a sequence of bytes")
    return frames
