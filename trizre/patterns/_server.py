"""The serving side shared by every pattern: requests in, handler, replies out."""

from __future__ import annotations

import logging
import math
from collections import OrderedDict, deque
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Final, final
from uuid import UUID

import attrs
import trio

from .._events import NodeError, Whisper
from .._node import Node
from .._util import unwrap_single_exception_group
from . import _protocol as proto

__all__ = [
    "Handler",
    "IncomingRequest",
    "ReplyCache",
    "Server",
    "check_service_name",
    "open_server",
]

log = logging.getLogger("trizre.patterns")


@final
@attrs.frozen
class IncomingRequest:
    """A request as a handler sees it."""

    peer: UUID
    name: str
    request_id: int
    service: str
    body: tuple[bytes, ...]


Handler = Callable[[IncomingRequest], Awaitable[bytes | Sequence[bytes]]]
"""An async function answering a request with one frame or a sequence of frames."""

Gate = Callable[[IncomingRequest], "int | None"]


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


_IN_PROGRESS: Final = object()


@final
class ReplyCache:
    """Remembers replies by (client, request id) so a retried request runs once.

    Opt-in, for non-idempotent services: a retry of a request that is still
    running is ignored (its reply will come), a retry of a finished one
    gets the stored reply again without running the handler.  Entries are
    dropped beyond ``max_entries`` (oldest first) or after ``max_age``
    seconds; a retry that arrives later than that runs again.

    Bad input: ``max_entries < 1`` or a non-positive ``max_age`` raises
    ``ValueError``.
    """

    def __init__(self, max_entries: int = 10_000, max_age: float = 300.0) -> None:
        if max_entries < 1:
            raise ValueError(f"max_entries must be at least 1, got {max_entries}")
        if not (max_age > 0 and math.isfinite(max_age)):
            raise ValueError(f"max_age must be a positive number of seconds, got {max_age}")
        self.max_entries = max_entries
        self.max_age = max_age
        self._entries: OrderedDict[tuple[UUID, int], tuple[float, object]] = OrderedDict()
        self.hits = 0

    def __len__(self) -> int:
        return len(self._entries)

    def _expire(self, now: float) -> None:
        entries = self._entries
        while entries and (
            len(entries) > self.max_entries or next(iter(entries.values()))[0] + self.max_age < now
        ):
            entries.popitem(last=False)

    def lookup(self, key: tuple[UUID, int], now: float) -> proto.Reply | object | None:
        """The stored reply; a marker object while the request is still running;
        ``None`` if never seen or forgotten.  ``hits`` counts stored replies found.
        """
        self._expire(now)
        entry = self._entries.get(key)
        if entry is None:
            return None
        if isinstance(entry[1], proto.Reply):
            self.hits += 1
        return entry[1]

    def start(self, key: tuple[UUID, int], now: float) -> None:
        """Mark ``key`` as running (the newest entry)."""
        self._entries[key] = (now, _IN_PROGRESS)
        self._entries.move_to_end(key)
        self._expire(now)

    def finish(self, key: tuple[UUID, int], reply: proto.Reply, now: float) -> None:
        if key in self._entries:
            self._entries[key] = (now, reply)
            self._entries.move_to_end(key)
        self._expire(now)

    def forget(self, key: tuple[UUID, int]) -> None:
        self._entries.pop(key, None)


@final
class Server:
    """A running server; counters for tests and monitoring."""

    def __init__(self, node: Node, service: str | None) -> None:
        self.node = node
        self.service = service
        self.executed = 0  # handler runs
        self.replied = 0  # replies sent (cached resends included)
        self.refused = 0  # requests refused by the gate (e.g. a passive Binary Star)


async def _reply(node: Node, peer: UUID, reply: proto.Reply) -> bool:
    """Send a reply; no checkpoint when it can go at once.  False: the client is gone."""
    frames = proto.encode(reply)
    try:
        if not node.whisper_nowait(peer, *frames):
            await node.whisper(peer, *frames)
    except NodeError as exc:
        # The client is gone; if it comes back it will ask again.
        log.debug("could not reply to %s: %s", peer, exc)
        return False
    return True


def _as_frames(result: bytes | Sequence[bytes]) -> tuple[bytes, ...]:
    if isinstance(result, bytes):
        return (result,)
    frames = tuple(result)
    if not all(isinstance(f, bytes) for f in frames):
        raise TypeError("a handler must return bytes or a sequence of bytes")
    return frames


@asynccontextmanager
async def open_server(
    node: Node,
    handler: Handler,
    *,
    service: str | None = None,
    reply_cache: ReplyCache | None = None,
    max_concurrency: int = 64,
    _gate: Gate | None = None,
) -> AsyncIterator[Server]:
    """Answer pattern requests arriving at ``node`` with ``handler``.

    With ``service=None`` it answers requests addressed to this peer
    directly (Lazy Pirate); with a service name it joins that ZRE group and
    answers requests for that service (a Majordomo-style worker), leaving
    the group when the block ends.  Requests for anything else are left to
    other servers on the node.

    Up to ``max_concurrency`` handlers run at once; beyond that the server
    stops reading, which backpressures the node and, through it, clients.
    A handler that raises is answered with status 500 and the server goes
    on; its cancellation (the block ending) sends no reply.

    Bad input: an invalid or ``mmi.*`` service name, or ``max_concurrency
    < 1``, raises ``ValueError`` before anything starts.
    """
    if service is not None:
        check_service_name(service)
    if max_concurrency < 1:
        raise ValueError(f"max_concurrency must be at least 1, got {max_concurrency}")
    wanted = service or ""
    server = Server(node, service)
    limiter = trio.CapacityLimiter(max_concurrency)
    events = node.events()

    tracer = node.tracer

    def trace(kind: str, request: IncomingRequest, **fields: object) -> None:
        if tracer is not None:
            tracer.record(
                kind,
                rid=f"{request.request_id:016x}",
                client=request.peer,
                service=request.service,
                **fields,
            )

    async def run_one(request: IncomingRequest, token: object) -> None:
        key = (request.peer, request.request_id)
        try:
            server.executed += 1
            trace("request-executed", request, idempotent=reply_cache is not None)
            try:
                frames = _as_frames(await handler(request))
                reply = proto.Reply(request.request_id, proto.Status.OK, frames)
            except Exception as exc:
                log.warning("handler failed on request %#x: %r", request.request_id, exc)
                reply = proto.Reply(
                    request.request_id, proto.Status.ERROR, (type(exc).__name__.encode(),)
                )
            if reply_cache is not None:
                reply_cache.finish(key, reply, trio.current_time())
            outbox.append((request, reply))
            outbox_ready.unpark()
        except BaseException:
            if reply_cache is not None:
                reply_cache.forget(key)  # not finished: a retry must run it
            raise
        finally:
            limiter.release_on_behalf_of(token)

    # Replies leave through one task that sends all those queued so far
    # back to back: one libzmq wake-up per batch rather than per reply.
    outbox: deque[tuple[IncomingRequest, proto.Reply]] = deque()
    outbox_ready = trio.lowlevel.ParkingLot()

    async def send_replies() -> None:
        while True:
            while not outbox:
                await outbox_ready.park()
            while outbox:
                request, reply = outbox.popleft()
                if await _reply(node, request.peer, reply):
                    server.replied += 1
                    trace("reply-sent", request, status=reply.status)
            await trio.lowlevel.checkpoint()

    async def serve(nursery: trio.Nursery) -> None:
        async for event in events:
            if not isinstance(event, Whisper):
                continue
            try:
                message = proto.decode(event.frames)
            except proto.PatternDecodeError as exc:
                log.debug("dropping malformed pattern traffic from %s: %s", event.peer, exc)
                continue
            if not isinstance(message, proto.Request) or message.service != wanted:
                continue
            request = IncomingRequest(
                event.peer, event.name, message.request_id, message.service, message.body
            )
            trace("request-received", request)
            if _gate is not None and (status := _gate(request)) is not None:
                server.refused += 1
                trace("request-refused", request, status=status)
                await _reply(node, event.peer, proto.Reply(request.request_id, status))
                continue
            if reply_cache is not None:
                key = (request.peer, request.request_id)
                cached = reply_cache.lookup(key, trio.current_time())
                if isinstance(cached, proto.Reply):
                    trace("dedupe-hit", request)
                    if await _reply(node, request.peer, cached):
                        server.replied += 1
                        trace("reply-sent", request, status=cached.status)
                    continue
                if cached is not None:
                    continue  # still running: its reply will answer the retry too
                reply_cache.start(key, trio.current_time())
            token = object()  # equal requests (a retry) are still distinct borrowers
            await limiter.acquire_on_behalf_of(token)
            nursery.start_soon(run_one, request, token)

    with unwrap_single_exception_group():
        async with trio.open_nursery() as nursery:
            if service is not None:
                await node.join(service)
            nursery.start_soon(serve, nursery)
            nursery.start_soon(send_replies)
            try:
                yield server
            finally:
                events.close()
                nursery.cancel_scope.cancel()
                if service is not None:
                    with trio.CancelScope(shield=True):
                        await node.leave(service)
