"""Links between nodes of one Trio run: the same ZRE messages, in memory.

A node that finds a peer living in the same Trio run (same UUID and same
endpoint in this run's registry, same protocol version) links to it with a
:class:`LocalLink` instead of a DEALER socket.  The link carries exactly the
bytes a DEALER would — HELLO, sequence numbers, JOIN, WHISPER, GOODBYE —
into the peer's :class:`LocalInbox`, which its node reads like its ROUTER.
What changes is the cost: no TCP connection (libzmq spends ~60 kB and
three descriptors on each), no I/O thread hop, and no PINGs, because a
local peer's liveness can be read directly (:attr:`LocalInbox.deaf_since`).

Backpressure is the DEALER's: at most ``hwm`` messages of one link wait in
the inbox; a sender beyond that waits (``send``) or is refused
(``send_nowait``).  Nothing is dropped: a message in the inbox is delivered
unless the receiving node stops, as with TCP.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import Final, final
from uuid import UUID

import trio

__all__ = ["LocalInbox", "LocalLink", "lookup", "register", "unregister"]

_REGISTRY: Final[trio.lowlevel.RunVar[dict[UUID, LocalInbox]]] = trio.lowlevel.RunVar(
    "trizre_local_inboxes"
)


@final
class LocalInbox:
    """The in-memory inbox of one node, fed by the links of the run's other nodes.

    ``deaf_since`` is set by its node while it cannot read (its events
    subscribers are full); local peers read it instead of pinging.
    """

    __slots__ = ("_lot", "_queue", "closed", "deaf_since", "endpoint", "links", "version")

    def __init__(self, endpoint: str, version: int) -> None:
        self.endpoint = endpoint
        self.version = version
        self.closed = False
        self.deaf_since: float | None = None
        self.links: set[LocalLink] = set()  # links into this inbox, closed with it
        self._queue: deque[tuple[LocalLink, list[bytes]]] = deque()
        self._lot = trio.lowlevel.ParkingLot()

    def _put(self, link: LocalLink, frames: list[bytes]) -> None:
        self._queue.append((link, frames))
        if self._lot:  # an empty ParkingLot's unpark still costs ~1 us
            self._lot.unpark_all()

    async def receive_batch(self, max_messages: int) -> list[list[bytes]]:
        """Wait for messages; return up to ``max_messages`` of them, oldest first.

        Each message is ``[sender identity, *frames]``, as a ROUTER gives.
        Always a schedule point.  Cancellation: nothing was taken.  Raises
        ``trio.ClosedResourceError`` once the inbox is closed.
        """
        await trio.lowlevel.checkpoint()
        while not self._queue:
            if self.closed:
                raise trio.ClosedResourceError("the local inbox was closed")
            await self._lot.park()
        if self.closed:
            raise trio.ClosedResourceError("the local inbox was closed")
        queue = self._queue
        batch: list[list[bytes]] = []
        for _ in range(min(max_messages, len(queue))):
            link, frames = queue.popleft()
            link._taken()
            batch.append(frames)
        return batch

    def close(self) -> None:
        """Drop what is queued, close every link into it, wake its reader."""
        if self.closed:
            return
        self.closed = True
        self._queue.clear()
        for link in list(self.links):
            link.close()
        self._lot.unpark_all()


@final
class LocalLink:
    """One node's sending end towards a :class:`LocalInbox`: a DEALER's stand-in.

    Has the sending surface of :class:`~trizre._zsock.ZSocket` that the node
    uses (``send_nowait``, ``send``, ``close``, ``closed``).  Closing it (by
    either node) wakes its waiting senders with ``trio.ClosedResourceError``.
    """

    __slots__ = ("__weakref__", "_hwm", "_identity", "_inbox", "_lot", "closed", "inflight")

    def __init__(self, inbox: LocalInbox, identity: bytes, hwm: int) -> None:
        self._inbox = inbox
        self._identity = identity
        self._hwm = hwm
        self.inflight = 0  # messages of ours in the inbox
        self.closed = False
        self._lot: trio.lowlevel.ParkingLot | None = None  # made on the first wait
        inbox.links.add(self)

    @property
    def peer_deaf_since(self) -> float | None:
        """Since when the peer's node has not been reading, or ``None``."""
        return self._inbox.deaf_since

    def send_nowait(self, frames: Sequence[bytes]) -> bool:
        """Queue one message if fewer than ``hwm`` of ours wait; else ``False``.

        Raises ``trio.ClosedResourceError`` when the link is closed.
        """
        if self.closed:
            raise trio.ClosedResourceError("the local link was closed")
        if self.inflight >= self._hwm:
            return False
        self.inflight += 1
        self._inbox._put(self, [self._identity, *frames])
        return True

    def force(self, frames: Sequence[bytes]) -> None:
        """Queue one message over the limit (a node's last words when it stops)."""
        if not self.closed:
            self.inflight += 1
            self._inbox._put(self, [self._identity, *frames])

    async def send(self, frames: Sequence[bytes]) -> None:
        """Queue one message, waiting while ``hwm`` of ours wait (backpressure).

        Cancellation: nothing was sent if it raised, exactly once if it
        returned.  Raises ``trio.ClosedResourceError`` when the link is or
        gets closed.
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        while not self.send_nowait(frames):
            if self._lot is None:
                self._lot = trio.lowlevel.ParkingLot()
            await self._lot.park()
        await trio.lowlevel.cancel_shielded_checkpoint()

    def _taken(self) -> None:
        self.inflight -= 1
        if self._lot:
            self._lot.unpark()

    def close(self) -> None:
        """Stop sending; waiting senders get ``trio.ClosedResourceError``."""
        if self.closed:
            return
        self.closed = True
        self._inbox.links.discard(self)
        if self._lot:
            self._lot.unpark_all()


def _registry() -> dict[UUID, LocalInbox]:
    try:
        return _REGISTRY.get()
    except LookupError:
        inboxes: dict[UUID, LocalInbox] = {}
        _REGISTRY.set(inboxes)
        return inboxes


def register(node: UUID, inbox: LocalInbox) -> None:
    """Make ``inbox`` findable by the run's other nodes."""
    _registry()[node] = inbox


def unregister(node: UUID) -> None:
    """Forget a node's inbox (it stopped)."""
    _registry().pop(node, None)


def lookup(node: UUID, endpoint: str, version: int) -> LocalInbox | None:
    """The inbox of a node of this run at ``endpoint`` speaking ``version``, if any."""
    inbox = _registry().get(node)
    if inbox is None or inbox.closed or inbox.endpoint != endpoint or inbox.version != version:
        return None
    return inbox
