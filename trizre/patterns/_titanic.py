"""Titanic: disconnected, disk-backed requests (the Guide's 9/TSP), over ZRE services.

A Titanic node offers three services (``patterns/titanic.md``):

* ``titanic.request``: body ``[service, frame...]``; the request is stored
  durably, then answered 200 ``[id]`` (a UUID in hex);
* ``titanic.reply``: body ``[id]``; 200 with the reply's frames when done
  (or the worker's error status and body), 300 while pending, 400 when
  unknown or closed;
* ``titanic.close``: body ``[id]``; 200, whatever it knew (idempotent).

A dispatcher sends every stored request to its service, again and again
until a worker answers, with a request id derived from the Titanic id, so
that after a Titanic restart a worker with ``ReplyCache(per_client=False)``
recognises it and does not run it twice.

The store is SQLite in WAL mode with ``synchronous=FULL``: a request is
acknowledged only after its commit reached the disk, so ``kill -9`` at any
moment loses nothing acknowledged.  The same transaction records which
client request (node, request id) it was, so a retry reaching a restarted
Titanic gets the same id instead of a second request, and keeps a header
row (identity, request count) that the checks at open compare with the
rows: a damaged store raises :class:`TitanicStoreDamaged`.  SQLite calls are blocking; they run
one at a time in a worker thread (``trio.to_thread``).

Writes are group-committed: those that arrive while a commit is under
way (requests stored, replies stored, requests forgotten) share the next
transaction and its one fsync, and each is acknowledged only once that
transaction is on disk.

This module is the service and its client; the store and the checks made
before it opens are ``_titanic_store.py``, the group commit
``_titanic_commit.py``.
"""

from __future__ import annotations

import functools
import logging
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Literal, TypeVar, TypeVarTuple, cast, final

import trio

from .. import Node
from .._concurrency import unwrap_single_exception_group
from . import _protocol as proto
from ._common import PatternError, RemoteError, RequestAbandoned, RetryPolicy
from ._open_server import open_server
from ._server import (
    IncomingRequest,
    ReplyCache,
    ReplyWith,
    Server,
    check_service_name,
)
from ._service_client import ServiceClient, open_service_client
from ._titanic_commit import _GroupCommit
from ._titanic_memory import _Answers, _DispatchQueue
from ._titanic_store import (
    PENDING,
    UNKNOWN,
    TitanicStoreDamaged,
    _Accept,
    _Changes,
    _Close,
    _Finish,
    _Lookup,
    _Op,
    _pack,
    _Store,
    _unpack,
    _wal_promise,  # noqa: F401 -- where tests find it
)

__all__ = [
    "PENDING",
    "UNKNOWN",
    "Titanic",
    "TitanicClient",
    "TitanicStoreDamaged",
    "TitanicUnknown",
    "open_titanic",
    "open_titanic_client",
]

log = logging.getLogger("trizre.patterns.titanic")
T = TypeVar("T")
Ts = TypeVarTuple("Ts")

BAD = 400  # a body Titanic cannot read (9/TSP has no other error status)
_HEX = frozenset(b"0123456789abcdef")
# Pending requests the dispatcher holds in memory, per dispatch slot: more
# arriving at once than that are read back from the disk later.
_READY_PER_SLOT = 4
# The latest answers held in memory for titanic.reply: at most this many,
# and this many bytes of reply frames (a client usually asks soon after).
_ANSWERS_HELD = 10_000
_ANSWER_BYTES_HELD = 16 * 2**20


class TitanicUnknown(PatternError):
    """Titanic knows no request by that id (it never took it, or it was closed)."""


def wire_id(titanic_id: str) -> int:
    """The pattern request id Titanic dispatches ``titanic_id`` under: stable across restarts."""
    return uuid.UUID(hex=titanic_id).int >> 64


@final
class Titanic:
    """A running Titanic service: what :func:`open_titanic` yields (never made directly).

    Counters, for tests and monitoring: ``accepted`` requests stored,
    ``completed`` answered by a worker, ``in_flight`` being dispatched now.
    """

    def __init__(self, node: Node, store: _Store, client: ServiceClient, max_dispatch: int) -> None:
        self.node = node
        self.accepted = 0
        self.completed = 0
        self._store = store
        self._client = client
        self._disk = trio.CapacityLimiter(1)  # one SQLite call at a time
        self._writes = _GroupCommit(store, self._on_disk, self._committed)
        self._max_dispatch = max_dispatch
        # What is pending, as far as memory knows: the disk is read only when it may know more.
        self._queue = _DispatchQueue(_READY_PER_SLOT * max_dispatch)
        # The latest answers, for titanic.reply without the disk.
        self._answers = _Answers(_ANSWERS_HELD, _ANSWER_BYTES_HELD)
        # Set when a request arrives or a dispatch slot frees: the dispatcher looks again.
        self._more = trio.Event()
        # Announcing the counters to watchers: titanic.request's server, once it runs.
        self._announcer: Server | None = None
        self._pending_at_start = 0

    @property
    def in_flight(self) -> int:
        """Requests being sent to workers now."""
        return len(self._queue.in_flight)

    def _stats(self) -> dict[str, Any]:
        """Titanic's part of its titanic.request server's announced stats."""
        pending = self._pending_at_start + self.accepted - self.completed
        return {
            "titanic": {
                "accepted": self.accepted,
                "completed": self.completed,
                "pending": max(pending, 0),
                "in_flight": self.in_flight,
            }
        }

    async def _on_disk(self, fn: Callable[[*Ts], T], *args: *Ts) -> T:
        """Run a store call in a thread, one at a time (SQLite blocks)."""
        return await trio.to_thread.run_sync(fn, *args, limiter=self._disk)

    def _committed(self, ops: Sequence[_Op], changes: _Changes) -> None:
        """A batch is on disk: memory follows (even if the batch's callers left).

        Its new requests are counted and handed to the dispatcher, its
        answers kept for ``titanic.reply``, its closed requests dropped
        from both.
        """
        if changes.stored:
            stored = changes.stored
            self.accepted += len(stored)
            self._queue.stored([(i, service, _unpack(body)) for i, service, body in stored])
            self._more.set()  # never waits for the dispatcher: no worker is no reason to refuse
        for titanic_id, status, reply in changes.answered:
            self._answers.add(titanic_id, status, reply)
        closed = [op.titanic_id for op in ops if type(op) is _Close]
        if closed:
            self._queue.closed(closed)
            self._answers.forget(closed)

    # -------------------------------------------------------------- services

    async def _request(self, request: IncomingRequest) -> list[bytes]:
        if not request.body:
            raise ReplyWith(BAD, b"titanic.request: the service, then the request's frames")
        try:
            service = request.body[0].decode("utf-8")
            check_service_name(service)
        except ValueError as exc:
            raise ReplyWith(BAD, f"titanic.request: {exc}".encode()) from None
        # The client's own name for this request: its retry, even one that
        # reaches a Titanic restarted since, finds the id the store gave it.
        asked = f"{request.peer.hex}/{request.request_id:016x}"
        titanic_id = await self._writes.write(_Accept(service, _pack(request.body[1:]), asked))
        return [cast(str, titanic_id).encode()]

    async def _reply(self, request: IncomingRequest) -> list[bytes]:
        titanic_id = _id(request)
        held = self._answers.get(titanic_id)  # a recent answer: no trip to the disk
        if held is not None:
            status, frames = held[0], _unpack(held[1])
        else:
            # Through the writer's queue: lookups arriving together are one query, one thread hop.
            state = await self._writes.write(_Lookup(titanic_id))
            status, frames = cast(tuple[int, tuple[bytes, ...]], state)
        if status != proto.Status.OK:
            raise ReplyWith(status, *frames)
        return list(frames)

    async def _close(self, request: IncomingRequest) -> list[bytes]:
        titanic_id = _id(request)
        # A lookup that comes after this close sees the disk's answer: the close's.
        self._answers.closing(titanic_id)
        try:
            await self._writes.write(_Close(titanic_id))
        finally:
            self._answers.close_done(titanic_id)
        return []

    # ------------------------------------------------------------ dispatcher

    async def _dispatcher(self, nursery: trio.Nursery) -> None:
        """Keep up to ``max_dispatch`` of the oldest pending requests in flight.

        The disk is the queue.  Requests committed while memory holds
        everything pending are handed over by their commit; otherwise
        (at start, after more arrived than memory holds) the oldest
        pending are read from the disk once memory has run dry
        (:class:`_DispatchQueue`).  So nothing accepted can be missed,
        however many arrive while every slot is busy, and the disk is
        not read for requests memory already has.
        """
        queue = self._queue
        while True:
            self._more = trio.Event()
            free = self._max_dispatch - len(queue.in_flight)
            if free > 0 and queue.need_read:
                queue.read_ends(await self._on_disk(self._store.pending, queue.read_begins()))
            for titanic_id, service, frames in queue.take(free):
                nursery.start_soon(self._deliver, titanic_id, service, frames)
            await self._more.wait()

    async def _deliver(self, titanic_id: str, service: str, frames: tuple[bytes, ...]) -> None:
        """Send one stored request until a worker answers; store the answer."""
        backoff = 0.5
        try:
            while True:
                try:
                    reply = await self._client.request(
                        service, *frames, request_id=wire_id(titanic_id)
                    )
                    status, body = int(proto.Status.OK), reply
                    break
                except RemoteError as exc:
                    status, body = exc.status, exc.body
                    break
                except RequestAbandoned:
                    log.info(
                        "%s for %r: no worker answered; again in %.1f s",
                        titanic_id,
                        service,
                        backoff,
                    )
                    await trio.sleep(backoff)
                    backoff = min(backoff * 2, 30.0)
            await self._writes.write(_Finish(titanic_id, status, _pack(body)))
            self.completed += 1
            if self._announcer is not None:
                self._announcer.stats_changed()
        finally:
            self._queue.finished(titanic_id)
            self._more.set()


def _id(request: IncomingRequest) -> str:
    """The request's Titanic id; 400 for anything but one frame of 32 hex digits."""
    body = request.body
    if len(body) != 1 or len(body[0]) != 32 or not _HEX.issuperset(body[0]):
        raise ReplyWith(BAD, f"{request.service}: the body is one Titanic id".encode())
    return body[0].decode("ascii")


@asynccontextmanager
async def open_titanic(
    node: Node,
    path: str | Path,
    *,
    max_dispatch: int = 16,
    policy: RetryPolicy | None = None,
    check: Literal["full", "quick"] = "full",
) -> AsyncIterator[Titanic]:
    """Run a Titanic service on ``node``, storing requests in the SQLite file ``path``.

    The node joins ``titanic.request``, ``titanic.reply`` and
    ``titanic.close``; requests already stored in ``path`` (a restart) are
    dispatched at once.  Up to ``max_dispatch`` requests are sent to
    workers at a time, each through a service client with ``policy``, and
    retried (backing off to every 30 s) until a worker answers.  Memory
    holds at most ``4 * max_dispatch`` pending requests (the rest wait on
    disk) and the latest 10,000 answers, 16 MiB of reply frames at most
    (older ones are read from disk): ``docs/patterns.md``, "What Titanic
    holds in memory".

    A missing ``path`` is a new, empty store (created whole: written
    aside, then renamed).  An existing one is verified before anything is
    served: SQLite's ``integrity_check`` (``check="quick"``: its
    ``quick_check``, faster on a large store), the header row (the store's
    identity and how many requests it holds, kept in the same
    transactions as the requests) against the rows, and the WAL against
    what SQLite recorded of it.  A damaged store raises
    :class:`TitanicStoreDamaged` naming the file; Titanic does not start
    on it (``docs/patterns.md`` says how to recover).

    Cancellation and the block's end stop the services and the
    dispatcher; nothing stored is lost.  Bad input: ``max_dispatch < 1``
    or an unknown ``check`` raises ``ValueError``.
    """
    if max_dispatch < 1:
        raise ValueError(f"max_dispatch must be at least 1, got {max_dispatch}")
    store = await trio.to_thread.run_sync(functools.partial(_Store, Path(path), check=check))
    try:
        with unwrap_single_exception_group():
            async with (
                open_service_client(node, policy) as client,
                trio.open_nursery() as nursery,
            ):
                titanic = Titanic(node, store, client, max_dispatch)
                # Before any request is taken: each is then counted once.
                titanic._pending_at_start = await titanic._on_disk(store.count_pending)
                # Before the services: a request is written only by this task.
                nursery.start_soon(titanic._writes.run)
                # A retried titanic.request gets the id it was given, not a new
                # one: while it runs, from this cache (ACCEPTED); later, and
                # after a restart, from the store's ``known`` rows.
                async with (
                    open_server(
                        node, titanic._request, service="titanic.request", reply_cache=ReplyCache()
                    ) as request_server,
                    open_server(node, titanic._reply, service="titanic.reply"),
                    open_server(node, titanic._close, service="titanic.close"),
                ):
                    nursery.start_soon(titanic._dispatcher, nursery)
                    # Watchers (trizre watch --metrics) read the queue in titanic.request's stats.
                    titanic._announcer = request_server
                    request_server.stats_source = titanic._stats
                    try:
                        yield titanic
                    finally:
                        nursery.cancel_scope.cancel()
    finally:
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(store.shut)


@final
class TitanicClient:
    """Submit requests to Titanic, and collect their replies later (9/TSP's client side)."""

    def __init__(self, client: ServiceClient) -> None:
        self._client = client

    async def submit(self, service: str, *frames: bytes) -> str:
        """Store a request for ``service``; its Titanic id (32 hex digits).

        Returns once Titanic has it on disk.  Raises ``ValueError`` for an
        invalid service name, and what :meth:`ServiceClient.request` raises
        (``RequestAbandoned`` when no Titanic answered).
        """
        check_service_name(service)
        reply = await self._client.request("titanic.request", service.encode(), *frames)
        return reply[0].decode("ascii")

    async def reply(self, titanic_id: str) -> tuple[bytes, ...] | None:
        """The reply's frames, or ``None`` while the request waits for a worker.

        Raises :class:`TitanicUnknown` if Titanic knows no such request
        (never taken, or closed), :class:`RemoteError` with the worker's
        status if it answered with an error.
        """
        try:
            return await self._client.request("titanic.reply", titanic_id.encode("ascii"))
        except RemoteError as exc:
            if exc.status == PENDING:
                return None
            if exc.status == UNKNOWN:
                raise TitanicUnknown(f"Titanic knows no request {titanic_id}") from None
            raise

    async def result(
        self, titanic_id: str, *, first_poll: float = 0.05, max_poll: float = 2.0
    ) -> tuple[bytes, ...]:
        """Poll until the reply is there (backing off from ``first_poll`` to ``max_poll`` s).

        Cancellation: stops polling; the request stays stored.  Bound it
        with ``trio.fail_after``.
        """
        wait = first_poll
        while (frames := await self.reply(titanic_id)) is None:
            await trio.sleep(wait)
            wait = min(wait * 2, max_poll)
        return frames

    async def close(self, titanic_id: str) -> None:
        """Forget the request and its reply (idempotent: an unknown id is fine)."""
        await self._client.request("titanic.close", titanic_id.encode("ascii"))


@asynccontextmanager
async def open_titanic_client(
    node: Node, policy: RetryPolicy | None = None
) -> AsyncIterator[TitanicClient]:
    """A :class:`TitanicClient` on ``node``; it listens for replies while the block runs."""
    async with open_service_client(node, policy) as client:
        yield TitanicClient(client)
