"""Trio helpers shared by every layer that runs tasks: the node, its transport, the patterns.

The library's own wake-ups, queues and per-run state live here, built once
on ``trio.lowlevel`` and tested by themselves (tests/node/test_concurrency.py),
so that the node, the links, the fan-out and the patterns need no
``trio.lowlevel`` of their own.  Besides this module only the socket layer
(``transport/_zsock.py``) and the conformance agent's process use it;
tests/unit/test_lowlevel_confined.py keeps it so.

* :class:`Wakeup`: tasks wait until another task says something changed;
* :class:`Latch`: one task waits; a wake-up given while it was busy is kept;
* :class:`BoundedQueue`: a deque with waiting getters and putters, a low
  water mark and Trio's close semantics;
* :class:`TaskSet`: "is the running task one of these?";
* :class:`RunLocal`: one value per Trio run, made on first use;
* :func:`sleep_until_shared`: sleeps to one instant that share one timer;
* the checkpoints and :func:`spawn_system_task`, named here so that the hot
  paths that pace their own schedule points say which one they take, and
  :func:`clock_reader`, the run's clock without ``trio.current_time``'s
  two wrappers.

They are cheaper than Trio's general objects where the library's hot paths
need it (a :class:`Wakeup` with nobody waiting costs a dict check, a
``ParkingLot``'s ``unpark`` about 1 us); each has ``statistics()`` as
Trio's own objects do.
"""

from __future__ import annotations

import heapq
import math
from collections import OrderedDict, deque
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Final, Generic, NamedTuple, TypeVar, final

import trio
from trio.lowlevel import (
    Abort,
    RunVar,
    Task,
    current_task,
    enable_ki_protection,
    reschedule,
    wait_task_rescheduled,
)

__all__ = [
    "BoundedQueue",
    "Latch",
    "LatchStatistics",
    "QueueStatistics",
    "RunLocal",
    "TaskSet",
    "Wakeup",
    "WakeupStatistics",
    "cancel_shielded_checkpoint",
    "checkpoint",
    "checkpoint_if_cancelled",
    "clock_reader",
    "sleep_until_shared",
    "spawn_system_task",
    "unwrap_single_exception_group",
]

T = TypeVar("T")

# ----------------------------------------------------------------- checkpoints
#
# A Trio checkpoint is a cancellation point and a schedule point.  The hot
# paths (a send that did not wait, an event already buffered) honour
# cancellation on every call but take a schedule point only every so often,
# which is most of their cost otherwise: they use the two halves apart.

#: A full checkpoint: raises ``trio.Cancelled`` if cancelled, and lets others run.
checkpoint: Final = trio.lowlevel.checkpoint
#: Raises ``trio.Cancelled`` if cancelled; otherwise returns at once (no schedule point).
checkpoint_if_cancelled: Final = trio.lowlevel.checkpoint_if_cancelled
#: Lets others run, but cannot raise ``trio.Cancelled`` (for after the work is done).
cancel_shielded_checkpoint: Final = trio.lowlevel.cancel_shielded_checkpoint
#: A task of the run rather than of a nursery (see ``trio.lowlevel.spawn_system_task``):
#: it outlives the task that started it, is cancelled when the run ends, and
#: an error out of it ends the run.  For a service shared by the run's nodes.
spawn_system_task: Final = trio.lowlevel.spawn_system_task


def clock_reader() -> Callable[[], float]:
    """The current run's clock's ``current_time``: what ``trio.current_time()`` returns.

    One Python call a read where ``trio.current_time()`` makes three, for
    a hot path that reads the clock on every wake-up and is made inside
    the run it serves (a test's virtual clock is the one it reads).
    Outside a Trio run it raises ``RuntimeError``.  Not a checkpoint.
    """
    return trio.lowlevel.current_clock().current_time


# --------------------------------------------------------------------- Wakeup


class WakeupStatistics(NamedTuple):
    """What a :class:`Wakeup` holds: ``tasks_waiting``, as ``ParkingLot.statistics()``."""

    tasks_waiting: int


@final
class Wakeup:
    """Tasks that wait until another task says something changed.

    The waker changes the state first, then calls :meth:`wake_one` (one
    waiter is enough: an item for one getter) or :meth:`wake_all` (a state
    every waiter must see: closed, room for many).  Waiters wake in the
    order they came.  A wake-up with nobody waiting is lost on purpose:
    waiters re-check the state before they wait (it is not a latch; see
    :class:`Latch`).  ``bool(wakeup)`` and ``len(wakeup)`` say whether and
    how many tasks wait; ``wakeup.waiting`` (the waiting tasks, read only)
    says whether without a Python call.

    Cancellation: a cancelled :meth:`wait` leaves the waiters at once and
    consumed no wake-up; a task already woken is not cancelled out of it
    (it returns, and should re-check the state as any woken waiter).
    """

    __slots__ = ("_waiters", "waiting")

    def __init__(self) -> None:
        # An ordered dict, as ParkingLot: FIFO and O(1) removal of a
        # cancelled waiter from anywhere.
        self._waiters: OrderedDict[Task, None] = OrderedDict()
        # The waiting tasks, in order; read only.  ``not wakeup.waiting`` is
        # ``not wakeup`` without a Python call, for paths that ask on every
        # request or message whether anyone waits.
        self.waiting: Mapping[Task, None] = self._waiters

    def __bool__(self) -> bool:
        return bool(self._waiters)

    def __len__(self) -> int:
        return len(self._waiters)

    @enable_ki_protection
    async def wait(self) -> None:
        """Wait until woken.  Always a checkpoint (it always waits)."""
        task = current_task()
        self._waiters[task] = None

        def abort(_: object) -> Abort:
            del self._waiters[task]
            return Abort.SUCCEEDED

        await wait_task_rescheduled(abort)

    @enable_ki_protection
    def wake_one(self) -> bool:
        """Wake the longest waiter; False if nobody waited.  Never blocks."""
        if not self._waiters:
            return False
        task, _ = self._waiters.popitem(last=False)
        reschedule(task)
        return True

    @enable_ki_protection
    def wake_all(self) -> int:
        """Wake every waiter; how many there were.  Never blocks."""
        waiters = self._waiters
        if not waiters:
            return 0
        woken = list(waiters)
        waiters.clear()  # the same dict: ``waiting`` is a view of it
        for task in woken:
            reschedule(task)
        return len(woken)

    def statistics(self) -> WakeupStatistics:
        return WakeupStatistics(tasks_waiting=len(self._waiters))


# ---------------------------------------------------------------------- Latch


class LatchStatistics(NamedTuple):
    """What a :class:`Latch` holds: a waiting task (0 or 1), a wake-up kept for the next wait."""

    tasks_waiting: int
    woken: bool


@final
class Latch:
    """One task waits; a :meth:`wake` given while it was elsewhere is kept for its next wait.

    For a task that waits for "something about me changed" between checks
    of its own state (a request waiting for its reply or the loss of its
    target): a wake-up between the check and the wait is not lost, unlike
    with :class:`Wakeup` or ``trio_util.RepeatedEvent``.  A kept wake-up
    may be stale (the waiter had already seen the change); the waiter
    re-checks its state in a loop, so it costs one turn.  Cheaper than a
    ``trio.Event`` per wait: nothing is allocated.

    Cancellation: a cancelled :meth:`wait` consumed no wake-up (one that
    was kept stays kept; one that comes later is kept).  Bad use: a second
    task waiting while one does raises ``trio.BusyResourceError``.
    """

    __slots__ = ("_waiter", "_woken")

    def __init__(self) -> None:
        self._waiter: Task | None = None
        self._woken = False  # a wake() no wait() has taken yet

    @enable_ki_protection
    def wake(self) -> None:
        """Wake the waiting task, or keep the wake-up for the next :meth:`wait`.  Never blocks."""
        if self._waiter is not None:
            reschedule(self._waiter)
            self._waiter = None
        else:
            self._woken = True

    @enable_ki_protection
    async def wait(self) -> None:
        """Return once woken (at once, after a schedule point, if a wake-up was kept)."""
        if self._woken:
            await checkpoint()
            self._woken = False  # after the checkpoint: a cancelled wait keeps it
            return
        if self._waiter is not None:
            raise trio.BusyResourceError("another task is already waiting on this latch")
        self._waiter = current_task()
        await wait_task_rescheduled(self._abort)

    def _abort(self, _: object) -> Abort:
        self._waiter = None
        return Abort.SUCCEEDED

    def statistics(self) -> LatchStatistics:
        return LatchStatistics(tasks_waiting=int(self._waiter is not None), woken=self._woken)


# --------------------------------------------------------------- BoundedQueue


class QueueStatistics(NamedTuple):
    """What a :class:`BoundedQueue` holds, named as ``MemoryChannelStatistics``."""

    current_buffer_used: int
    max_buffer_size: int | float
    tasks_waiting_put: int
    tasks_waiting_get: int
    closed: bool


class BoundedQueue(Generic[T]):
    """A FIFO of at most ``limit`` items with waiting getters and putters.

    ``limit`` may be ``math.inf`` (the bound is then kept by whoever puts,
    as the local inbox's per-link credits do).  Getters wake one per item;
    putters waiting for room wake once the queue has drained to
    ``low_water`` items (default: as soon as there is room), so that a
    producer and a consumer that both wait do not swap places on every item.

    Closing (:meth:`close`) ends the producing side, as closing a Trio send
    channel: :meth:`put`, :meth:`put_nowait` and :meth:`push` then raise
    ``trio.ClosedResourceError``, putters waiting for room wake with it,
    and getters take what is buffered, then get ``trio.EndOfChannel``.
    :meth:`clear` drops what is buffered (with :meth:`close`: the consumer
    went away, nothing it would have read is kept).

    Bad input: ``limit < 1``, or ``low_water`` outside ``0 .. limit - 1``,
    raise ``ValueError``.
    """

    __slots__ = ("_getters", "_items", "_limit", "_low_water", "_putters", "closed")

    def __init__(self, limit: int | float, *, low_water: int | float | None = None) -> None:
        if not limit >= 1:
            raise ValueError(f"a queue's limit must be at least 1, got {limit!r}")
        if low_water is None:
            low_water = limit - 1
        elif not 0 <= low_water < limit:
            raise ValueError(
                f"low_water must be in 0 .. limit - 1 ({limit - 1}), got {low_water!r}"
            )
        self._items: deque[T] = deque()
        self._limit = limit
        self._low_water = low_water
        self._getters = Wakeup()
        self._putters = Wakeup()
        self.closed = False

    def __len__(self) -> int:
        return len(self._items)

    def full(self) -> bool:
        """Would :meth:`put_nowait` refuse an item now (for want of room)?"""
        return len(self._items) >= self._limit

    @enable_ki_protection
    def put_nowait(self, item: T) -> bool:
        """Append ``item`` if there is room and wake a getter; False (nothing done) if full.

        Raises ``trio.ClosedResourceError`` once closed.  Never blocks.
        """
        if self.closed:
            raise trio.ClosedResourceError("the queue was closed")
        items = self._items
        if len(items) >= self._limit:
            return False
        items.append(item)
        if self._getters.waiting:  # the common case, nobody waits, costs no call
            self._getters.wake_one()
        return True

    @enable_ki_protection
    def push(self, item: T) -> None:
        """Append ``item`` over the limit (last words, a final event) and wake a getter.

        Raises ``trio.ClosedResourceError`` once closed.  Never blocks.
        """
        if self.closed:
            raise trio.ClosedResourceError("the queue was closed")
        self._items.append(item)
        if self._getters.waiting:
            self._getters.wake_one()

    async def put(self, item: T) -> None:
        """Append ``item``, waiting for room.

        Cancellation: the item was put if it returned, not at all if it
        raised.  Raises ``trio.ClosedResourceError`` if the queue is or gets
        closed (the item was not put).
        """
        await checkpoint_if_cancelled()
        while not self.put_nowait(item):
            await self._putters.wait()
        await cancel_shielded_checkpoint()

    @enable_ki_protection
    def get_nowait(self) -> T:
        """Take the oldest item.  Never blocks.

        Raises ``trio.WouldBlock`` when empty, ``trio.EndOfChannel`` when
        empty and closed.
        """
        items = self._items
        if not items:
            if self.closed:
                raise trio.EndOfChannel
            raise trio.WouldBlock
        item = items.popleft()
        if self._putters.waiting and len(items) <= self._low_water:
            self._putters.wake_all()
        return item

    async def get(self) -> T:
        """Take the oldest item, waiting for one.

        Cancellation: nothing was taken if it raised.  Raises
        ``trio.EndOfChannel`` once closed and drained.
        """
        await checkpoint_if_cancelled()
        if self._items:
            item = self.get_nowait()
            await cancel_shielded_checkpoint()
            return item
        while not self._items:
            if self.closed:
                await cancel_shielded_checkpoint()
                raise trio.EndOfChannel
            await self._getters.wait()  # this task's schedule point
        return self.get_nowait()

    async def get_batch(self, max_items: int) -> list[T]:
        """Take up to ``max_items`` items, oldest first, waiting for at least one.

        The schedule point comes first, so that the batch gathers what
        other tasks put meanwhile.  Cancellation: nothing was taken if it
        raised.  Raises ``trio.EndOfChannel`` once closed and drained; bad
        input: ``max_items < 1`` raises ``ValueError``.
        """
        if max_items < 1:
            raise ValueError(f"max_items must be at least 1, got {max_items}")
        await checkpoint()
        items = self._items
        while not items:
            if self.closed:
                raise trio.EndOfChannel
            await self._getters.wait()
        if len(items) <= max_items:
            batch = list(items)
            items.clear()
        else:
            batch = [items.popleft() for _ in range(max_items)]
        if self._putters.waiting and len(items) <= self._low_water:
            self._putters.wake_all()
        return batch

    def clear(self) -> None:
        """Drop every buffered item (waking putters: there is room).  Never blocks."""
        self._items.clear()
        self._putters.wake_all()

    def close(self) -> None:
        """No more items: wake every getter and putter (see the class).  Idempotent."""
        self.closed = True
        self._getters.wake_all()
        self._putters.wake_all()

    def statistics(self) -> QueueStatistics:
        return QueueStatistics(
            current_buffer_used=len(self._items),
            max_buffer_size=self._limit,
            tasks_waiting_put=len(self._putters),
            tasks_waiting_get=len(self._getters),
            closed=self.closed,
        )


# -------------------------------------------------------------------- TaskSet


@final
class TaskSet:
    """Remembers tasks, to ask later "is the running task one of them?".

    For code that must act differently when called from a given role's task
    (a node's inbox readers, whose waits stop the node reading).  A task
    is a member for the length of a :meth:`member` block, however the
    block ends, so nothing outlives its task.
    """

    __slots__ = ("_tasks",)

    def __init__(self) -> None:
        self._tasks: set[Task] = set()

    @contextmanager
    def member(self) -> Iterator[None]:
        """The running task is a member inside the block.  Not a checkpoint."""
        task = current_task()
        self._tasks.add(task)
        try:
            yield
        finally:
            self._tasks.discard(task)

    def has_current(self) -> bool:
        """Is the running task a member?  Raises ``RuntimeError`` outside a Trio run."""
        return current_task() in self._tasks

    def __len__(self) -> int:
        return len(self._tasks)


# ------------------------------------------------------------------- RunLocal


@final
class RunLocal(Generic[T]):
    """One value per Trio run, made by ``factory`` on first use in that run.

    For state shared by the nodes of one run (the registry of local inboxes,
    the beacon hubs, the ZAP handler) that must not leak into the next run,
    as a test suite runs many.  Outside a Trio run, :meth:`get` and
    :meth:`set` raise ``RuntimeError``.
    """

    __slots__ = ("_factory", "_var")

    def __init__(self, name: str, factory: Callable[[], T]) -> None:
        self._var: RunVar[T] = RunVar(name)
        self._factory = factory

    def get(self) -> T:
        """This run's value (made now on the first call).  Not a checkpoint."""
        try:
            return self._var.get()
        except LookupError:
            value = self._factory()
            self._var.set(value)
            return value

    def set(self, value: T) -> None:
        """Replace this run's value.  Not a checkpoint."""
        self._var.set(value)


# ------------------------------------------------------------ shared sleeps


@final
class _Instants:
    """Per run: the instants tasks sleep until, each with its sleepers, and one timer task."""

    __slots__ = ("heap", "sleepers", "timer")

    def __init__(self) -> None:
        self.sleepers: dict[float, Wakeup] = {}
        self.heap: list[float] = []  # the instants of ``sleepers``, earliest first
        self.timer = Wakeup()  # the timer task, when it waits for an earlier instant

    async def run(self) -> None:
        """Wake each instant's sleepers when it comes; never raises (a system task)."""
        sleepers, heap = self.sleepers, self.heap
        while True:
            if not heap:
                await self.timer.wait()
                continue
            with trio.move_on_at(heap[0]):
                await self.timer.wait()  # an earlier instant came: sleep for it instead
            now = trio.current_time()
            while heap and heap[0] <= now:
                sleepers.pop(heapq.heappop(heap)).wake_all()


_INSTANTS: Final[RunVar[_Instants]] = RunVar("trizre_shared_sleeps")


async def sleep_until_shared(deadline: float) -> None:
    """``trio.sleep_until(deadline)``, with one timer for all the run's tasks sleeping until it.

    For many tasks that wake at the same instant (the beacons of a
    process's nodes, on the multiples of their interval): one deadline in
    Trio's timer heap and one task woken by it, which wakes the others,
    instead of a cancel scope each.  Always a checkpoint.  Cancellation:
    the sleep ends at once and the others sleep on.  Bad input: a
    ``deadline`` that is not a number raises ``TypeError``; NaN raises
    ``ValueError``, as Trio's.
    """
    if not isinstance(deadline, int | float):
        raise TypeError(f"a deadline is a number, got {type(deadline).__name__}")
    if math.isnan(deadline):
        raise ValueError("deadline must not be NaN")
    if deadline <= trio.current_time():
        await checkpoint()
        return
    try:
        instants = _INSTANTS.get()
    except LookupError:
        instants = _Instants()
        _INSTANTS.set(instants)
        spawn_system_task(instants.run, name="trizre shared sleeps")
    sleepers = instants.sleepers.get(deadline)
    if sleepers is None:
        sleepers = instants.sleepers[deadline] = Wakeup()
        heapq.heappush(instants.heap, deadline)
        if instants.heap[0] == deadline:
            instants.timer.wake_one()  # it sleeps for a later instant, or for none
    await sleepers.wait()


# -------------------------------------------------------------------- errors


def _leaves(group: BaseExceptionGroup[BaseException]) -> list[BaseException]:
    found: list[BaseException] = []
    for exc in group.exceptions:
        if isinstance(exc, BaseExceptionGroup):
            found.extend(_leaves(exc))
        else:
            found.append(exc)
    return found


@contextmanager
def unwrap_single_exception_group() -> Iterator[None]:
    """Let one error out of an internal nursery bare, not in an exception group.

    Public context managers own nurseries; their users should see the
    ``KeyError`` their body raised, not an ``ExceptionGroup`` around it.
    When the group holds one real error (besides any ``trio.Cancelled``),
    that error is raised; only several real errors stay grouped.
    """
    try:
        yield
    except BaseExceptionGroup as group:
        leaves = _leaves(group)
        real = [exc for exc in leaves if not isinstance(exc, trio.Cancelled)]
        if len(real) == 1:
            raise real[0] from None
        if not real and leaves:
            raise leaves[0] from None
        raise
