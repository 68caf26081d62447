"""UUIDs that count their ``__hash__`` calls: for tests that a hot path hashes none.

``uuid.UUID.__hash__`` is a Python method, so a dict or set keyed by UUIDs
costs a Python call a lookup; issue 28's levers key by ``UUID.int`` instead,
and these tests pin that.  Pure: no Trio, no sockets (``tests/unit`` uses it).
"""

from __future__ import annotations

from collections.abc import Callable
from uuid import UUID


def counting_uuids() -> tuple[Callable[[int], UUID], Callable[[], int]]:
    """A maker of UUIDs (from an int) whose ``__hash__`` calls are counted, and the count."""
    hashed = 0

    class CountingUUID(UUID):
        __slots__ = ()

        def __hash__(self) -> int:
            nonlocal hashed
            hashed += 1
            return super().__hash__()

    def make(value: int) -> UUID:
        return CountingUUID(int=value)

    def count() -> int:
        return hashed

    return make, count
