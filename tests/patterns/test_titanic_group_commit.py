"""Titanic's group commit: writes arriving together share one transaction and fsync (issue 28)."""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path
from uuid import UUID

import pytest
import trio
import trio.testing

import trizre
from tests.support.nodes import FAST, free_udp_port
from trizre import patterns
from trizre.patterns import IncomingRequest, RetryPolicy
from trizre.patterns._titanic import (
    PENDING,
    UNKNOWN,
    _Accept,
    _Changes,
    _Close,
    _Finish,
    _GroupCommit,
    _Lookup,
    _pack,
    _Store,
)


def committed_ids(path: Path) -> set[str]:
    """The requests another connection reads from the file: committed, nothing else."""
    with contextlib.closing(sqlite3.connect(path)) as db:
        return {row[0] for row in db.execute("SELECT id FROM requests")}


def submit(request_id: int, body: bytes) -> IncomingRequest:
    """A titanic.request as its handler sees it, from one client."""
    return IncomingRequest(
        peer=UUID(int=1), name="cli", request_id=request_id, service="titanic.request",
        body=(b"echo", body),
    )  # fmt: skip


async def test_requests_arriving_during_a_commit_share_the_next_one_each_answered_after_it(
    tmp_path: Path,
) -> None:
    """20 requests arrive while a commit is under way: one more commit, not 20.

    Each handler answers only once its request is readable from another
    connection (committed).  On the code before group commit, each
    request had a transaction of its own: 21 COMMITs.
    """
    path = tmp_path / "t.db"
    commits = 0
    hold = threading.Event()

    def on_statement(sql: str) -> None:  # in the store's thread
        nonlocal commits
        if sql.strip().upper() == "COMMIT":
            commits += 1
            if commits == 1:
                hold.wait(30)  # the first commit takes its time: the others queue meanwhile

    answered: dict[int, str] = {}

    async def ask(titanic: patterns.Titanic, request_id: int) -> None:
        (given,) = await titanic._request(submit(request_id, b"%d" % request_id))
        titanic_id = given.decode()
        assert titanic_id in committed_ids(path), "answered before its commit"
        answered[request_id] = titanic_id

    with trio.fail_after(30):
        async with (
            trizre.open_node("titanic", beacon_port=free_udp_port(), **FAST) as node,
            patterns.open_titanic(node, path, policy=RetryPolicy(0.5, 2)) as titanic,
            trio.open_nursery() as nursery,
        ):
            titanic._store._db.set_trace_callback(on_statement)
            nursery.start_soon(ask, titanic, 0)
            await trio.testing.wait_all_tasks_blocked()  # the first is being written
            for request_id in range(1, 21):
                nursery.start_soon(ask, titanic, request_id)
            await trio.testing.wait_all_tasks_blocked()  # the others wait for the disk
            assert not answered
            hold.set()
    assert sorted(answered) == list(range(21)) and len(set(answered.values())) == 21
    assert commits == 2, f"{commits} commits for 21 requests"
    assert titanic.accepted == 21


# The group commit on its own, on virtual time: the store's calls run inline,
# each batch waiting at a gate the test opens.


class Disk:
    """``on_disk`` for a :class:`_GroupCommit`: runs each batch inline once the gate opens."""

    def __init__(self) -> None:
        self.gate = trio.Event()
        self.batches: list[int] = []  # sizes of the batches started
        self.waiting = trio.Event()  # set when a batch waits at the gate

    async def __call__(self, write: Callable[[], list[str | None]]) -> list[str | None]:
        ops = write.args[0]  # type: ignore[attr-defined]  # functools.partial(store.write, ops)
        self.batches.append(len(ops))
        self.waiting.set()
        await self.gate.wait()
        return write()


class CommitCounter:
    """Counts the COMMITs SQLite runs on a store's connection."""

    def __init__(self, store: _Store) -> None:
        self.count = 0
        store._db.set_trace_callback(self._statement)

    def _statement(self, sql: str) -> None:
        if sql.strip().upper() == "COMMIT":
            self.count += 1


def accept(i: int, asked: str | None = None) -> _Accept:
    return _Accept("echo", _pack([b"%d" % i]), asked)


async def test_writes_queued_behind_a_commit_go_in_one_batch_each_after_its_commit(
    tmp_path: Path, autojump_clock: trio.abc.Clock
) -> None:
    store = _Store(tmp_path / "t.db")
    disk = Disk()
    seen: list[list[int]] = []
    commits = CommitCounter(store)
    # Called with each batch's ops and what it changed (requests stored, all new here).
    writes = _GroupCommit(
        store,
        disk,
        lambda ops, changes: seen.append([len(ops), len({row[0] for row in changes.stored})]),
    )
    given: dict[int, str | None] = {}

    async def write(i: int) -> None:
        given[i] = await writes.write(accept(i))
        # Answered after its commit: the batch is on disk, its caller woken after.
        assert given[i] in committed_ids(store.path)

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(writes.run)
            async with trio.open_nursery() as callers:
                callers.start_soon(write, 0)
                await disk.waiting.wait()  # 0 is being written, alone: no wait for company
                for i in range(1, 11):
                    callers.start_soon(write, i)
                await trio.testing.wait_all_tasks_blocked()
                assert disk.batches == [1] and not given
                disk.gate.set()
            nursery.cancel_scope.cancel()
    assert disk.batches == [1, 10] and commits.count == 2 and writes.commits == 2
    assert seen == [[1, 1], [10, 10]]
    assert len(set(given.values())) == 11 and None not in given.values()
    store.shut()


async def test_a_failed_commit_fails_every_write_of_its_batch_with_sqlites_error(
    tmp_path: Path, autojump_clock: trio.abc.Clock
) -> None:
    """A full disk: each request in the batch gets the error it got alone, none is stored."""
    store = _Store(tmp_path / "t.db")
    (pages,) = store._db.execute("PRAGMA page_count").fetchone()
    store._db.execute(f"PRAGMA max_page_count = {pages}")  # no room for one more page
    disk = Disk()
    writes = _GroupCommit(store, disk)
    failed: list[BaseException] = []

    async def write(i: int) -> None:
        with pytest.raises(sqlite3.OperationalError) as caught:
            await writes.write(_Accept("echo", _pack([b"x" * 20_000]), f"c/{i}"))
        failed.append(caught.value)

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            async with trio.open_nursery() as callers:
                for i in range(5):
                    callers.start_soon(write, i)
                await trio.testing.wait_all_tasks_blocked()
                nursery.start_soon(writes.run)  # finds all five queued
                disk.gate.set()
            assert disk.batches == [5] and writes.commits == 0
            # Each its own copy of the error (its own traceback), SQLite's as the cause.
            assert len({id(exc) for exc in failed}) == 5
            assert all("full" in str(exc) for exc in failed), failed
            assert all(isinstance(exc.__cause__, sqlite3.OperationalError) for exc in failed)
            assert store.pending() == []  # rolled back: none of them is stored
            store._db.execute("PRAGMA max_page_count = 1073741823")
            assert await writes.write(accept(9)) is not None  # the writer goes on
            nursery.cancel_scope.cancel()
    store.shut()
    _Store(store.path).shut()  # whole: the header's count followed the rollback


async def test_a_caller_cancelled_while_its_batch_commits_leaves_the_batch_alone(
    tmp_path: Path, autojump_clock: trio.abc.Clock
) -> None:
    """Cancelled once taken: committed all the same; cancelled while queued: not written."""
    store = _Store(tmp_path / "t.db")
    disk = Disk()
    writes = _GroupCommit(store, disk)
    given: dict[int, str | None] = {}
    cancelled: list[int] = []
    scopes: dict[int, trio.CancelScope] = {}

    async def write(i: int) -> None:
        with trio.CancelScope() as scopes[i]:
            given[i] = await writes.write(accept(i, f"c/{i}"))
        if scopes[i].cancelled_caught:
            cancelled.append(i)

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            async with trio.open_nursery() as callers:
                for i in range(3):
                    callers.start_soon(write, i)
                await trio.testing.wait_all_tasks_blocked()
                nursery.start_soon(writes.run)
                await disk.waiting.wait()  # 0, 1 and 2 are being committed
                for i in range(3, 5):
                    callers.start_soon(write, i)  # queued behind them
                await trio.testing.wait_all_tasks_blocked()
                scopes[1].cancel()  # taken: its batch is on its way to the disk
                scopes[3].cancel()  # queued: not written
                await trio.testing.wait_all_tasks_blocked()
                assert sorted(cancelled) == [1, 3] and not given  # at once, not after the commit
                disk.gate.set()
            nursery.cancel_scope.cancel()
    assert sorted(given) == [0, 2, 4] and disk.batches == [3, 1]
    stored = store._db.execute("SELECT asked FROM known ORDER BY asked").fetchall()
    assert [row[0] for row in stored] == ["c/0", "c/1", "c/2", "c/4"]
    store.shut()


async def test_writes_not_committed_when_the_writer_stops_fail_closed(
    tmp_path: Path, autojump_clock: trio.abc.Clock
) -> None:
    store = _Store(tmp_path / "t.db")
    disk = Disk()
    writes = _GroupCommit(store, disk)
    failed: list[int] = []

    async def write(i: int) -> None:
        with pytest.raises(trio.ClosedResourceError):
            await writes.write(accept(i))
        failed.append(i)

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery, trio.open_nursery() as writer:
            writer.start_soon(writes.run)
            for i in range(3):
                nursery.start_soon(write, i)
            await disk.waiting.wait()  # a batch is being written: the writer stops mid-write
            nursery.start_soon(write, 3)  # queued
            await trio.testing.wait_all_tasks_blocked()
            writer.cancel_scope.cancel()
        with pytest.raises(trio.ClosedResourceError):
            await writes.write(accept(4))
    assert sorted(failed) == [0, 1, 2, 3] and store.pending() == []
    with pytest.raises(ValueError):
        _GroupCommit(store, disk, max_batch=0)
    store.shut()


async def test_a_batch_holds_at_most_max_batch_writes(
    tmp_path: Path, autojump_clock: trio.abc.Clock
) -> None:
    store = _Store(tmp_path / "t.db")
    disk = Disk()
    writes = _GroupCommit(store, disk, max_batch=4)
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(writes.run)
            async with trio.open_nursery() as callers:
                callers.start_soon(writes.write, accept(0))
                await disk.waiting.wait()
                for i in range(1, 11):
                    callers.start_soon(writes.write, accept(i))
                await trio.testing.wait_all_tasks_blocked()
                disk.gate.set()
            nursery.cancel_scope.cancel()
    assert disk.batches == [1, 4, 4, 2]
    assert len(store.pending()) == 11
    store.shut()


def test_a_mixed_batch_is_what_its_writes_one_by_one_would_give(tmp_path: Path) -> None:
    """Runs of one kind go to SQLite together, in order; a retry in the batch is stored once."""
    path = tmp_path / "t.db"
    store = _Store(path)
    old = store.accept("echo", [b"old"], "c/1")
    done = store.accept("echo", [b"done"], "c/2")
    trace = CommitCounter(store)
    changes = _Changes()
    given = store.write(
        [
            _Accept("echo", _pack([b"a"]), "c/3"),
            _Accept("echo", _pack([b"a"]), "c/3"),  # its retry: the same id
            _Accept("echo", _pack([b"b"]), None),
            _Accept("echo", _pack([b"old"]), "c/1"),  # stored before: its id
            _Finish(done, 200, _pack([b"first"])),
            _Finish(done, 500, _pack([b"second"])),  # a first answer is kept
            _Close(old),
            _Accept("echo", _pack([b"old"]), "c/1"),  # closed, asked again: a new request
            _Close("f" * 32),  # unknown: nothing
        ],
        changes,
    )
    assert trace.count == 1
    new_a, again_a, b, old_again, *nothing, new_old, unknown = given
    assert new_a == again_a and old_again == old and new_old not in (old, new_a, b)
    assert nothing == [None, None, None] and unknown is None
    # What it changed, for memory: new requests only, not the retries; first answers only.
    assert changes.answered == [(done, 200, _pack([b"first"]))]
    assert changes.stored == [
        (new_a, "echo", _pack([b"a"])),
        (b, "echo", _pack([b"b"])),
        (new_old, "echo", _pack([b"old"])),
    ]
    assert store.lookup(done) == (200, (b"first",))
    assert store.lookup(old) == (UNKNOWN, ())
    assert [row[0] for row in store.pending()] == [new_a, b, new_old]
    store.shut()
    store = _Store(path)  # the header's count followed: 2 + 3 new - 1 closed
    (count,) = store._db.execute("SELECT requests FROM header").fetchone()
    assert count == 4
    store.shut()


def test_lookups_in_a_batch_see_the_writes_before_them_and_alone_commit_nothing(
    tmp_path: Path,
) -> None:
    store = _Store(tmp_path / "t.db")
    first = store.accept("echo", [b"a"])
    trace = CommitCounter(store)
    given = store.write([_Lookup(first), _Finish(first, 200, _pack([b"r", b""])), _Lookup(first)])
    assert given == [(PENDING, ()), None, (200, (b"r", b""))] and trace.count == 1
    given = store.write([_Lookup(first), _Lookup("0" * 32), _Lookup(first)])
    assert given == [(200, (b"r", b"")), (UNKNOWN, ()), (200, (b"r", b""))]
    assert trace.count == 1  # reads alone: no write transaction, no fsync
    store.shut()
