"""A peer as a node holds it: its protocol, its link, and the order of its senders.

:class:`PeerSession` joins one peer's sans-I/O :class:`~trizre.sansio._peer.PeerProtocol`
to the :class:`~trizre.transport._links.Link` that carries its messages, and keeps the
one rule that needs both: messages leave in the order they were numbered.
Protocol messages queued by the protocol (HELLO, JOIN, LEAVE, PING, PING-OK)
go before the next data message; a data sender that must wait for room
queues on a FIFO lock, and nobody overtakes it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TypeAlias, final
from uuid import UUID

import trio

from .._errors import PeerDisconnected
from ..sansio._peer import PeerProtocol
from ._links import Link

__all__ = ["Build", "PeerSession", "Sent", "send_each"]

Build: TypeAlias = Callable[[int], list[bytes]]
"""A data message's frames for a given sequence number."""


@final
class Sent:
    """What a node handed to its peers' links: ZRE messages and their octets.

    One per node, shared by its sessions.  Protocol messages are counted
    here, as they go; data messages by the node's send paths, which know
    their size already (no frame is measured twice on a flood's path).
    """

    __slots__ = ("messages", "octets")

    def __init__(self) -> None:
        self.messages = 0
        self.octets = 0

    def add(self, frames: Sequence[bytes]) -> None:
        """Count one message of ``frames`` (a protocol message: rare, measured here)."""
        self.messages += 1
        self.octets += sum(map(len, frames))


@final
class PeerSession:
    """One peer's protocol and link, sending in sequence.

    Errors: a send on a closed link raises :class:`~trizre.PeerDisconnected`
    (the message was not sent).
    """

    # A process may hold thousands of these (100 local nodes: 9,900): the
    # lock is made for the first sender that waits.
    __slots__ = ("_hex", "_lock", "beacon_key", "link", "protocol", "sent", "waiting")

    def __init__(self, protocol: PeerProtocol, link: Link, sent: Sent | None = None) -> None:
        self.protocol = protocol
        self.link = link
        self.sent = Sent() if sent is None else sent  # its node's, shared
        self.beacon_key: bytes | None = None  # the discovery's key of its beacon
        self.waiting = 0  # data senders queued on the lock
        self._lock: trio.StrictFIFOLock | None = None
        self._hex: str | None = None

    @property
    def uuid(self) -> UUID:
        """The peer's UUID."""
        return self.protocol.uuid

    @property
    def in_process(self) -> bool:
        """Whether its link is in memory (a node of this Trio run), not a socket."""
        return self.link.in_process

    @property
    def hex(self) -> str:
        """The UUID in hex, as traces name peers (computed once, when first traced)."""
        if self._hex is None:
            self._hex = self.protocol.uuid.hex
        return self._hex

    def flush(self) -> bool:
        """Hand queued protocol messages to the link while it has room.

        Returns True once nothing is queued.  A waiting data sender holds
        the order, so it flushes instead.
        """
        protocol, link = self.protocol, self.link
        if not self.waiting and not link.closed:
            while (frames := protocol.queued()) is not None and link.send_nowait(frames):
                protocol.sent_queued()
                self.sent.add(frames)
        return not protocol.has_queued

    def send_nowait(self, build: Build) -> int | None:
        """Send one data message in sequence if it can go at once; its sequence number.

        ``None``, having sent nothing, when the link is full or senders
        (protocol messages, a waiting data sender) are ahead of it.
        """
        protocol = self.protocol
        if (protocol.has_queued and not self.flush()) or self.waiting:
            if self.link.closed:
                raise PeerDisconnected(protocol.uuid)
            return None  # others are queued ahead of us: keep the order
        try:
            if not self.link.send_nowait(build(protocol.next_sequence)):
                return None
        except trio.ClosedResourceError:
            raise PeerDisconnected(protocol.uuid) from None
        return protocol.sent()

    async def send(self, build: Build) -> int:
        """Wait for room, send what is queued ahead, then this message; its number.

        Cancellation: if cancelled, this message was not sent (protocol
        messages ahead of it may have been).
        """
        self.waiting += 1
        try:
            if self._lock is None:
                self._lock = trio.StrictFIFOLock()
            async with self._lock:
                protocol, link = self.protocol, self.link
                while (frames := protocol.queued()) is not None:
                    await link.send(frames)
                    protocol.sent_queued()
                    self.sent.add(frames)
                await link.send(build(protocol.next_sequence))
                return protocol.sent()
        except trio.ClosedResourceError:
            raise PeerDisconnected(self.protocol.uuid) from None
        finally:
            self.waiting -= 1


def send_each(
    sessions: Iterable[PeerSession],
    build: Build,
    size: int,
    sent: Sent,
    full: list[PeerSession],
    *,
    numbered: list[tuple[PeerSession, int]] | None = None,
) -> int:
    """One data message to each of ``sessions`` that can take it now; how many took it.

    :meth:`PeerSession.send_nowait`'s rule for each, in one loop (a SHOUT
    to many peers calls it once, not once a member): a session with
    senders ahead of it or a full link is appended to ``full``, having sent
    nothing; one whose link is closed is skipped (it is gone).  Each
    message taken is counted in ``sent`` as ``size`` octets, also when an
    error ends the loop (it propagates; the sessions after it got
    nothing).  With ``numbered``, each session that took it is appended
    with the sequence number it used.  Never waits.
    """
    delivered = 0
    try:
        for session in sessions:
            protocol = session.protocol
            link = session.link
            if (protocol.has_queued and not session.flush()) or session.waiting:
                if not link.closed:
                    full.append(session)  # others are queued ahead of it: keep the order
                continue
            try:
                if not link.send_nowait(build(protocol.next_sequence)):
                    full.append(session)
                    continue
            except trio.ClosedResourceError:
                continue
            seq = protocol.sent()
            delivered += 1
            if numbered is not None:
                numbered.append((session, seq))
    finally:
        sent.messages += delivered
        sent.octets += delivered * size
    return delivered
