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
moment loses nothing acknowledged.  SQLite calls are blocking; they run
one at a time in a worker thread (``trio.to_thread``).
"""

from __future__ import annotations

import logging
import sqlite3
import struct
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar, TypeVarTuple, final

import trio

from .._node import Node
from .._util import unwrap_single_exception_group
from . import _protocol as proto
from ._clients import ServiceClient, open_service_client
from ._common import PatternError, RemoteError, RequestAbandoned, RetryPolicy
from ._server import (
    IncomingRequest,
    ReplyCache,
    ReplyWith,
    Server,
    check_service_name,
    open_server,
)

__all__ = [
    "PENDING",
    "UNKNOWN",
    "Titanic",
    "TitanicClient",
    "TitanicUnknown",
    "open_titanic",
    "open_titanic_client",
]

log = logging.getLogger("trizre.patterns.titanic")
T = TypeVar("T")
Ts = TypeVarTuple("Ts")

PENDING = 300  # titanic.reply: stored, not answered yet
UNKNOWN = 400  # titanic.reply: no such request (never, or closed)
BAD = 400  # a body Titanic cannot read (9/TSP has no other error status)
_HEX = frozenset(b"0123456789abcdef")
_LEN = struct.Struct(">I")


class TitanicUnknown(PatternError):
    """Titanic knows no request by that id (it never took it, or it was closed)."""


def _pack(frames: Sequence[bytes]) -> bytes:
    return b"".join(_LEN.pack(len(f)) + f for f in frames)


def _unpack(blob: bytes) -> tuple[bytes, ...]:
    frames, pos = [], 0
    while pos < len(blob):
        (size,) = _LEN.unpack_from(blob, pos)
        frames.append(blob[pos + 4 : pos + 4 + size])
        pos += 4 + size
    return tuple(frames)


def wire_id(titanic_id: str) -> int:
    """The pattern request id Titanic dispatches ``titanic_id`` under: stable across restarts."""
    return uuid.UUID(hex=titanic_id).int >> 64


@final
class _Store:
    """The requests on disk; every method blocks (run it in a thread)."""

    def __init__(self, path: Path) -> None:
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS requests ("
            " id TEXT PRIMARY KEY, service TEXT NOT NULL, body BLOB NOT NULL,"
            " status INTEGER, reply BLOB)"
        )

    def accept(self, service: str, frames: Sequence[bytes]) -> str:
        titanic_id = uuid.uuid4().hex
        with self._db:  # one transaction, committed (to disk: synchronous=FULL) on exit
            self._db.execute("BEGIN")
            self._db.execute(
                "INSERT INTO requests (id, service, body) VALUES (?, ?, ?)",
                (titanic_id, service, _pack(frames)),
            )
        return titanic_id

    def pending(self, limit: int = -1) -> list[tuple[str, str, tuple[bytes, ...]]]:
        rows = self._db.execute(
            "SELECT id, service, body FROM requests WHERE status IS NULL ORDER BY rowid LIMIT ?",
            (limit,),
        ).fetchall()
        return [(row[0], row[1], _unpack(row[2])) for row in rows]

    def finish(self, titanic_id: str, status: int, frames: Sequence[bytes]) -> None:
        with self._db:
            self._db.execute("BEGIN")
            self._db.execute(
                "UPDATE requests SET status = ?, reply = ? WHERE id = ? AND status IS NULL",
                (status, _pack(frames), titanic_id),
            )

    def lookup(self, titanic_id: str) -> tuple[int, tuple[bytes, ...]]:
        row = self._db.execute(
            "SELECT status, reply FROM requests WHERE id = ?", (titanic_id,)
        ).fetchone()
        if row is None:
            return UNKNOWN, ()
        if row[0] is None:
            return PENDING, ()
        return row[0], _unpack(row[1])

    def count_pending(self) -> int:
        """How many stored requests have no answer yet (for watchers)."""
        (count,) = self._db.execute("SELECT COUNT(*) FROM requests WHERE status IS NULL").fetchone()
        return int(count)

    def close(self, titanic_id: str) -> None:
        with self._db:
            self._db.execute("BEGIN")
            self._db.execute("DELETE FROM requests WHERE id = ?", (titanic_id,))

    def shut(self) -> None:
        self._db.close()


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
        self.in_flight = 0
        self._store = store
        self._client = client
        self._disk = trio.CapacityLimiter(1)  # one SQLite call at a time
        self._max_dispatch = max_dispatch
        self._dispatching: set[str] = set()
        # Set when a request arrives or a dispatch slot frees: look at the disk again.
        self._more = trio.Event()
        # Announcing the counters to watchers: titanic.request's server, once it runs.
        self._announcer: Server | None = None
        self._pending_at_start = 0

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

    # -------------------------------------------------------------- services

    async def _request(self, request: IncomingRequest) -> list[bytes]:
        if not request.body:
            raise ReplyWith(BAD, b"titanic.request: the service, then the request's frames")
        try:
            service = request.body[0].decode("utf-8")
            check_service_name(service)
        except ValueError as exc:
            raise ReplyWith(BAD, f"titanic.request: {exc}".encode()) from None
        titanic_id = await self._on_disk(self._store.accept, service, request.body[1:])
        self.accepted += 1
        self._more.set()  # never waits for the dispatcher: no worker is no reason to refuse
        return [titanic_id.encode()]

    async def _reply(self, request: IncomingRequest) -> list[bytes]:
        status, frames = await self._on_disk(self._store.lookup, _id(request))
        if status != proto.Status.OK:
            raise ReplyWith(status, *frames)
        return list(frames)

    async def _close(self, request: IncomingRequest) -> list[bytes]:
        await self._on_disk(self._store.close, _id(request))
        return []

    # ------------------------------------------------------------ dispatcher

    async def _dispatcher(self, nursery: trio.Nursery) -> None:
        """Keep up to ``max_dispatch`` of the oldest pending requests in flight.

        The disk is the queue: what is pending is read from it (at start,
        when a request arrives, when a slot frees), so nothing accepted can
        be missed, however many arrive while every slot is busy.
        """
        while True:
            self._more = trio.Event()
            free = self._max_dispatch - len(self._dispatching)
            if free > 0:
                # The oldest first; those in flight are among them, hence the margin.
                rows = await self._on_disk(self._store.pending, free + len(self._dispatching))
                for titanic_id, service, frames in rows:
                    if titanic_id not in self._dispatching and free > 0:
                        free -= 1
                        self._dispatching.add(titanic_id)
                        nursery.start_soon(self._deliver, titanic_id, service, frames)
            await self._more.wait()

    async def _deliver(self, titanic_id: str, service: str, frames: tuple[bytes, ...]) -> None:
        """Send one stored request until a worker answers; store the answer."""
        self.in_flight += 1
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
            await self._on_disk(self._store.finish, titanic_id, status, body)
            self.completed += 1
            if self._announcer is not None:
                self._announcer.stats_changed()
        finally:
            self.in_flight -= 1
            self._dispatching.discard(titanic_id)
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
) -> AsyncIterator[Titanic]:
    """Run a Titanic service on ``node``, storing requests in the SQLite file ``path``.

    The node joins ``titanic.request``, ``titanic.reply`` and
    ``titanic.close``; requests already stored in ``path`` (a restart) are
    dispatched at once.  Up to ``max_dispatch`` requests are sent to
    workers at a time, each through a service client with ``policy``, and
    retried (backing off to every 30 s) until a worker answers.

    Cancellation and the block's end stop the services and the
    dispatcher; nothing stored is lost.  Bad input: ``max_dispatch < 1``
    raises ``ValueError``; a path SQLite cannot open, ``sqlite3.Error``.
    """
    if max_dispatch < 1:
        raise ValueError(f"max_dispatch must be at least 1, got {max_dispatch}")
    store = await trio.to_thread.run_sync(_Store, Path(path))
    try:
        with unwrap_single_exception_group():
            async with (
                open_service_client(node, policy) as client,
                trio.open_nursery() as nursery,
            ):
                titanic = Titanic(node, store, client, max_dispatch)
                # Before any request is taken: each is then counted once.
                titanic._pending_at_start = await titanic._on_disk(store.count_pending)
                # A retried titanic.request gets the id it was given, not a new one.
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
