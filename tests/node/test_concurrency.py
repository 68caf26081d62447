"""trizre._concurrency: the wake-ups, queues and per-run state, and unwrap_single_exception_group.

Every waiting primitive is tried for what a waiter sees when it is woken,
cancelled or closed on, under virtual time (``autojump_clock``).
"""

from __future__ import annotations

import math

import pytest
import trio
import trio.testing
from trio.testing import wait_all_tasks_blocked

from tests.support.waiting import waiting
from trizre._concurrency import (
    _INSTANTS,
    BoundedQueue,
    Latch,
    LatchStatistics,
    QueueStatistics,
    RunLocal,
    TaskSet,
    Wakeup,
    WakeupStatistics,
    checkpoint,
    clock_reader,
    sleep_until_shared,
    unwrap_single_exception_group,
)


def cancelled() -> trio.Cancelled:
    return trio.Cancelled._create()


def test_single_error_group_reraises_the_bare_error() -> None:
    error = ValueError("boom")
    with pytest.raises(ValueError, match="boom") as info, unwrap_single_exception_group():
        raise ExceptionGroup("g", [error])
    assert info.value is error
    assert type(info.value) is ValueError
    assert info.value.__cause__ is None
    assert info.value.__suppress_context__


def test_nested_group_with_one_real_error_and_cancelled_raises_the_real_one() -> None:
    error = KeyError("k")
    group = BaseExceptionGroup(
        "outer",
        [
            cancelled(),
            BaseExceptionGroup("inner", [cancelled(), error]),
        ],
    )
    with pytest.raises(KeyError) as info, unwrap_single_exception_group():
        raise group
    assert info.value is error


def test_two_real_errors_stay_grouped() -> None:
    group = ExceptionGroup("g", [ValueError("a"), KeyError("b")])
    with pytest.raises(ExceptionGroup) as info, unwrap_single_exception_group():
        raise group
    assert info.value is group


def test_two_real_errors_nested_with_cancelled_stay_grouped() -> None:
    group = BaseExceptionGroup(
        "outer", [cancelled(), BaseExceptionGroup("inner", [ValueError("a")]), KeyError("b")]
    )
    with pytest.raises(BaseExceptionGroup) as info, unwrap_single_exception_group():
        raise group
    assert info.value is group


def test_only_cancelled_comes_out_bare() -> None:
    c = cancelled()
    with pytest.raises(trio.Cancelled) as info, unwrap_single_exception_group():
        raise BaseExceptionGroup("g", [BaseExceptionGroup("inner", [c])])
    assert info.value is c


def test_no_exception_passes_through() -> None:
    ran = []
    with unwrap_single_exception_group():
        ran.append(True)
    assert ran == [True]


def test_bare_exception_passes_through_untouched() -> None:
    error = KeyError("bare")
    with pytest.raises(KeyError) as info, unwrap_single_exception_group():
        raise error
    assert info.value is error


async def test_nursery_body_error_surfaces_bare() -> None:
    with trio.fail_after(5):
        with pytest.raises(KeyError, match="body") as info, unwrap_single_exception_group():
            async with trio.open_nursery() as nursery:
                nursery.start_soon(trio.sleep_forever)
                await trio.lowlevel.checkpoint()
                raise KeyError("body")
        assert type(info.value) is KeyError


async def test_nursery_child_error_surfaces_bare() -> None:
    async def child() -> None:
        await trio.lowlevel.checkpoint()
        raise ValueError("child")

    with trio.fail_after(5):
        with pytest.raises(ValueError, match="child"), unwrap_single_exception_group():
            async with trio.open_nursery() as nursery:
                nursery.start_soon(trio.sleep_forever)
                nursery.start_soon(child)


async def test_nursery_with_two_failing_children_stays_grouped() -> None:
    async def fail(exc: Exception) -> None:
        raise exc  # no checkpoint: both fail before either can be cancelled

    with trio.fail_after(5):
        with pytest.raises(ExceptionGroup) as info, unwrap_single_exception_group():
            async with trio.open_nursery() as nursery:
                nursery.start_soon(fail, ValueError("a"))
                nursery.start_soon(fail, KeyError("b"))
        assert sorted(type(e).__name__ for e in info.value.exceptions) == ["KeyError", "ValueError"]


# --------------------------------------------------------------------- Wakeup


async def test_wakeup_wakes_one_waiter_at_a_time_in_arrival_order(
    autojump_clock: trio.abc.Clock,
) -> None:
    wakeup = Wakeup()
    woken: list[int] = []

    async def waiter(n: int) -> None:
        await wakeup.wait()
        woken.append(n)

    with trio.fail_after(5):
        assert not wakeup and wakeup.wake_one() is False  # nobody waits: nothing happens
        async with trio.open_nursery() as nursery:
            for n in range(3):
                nursery.start_soon(waiter, n)
                await wait_all_tasks_blocked()
            assert len(wakeup) == 3 and wakeup.statistics() == WakeupStatistics(3)
            for _ in range(2):
                assert wakeup.wake_one() is True
                await wait_all_tasks_blocked()
            assert woken == [0, 1]
            assert wakeup.wake_all() == 1
        assert sorted(woken) == [0, 1, 2]  # woken together, they run in any order
        assert wakeup.statistics().tasks_waiting == 0
        assert wakeup.wake_all() == 0


async def test_wake_all_wakes_every_waiter() -> None:
    wakeup = Wakeup()
    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            for _ in range(5):
                nursery.start_soon(wakeup.wait)
            await wait_all_tasks_blocked()
            assert wakeup.wake_all() == 5
        assert wakeup.statistics() == WakeupStatistics(0)


async def test_wakeup_waiting_is_a_live_view_of_its_waiters(
    autojump_clock: trio.abc.Clock,
) -> None:
    """``waiting`` (read without a call on hot paths) says what ``bool()`` and
    ``len()`` say, through waits, wake-ups, a cancelled wait and wake_all."""
    wakeup = Wakeup()
    view = wakeup.waiting
    with trio.fail_after(5):
        assert not view
        async with trio.open_nursery() as nursery:
            scopes = [trio.CancelScope() for _ in range(4)]

            async def waiter(scope: trio.CancelScope) -> None:
                with scope:
                    await wakeup.wait()

            for scope in scopes:
                nursery.start_soon(waiter, scope)
                await wait_all_tasks_blocked()
            assert len(view) == len(wakeup) == 4
            wakeup.wake_one()
            scopes[1].cancel()
            await wait_all_tasks_blocked()
            assert len(view) == len(wakeup) == 2
            assert wakeup.wake_all() == 2
            assert not view and not wakeup
        assert wakeup.waiting is view  # the same mapping after wake_all
        async with trio.open_nursery() as again:
            again.start_soon(wakeup.wait)
            await wait_all_tasks_blocked()
            assert len(view) == 1
            wakeup.wake_all()


async def test_wakeup_given_before_a_wait_is_not_kept(autojump_clock: trio.abc.Clock) -> None:
    wakeup = Wakeup()
    wakeup.wake_one()
    wakeup.wake_all()
    with trio.move_on_after(1) as waited:
        await wakeup.wait()
    assert waited.cancelled_caught


async def test_a_cancelled_wakeup_wait_leaves_and_takes_no_wake_up(
    autojump_clock: trio.abc.Clock,
) -> None:
    wakeup = Wakeup()
    woken: list[str] = []

    async def waiter(name: str, scope: trio.CancelScope) -> None:
        with scope:
            await wakeup.wait()
            woken.append(name)

    with trio.fail_after(5):
        first, second = trio.CancelScope(), trio.CancelScope()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(waiter, "first", first)
            await wait_all_tasks_blocked()
            nursery.start_soon(waiter, "second", second)
            await wait_all_tasks_blocked()
            first.cancel()
            await wait_all_tasks_blocked()
            assert wakeup.statistics().tasks_waiting == 1
            assert wakeup.wake_one() is True  # to the one still waiting
        assert woken == ["second"]
        assert first.cancelled_caught and not second.cancelled_caught


async def test_a_woken_waiter_is_not_cancelled_out_of_its_wake_up(
    autojump_clock: trio.abc.Clock,
) -> None:
    wakeup = Wakeup()
    returned = False

    async def waiter(scope: trio.CancelScope) -> None:
        nonlocal returned
        with scope:
            await wakeup.wait()
            returned = True

    with trio.fail_after(5):
        scope = trio.CancelScope()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(waiter, scope)
            await wait_all_tasks_blocked()
            wakeup.wake_one()
            scope.cancel()  # too late: it was woken, so the wake-up is not lost
        assert returned


async def test_a_wakeup_wait_in_a_cancelled_scope_raises_at_once() -> None:
    wakeup = Wakeup()
    with trio.fail_after(5), trio.CancelScope() as scope:
        scope.cancel()
        await wakeup.wait()
        pytest.fail("a wait is a checkpoint")
    assert scope.cancelled_caught
    assert wakeup.statistics().tasks_waiting == 0


# ---------------------------------------------------------------------- Latch


async def test_a_latch_keeps_a_wake_up_given_while_nobody_waits(
    autojump_clock: trio.abc.Clock,
) -> None:
    latch = Latch()
    with trio.fail_after(5):
        latch.wake()
        latch.wake()  # kept once, not counted
        assert latch.statistics() == LatchStatistics(tasks_waiting=0, woken=True)
        await latch.wait()
        assert latch.statistics() == LatchStatistics(tasks_waiting=0, woken=False)
        with trio.move_on_after(1) as waited:
            await latch.wait()
        assert waited.cancelled_caught


async def test_a_latch_wakes_its_waiter(autojump_clock: trio.abc.Clock) -> None:
    latch = Latch()
    done = False

    async def waiter() -> None:
        nonlocal done
        await latch.wait()
        done = True

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(waiter)
            await wait_all_tasks_blocked()
            assert latch.statistics() == LatchStatistics(tasks_waiting=1, woken=False)
            latch.wake()
        assert done
        assert latch.statistics() == LatchStatistics(tasks_waiting=0, woken=False)


async def test_a_cancelled_latch_wait_keeps_the_next_wake_up(
    autojump_clock: trio.abc.Clock,
) -> None:
    latch = Latch()
    with trio.fail_after(5):
        with trio.move_on_after(1):
            await latch.wait()
        assert latch.statistics() == LatchStatistics(tasks_waiting=0, woken=False)
        latch.wake()  # nobody waits now: kept
        await latch.wait()


async def test_a_cancelled_latch_wait_does_not_take_a_kept_wake_up() -> None:
    latch = Latch()
    latch.wake()
    with trio.fail_after(5):
        with trio.CancelScope() as scope:
            scope.cancel()
            await latch.wait()
        assert scope.cancelled_caught
        assert latch.statistics().woken
        await latch.wait()
        assert not latch.statistics().woken


async def test_a_second_waiter_on_a_latch_is_refused() -> None:
    latch = Latch()
    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(latch.wait)
            await wait_all_tasks_blocked()
            with pytest.raises(trio.BusyResourceError):
                await latch.wait()
            latch.wake()


# --------------------------------------------------------------- BoundedQueue


async def test_a_queue_is_first_in_first_out_and_refuses_when_full() -> None:
    queue: BoundedQueue[int] = BoundedQueue(2)
    with trio.fail_after(5):
        assert queue.put_nowait(1) and queue.put_nowait(2)
        assert queue.full() and len(queue) == 2
        assert queue.put_nowait(3) is False
        assert queue.statistics() == QueueStatistics(2, 2, 0, 0, False)
        assert queue.get_nowait() == 1
        assert await queue.get() == 2
        with pytest.raises(trio.WouldBlock):
            queue.get_nowait()


@pytest.mark.parametrize(
    ("limit", "low_water"), [(0, None), (-1, None), (math.nan, None), (2, 2), (2, -1), (3, 5)]
)
def test_a_queue_refuses_a_bad_limit_or_low_water(limit: float, low_water: int | None) -> None:
    with pytest.raises(ValueError, match=r"limit|low_water"):
        BoundedQueue(limit, low_water=low_water)


async def test_a_getter_waits_for_an_item(autojump_clock: trio.abc.Clock) -> None:
    queue: BoundedQueue[str] = BoundedQueue(1)
    with trio.fail_after(5):
        async with waiting(queue.get) as getter:
            assert queue.statistics().tasks_waiting_get == 1
            assert queue.put_nowait("x")
        assert getter.result == "x"


async def test_a_cancelled_get_takes_nothing(autojump_clock: trio.abc.Clock) -> None:
    queue: BoundedQueue[str] = BoundedQueue(1)
    with trio.fail_after(5):
        with trio.move_on_after(1) as waited:
            await queue.get()
        assert waited.cancelled_caught
        assert queue.statistics().tasks_waiting_get == 0
        queue.put_nowait("kept")
        with trio.CancelScope() as scope:
            scope.cancel()
            await queue.get()
        assert len(queue) == 1  # cancelled before taking it
        assert await queue.get() == "kept"


async def test_a_putter_waits_until_the_queue_drains_to_its_low_water(
    autojump_clock: trio.abc.Clock,
) -> None:
    queue: BoundedQueue[int] = BoundedQueue(4, low_water=2)
    for n in range(4):
        queue.put_nowait(n)
    with trio.fail_after(5):
        async with waiting(queue.put, 4) as putter:
            assert queue.statistics().tasks_waiting_put == 1
            queue.get_nowait()  # 3 left: room, but above the low water
            await wait_all_tasks_blocked()
            assert not putter.done
            queue.get_nowait()  # 2 left: woken
        assert putter.done
        assert [queue.get_nowait() for _ in range(len(queue))] == [2, 3, 4]


async def test_a_cancelled_put_puts_nothing(autojump_clock: trio.abc.Clock) -> None:
    queue: BoundedQueue[int] = BoundedQueue(1)
    queue.put_nowait(1)
    with trio.fail_after(5):
        with trio.move_on_after(1) as waited:
            await queue.put(2)
        assert waited.cancelled_caught
        assert queue.statistics() == QueueStatistics(1, 1, 0, 0, False)
        assert queue.get_nowait() == 1
        with pytest.raises(trio.WouldBlock):
            queue.get_nowait()


async def test_closing_wakes_a_waiting_getter_with_end_of_channel() -> None:
    queue: BoundedQueue[int] = BoundedQueue(1)
    with trio.fail_after(5):
        async with waiting(queue.get, catching=trio.EndOfChannel) as getter:
            queue.close()
        assert [type(e) for e in getter.errors] == [trio.EndOfChannel]


async def test_a_closed_queue_is_drained_then_ends() -> None:
    queue: BoundedQueue[int] = BoundedQueue(2)
    queue.put_nowait(1)
    queue.close()
    queue.close()  # idempotent
    with trio.fail_after(5):
        assert queue.statistics().closed
        assert await queue.get() == 1
        with pytest.raises(trio.EndOfChannel):
            await queue.get()
        with pytest.raises(trio.EndOfChannel):
            queue.get_nowait()
        with pytest.raises(trio.EndOfChannel):
            await queue.get_batch(5)


async def test_putting_into_a_closed_queue_raises_closed_resource_error() -> None:
    queue: BoundedQueue[int] = BoundedQueue(2)
    queue.close()
    with trio.fail_after(5):
        with pytest.raises(trio.ClosedResourceError):
            queue.put_nowait(1)
        with pytest.raises(trio.ClosedResourceError):
            queue.push(1)
        with pytest.raises(trio.ClosedResourceError):
            await queue.put(1)
        assert len(queue) == 0


async def test_closing_wakes_a_waiting_putter_with_closed_resource_error() -> None:
    queue: BoundedQueue[int] = BoundedQueue(1)
    queue.put_nowait(1)
    with trio.fail_after(5):
        async with waiting(queue.put, 2, catching=trio.ClosedResourceError) as putter:
            queue.close()
        assert [type(e) for e in putter.errors] == [trio.ClosedResourceError]
        assert queue.get_nowait() == 1  # the waiting item was not put
        with pytest.raises(trio.EndOfChannel):
            queue.get_nowait()


async def test_push_goes_over_the_limit_and_wakes_a_getter() -> None:
    queue: BoundedQueue[str] = BoundedQueue(1)
    with trio.fail_after(5):
        async with waiting(queue.get) as getter:
            queue.push("a")
        queue.put_nowait("b")
        queue.push("c")  # over the limit of 1
        assert getter.results == ["a"] and len(queue) == 2 and queue.full()


async def test_clear_drops_the_items_and_wakes_a_waiting_putter() -> None:
    queue: BoundedQueue[int] = BoundedQueue(2, low_water=0)
    queue.put_nowait(1)
    queue.put_nowait(2)
    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(queue.put, 3)
            await wait_all_tasks_blocked()
            queue.clear()
        assert queue.get_nowait() == 3
        assert len(queue) == 0


async def test_get_batch_takes_up_to_its_maximum_oldest_first() -> None:
    queue: BoundedQueue[int] = BoundedQueue(math.inf)
    for n in range(5):
        queue.put_nowait(n)
    with trio.fail_after(5):
        assert await queue.get_batch(3) == [0, 1, 2]
        assert await queue.get_batch(3) == [3, 4]
        assert queue.statistics() == QueueStatistics(0, math.inf, 0, 0, False)
        with pytest.raises(ValueError, match="max_items"):
            await queue.get_batch(0)


async def test_get_batch_waits_for_one_and_is_always_a_checkpoint() -> None:
    queue: BoundedQueue[int] = BoundedQueue(10)
    with trio.fail_after(5):
        async with waiting(queue.get_batch, 10) as getter:
            assert queue.statistics().tasks_waiting_get == 1
            queue.put_nowait(1)
        assert getter.results == [[1]]
        queue.put_nowait(2)
        with trio.testing.assert_checkpoints():
            assert await queue.get_batch(10) == [2]


async def test_a_cancelled_get_batch_takes_nothing(autojump_clock: trio.abc.Clock) -> None:
    queue: BoundedQueue[int] = BoundedQueue(4)
    with trio.fail_after(5):
        with trio.move_on_after(1) as waited:
            await queue.get_batch(4)
        assert waited.cancelled_caught
        queue.put_nowait(1)
        with trio.CancelScope() as scope:
            scope.cancel()
            await queue.get_batch(4)
        assert queue.statistics() == QueueStatistics(1, 4, 0, 0, False)


async def test_get_batch_wakes_a_putter_once_below_the_low_water() -> None:
    queue: BoundedQueue[int] = BoundedQueue(2)
    queue.put_nowait(1)
    queue.put_nowait(2)
    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(queue.put, 3)
            await wait_all_tasks_blocked()
            assert await queue.get_batch(2) == [1, 2]
        assert queue.get_nowait() == 3


async def test_closing_wakes_a_get_batch_with_end_of_channel() -> None:
    queue: BoundedQueue[int] = BoundedQueue(2)
    with trio.fail_after(5):
        async with waiting(queue.get_batch, 2, catching=trio.EndOfChannel) as getter:
            queue.close()
        assert [type(e) for e in getter.errors] == [trio.EndOfChannel]


# -------------------------------------------------------------------- TaskSet


async def test_a_task_set_knows_its_members_for_their_blocks() -> None:
    tasks = TaskSet()
    seen: dict[str, bool] = {}

    async def member() -> None:
        with tasks.member():
            seen["member"] = tasks.has_current()
            await checkpoint()
        seen["after"] = tasks.has_current()

    async def stranger() -> None:
        seen["stranger"] = tasks.has_current()

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(member)
            nursery.start_soon(stranger)
        assert seen == {"member": True, "stranger": False, "after": False}
        with pytest.raises(KeyError), tasks.member():
            assert len(tasks) == 1
            raise KeyError("the block fails")
        assert len(tasks) == 0


# ------------------------------------------------------------------- RunLocal


def test_run_local_makes_one_value_per_run() -> None:
    made: list[list[int]] = []

    def factory() -> list[int]:
        made.append([])
        return made[-1]

    local: RunLocal[list[int]] = RunLocal("trizre_test_local", factory)

    async def use(n: int) -> list[int]:
        local.get().append(n)
        local.get().append(n)
        return local.get()

    assert trio.run(use, 1) == [1, 1]
    assert trio.run(use, 2) == [2, 2]  # a fresh value: nothing leaks from the last run
    assert len(made) == 2

    async def replace() -> list[int]:
        local.set([9])
        return local.get()

    assert trio.run(replace) == [9]
    assert len(made) == 2
    with pytest.raises(RuntimeError):
        local.get()


async def test_clock_reader_reads_the_runs_clock(autojump_clock: trio.abc.Clock) -> None:
    now = clock_reader()
    assert now() == trio.current_time()
    await trio.sleep(12.5)  # virtual: the reader follows the run's clock, not the wall's
    assert now() == trio.current_time()
    assert now() >= 12.5


def test_clock_reader_outside_a_run_raises() -> None:
    with pytest.raises(RuntimeError):
        clock_reader()


# --------------------------------------------------------- sleep_until_shared


async def test_sleepers_to_one_instant_share_one_timer_and_wake_at_it(
    autojump_clock: trio.abc.Clock,
) -> None:
    """Issue 28: a process's nodes beacon on the same multiples; one timer for them all."""
    woke: list[tuple[int, float]] = []
    at = trio.current_time() + 2.0

    async def sleeper(i: int) -> None:
        await sleep_until_shared(at)
        woke.append((i, trio.current_time()))

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            for i in range(50):
                nursery.start_soon(sleeper, i)
            await wait_all_tasks_blocked()
            instants = _INSTANTS.get()
            assert instants.heap == [at]  # one instant in the timer's heap
            assert len(instants.sleepers[at]) == 50
    assert sorted(woke) == [(i, at) for i in range(50)]
    assert instants.heap == [] and instants.sleepers == {}


async def test_an_earlier_instant_wakes_on_time_while_the_timer_waits_for_a_later(
    autojump_clock: trio.abc.Clock,
) -> None:
    start = trio.current_time()
    woke: dict[float, float] = {}

    async def sleeper(delay: float) -> None:
        await sleep_until_shared(start + delay)
        woke[delay] = trio.current_time() - start

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(sleeper, 5.0)
            await wait_all_tasks_blocked()
            nursery.start_soon(sleeper, 1.0)
            await wait_all_tasks_blocked()
            nursery.start_soon(sleeper, 3.0)
    assert woke == {1.0: 1.0, 3.0: 3.0, 5.0: 5.0}


async def test_a_cancelled_shared_sleep_leaves_the_others_asleep(
    autojump_clock: trio.abc.Clock,
) -> None:
    start = trio.current_time()
    woke: list[float] = []

    async def sleeper() -> None:
        await sleep_until_shared(start + 2.0)
        woke.append(trio.current_time() - start)

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(sleeper)
            with trio.move_on_after(1.0) as scope:
                await sleep_until_shared(start + 2.0)
            assert scope.cancelled_caught
            assert trio.current_time() - start == 1.0
    assert woke == [2.0]


async def test_a_shared_sleep_to_a_past_instant_is_a_checkpoint() -> None:
    with trio.testing.assert_checkpoints():
        await sleep_until_shared(trio.current_time())
    with trio.testing.assert_checkpoints():
        await sleep_until_shared(-math.inf)


async def test_a_shared_sleep_to_no_instant_raises() -> None:
    with pytest.raises(TypeError):
        await sleep_until_shared("soon")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="NaN"):
        await sleep_until_shared(math.nan)
