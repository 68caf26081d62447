"""Which stored requests Titanic's dispatcher sends next (pure: no I/O, no clock).

The disk is the queue: every request acknowledged is on it, and a restart
finds them there.  :class:`_DispatchQueue` is what of that queue the
dispatcher holds in memory, so that it reads the disk only when memory
may not hold everything pending: at start, and after more arrived than
fit.  Requests committed while memory holds everything pending are handed
over by the commit itself, in commit order (the disk's order).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import final

Row = tuple[str, str, tuple[bytes, ...]]  # a stored request: Titanic id, service, frames


@final
class _DispatchQueue:
    """Pending requests not yet in flight, oldest first, up to ``capacity`` of them.

    The dispatcher asks :attr:`need_read`; when true it reads the oldest
    :meth:`read_begins` pending rows from the disk and gives them to
    :meth:`read_ends`.  Commits give their new requests to
    :meth:`stored` and their closes to :meth:`closed`; :meth:`take`
    moves requests in flight and :meth:`finished` takes them out.

    Memory is *complete* when it holds every pending request not in
    flight.  Only then are commits handed over; a commit that brings
    more than fit, or arrives while a read is under way (which may or may
    not have seen it), makes memory incomplete, and the next read (once
    memory is empty) finds them on the disk.  So nothing stored is missed,
    and memory holds at most ``capacity`` requests.  Bad input:
    ``capacity < 1`` raises ``ValueError``.
    """

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be at least 1, got {capacity}")
        self._capacity = capacity
        self._ready: dict[str, tuple[str, tuple[bytes, ...]]] = {}  # insertion order: oldest first
        self.in_flight: set[str] = set()
        self._complete = False  # at start the disk may hold anything
        self._reading = False
        self._missed = False  # a commit came while the read was under way
        # Finished or closed while the read was under way: the read may have found them pending.
        self._gone_while_reading: set[str] = set()
        self.reads = 0  # disk reads begun (for tests and monitoring)

    def __len__(self) -> int:
        """Requests waiting in memory (not in flight)."""
        return len(self._ready)

    @property
    def need_read(self) -> bool:
        """Memory is empty and may not hold everything pending: read the disk."""
        return not self._complete and not self._ready and not self._reading

    def read_begins(self) -> int:
        """A read of the disk starts; how many of the oldest pending rows to read.

        The rows in flight are among the oldest pending, hence the margin,
        and one more than fits tells whether memory can hold them all.
        """
        self._reading = True
        self._missed = False
        self._gone_while_reading.clear()
        self.reads += 1
        return self._capacity + len(self.in_flight) + 1

    def read_ends(self, rows: Sequence[Row]) -> None:
        """The read gave ``rows``, the oldest pending first; memory takes what fits."""
        self._reading = False
        skip = self.in_flight | self._gone_while_reading
        self._gone_while_reading = set()
        left_out = False
        for titanic_id, service, frames in rows:
            if titanic_id in skip:
                continue
            if len(self._ready) < self._capacity:
                self._ready[titanic_id] = (service, frames)
            else:
                left_out = True
        # The read asked for one more than fits: if all fitted, the disk had
        # no more, unless a commit came meanwhile (the read may have missed it).
        self._complete = not left_out and not self._missed

    def stored(self, rows: Iterable[Row]) -> None:
        """Requests a commit just stored (new ones only), in the commit's order."""
        rows = list(rows)
        if self._reading:
            self._missed = True
        elif self._complete and len(self._ready) + len(rows) <= self._capacity:
            for titanic_id, service, frames in rows:
                self._ready[titanic_id] = (service, frames)
        else:
            self._complete = False

    def closed(self, titanic_ids: Iterable[str]) -> None:
        """Requests a commit just forgot: not sent (those in flight finish as they will)."""
        for titanic_id in titanic_ids:
            self._ready.pop(titanic_id, None)
            if self._reading:  # the read may have found it before it went
                self._gone_while_reading.add(titanic_id)

    def take(self, n: int) -> list[Row]:
        """Up to ``n`` of the oldest requests in memory, now in flight."""
        taken: list[Row] = []
        while self._ready and len(taken) < n:
            titanic_id = next(iter(self._ready))
            service, frames = self._ready.pop(titanic_id)
            self.in_flight.add(titanic_id)
            taken.append((titanic_id, service, frames))
        return taken

    def finished(self, titanic_id: str) -> None:
        """A request in flight is done (answered, or its sender stopped)."""
        self.in_flight.discard(titanic_id)
        if self._reading:
            self._gone_while_reading.add(titanic_id)
