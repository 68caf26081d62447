"""Waiting-until helpers: a call left waiting in a task, and what became of it.

Many tests need "a task blocked in ``await x()``" to check that something
wakes it (or does not).  :func:`waiting` starts the call(s), returns once
every task of the run is blocked, and leaves the block only when they have
all returned: no sleeps, and nothing left running.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, Generic, TypeVar

import attrs
import trio
import trio.testing

T = TypeVar("T")

__all__ = ["Waiting", "waiting"]


@attrs.define
class Waiting(Generic[T]):
    """What became of the waiting call(s): results and caught errors, in the order they came."""

    results: list[T] = attrs.Factory(list)
    errors: list[BaseException] = attrs.Factory(list)
    returned: trio.Event = attrs.Factory(trio.Event)
    """Set when the first call has returned (or raised one of ``catching``)."""
    nursery: trio.Nursery | None = None
    """Where the calls run: cancel its scope to give up waiting for them."""

    @property
    def done(self) -> bool:
        return self.returned.is_set()

    @property
    def result(self) -> T:
        """The one call's result (it must have returned)."""
        (result,) = self.results
        return result


@asynccontextmanager
async def waiting(
    afn: Callable[..., Awaitable[T]],
    *args: Any,
    tasks: int = 1,
    catching: type[BaseException] | tuple[type[BaseException], ...] = (),
) -> AsyncIterator[Waiting[T]]:
    """``await afn(*args)`` in ``tasks`` tasks, all blocked by the time the block starts.

    An exception of a type in ``catching`` is recorded in ``errors``
    (the call is then done); any other propagates, as from a nursery.
    Leaving the block waits for every call to end; cancel
    ``Waiting.nursery``'s scope to cancel them instead.  Bound the test
    with ``trio.fail_after``: a call that never returns holds the block.
    """
    state: Waiting[T] = Waiting()

    async def call() -> None:
        try:
            state.results.append(await afn(*args))
        except catching as exc:
            state.errors.append(exc)
        state.returned.set()

    async with trio.open_nursery() as nursery:
        state.nursery = nursery
        for _ in range(tasks):
            nursery.start_soon(call)
        await trio.testing.wait_all_tasks_blocked()
        yield state
