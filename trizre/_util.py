"""Small helpers shared by the node and the patterns."""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Final, final

import trio

__all__ = ["OVERSIZE", "release_freed_memory", "unwrap_single_exception_group"]


@final
class _Oversize(bytes):
    """The type of :data:`OVERSIZE`: no peer can send an instance of it."""

    __slots__ = ()


OVERSIZE: Final = _Oversize()
"""Frame 1 of ``[identity, OVERSIZE]``: an inbox refused a message over ``max_message_size``.

Compared by identity (``frames[1] is OVERSIZE``): peers send plain bytes,
so nothing on the wire can pass for it.  Its value is ``b""``, which
decodes as no ZRE message at all.
"""


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        trim: Callable[[int], int] = libc.malloc_trim
    except (OSError, AttributeError):  # not glibc
        return None
    return trim


def release_freed_memory() -> None:
    """Hand the C heap's free pages back to the OS (glibc's ``malloc_trim``; else nothing).

    libzmq frees a closed socket's buffers, but glibc keeps them in the
    arenas of libzmq's threads: after a burst of thousands of sockets
    (a forged-beacon flood) the process would stay that much larger.
    Costs a few milliseconds; call it after such a burst, not per socket.
    """
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


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
