"""Titanic's group commit: writes that arrive together share one transaction and one fsync.

One task (:meth:`_GroupCommit.run`) takes the ops queued while the last
commit was under way and applies them to the :class:`_Store` as one
batch; each writer waits until its own batch is on disk.
"""

from __future__ import annotations

import copy
import functools
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from typing import final

import trio

from .._concurrency import Wakeup
from ._titanic_store import _Changes, _Given, _Op, _Store

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
    committed.  ``committed`` is called with a batch's ops and what it
    changed (:class:`_Changes`) once they are on disk, before any caller
    is woken.  Lookups take the same
    queue: those arriving together are one query and one thread hop,
    and see every write queued before them.  The queue holds at most
    one op per waiting caller.
    """

    def __init__(
        self,
        store: _Store,
        on_disk: Callable[[Callable[[], list[_Given]]], Awaitable[list[_Given]]],
        committed: Callable[[Sequence[_Op], _Changes], None] = lambda ops, changes: None,
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
                changes = _Changes()
                try:
                    given = await self._on_disk(functools.partial(self._store.write, ops, changes))
                except Exception as exc:
                    for queued in batch:
                        queued.error = exc
                        queued.done.set()
                    self._batch = []
                    continue
                self._batch = []
                self.commits += 1
                self._committed(ops, changes)
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
