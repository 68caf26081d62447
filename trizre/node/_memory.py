"""Giving freed memory back to the system after a mass exit."""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
from collections.abc import Callable

__all__ = ["release_freed_memory"]


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
