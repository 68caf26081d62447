"""The mark of a frame too large to have been read."""

from __future__ import annotations

from typing import Final, final

__all__ = ["OVERSIZE"]


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
