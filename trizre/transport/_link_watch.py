"""Which of a node's TCP links broke: one socket reads all their monitors.

A DEALER whose connection breaks reconnects on its own and goes on
sending, though what was in flight is lost and the peer sees a gap
(issue 25).  libzmq tells of the break only through a *socket monitor*: a
PAIR socket it makes inside the watched socket, which sends each event
to an inproc endpoint.  Issue 25 read each monitor with a PAIR socket
and a task of its own; here one PULL socket connects to every watched
link's monitor, so a watched link costs the monitor and its inproc pipe
(about 13 kB of libzmq's memory and one descriptor, measured by
``benchmarks/peer_memory.py --libzmq``), not also a socket, a
descriptor and a task.

The event names the endpoint the link connected to, exactly as given to
``connect`` (libzmq's words for a connecting socket), so the watch finds
the link by it.  Not ``ZMQ_CONFLATE`` on the PULL, which would make the
pipes smaller still: a monitor event is two frames, and a conflated pipe
can show the first alone to a reader, which libzmq asserts against
(``fq.cpp``, an abort of the process: ``benchmarks/monitor_conflate.py``).
"""

from __future__ import annotations

import itertools
import sys
from typing import Any, Final, Generic, TypeVar, final

import trio
import zmq

from ._links import TcpLink
from ._zsock import ZSocket, context

__all__ = ["LinkWatch"]

T = TypeVar("T")

_DISCONNECTED: Final = int(zmq.EVENT_DISCONNECTED)
_MONITORS: Final = itertools.count()  # unique inproc names, process-wide
_BATCH: Final = 256  # events taken per wake-up: a killed process breaks many links at once


@final
class LinkWatch(Generic[T]):
    """Tells which watched :class:`TcpLink` lost its connection (libzmq's DISCONNECTED).

    :meth:`watch` a link with a tag (the node's peer); :meth:`broken`
    waits and returns the tags of links whose connection broke.  Only a
    connection that was made can break: a peer not yet listening is
    retried, not reported.  Closing a link forgets it (its monitor is
    stopped first, so nothing about it is reported after).  Two watched
    links to one endpoint (a peer's and a forged or stale peer's claiming
    the same address) are reported together: the event names the
    endpoint, not the socket.

    Memory is bounded by the links watched: one entry a link, removed
    when it closes; events wait in libzmq's pipes (at most one a break,
    and a break ends its peer).
    """

    __slots__ = ("_forget_link", "_links", "_sock")

    def __init__(self) -> None:
        """Open the watch's socket; raises ``zmq.ZMQError`` when the process is out of sockets."""
        pull: zmq.Socket[Any] = context().socket(zmq.PULL)
        self._sock = ZSocket(pull)
        # endpoint as libzmq names it in events -> [(link, tag)]: one in all
        # but odd cases; keyed by the link's own string, no copy a link
        self._links: dict[str, list[tuple[TcpLink, T]]] = {}
        self._forget_link = self._forget  # one bound method for every link's on_close

    def __len__(self) -> int:
        """How many links are watched."""
        return sum(map(len, self._links.values()))

    def __contains__(self, link: object) -> bool:
        """Whether ``link`` is watched."""
        if not isinstance(link, TcpLink):
            return False
        return any(watched is link for watched, _ in self._links.get(link.endpoint, ()))

    @property
    def closed(self) -> bool:
        """True once closed."""
        return self._sock.closed

    def watch(self, link: TcpLink, tag: T) -> None:
        """Watch ``link``: :meth:`broken` returns ``tag`` each time its connection breaks.

        Watching a link already watched (by this watch) does nothing.
        Raises ``trio.ClosedResourceError`` if the watch or the link is
        closed, ``ValueError`` if another watch has it, and
        ``zmq.ZMQError`` when the process is out of sockets or
        descriptors for the monitor (nothing is then watched).
        """
        if self._sock.closed or link.closed:
            raise trio.ClosedResourceError("the watch or the link is closed")
        if link.on_close is self._forget_link:
            return
        if link.on_close is not None:
            raise ValueError("the link is watched already")
        address = f"inproc://trizre-link-{next(_MONITORS)}"
        watched = link.zmq_socket
        # Only disconnections: the one event that says sent messages may be lost.
        watched.monitor(address, zmq.EVENT_DISCONNECTED)
        try:
            self._sock.connect(address)
        except BaseException:
            watched.disable_monitor()
            raise
        link.on_close = self._forget_link
        self._links.setdefault(link.endpoint, []).append((link, tag))

    def _forget(self, link: TcpLink) -> None:
        """A watched link is closing: stop its monitor, drop its entry."""
        link.on_close = None
        # First: libzmq sends monitor events with a blocking send from its
        # I/O thread; stopped, the monitor sends none about a socket that
        # no longer exists (nor to a watch that closed).
        link.zmq_socket.disable_monitor()
        entries = self._links.get(link.endpoint, [])
        entries[:] = [entry for entry in entries if entry[0] is not link]
        if not entries:
            self._links.pop(link.endpoint, None)

    async def broken(self) -> list[T]:
        """Wait until watched links' connections broke; their tags, oldest break first.

        A link is reported at each break (libzmq reconnects it), until it
        is closed.  Cancellation: nothing is lost, the events wait for the
        next call.  Raises ``trio.ClosedResourceError`` once the watch is
        closed (also while waiting).
        """
        links = self._links
        while True:
            tags: list[T] = []
            for frames in await self._sock.receive_batch(_BATCH):
                event, endpoint = frames[0], frames[-1]
                if int.from_bytes(event[:2], sys.byteorder) != _DISCONNECTED:
                    continue
                tags.extend(tag for _, tag in links.get(endpoint.decode(errors="replace"), ()))
            if tags:
                return tags

    def close(self) -> None:
        """Stop every watched link's monitor, then close; idempotent.

        A waiting :meth:`broken` raises ``trio.ClosedResourceError``.  The
        links stay open; they are no longer watched.
        """
        if self._sock.closed:
            return
        for entries in list(self._links.values()):
            for link, _ in list(entries):
                self._forget(link)
        self._sock.close()
