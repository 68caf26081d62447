"""Links: how a node's messages reach one peer.  One interface, two transports.

A node talks to each peer over a :class:`Link` and reads what peers send
from its inboxes.  The node never asks which transport a link is; what
differs is said by the interface itself (:attr:`Link.in_process`,
:meth:`Link.liveness`, what :meth:`Link.close` does with last words).

* :class:`TcpLink`: a ZeroMQ DEALER connected to the peer's ROUTER inbox,
  as zyre and pyre do (:func:`bind_inbox` makes the node's own).
* :class:`LocalLink`: for a peer living in the same Trio run.  It carries
  exactly the bytes a DEALER would (HELLO, sequence numbers, JOIN, WHISPER,
  GOODBYE) into the peer's :class:`LocalInbox`, which its node reads like
  its ROUTER.  What changes is the cost: no TCP connection (libzmq spends
  ~60 kB and three descriptors on each), no I/O thread hop, and no PINGs,
  because a local peer's liveness is read directly
  (:attr:`LocalInbox.deaf_since`).
* CURVE is a :class:`TcpLink` made with a key pair and the peer's public
  key, into an inbox bound as a CURVE server (:mod:`trizre.transport._curve`).

Backpressure is the DEALER's on both: at most ``hwm`` messages of one link
wait; a sender beyond that waits (``send``) or is refused (``send_nowait``).
Nothing is dropped while both nodes run.
"""

from __future__ import annotations

import errno
import math
from collections.abc import Callable, Sequence
from typing import Any, Final, Protocol, final
from uuid import UUID

import attrs
import trio
import zmq

from .._concurrency import (
    BoundedQueue,
    RunLocal,
    Wakeup,
    cancel_shielded_checkpoint,
    checkpoint_if_cancelled,
)
from ..wire import OVERSIZE
from ._zsock import ZSocket, check_busy_poll, context

_RECONNECT_IVL_MAX_MS: Final = 1000  # libzmq doubles from 100 ms up to this

__all__ = [
    "EPHEMERAL_PORTS",
    "CurveClient",
    "CurveServer",
    "Inbox",
    "Link",
    "LocalInbox",
    "LocalLink",
    "TcpLink",
    "bind_inbox",
    "bind_when_free",
    "lookup",
    "register",
    "unregister",
]

EPHEMERAL_PORTS: Final = (0xC000, 0x10000)
"""36/ZRE: a node binds its inbox to a random port in %xC000-%xFFFF."""


class Link(Protocol):
    """Our sending end towards one peer.

    Errors: ``send_nowait`` and ``send`` raise ``trio.ClosedResourceError``
    once the link is closed (also a sender that was waiting when it was).
    """

    @property
    def closed(self) -> bool:
        """True once closed, by us or (an in-process link) by the peer's node."""
        ...

    @property
    def in_process(self) -> bool:
        """True for a link to a node of this Trio run.

        Such a peer's liveness is read from the link (:meth:`liveness`),
        never inferred from beacons, and its GOODBYE always arrives after
        its last message, so its leaving beacon is not needed.
        """
        ...

    def send_nowait(self, frames: Sequence[bytes]) -> bool:
        """Queue one message if there is room now; ``False`` (nothing sent) if not."""
        ...

    async def send(self, frames: Sequence[bytes]) -> None:
        """Queue one message, waiting for room.  Cancelled: nothing was sent."""
        ...

    def liveness(self, now: float) -> float | None:
        """When the transport itself last saw the peer alive; ``None``: only traffic tells."""
        ...

    def close(self, last_words: Sequence[Sequence[bytes]] = ()) -> None:
        """Close; deliver ``last_words`` first if the transport can without waiting."""
        ...


class Inbox(Protocol):
    """Where a node reads what its peers send: its ROUTER, or its in-process inbox."""

    async def receive_batch(self, max_messages: int) -> list[list[bytes]]:
        """Wait for messages; up to ``max_messages``, each ``[identity, *frames]``."""
        ...


CURVE_FRAME_OVERHEAD: Final = 33
"""Octets a CURVE MESSAGE command adds to a frame (26/CurveZMQ): flags, name, nonce, MAC."""


def bind_inbox(
    address: str,
    max_message_size: int = -1,
    *,
    curve: CurveServer | None = None,
    endpoint: str | None = None,
    ipv6: bool = False,
    busy_poll: float = 0.0,
) -> tuple[ZSocket, str]:
    """A ROUTER bound to a random port of ``address`` in %xC000-%xFFFF; and its endpoint.

    With ``endpoint`` (gossip discovery) it is bound there instead
    (``tcp://host:port``, ``tcp://host:*``, ``ipc://path``), and the
    endpoint returned is libzmq's, the port resolved.

    libzmq disconnects a peer that sends a frame over ``max_message_size``
    bytes before buffering it (-1: no limit); a message of smaller frames
    over it in total is discarded uncopied and given as
    ``[identity, OVERSIZE]`` (see :meth:`ZSocket.receive_batch`).  With ``curve`` the inbox is
    a CURVE server: only clients the ZAP handler accepts connect, and each
    message's identity frame is prefixed with the client's key in Z85
    (see :class:`ZSocket`'s ``tag_user_id``).  ``busy_poll`` (seconds,
    0 = off) is the inbox's low-latency mode (see :class:`ZSocket`);
    checked before anything is made.  Raises ``zmq.ZMQError`` when no
    port is free (after 1000 tries) or the address is not this host's.
    """
    check_busy_poll(busy_poll)
    sock = context().socket(zmq.ROUTER)
    try:
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.IPV6, int(ipv6))
        if curve is not None and max_message_size >= 0:
            # libzmq measures the encrypted frame (flags, "MESSAGE", nonce
            # and MAC make it 33 octets longer): allow for them, and leave
            # the exact limit to ZSocket's own check.
            sock.setsockopt(zmq.MAXMSGSIZE, max_message_size + CURVE_FRAME_OVERHEAD)
        else:
            sock.setsockopt(zmq.MAXMSGSIZE, max_message_size)
        if curve is not None:
            sock.setsockopt(zmq.CURVE_SERVER, 1)
            sock.setsockopt(zmq.CURVE_SECRETKEY, curve.secret)
            sock.setsockopt(zmq.CURVE_PUBLICKEY, curve.public)
            sock.setsockopt(zmq.ZAP_DOMAIN, curve.domain.encode("utf-8"))
            # The ZAP handler finds this node's policy by it (27/ZAP's "identity").
            sock.setsockopt(zmq.ROUTING_ID, curve.routing_id)
        if curve is None:
            # A peer that reconnects with the same identity takes over its
            # old route at once, rather than being refused until the old
            # one dies.
            sock.setsockopt(zmq.ROUTER_HANDOVER, 1)
        else:
            # With CURVE, a second connection claiming a connected peer's
            # identity is refused, whatever key it holds: handing the route
            # over would let any allowed key cut a peer off.  ZMTP
            # heartbeats close a dead connection instead, freeing its
            # identity for the peer's reconnection within seconds.
            sock.setsockopt(zmq.HEARTBEAT_IVL, 1000)
            sock.setsockopt(zmq.HEARTBEAT_TIMEOUT, 3000)
        if endpoint is not None:
            sock.bind(endpoint)
            bound = sock.getsockopt_string(zmq.LAST_ENDPOINT)
        else:
            # pyzmq hands exactly its default range, which is 36/ZRE's, to the
            # OS (whose ephemeral range differs); one port less keeps it ours.
            port = sock.bind_to_random_port(
                f"tcp://{address}",
                min_port=EPHEMERAL_PORTS[0],
                max_port=EPHEMERAL_PORTS[1] - 1,
                max_tries=1000,
            )
            bound = f"tcp://{address}:{port}"
    except BaseException:
        sock.close(linger=0)
        raise
    inbox = ZSocket(
        sock,
        tag_user_id=curve is not None,
        max_message_size=max_message_size,
        busy_poll=busy_poll,
    )
    return inbox, bound


@final
@attrs.frozen
class CurveServer:
    """What a CURVE inbox needs: our key pair, the ZAP domain, the routing id ZAP knows us by."""

    public: bytes
    secret: bytes
    domain: str
    routing_id: bytes


@final
@attrs.frozen
class CurveClient:
    """What a CURVE link needs: our key pair and the peer's public key (all 32 bytes)."""

    public: bytes
    secret: bytes
    server: bytes


@final
class TcpLink:
    """A DEALER connected to a peer's ROUTER: the link zyre and pyre use.

    Closing drops whatever libzmq still holds (LINGER 0), last words
    included: a stopping node does not wait for slow peers.

    A DEALER whose connection breaks reconnects silently and goes on
    sending, though what was in flight is lost and the peer (whose inbox
    may have dropped us for a frame over its ``max_message_size``) sees a
    gap.  The peer's node ends us then, and closes its link to us, which
    our node's inbox watch sees (``_inbox_watch.py``): each end learns
    from the connection into its own inbox.
    """

    __slots__ = ("_linger_ms", "_sock", "send", "send_nowait")

    in_process: Final = False

    def __init__(self, sock: ZSocket, linger_ms: int = 0) -> None:
        self._sock = sock
        self._linger_ms = linger_ms
        # Bound once: a flood calls send_nowait for every message.
        self.send_nowait = sock.send_nowait
        self.send = sock.send

    @classmethod
    def connect(
        cls,
        endpoint: str,
        identity: bytes,
        hwm: int,
        *,
        curve: CurveClient | None = None,
        linger_ms: int = 0,
        ipv6: bool = False,
    ) -> TcpLink:
        """Open a DEALER with ``identity`` and ``hwm`` and connect it to ``endpoint``.

        With ``curve`` it is a CURVE client of the peer's key: libzmq
        refuses to talk to a server holding any other key.  With
        ``linger_ms`` its :meth:`close` delivers last words (below).
        Raises ``zmq.ZMQError`` when the process is out of sockets or
        descriptors, or ``endpoint`` is not one ZeroMQ can connect to.
        """
        zsock: zmq.Socket[Any] = context().socket(zmq.DEALER)
        try:
            zsock.setsockopt(zmq.IDENTITY, identity)
            zsock.setsockopt(zmq.SNDHWM, hwm)
            zsock.setsockopt(zmq.LINGER, 0)
            zsock.setsockopt(zmq.IPV6, int(ipv6))
            # A dead peer stays linked until it expires: retry every 100 ms
            # at first, then back off to once a second, not ten times (a
            # kill -9 of a process of 25 nodes leaves a mesh of 250 with
            # 5,625 such links).
            zsock.setsockopt(zmq.RECONNECT_IVL_MAX, _RECONNECT_IVL_MAX_MS)
            if curve is not None:
                zsock.setsockopt(zmq.CURVE_SERVERKEY, curve.server)
                zsock.setsockopt(zmq.CURVE_PUBLICKEY, curve.public)
                zsock.setsockopt(zmq.CURVE_SECRETKEY, curve.secret)
            zsock.connect(endpoint)
        except BaseException:
            zsock.close(linger=0)
            raise
        # cork: floods hand libzmq one batch, not each message.
        return cls(ZSocket(zsock, cork=True), linger_ms)

    @property
    def closed(self) -> bool:
        """True once closed."""
        return self._sock.closed

    def liveness(self, now: float) -> None:
        """Always ``None``: over TCP only the peer's traffic proves it alive."""
        return None

    def close(self, last_words: Sequence[Sequence[bytes]] = ()) -> None:
        """Close; never waits.

        Made with ``linger_ms`` (gossip mode, where GOODBYE is how peers
        learn we left): ``last_words`` are queued after what is queued,
        as far as there is room, and libzmq goes on sending for up to that
        long.  Otherwise (LINGER 0) they are dropped with anything queued:
        a port-0 beacon tells peers instead.
        """
        if self._linger_ms and not self._sock.closed:
            for frames in last_words:
                if not self.send_nowait(frames):
                    break
        self._sock.close(self._linger_ms)


_REGISTRY: Final[RunLocal[dict[UUID, LocalInbox]]] = RunLocal("trizre_local_inboxes", dict)


@final
class LocalInbox:
    """The in-memory inbox of one node, fed by the links of the run's other nodes.

    ``deaf_since`` is set by its node while it cannot read (its events
    subscribers are full); local peers read it instead of pinging.
    ``max_message_size`` (-1: none) applies as the TCP inbox does: a
    message whose frames total more arrives as ``[identity, OVERSIZE]`` (see
    :func:`bind_inbox`), so in-memory links refuse what TCP would.
    """

    __slots__ = (
        "_queue",
        "closed",
        "deaf_since",
        "endpoint",
        "links",
        "max_message_size",
        "received_bytes",
        "received_messages",
        "version",
    )

    def __init__(self, endpoint: str, version: int, max_message_size: int = -1) -> None:
        self.endpoint = endpoint
        self.version = version
        self.max_message_size = max_message_size if max_message_size >= 0 else 2**63
        self.closed = False
        self.deaf_since: float | None = None
        self.links: set[LocalLink] = set()  # links into this inbox, closed with it
        # Unbounded here: each link into it holds at most its hwm (LocalLink).
        # (link, frames, octets after the identity: as the TCP inbox counts them)
        self._queue: BoundedQueue[tuple[LocalLink, list[bytes], int]] = BoundedQueue(math.inf)
        # What receive_batch handed to the node since it opened (its statistics).
        self.received_messages = 0
        self.received_bytes = 0

    def _put(self, link: LocalLink, frames: list[bytes]) -> None:
        size = sum(map(len, frames)) - len(frames[0])
        if size > self.max_message_size:
            frames = [frames[0], OVERSIZE]  # as the TCP inbox
        self._queue.push((link, frames, size))

    async def receive_batch(self, max_messages: int) -> list[list[bytes]]:
        """Wait for messages; return up to ``max_messages`` of them, oldest first.

        Each message is ``[sender identity, *frames]``, as a ROUTER gives.
        Always a schedule point.  Cancellation: nothing was taken.  Raises
        ``trio.ClosedResourceError`` once the inbox is closed.
        """
        try:
            taken = await self._queue.get_batch(max_messages)
        except trio.EndOfChannel:
            raise trio.ClosedResourceError("the local inbox was closed") from None
        batch: list[list[bytes]] = []
        octets = 0
        for link, frames, size in taken:
            link._taken()
            batch.append(frames)
            octets += size
        self.received_messages += len(batch)
        self.received_bytes += octets
        return batch

    def drop(self, identity: bytes) -> None:
        """Close the links into this inbox from ``identity``: as libzmq dropping a connection.

        Their node's next send raises ``trio.ClosedResourceError`` and it
        forgets us (it sees the link closed): nothing it sends after is
        taken silently.
        """
        for link in [link for link in self.links if link._identity == identity]:
            link._dropped()

    def close(self) -> None:
        """Drop what is queued, close every link into it, wake its reader."""
        if self.closed:
            return
        self.closed = True
        for link in list(self.links):
            link._dropped()
        # Its reader wakes and raises: nothing queued is read after close.
        self._queue.clear()
        self._queue.close()


@final
class LocalLink:
    """One node's sending end towards a :class:`LocalInbox`: a DEALER's stand-in.

    A :class:`Link`.  Closing it (by either node) wakes its waiting senders
    with ``trio.ClosedResourceError``.  ``peer`` is what :attr:`on_close`
    is called with: the UUID of the inbox's node, for one callback shared
    by all of a node's links (a closure each cost ~200 B a link).
    """

    __slots__ = (
        "__weakref__",
        "_hwm",
        "_identity",
        "_inbox",
        "_room",
        "closed",
        "inflight",
        "on_close",
        "peer",
    )

    def __init__(
        self, inbox: LocalInbox, identity: bytes, hwm: int, *, peer: UUID | None = None
    ) -> None:
        self.peer = peer
        self._inbox = inbox
        self._identity = identity
        self._hwm = hwm
        self.inflight = 0  # messages of ours in the inbox
        self.closed = False
        # Called when the peer's node closes it (it stopped, or dropped us
        # for a limit): its node learns at once.
        self.on_close: Callable[[UUID | None], None] | None = None
        self._room: Wakeup | None = None  # senders waiting for room; made on the first wait
        inbox.links.add(self)

    in_process: Final = True

    def liveness(self, now: float) -> float:
        """``now`` while the peer's node reads; else when it stopped reading.

        A node whose event subscriber is full stops reading: that is its
        last sign of life, and from there it goes evasive, silent and
        expires as a TCP peer that stopped answering would.
        """
        deaf_since = self._inbox.deaf_since
        return now if deaf_since is None else deaf_since

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

    async def send(self, frames: Sequence[bytes]) -> None:
        """Queue one message, waiting while ``hwm`` of ours wait (backpressure).

        Cancellation: nothing was sent if it raised, exactly once if it
        returned.  Raises ``trio.ClosedResourceError`` when the link is or
        gets closed.
        """
        await checkpoint_if_cancelled()
        while not self.send_nowait(frames):
            if self._room is None:
                self._room = Wakeup()
            await self._room.wait()
        await cancel_shielded_checkpoint()

    def _taken(self) -> None:
        self.inflight -= 1
        if self._room is not None:
            self._room.wake_one()

    def close(self, last_words: Sequence[Sequence[bytes]] = ()) -> None:
        """Deliver ``last_words`` over any limit, then stop sending.

        Waiting senders get ``trio.ClosedResourceError``: their messages
        were not sent.  A stopping node's queued messages and GOODBYE go
        as last words, so its local peers lose nothing it had sent.
        """
        if self.closed:
            return
        for frames in last_words:
            self.inflight += 1
            self._inbox._put(self, [self._identity, *frames])
        self.closed = True
        self._inbox.links.discard(self)
        if self._room is not None:
            self._room.wake_all()

    def _dropped(self) -> None:
        """The inbox's node closed it (it stopped, or dropped us): tell ours."""
        if self.closed:
            return
        self.close()
        if self.on_close is not None:
            self.on_close(self.peer)


def register(node: UUID, inbox: LocalInbox) -> None:
    """Make ``inbox`` findable by the run's other nodes."""
    _REGISTRY.get()[node] = inbox


def unregister(node: UUID) -> None:
    """Forget a node's inbox (it stopped)."""
    _REGISTRY.get().pop(node, None)


def lookup(node: UUID, endpoint: str, version: int) -> LocalInbox | None:
    """The inbox of a node of this run at ``endpoint`` speaking ``version``, if any."""
    inbox = _REGISTRY.get().get(node)
    if inbox is None or inbox.closed or inbox.endpoint != endpoint or inbox.version != version:
        return None
    return inbox


REBIND_GRACE: Final = 1.0
"""Seconds :func:`bind_when_free` waits for a port that is still being released."""


async def bind_when_free(sock: zmq.Socket[Any], endpoint: str, what: str) -> None:
    """Bind ``sock`` to ``endpoint``, trying an address in use again for :data:`REBIND_GRACE` s.

    libzmq releases a closed socket's port on its I/O thread a moment after
    ``close`` returns, so a server restarted on its endpoint in the same
    process finds it in use now and then.  A port another program holds
    still fails, after the grace, with ``zmq.ZMQError`` naming ``what`` and
    the endpoint.  Cancellation: nothing is bound.
    """
    deadline = trio.current_time() + REBIND_GRACE
    while True:
        try:
            sock.bind(endpoint)
            return
        except zmq.ZMQError as exc:
            if exc.errno != errno.EADDRINUSE or trio.current_time() >= deadline:
                raise zmq.ZMQError(exc.errno, f"cannot bind {what} to {endpoint!r}: {exc}") from exc
        await trio.sleep(0.02)
