"""Which peers' connections into a node's TCP inbox closed: one socket monitor on the inbox.

Each entered TCP peer talks to us over its own connection into our ROUTER
inbox.  When that connection closes, the conversation is over: the peer
died or stopped, or ended us and closed its link, or our inbox dropped
it (a frame over our ``max_message_size``).  libzmq would let the peer's
DEALER reconnect and go on, after a gap (issue 25).  It tells of a
closed connection only through a *socket monitor*.

Issue 25 watched our own DEALER to each peer instead: a monitor, its
inproc pipe and a reader a link (13-16 kB of libzmq's memory and a
descriptor a peer, issue 28).  One monitor on the inbox sees every
connection into it, whatever their number: the peer's HELLO names the
connection it came on (its descriptor, libzmq's ``ZMQ_SRCFD``, noted by
:meth:`ZSocket.note_sources`), and the DISCONNECTED event names the
descriptor that closed.

Our DEALER to a peer breaking is seen from the other end: the peer's
inbox watch ends us and closes its link to us, which closes a connection
into ours.  A peer that watches nothing (zyre) ends us at the gap its
inbox sees next, which closes its link to us all the same.
"""

from __future__ import annotations

import itertools
import sys
from typing import Any, Final, Generic, TypeVar, final

import trio
import zmq

from ._zsock import ZSocket, context

__all__ = ["InboxWatch"]

T = TypeVar("T")

_DISCONNECTED: Final = int(zmq.EVENT_DISCONNECTED)
_MONITORS: Final = itertools.count()  # unique inproc names, process-wide
_BATCH: Final = 256  # events taken per wake-up: a killed process closes many connections
# Events libzmq may hold for the watch (its send, from the I/O thread,
# blocks when they are this many behind): every connection made and
# closed into the inbox is one, a stranger's too; ~200 octets each.
_EVENTS_HWM: Final = 10_000


@final
class InboxWatch(Generic[T]):
    """Tells whose connection into a ROUTER ``inbox`` closed (libzmq's DISCONNECTED).

    :meth:`watch` a connection, by the descriptor its message came on
    (:meth:`ZSocket.note_sources`), with a tag (the node's peer);
    :meth:`broken` waits and returns the tags of connections that
    closed, each once.  A descriptor is reused once closed, so a tag is
    forgotten when reported, and :meth:`watch` of a descriptor replaces
    whatever tag it had.

    Memory is bounded by the connections watched: an entry each, removed
    when it is reported or forgotten; events wait in libzmq's pipe (at
    most ``_EVENTS_HWM``, then libzmq's I/O thread waits for us).
    """

    __slots__ = ("_by_fd", "_closed_tags", "_fd_of", "_inbox", "_sock")

    def __init__(self, inbox: ZSocket) -> None:
        """Start the monitor of ``inbox``.

        Raises ``zmq.ZMQError`` when the process is out of sockets, and
        ``trio.ClosedResourceError`` if ``inbox`` is closed; nothing is
        left open then.
        """
        reader: zmq.Socket[Any] = context().socket(zmq.PAIR)
        reader.setsockopt(zmq.RCVHWM, _EVENTS_HWM)
        self._sock = ZSocket(reader)
        address = f"inproc://trizre-inbox-{next(_MONITORS)}"
        try:
            # Only disconnections: the one event that ends a conversation.
            inbox.monitor(address, _DISCONNECTED)
            try:
                self._sock.connect(address)
            except BaseException:
                inbox.monitor(None)
                raise
        except BaseException:
            self._sock.close()
            raise
        self._inbox = inbox
        self._by_fd: dict[int, T] = {}
        self._fd_of: dict[T, int] = {}
        self._closed_tags: list[T] = []  # taken by watch(), for broken() to return

    def __len__(self) -> int:
        """How many connections are watched."""
        return len(self._by_fd)

    def __contains__(self, tag: object) -> bool:
        """Whether a connection is watched for ``tag``."""
        return tag in self._fd_of

    @property
    def closed(self) -> bool:
        """True once closed."""
        return self._sock.closed

    def watch(self, fd: int, tag: T) -> None:
        """Watch the connection at descriptor ``fd``: :meth:`broken` returns ``tag`` when it closes.

        A tag watched already moves to ``fd``; a descriptor watched
        already changes tag (the old one is forgotten: that connection
        closed, its descriptor was reused).  Raises
        ``trio.ClosedResourceError`` once the watch is closed, and
        ``ValueError`` for a negative ``fd``.

        Events libzmq sent already are taken first: a connection that
        closed had its descriptor's event sent before the descriptor was
        closed, so before a new connection could reuse it and say HELLO
        on it; taken after, it would end the new connection's tag.
        """
        if self._sock.closed:
            raise trio.ClosedResourceError("the watch is closed")
        if fd < 0:
            raise ValueError(f"not a descriptor: {fd}")
        self._take_ready()
        self.forget(tag)
        if (old := self._by_fd.get(fd)) is not None:
            del self._fd_of[old]
        self._by_fd[fd] = tag
        self._fd_of[tag] = fd

    def forget(self, tag: T) -> None:
        """Stop watching ``tag``'s connection, if it is watched."""
        fd = self._fd_of.pop(tag, None)
        if fd is not None:
            del self._by_fd[fd]

    async def broken(self) -> list[T]:
        """Wait until watched connections closed; their tags, oldest first.

        Each tag is reported once, and forgotten.  Cancellation: nothing is
        lost, the events wait for the next call.  Raises
        ``trio.ClosedResourceError`` once the watch is closed (also while
        waiting).
        """
        while not self._closed_tags:
            for frames in await self._sock.receive_batch(_BATCH):
                self._closed(frames)
        tags, self._closed_tags = self._closed_tags, []
        return tags

    def _closed(self, frames: list[bytes]) -> None:
        """One event from the monitor: a watched connection's closing is noted."""
        event = frames[0]  # the event (2 octets), its value (4): native order
        if len(event) != 6 or int.from_bytes(event[:2], sys.byteorder) != _DISCONNECTED:
            return
        tag = self._by_fd.pop(int.from_bytes(event[2:], sys.byteorder), None)
        if tag is not None:
            del self._fd_of[tag]
            self._closed_tags.append(tag)

    def _take_ready(self) -> None:
        """Take every event already sent; a waiting :meth:`broken` returns their tags."""
        sock = self._sock
        # A non-blocking read that finds nothing processes the socket's
        # commands unthrottled: an event already sent is seen.
        while (frames := sock.receive_nowait()) is not None:
            self._closed(frames)
        if self._closed_tags:
            sock.interrupt()

    def close(self) -> None:
        """Stop the inbox's monitor, then close; idempotent.

        Call it before the inbox closes.  A waiting :meth:`broken` raises
        ``trio.ClosedResourceError``.
        """
        if self._sock.closed:
            return
        # First: libzmq sends monitor events with a blocking send from its
        # I/O thread; stopped, the monitor sends none to a closed reader.
        if not self._inbox.closed:
            self._inbox.monitor(None)
        self._by_fd.clear()
        self._fd_of.clear()
        self._closed_tags.clear()
        self._sock.close()
