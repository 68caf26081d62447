"""What Titanic holds in memory of its store (pure: no I/O, no clock).

The disk is the truth: every request acknowledged is on it, and a
restart finds it there.  Memory mirrors two parts of it, so that the
disk is asked less often:

* :class:`_DispatchQueue`, the pending requests the dispatcher sends
  next.  It reads the disk only when memory may not hold everything
  pending: at start, and after more arrived than fit.  Requests
  committed while memory holds everything pending are handed over by
  the commit itself, in commit order (the disk's order).
* :class:`_Answers`, the latest answers: a ``titanic.reply`` for one of
  them is answered without a trip to the disk.
"""

from __future__ import annotations

from collections import OrderedDict
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
    not have seen it), makes memory incomplete, as does a read that
    returned as many rows as it asked for; the next read (once memory is
    empty) finds the rest on the disk.  So nothing stored is missed,
    and memory holds at most ``capacity`` requests.  Bad input:
    ``capacity < 1`` raises ``ValueError``.
    """

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be at least 1, got {capacity}")
        self._capacity = capacity
        self._ready: OrderedDict[str, tuple[str, tuple[bytes, ...]]] = OrderedDict()  # oldest first
        self.in_flight: set[str] = set()
        self._complete = False  # at start the disk may hold anything
        self._reading = False
        self._missed = False  # a commit came while the read was under way
        # Finished or closed while the read was under way: the read may have found them pending.
        self._gone_while_reading: set[str] = set()
        self._limit = 0  # how many rows the read under way asked for
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
        self.reads += 1
        self._limit = self._capacity + len(self.in_flight) + 1
        return self._limit

    def read_ends(self, rows: Sequence[Row]) -> None:
        """The read gave ``rows``, the oldest pending first; memory takes what fits."""
        self._reading = False
        skip = self.in_flight | self._gone_while_reading
        self._gone_while_reading.clear()  # only ever filled while a read runs
        left_out = False
        for titanic_id, service, frames in rows:
            if titanic_id in skip:
                continue
            if len(self._ready) < self._capacity:
                self._ready[titanic_id] = (service, frames)
            else:
                left_out = True
        # Fewer rows than asked for: the disk had no more.  Everything it had
        # is now in flight or in memory, unless some did not fit or a commit
        # came meanwhile (the read may have missed it).  A full read may
        # leave more on disk even when all fitted: some went while it ran.
        self._complete = len(rows) < self._limit and not left_out and not self._missed

    def stored(self, rows: Sequence[Row]) -> None:
        """Requests a commit just stored (new ones only), in the commit's order."""
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
            titanic_id, (service, frames) = self._ready.popitem(last=False)
            self.in_flight.add(titanic_id)
            taken.append((titanic_id, service, frames))
        return taken

    def finished(self, titanic_id: str) -> None:
        """A request in flight is done (answered, or its sender stopped)."""
        self.in_flight.discard(titanic_id)
        if self._reading:
            self._gone_while_reading.add(titanic_id)


@final
class _Answers:
    """The latest answers, oldest dropped first beyond ``max_count`` or ``max_bytes`` of replies.

    :meth:`add` is told each first answer once it is committed;
    :meth:`get` gives ``(status, reply)`` (the reply's frames packed) for
    one it holds, ``None`` for the rest: ask the disk.  What it gives is
    what the disk would: a close takes its request out as soon as it is
    queued (:meth:`closing`), and an answer is not taken in while a close
    of its request is under way (until :meth:`close_done`) nor once the
    close committed (:meth:`forget`).  Bad input: ``max_count < 1`` or
    ``max_bytes < 0`` raises ``ValueError``.
    """

    def __init__(self, max_count: int, max_bytes: int) -> None:
        if max_count < 1 or max_bytes < 0:
            raise ValueError(
                f"need max_count >= 1 and max_bytes >= 0, got {max_count}, {max_bytes}"
            )
        self._max_count = max_count
        self._max_bytes = max_bytes
        self._held: OrderedDict[str, tuple[int, bytes]] = OrderedDict()  # oldest first
        self.bytes = 0  # reply bytes held
        self._closing: dict[str, int] = {}  # closes under way, by request

    def __len__(self) -> int:
        return len(self._held)

    def get(self, titanic_id: str) -> tuple[int, bytes] | None:
        """The request's answer, if held: ``(status, reply)``."""
        return self._held.get(titanic_id)

    def add(self, titanic_id: str, status: int, reply: bytes) -> None:
        """A request's first answer is committed (too large to hold: not held)."""
        if titanic_id in self._closing or len(reply) > self._max_bytes:
            return
        self._held[titanic_id] = (status, reply)
        self.bytes += len(reply)
        while len(self._held) > self._max_count or self.bytes > self._max_bytes:
            _, (_, dropped) = self._held.popitem(last=False)
            self.bytes -= len(dropped)

    def forget(self, titanic_ids: Iterable[str]) -> None:
        """Requests a commit closed."""
        for titanic_id in titanic_ids:
            self._drop(titanic_id)

    def closing(self, titanic_id: str) -> None:
        """A close of the request is queued: from now on the disk answers for it."""
        self._drop(titanic_id)
        self._closing[titanic_id] = self._closing.get(titanic_id, 0) + 1

    def close_done(self, titanic_id: str) -> None:
        """That close is over: committed (then also :meth:`forget`), failed or abandoned."""
        left = self._closing[titanic_id] - 1
        if left:
            self._closing[titanic_id] = left
        else:
            del self._closing[titanic_id]

    def _drop(self, titanic_id: str) -> None:
        held = self._held.pop(titanic_id, None)
        if held is not None:
            self.bytes -= len(held[1])
