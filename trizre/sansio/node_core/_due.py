"""When each peer's presence clock next needs a look: a heap, so a pass looks only at those due.

A node's clock used to look at every peer on every pass.  A pass comes at
the earliest peer's deadline, and in a mesh of N peers whose links were
made at different times that is about N passes an ``expired_timeout``, so
N² looks a node, most of them at peers with nothing due (issue 28: at 500
nodes the idle mesh spent most of the machine on them).  With this
schedule a pass looks at the peers whose time came.

A peer's recorded time may be early (it was heard since, which moves its
deadline later): the look then finds nothing due and schedules it again.
It must never be late, so whoever moves a peer's deadline earlier
schedules it again (the core on a new peer, the shell after each look).
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar, final

__all__ = ["Due"]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

_SLACK = 64  # stale entries tolerated beyond the live ones before the heap is rebuilt


@final
class Due(Generic[K, V]):
    """Items by the time they are next due; one time per key, the latest given.

    :meth:`schedule` replaces a key's time; :meth:`pop` hands out the items
    whose time has come, each once, and forgets them until scheduled again;
    :meth:`forget` drops a key.  Replaced and forgotten entries stay in the
    heap until they surface, and the heap is rebuilt once they outnumber
    the live ones, so memory stays bounded by the keys scheduled.
    """

    __slots__ = ("_counter", "_heap", "_token")

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, K, V]] = []
        self._token: dict[K, int] = {}  # the live entry's tie-breaker, per key
        self._counter = itertools.count()

    def __len__(self) -> int:
        """How many keys are scheduled."""
        return len(self._token)

    def __contains__(self, key: object) -> bool:
        return key in self._token

    def schedule(self, key: K, item: V, at: float) -> None:
        """Hand out ``item`` from :meth:`pop` once ``at`` has come; ``key``'s old time is void."""
        token = next(self._counter)
        self._token[key] = token
        heap = self._heap
        heapq.heappush(heap, (at, token, key, item))
        if len(heap) > 2 * len(self._token) + _SLACK:
            live = self._token
            self._heap = [entry for entry in heap if live.get(entry[2]) == entry[1]]
            heapq.heapify(self._heap)

    def forget(self, key: K) -> None:
        """``key`` is not due any more (nothing if it was not scheduled)."""
        self._token.pop(key, None)

    def pop(self, now: float) -> list[V]:
        """The items due by ``now``, earliest first; each is unscheduled until scheduled again."""
        heap, token = self._heap, self._token
        due: list[V] = []
        while heap and heap[0][0] <= now:
            _at, tie, key, item = heapq.heappop(heap)
            if token.get(key) == tie:
                del token[key]
                due.append(item)
        return due

    def settle(self, until: float, actual: Callable[[V], float | None]) -> None:
        """Move the early entries at the front, due by ``until``, to their real times.

        ``actual(item)`` is the item's time now, or ``None`` to leave its
        entry as it is.  An early entry (the peer was heard since it was
        scheduled) then costs no wake-up of its own: the pass before it
        moves it, with the others behind it.  It stops at the first entry
        that holds (or ``None``): that one wakes the next pass, which goes
        on from there, so each entry is asked about once a pass at most.
        Nothing is handed out; an item never moves earlier here.
        """
        heap, token = self._heap, self._token
        while heap and heap[0][0] <= until:
            at, tie, key, item = heap[0]
            if token.get(key) != tie:
                heapq.heappop(heap)  # void: replaced or forgotten
                continue
            later = actual(item)
            if later is None or later <= at:
                return
            heapq.heapreplace(heap, (later, tie, key, item))  # still the key's live entry

    def next(self) -> float:
        """The earliest scheduled time (``math.inf`` if nothing is scheduled)."""
        heap, token = self._heap, self._token
        while heap and token.get(heap[0][2]) != heap[0][1]:
            heapq.heappop(heap)  # void: replaced or forgotten
        return heap[0][0] if heap else math.inf
