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
"""

from __future__ import annotations

import copy
import functools
import itertools
import json
import logging
import os
import sqlite3
import struct
import sys
import uuid
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Literal, NamedTuple, TypeVar, TypeVarTuple, cast, final

import trio

from .. import Node
from .._concurrency import Wakeup, unwrap_single_exception_group
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
    "TitanicStoreDamaged",
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


STORE_FORMAT = 1  # the header row's ``format``: what this code writes and reads


class TitanicStoreDamaged(PatternError):
    """The Titanic store file is damaged or is not a Titanic store; Titanic will not start on it.

    ``path`` names the file and ``why`` says what was found.  Titanic never
    repairs a store itself: requests it acknowledged may be missing, and
    only the operator can decide what to do (``docs/patterns.md``,
    "Titanic after kill -9, and a damaged store": keep the file and its
    ``-wal`` and ``-shm`` aside, restore a backup or start on a new path).
    """

    def __init__(self, path: Path, why: str) -> None:
        super().__init__(
            f"the Titanic store {str(path)!r} is damaged: {why}. Titanic will not start on it. "
            f"Move it aside with its -wal and -shm files (kept for inspection), then restore "
            f"a backup or start Titanic on a new path; see docs/patterns.md, "
            f"'Titanic after kill -9, and a damaged store'"
        )
        self.path = path
        self.why = why


_SQLITE_MAGIC = b"SQLite format 3\x00"
_WAL_MAGIC = (0x377F0682, 0x377F0683)  # little-, big-endian checksums
_WAL_HEADER, _FRAME_HEADER, _SHM_HEADER = 32, 24, 48


def _checksum(data: bytes, order: str, s1: int = 0, s2: int = 0) -> tuple[int, int]:
    """SQLite's WAL checksum (wal.c ``walChecksumBytes``) over ``data``, from ``(s1, s2)``."""
    words = struct.unpack(f"{order}{len(data) // 4}I", data)
    mask = 0xFFFFFFFF
    for i in range(0, len(words), 2):
        s1 = (s1 + words[i] + s2) & mask
        s2 = (s2 + words[i + 1] + s1) & mask
    return s1, s2


def _committed_frames(wal: bytes, limit: int) -> tuple[int, int, int] | None:
    """The WAL's salts and how many of its first ``limit`` frames are valid, as SQLite reads it.

    ``(salt1, salt2, frames)``: frames counts those up to the last commit
    frame of the unbroken chain (right salts, right cumulative checksum);
    ``None`` for a WAL whose header is not valid.
    """
    if len(wal) < _WAL_HEADER:
        return None
    magic, version, page_size, _, salt1, salt2, c1, c2 = struct.unpack(">8I", wal[:_WAL_HEADER])
    if magic not in _WAL_MAGIC or version != 3007000:
        return None
    order = ">" if magic & 1 else "<"
    if _checksum(wal[:24], order) != (c1, c2) or page_size < 512:
        return None
    s1, s2 = c1, c2
    committed = 0
    size = _FRAME_HEADER + page_size
    for frame in range(limit):
        at = _WAL_HEADER + frame * size
        if at + size > len(wal):
            break
        page, commit, f_salt1, f_salt2, f1, f2 = struct.unpack_from(">6I", wal, at)
        if page == 0 or (f_salt1, f_salt2) != (salt1, salt2):
            break
        s1, s2 = _checksum(wal[at : at + 8], order, s1, s2)
        s1, s2 = _checksum(wal[at + _FRAME_HEADER : at + size], order, s1, s2)
        if (s1, s2) != (f1, f2):
            break
        if commit:
            committed = frame + 1
    return salt1, salt2, committed


def _wal_promise(shm: bytes) -> tuple[int, int, int] | None:
    """What the wal-index (``-shm``) says the WAL holds: ``(salt1, salt2, last frame)``.

    Written by SQLite after each commit reached the WAL, so it never says
    more than the WAL held; ``None`` unless both copies of its header
    agree and their checksum holds (not SQLite's, or torn: no evidence).
    """
    if len(shm) < 2 * _SHM_HEADER or shm[:_SHM_HEADER] != shm[_SHM_HEADER : 2 * _SHM_HEADER]:
        return None
    order = "<" if sys.byteorder == "little" else ">"  # the wal-index is in native order
    version, _, _, is_init, _, _, last, _, _, _, _, _, c1, c2 = struct.unpack(
        f"{order}3I2BH8I", shm[:_SHM_HEADER]
    )
    if version != 3007000 or not is_init or _checksum(shm[:40], order) != (c1, c2):
        return None
    salt1, salt2 = struct.unpack_from(">2I", shm, 32)  # copied from the WAL header as bytes
    return salt1, salt2, last


def _check_files(path: Path) -> None:
    """Refuse what SQLite would open silently: damage only the files' shapes show.

    Run before SQLite opens the store: its recovery rewrites the ``-shm``
    that is the evidence for a torn WAL.
    """
    wal, shm = Path(f"{path}-wal"), Path(f"{path}-shm")
    try:
        with path.open("rb") as f:
            head = f.read(len(_SQLITE_MAGIC))
    except FileNotFoundError:
        if wal.exists() and wal.stat().st_size > 0:
            raise TitanicStoreDamaged(
                path, f"the file is missing but its WAL {wal} is there"
            ) from None
        return
    except OSError as exc:
        raise TitanicStoreDamaged(path, f"it cannot be read ({exc})") from exc
    if not head:
        # Titanic creates a store whole (written aside, then renamed): an
        # empty one was truncated, it is not a new store.
        raise TitanicStoreDamaged(path, "the file is empty (0 bytes): it was truncated")
    if head != _SQLITE_MAGIC:
        raise TitanicStoreDamaged(path, "it is not an SQLite database")
    try:
        promise = _wal_promise(shm.read_bytes()) if shm.exists() else None
        if promise is None or promise[2] == 0:
            return
        data = wal.read_bytes() if wal.exists() else b""
    except OSError as exc:
        raise TitanicStoreDamaged(path, f"its WAL cannot be read ({exc})") from exc
    held = _committed_frames(data, promise[2])
    if held is None:
        raise TitanicStoreDamaged(
            path, f"its WAL {wal} is missing or its header is damaged, but it held commits"
        )
    if held[:2] == promise[:2] and held[2] < promise[2]:
        raise TitanicStoreDamaged(
            path,
            f"its WAL {wal} is torn: commits up to frame {promise[2]} were written to it, "
            f"only {held[2]} frames can be read back",
        )


_SCHEMA = (
    "CREATE TABLE header ("
    " one INTEGER PRIMARY KEY CHECK (one = 1), store TEXT NOT NULL, format INTEGER NOT NULL,"
    " requests INTEGER NOT NULL)",
    "CREATE TABLE IF NOT EXISTS requests ("
    " id TEXT PRIMARY KEY, service TEXT NOT NULL, body BLOB NOT NULL,"
    " status INTEGER, reply BLOB)",
    # A client's request (its node, its request id) -> the Titanic id it was given.
    "CREATE TABLE known (asked TEXT PRIMARY KEY, id TEXT NOT NULL) WITHOUT ROWID",
    "CREATE INDEX known_by_id ON known (id)",
)


def _connect(path: Path) -> sqlite3.Connection:
    db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    # FULL: every commit's WAL frames are fsynced before the commit returns,
    # so an acknowledged request survives kill -9 and power loss alike.
    db.execute("PRAGMA synchronous=FULL")
    return db


def _create(path: Path) -> None:
    """Make a new, empty store at ``path``, whole or not at all.

    Written under another name and renamed: a store that exists always
    has its header, so an empty or header-less file is damage, not news.
    """
    fresh = path.with_name(f"{path.name}.new")
    for leftover in (fresh, Path(f"{fresh}-wal"), Path(f"{fresh}-shm")):
        leftover.unlink(missing_ok=True)
    db = _connect(fresh)
    try:
        with db:
            db.execute("BEGIN")
            for statement in _SCHEMA:
                db.execute(statement)
            db.execute(
                "INSERT INTO header (one, store, format, requests) VALUES (1, ?, ?, 0)",
                (uuid.uuid4().hex, STORE_FORMAT),
            )
    finally:
        db.close()  # the last connection: checkpointed into the file, its WAL removed
    with fresh.open("rb+") as f:
        os.fsync(f.fileno())
    os.replace(fresh, path)
    _fsync_dir(path.parent)


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class _Accept(NamedTuple):
    """Store a request (``body``: its frames, packed); gives its Titanic id."""

    service: str
    body: bytes
    asked: str | None  # the client's name for it (node/request id): stored once


class _Finish(NamedTuple):
    """Store a request's answer (``reply``: its frames, packed), unless it has one."""

    titanic_id: str
    status: int
    reply: bytes


class _Close(NamedTuple):
    """Forget a request and its answer (nothing if unknown)."""

    titanic_id: str


class _Lookup(NamedTuple):
    """Read a request's state: gives ``(status, reply frames)`` (300 pending, 400 unknown)."""

    titanic_id: str


_Op = _Accept | _Finish | _Close | _Lookup
_Given = str | tuple[int, tuple[bytes, ...]] | None  # what an op gives: id, state, nothing


@final
class _Store:
    """The requests on disk; every method blocks (run it in a thread).

    Opening verifies the store (:func:`_check_files`, SQLite's
    ``integrity_check`` or ``quick_check``, the header row) and raises
    :class:`TitanicStoreDamaged` naming the file; a missing file is a new
    store.
    """

    def __init__(self, path: Path, *, check: Literal["full", "quick"] = "full") -> None:
        if check not in ("full", "quick"):
            raise ValueError(f"check is 'full' or 'quick', got {check!r}")
        self.path = path
        _check_files(path)
        if not path.exists():
            _create(path)
        try:
            self._db = _connect(path)
        except sqlite3.DatabaseError as exc:
            raise TitanicStoreDamaged(path, f"SQLite cannot open it ({exc})") from exc
        try:
            self.identity = self._verify(check)
        except sqlite3.DatabaseError as exc:
            self._db.close()
            raise TitanicStoreDamaged(path, f"SQLite cannot read it ({exc})") from exc
        except BaseException:
            self._db.close()
            raise

    def _verify(self, check: str) -> str:
        """The store's identity, once SQLite and the header row agree it is whole."""
        db, path = self._db, self.path
        pragma = "integrity_check" if check == "full" else "quick_check"
        problems = [row[0] for row in db.execute(f"PRAGMA {pragma}(20)")]
        if problems != ["ok"]:
            raise TitanicStoreDamaged(path, f"SQLite's {pragma} says {'; '.join(problems)}")
        tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master")}
        if "header" not in tables:
            if "requests" not in tables or "known" in tables:
                raise TitanicStoreDamaged(path, "it has no Titanic header: not a Titanic store")
            self._upgrade()  # a store from before the header: give it one
        rows = db.execute("SELECT store, format, requests FROM header").fetchall()
        if len(rows) != 1:
            raise TitanicStoreDamaged(path, f"its header has {len(rows)} rows, not 1")
        identity, version, promised = rows[0]
        if version != STORE_FORMAT:
            raise TitanicStoreDamaged(
                path, f"store format {version}, this Titanic reads format {STORE_FORMAT}"
            )
        (held,) = db.execute("SELECT COUNT(*) FROM requests").fetchone()
        if held != promised:
            raise TitanicStoreDamaged(
                path, f"its header counts {promised} requests but {held} can be read"
            )
        (strays,) = db.execute(
            "SELECT COUNT(*) FROM known WHERE id NOT IN (SELECT id FROM requests)"
        ).fetchone()
        if strays:
            raise TitanicStoreDamaged(path, f"{strays} client request ids name no request")
        return str(identity)

    def _upgrade(self) -> None:
        with self._db:
            self._db.execute("BEGIN IMMEDIATE")
            for statement in _SCHEMA:
                if not statement.startswith("CREATE TABLE IF NOT EXISTS requests"):
                    self._db.execute(statement)
            self._db.execute(
                "INSERT INTO header (one, store, format, requests)"
                " SELECT 1, ?, ?, COUNT(*) FROM requests",
                (uuid.uuid4().hex, STORE_FORMAT),
            )
        log.info("Titanic store %s: header added (a store from before format 1)", self.path)

    def accept(self, service: str, frames: Sequence[bytes], asked: str | None = None) -> str:
        """Store a request durably; its Titanic id (one :meth:`write` of its own).

        ``asked`` names the client's request (its node and request id): a
        request already stored under it is not stored again, its id is
        returned, whenever (before or after a restart) the retry comes.
        """
        (titanic_id,) = self.write([_Accept(service, _pack(frames), asked)])
        return cast(str, titanic_id)

    def write(self, ops: Sequence[_Op]) -> list[_Given]:
        """Apply ``ops`` in order as one transaction, on disk (``synchronous=FULL``) on return.

        What each gave, in order: an accept its Titanic id, a lookup the
        request's ``(status, frames)``, the others ``None``.  A request,
        its ``known`` row and the header's count are in the same
        transaction.  The result is what applying the ops one by one would
        give; consecutive ops of one kind go to SQLite as one
        ``executemany`` or one query.  Lookups alone open no write
        transaction (no COMMIT, no fsync).  Raises what SQLite raised, the
        transaction rolled back: then none of the ops happened.
        """
        given: list[_Given] = []
        if all(type(op) is _Lookup for op in ops):
            self._lookup_run(cast(list[_Lookup], ops), given)
            return given
        db = self._db
        counted = 0  # requests stored minus requests forgotten: the header's count follows
        with db:
            db.execute("BEGIN IMMEDIATE")
            for kind, run in itertools.groupby(ops, type):
                if kind is _Accept:
                    counted += self._accept_run(cast(list[_Accept], list(run)), given)
                elif kind is _Lookup:
                    self._lookup_run(cast(list[_Lookup], list(run)), given)
                elif kind is _Finish:
                    finishes = [
                        (op.status, op.reply, op.titanic_id) for op in cast(Iterable[_Finish], run)
                    ]
                    db.executemany(
                        "UPDATE requests SET status = ?, reply = ? WHERE id = ? AND status IS NULL",
                        finishes,
                    )
                    given.extend([None] * len(finishes))
                else:
                    ids = [(op.titanic_id,) for op in cast(Iterable[_Close], run)]
                    gone = db.executemany("DELETE FROM requests WHERE id = ?", ids).rowcount
                    if gone:
                        db.executemany("DELETE FROM known WHERE id = ?", ids)
                        counted -= gone
                    given.extend([None] * len(ids))
            if counted:
                db.execute("UPDATE header SET requests = requests + ?", (counted,))
        return given

    def _lookup_run(self, run: Sequence[_Lookup], given: list[_Given]) -> None:
        """Read consecutive lookups' requests in one query (inside :meth:`write`)."""
        found = {
            row[0]: row[1:]
            for row in self._db.execute(
                "SELECT id, status, reply FROM requests"
                " WHERE id IN (SELECT value FROM json_each(?))",
                (json.dumps([op.titanic_id for op in run]),),
            )
        }
        for op in run:
            row = found.get(op.titanic_id)
            if row is None:
                given.append((UNKNOWN, ()))
            elif row[0] is None:
                given.append((PENDING, ()))
            else:
                given.append((row[0], _unpack(row[1])))

    def _accept_run(self, run: Sequence[_Accept], given: list[_Given]) -> int:
        """Store consecutive accepts (inside :meth:`write`); how many were new."""
        db = self._db
        names = [op.asked for op in run if op.asked is not None]
        # One query for every client name in the run, not one each.
        known: dict[str, str] = (
            dict(
                db.execute(
                    "SELECT asked, id FROM known WHERE asked IN (SELECT value FROM json_each(?))",
                    (json.dumps(names),),
                )
            )
            if names
            else {}
        )
        requests, asked = [], []
        for op in run:
            titanic_id = known.get(op.asked) if op.asked is not None else None
            if titanic_id is None:
                titanic_id = uuid.uuid4().hex
                requests.append((titanic_id, op.service, op.body))
                if op.asked is not None:
                    known[op.asked] = titanic_id  # a second one in this run: the same id
                    asked.append((op.asked, titanic_id))
            given.append(titanic_id)
        db.executemany("INSERT INTO requests (id, service, body) VALUES (?, ?, ?)", requests)
        if asked:
            db.executemany("INSERT INTO known (asked, id) VALUES (?, ?)", asked)
        return len(requests)

    def pending(self, limit: int = -1) -> list[tuple[str, str, tuple[bytes, ...]]]:
        rows = self._db.execute(
            "SELECT id, service, body FROM requests WHERE status IS NULL ORDER BY rowid LIMIT ?",
            (limit,),
        ).fetchall()
        return [(row[0], row[1], _unpack(row[2])) for row in rows]

    def finish(self, titanic_id: str, status: int, frames: Sequence[bytes]) -> None:
        """Store a request's answer (one :meth:`write` of its own); a first answer is kept."""
        self.write([_Finish(titanic_id, status, _pack(frames))])

    def lookup(self, titanic_id: str) -> tuple[int, tuple[bytes, ...]]:
        """A request's ``(status, reply frames)``: 300 pending, 400 unknown (one :meth:`write`)."""
        (state,) = self.write([_Lookup(titanic_id)])
        return cast(tuple[int, tuple[bytes, ...]], state)

    def count_pending(self) -> int:
        """How many stored requests have no answer yet (for watchers)."""
        (count,) = self._db.execute("SELECT COUNT(*) FROM requests WHERE status IS NULL").fetchone()
        return int(count)

    def close(self, titanic_id: str) -> None:
        """Forget a request and its answer (one :meth:`write` of its own)."""
        self.write([_Close(titanic_id)])

    def shut(self) -> None:
        self._db.close()


_MAX_BATCH = 256  # writes in one transaction, at most: bounds a commit's time and memory
_QUEUED, _TAKEN, _ABANDONED = "queued", "taken", "abandoned"


@final
class _Queued:
    """One op waiting for its batch."""

    __slots__ = ("done", "error", "op", "result", "state")

    def __init__(self, op: _Op) -> None:
        self.op = op
        self.state = _QUEUED
        self.done = trio.Event()
        self.result: _Given = None
        self.error: Exception | None = None


def _again(error: Exception) -> Exception:
    """``error`` to raise in one more task: a copy of its own (same type, same message)."""
    try:
        return copy.copy(error)
    except Exception:  # an exception that cannot be copied: share it
        return error


@final
class _GroupCommit:
    """Group commit: writes that arrive together share one transaction and one fsync.

    :meth:`run` (one task) takes whatever is queued whenever it is free,
    up to ``max_batch`` ops, and applies them with one
    :meth:`_Store.write` through ``on_disk``; an op that finds it idle
    is taken at once (no added wait), and those arriving meanwhile form
    the next batch.  Each :meth:`write` returns only after its own batch
    committed.  ``committed`` is called with a batch's ops once they
    are on disk, before any caller is woken.  Lookups take the same
    queue: those arriving together are one query and one thread hop,
    and see every write queued before them.  The queue holds at most
    one op per waiting caller.
    """

    def __init__(
        self,
        store: _Store,
        on_disk: Callable[[Callable[[], list[_Given]]], Awaitable[list[_Given]]],
        committed: Callable[[Sequence[_Op]], None] = lambda ops: None,
        max_batch: int = _MAX_BATCH,
    ) -> None:
        if max_batch < 1:
            raise ValueError(f"max_batch must be at least 1, got {max_batch}")
        self._store = store
        self._on_disk = on_disk
        self._committed = committed
        self._max_batch = max_batch
        self._queue: deque[_Queued] = deque()
        self._batch: list[_Queued] = []
        self._ready = Wakeup()
        self._closed = False
        self.commits = 0  # batches applied (for tests and monitoring)

    async def write(self, op: _Op) -> _Given:
        """Apply ``op`` in the next transaction; what it gave, once that is on disk.

        A failed transaction raises, in every write of its batch, a copy
        of what SQLite raised (none of them happened).  Cancellation
        before the batch is taken: ``op`` is not written; after: the
        batch is committed all the same, the caller just does not wait
        for it.  Raises ``trio.ClosedResourceError`` once :meth:`run`
        has ended (Titanic is stopping), ``op`` not written.
        """
        if self._closed:
            raise trio.ClosedResourceError("Titanic's store is closed")
        queued = _Queued(op)
        self._queue.append(queued)
        self._ready.wake_one()
        try:
            await queued.done.wait()
        except BaseException:
            if queued.state == _QUEUED:
                queued.state = _ABANDONED  # run() skips it: never written
            raise
        if queued.error is not None:
            raise _again(queued.error) from queued.error
        return queued.result

    async def run(self) -> None:
        """Commit what is queued, batch after batch, until cancelled.

        On its end (cancellation) a write taken or queued and not
        committed fails with ``trio.ClosedResourceError``.
        """
        queue = self._queue
        try:
            while True:
                while not queue:
                    await self._ready.wait()
                batch = self._batch = []
                while queue and len(batch) < self._max_batch:
                    queued = queue.popleft()
                    if queued.state == _QUEUED:  # not abandoned by a cancelled caller
                        queued.state = _TAKEN
                        batch.append(queued)
                if not batch:
                    continue
                ops = [queued.op for queued in batch]
                try:
                    given = await self._on_disk(functools.partial(self._store.write, ops))
                except Exception as exc:
                    for queued in batch:
                        queued.error = exc
                        queued.done.set()
                    self._batch = []
                    continue
                self._batch = []
                self.commits += 1
                self._committed(ops)
                for queued, result in zip(batch, given, strict=True):
                    queued.result = result
                    queued.done.set()
        finally:
            self._closed = True
            for queued in (*self._batch, *queue):
                queued.error = trio.ClosedResourceError("Titanic stopped before it was written")
                queued.done.set()
            self._batch = []
            queue.clear()


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
        self._writes = _GroupCommit(store, self._on_disk, self._committed)
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

    def _committed(self, ops: Sequence[_Op]) -> None:
        """Requests just stored: counted, and the dispatcher looks (even if their callers left)."""
        accepted = sum(isinstance(op, _Accept) for op in ops)
        if accepted:
            self.accepted += accepted
            self._more.set()  # never waits for the dispatcher: no worker is no reason to refuse

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
        # Through the writer's queue: lookups arriving together are one query, one thread hop.
        state = await self._writes.write(_Lookup(_id(request)))
        status, frames = cast(tuple[int, tuple[bytes, ...]], state)
        if status != proto.Status.OK:
            raise ReplyWith(status, *frames)
        return list(frames)

    async def _close(self, request: IncomingRequest) -> list[bytes]:
        await self._writes.write(_Close(_id(request)))
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
            await self._writes.write(_Finish(titanic_id, status, _pack(body)))
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
    check: Literal["full", "quick"] = "full",
) -> AsyncIterator[Titanic]:
    """Run a Titanic service on ``node``, storing requests in the SQLite file ``path``.

    The node joins ``titanic.request``, ``titanic.reply`` and
    ``titanic.close``; requests already stored in ``path`` (a restart) are
    dispatched at once.  Up to ``max_dispatch`` requests are sent to
    workers at a time, each through a service client with ``policy``, and
    retried (backing off to every 30 s) until a worker answers.

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
