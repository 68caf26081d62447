"""Trio helpers shared by every layer that runs tasks: the node, its transport, the patterns."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import trio

__all__ = ["unwrap_single_exception_group"]


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
