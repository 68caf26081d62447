"""Titanic's store: the requests on disk, in SQLite, and the checks made before it opens.

:class:`_Store` is the file: one SQLite database in WAL mode with
``synchronous=FULL``, its header row (identity, format, request count) and
the client requests it has taken, each under its Titanic id.  Its methods
block (Titanic runs them in a worker thread); :meth:`_Store.write` applies
a batch of ops in one transaction (the group commit's, in
``_titanic_commit.py``).  Opening refuses a damaged store with
:class:`TitanicStoreDamaged`, including the damage only the files' shapes
show (a torn WAL, a truncated file), which SQLite would open silently.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import sqlite3
import struct
import sys
import uuid
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Literal, NamedTuple, cast, final

from ._common import PatternError

log = logging.getLogger("trizre.patterns.titanic")

PENDING = 300  # titanic.reply: stored, not answered yet
UNKNOWN = 400  # titanic.reply: no such request (never, or closed)
_LEN = struct.Struct(">I")


def _pack(frames: Sequence[bytes]) -> bytes:
    return b"".join(_LEN.pack(len(f)) + f for f in frames)


def _unpack(blob: bytes) -> tuple[bytes, ...]:
    frames, pos = [], 0
    while pos < len(blob):
        (size,) = _LEN.unpack_from(blob, pos)
        frames.append(blob[pos + 4 : pos + 4 + size])
        pos += 4 + size
    return tuple(frames)


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


@final
class _Changes:
    """What a transaction changed, for the memory that mirrors the store.

    :meth:`_Store.write` fills it: ``stored`` the new requests
    ``(titanic_id, service, body)`` (not a retry's, which gives the id
    it was given before), ``answered`` the first answers
    ``(titanic_id, status, reply)`` (bodies and replies packed), each in
    the order of the ops.
    """

    __slots__ = ("answered", "stored")

    def __init__(self) -> None:
        self.stored: list[tuple[str, str, bytes]] = []
        self.answered: list[tuple[str, int, bytes]] = []


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

    def write(self, ops: Sequence[_Op], changes: _Changes | None = None) -> list[_Given]:
        """Apply ``ops`` in order as one transaction, on disk (``synchronous=FULL``) on return.

        What each gave, in order: an accept its Titanic id, a lookup the
        request's ``(status, frames)``, the others ``None``.  ``changes``,
        if given, is told what the transaction stored and answered, for
        the memory that mirrors the store.  A request,
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
                    new = self._accept_run(cast(list[_Accept], list(run)), given)
                    counted += len(new)
                    if changes is not None:
                        changes.stored.extend(new)
                elif kind is _Lookup:
                    self._lookup_run(cast(list[_Lookup], list(run)), given)
                elif kind is _Finish:
                    self._finish_run(cast(list[_Finish], list(run)), given, changes)
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

    def _finish_run(
        self, run: Sequence[_Finish], given: list[_Given], changes: _Changes | None
    ) -> None:
        """Store consecutive answers (inside :meth:`write`); a request's first is kept."""
        db = self._db
        if changes is not None:
            # Which of them are first answers: those whose request waits for one.
            waiting = {
                row[0]
                for row in db.execute(
                    "SELECT id FROM requests WHERE status IS NULL"
                    " AND id IN (SELECT value FROM json_each(?))",
                    (json.dumps([op.titanic_id for op in run]),),
                )
            }
            for op in run:
                if op.titanic_id in waiting:
                    waiting.discard(op.titanic_id)  # a second answer in the run is not kept
                    changes.answered.append((op.titanic_id, op.status, op.reply))
        db.executemany(
            "UPDATE requests SET status = ?, reply = ? WHERE id = ? AND status IS NULL",
            [(op.status, op.reply, op.titanic_id) for op in run],
        )
        given.extend([None] * len(run))

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

    def _accept_run(
        self, run: Sequence[_Accept], given: list[_Given]
    ) -> list[tuple[str, str, bytes]]:
        """Store consecutive accepts (inside :meth:`write`); the new requests' rows."""
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
        requests: list[tuple[str, str, bytes]] = []
        asked: list[tuple[str, str]] = []
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
        return requests

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
