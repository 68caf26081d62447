"""The ZRE node: the public API, its tasks and its lifecycle.

The protocol rules live elsewhere, each in one place: the conversation
with one peer in :mod:`trizre.sansio._peer`, the transports in :mod:`trizre.transport._links`,
discovery in :mod:`trizre.transport._discovery`, the options in :mod:`trizre.node._config`.
The node wires them together (``docs/architecture.md`` has the map):

* beacons out: one at start, then every ``beacon_interval``;
* beacons in: a :class:`~trizre.transport._discovery.Discovery` calls ``_on_beacon``
  for each; an unknown UUID with a port becomes a peer (a link and a
  :class:`~trizre.sansio._peer.PeerProtocol` with our HELLO queued); port 0 is a
  hint (:mod:`trizre.sansio._guard`): the peer is PINGed, and the leavers task
  ends it if no PING-OK comes within a second;
* inboxes: the ROUTER, and the in-process inbox for peers of this Trio run;
  each message goes to its peer's protocol, whose events are published;
* presence: sleeps until the earliest peer deadline, then lets each peer's
  protocol ping, report or expire it.

Sending never drops: a message takes its sequence number only once the
link took it (:meth:`PeerProtocol.sent`).  Data (WHISPER, SHOUT) waits for
room; protocol messages wait in the peer's queue and go before the next
data message.
"""

from __future__ import annotations

import ipaddress
import logging
import math
import os
from collections import OrderedDict
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager, nullcontext
from typing import Final, final
from uuid import UUID, uuid4

import trio
import zmq
from trio_util import RepeatedEvent

from .. import wire
from .._concurrency import unwrap_single_exception_group
from .._errors import MessageTooLarge, PeerDisconnected, UnknownPeer
from ..sansio._election import Elected, ElectionAction, Elections, SendElect
from ..sansio._events import (
    Enter,
    Evasive,
    Event,
    Exit,
    Join,
    Leader,
    Leave,
    Shout,
    Silent,
    Whisper,
)
from ..sansio._gossip import Deliver, Forget
from ..sansio._guard import LeaveHints, LogLimiter, NewPeerBudget, credible_leave, log_rarely
from ..sansio._peer import Ballot, PeerEvent, PeerProtocol, Published, hello_from_stranger, node_id
from ..sansio._presence import Deafness
from ..trace import _contract as kinds
from ..trace._contract import ExitReason
from ..trace._writer import Tracer
from ..transport._curve import (
    CURVE_ALLOW_ANY,
    Certificate,
    CurveKey,
    CurvePolicy,
    curve_key,
    open_zap,
    z85,
)
from ..transport._discovery import Discovery, open_beacon_hub, open_memory_discovery
from ..transport._gossip_service import GossipService, open_gossip
from ..transport._interfaces import Interface, Interface6, select_interface, select_interface6
from ..transport._links import (
    CurveClient,
    CurveServer,
    Inbox,
    Link,
    LocalInbox,
    LocalLink,
    TcpLink,
    bind_inbox,
    lookup,
    register,
    unregister,
)
from ..transport._session import Build, PeerSession
from ..transport._zsock import ZSocket
from ..wire import OVERSIZE
from ._config import DiscoveryKind, NodeConfig
from ._fanout import EventStream, Fanout, Overflow
from ._memory import release_freed_memory

__all__ = ["Node", "open_node"]

log = logging.getLogger("trizre.node")

_BATCH: Final = 256
_YIELD_EVERY: Final = 32
_WHISPER_HEAD: Final = len(wire.encode_whisper(0, (), 2)[0])  # signature, command, version, seq
_SHOUT_HEAD: Final = _WHISPER_HEAD + 1  # and the group's length octet
_GOODBYE_LINGER_MS: Final = 500  # gossip mode: how long a stopped node's GOODBYE may take
# Peers without HELLO at once, or expired in one presence pass: worth
# handing memory back after.
_CROWD: Final = 64
_TRIM_DELAY: Final = 1.0  # seconds after the crowd dissolved
_MISSES_KEPT: Final = 1024  # peers whose missed handshakes we remember (forged UUIDs are free)
_SOURCE_BURST: Final = 64  # new peers one beacon source may announce at once
_TRACE_KINDS: Final[dict[type, str]] = {
    Enter: kinds.ENTER,
    Join: kinds.JOIN,
    Leave: kinds.LEAVE,
    Evasive: kinds.EVASIVE,
    Silent: kinds.SILENT,
}


@final
class Node:
    """A running ZRE node.  Create it with :func:`open_node`, never directly.

    Query methods are synchronous and see the node's current state; sending
    methods are async, wait for room (backpressure), and are safe to call
    from any number of tasks.  Once the node's block has ended every
    method raises ``trio.ClosedResourceError`` at once, except
    :meth:`events` (its subscription yields only :class:`~trizre.Stop`)
    and the identity properties.
    """

    def __init__(self, config: NodeConfig, interface: Interface | Interface6) -> None:
        self._uuid = uuid4()
        self._config = config
        # zyre's default name: the first 6 hex digits of the UUID.
        self._name = config.name or self._uuid.hex[:6].upper()
        self._interface = interface
        self._version = config.protocol_version
        self._identity = b"\x01" + self._uuid.bytes
        self._local: LocalInbox | None = None
        # When our readers waited for a full subscriber (see _publish).
        self._deafness = Deafness()
        self._readers: set[trio.lowlevel.Task] = set()  # the inbox readers' tasks
        self._planned_deaf = False  # the presence keeper's sleep was planned while deaf
        self._peers: dict[UUID, PeerSession] = {}
        self._by_identity: dict[bytes, PeerSession] = {}
        self._groups: set[str] = set()
        self._status = 0
        self._fanout = Fanout()
        self._inbox: ZSocket | None = None
        self._discovery: Discovery | None = None
        self._endpoint = ""
        self._advertised = ""  # the endpoint our HELLO gives
        self._stopped = False
        self._presence_wakeup = trio.Event()
        # The presence keeper's sleep between passes (None during a pass).
        self._presence_sleep: trio.CancelScope | None = None
        self._peers_changed = RepeatedEvent()
        self._pongs = RepeatedEvent()  # set on traffic while ping() waits
        self._pinging = 0
        self._tracer: Tracer | None = None
        # Beacons seen before, by the discovery's key: None, nothing to do;
        # a peer, refresh its presence (beacons_refresh).
        self._quiet: dict[bytes, PeerSession | None] = {}
        # Peers announced leaving (port 0), PINGed: ended unless they answer.
        self._leave_hints = LeaveHints()
        self._leavers_lot = trio.lowlevel.ParkingLot()
        self._unyielded = 0  # sends since the last schedule point (see _yield_due)
        # TCP peers that have not said HELLO, oldest first: at most
        # max_pending_peers of them hold a socket (forged beacons are cheap).
        self._unready: dict[UUID, PeerSession] = {}
        self._unready_peak = 0  # since the crowd last dissolved (see _settle)
        # Handshakes missed in a row, per peer: its next one gets twice as
        # long (see _handshake_for).
        self._missed_handshakes: OrderedDict[UUID, int] = OrderedDict()
        self._trim_at = math.inf  # when to hand a dissolved crowd's memory back
        self._departed = 0  # peers forgotten since memory was last handed back
        self._log_limiter = LogLimiter()  # what _log_rarely said, and when
        self._debug_limiter = LogLimiter(burst=10)  # DEBUG: a few more details
        self._curve = config.curve
        self._gossip: GossipService | None = None
        self._elections = Elections(self._uuid, timeout=config.election_timeout)
        # The ZAP handler tells this node's inbox from others' by it.
        self._zap_id = b"trizre-zap-" + self._uuid.bytes
        # New peers by beacon: per source, and all sources together (spoofed
        # sources): no faster than handshakes time out, so the pending
        # table does not churn sockets (see docs/security.md).
        self._throttle = NewPeerBudget(
            config.new_peers_per_source,
            _SOURCE_BURST,
            total_rate=max(
                config.new_peers_per_source, config.max_pending_peers / config.handshake_timeout
            ),
            total_burst=max(_SOURCE_BURST, config.max_pending_peers),
        )
        self._limits = config.peer_limits
        self._nursery: trio.Nursery | None = None  # where links are watched (_watch_link)

    # ------------------------------------------------------------ identity

    @property
    def uuid(self) -> UUID:
        """This node's UUID, fresh for every node."""
        return self._uuid

    @property
    def name(self) -> str:
        """This node's public name, sent in HELLO."""
        return self._name

    @property
    def endpoint(self) -> str:
        """The ``tcp://ip:port`` endpoint of this node's inbox."""
        return self._endpoint

    @property
    def config(self) -> NodeConfig:
        """The options this node was opened with."""
        return self._config

    @property
    def tracer(self) -> Tracer | None:
        """The trace recorder when ``open_node(trace_dir=...)`` asked for one."""
        return self._tracer

    @property
    def interface(self) -> Interface | Interface6:
        """The network interface this node beacons on (an ``Interface6`` with ``ipv6=True``)."""
        return self._interface

    # ------------------------------------------------------------- queries

    def _check_open(self) -> None:
        if self._stopped:
            raise trio.ClosedResourceError(f"node {self._name!r} has stopped")

    def _entered(self) -> Iterable[PeerSession]:
        self._check_open()
        return (p for p in self._peers.values() if p.protocol.ready)

    def peers(self) -> list[UUID]:
        """The UUIDs of the peers that have entered (said HELLO) and not exited."""
        return [p.uuid for p in self._entered()]

    def pending_peers(self) -> list[UUID]:
        """The peers this node is linking to whose HELLO has not arrived yet.

        A peer is pending from the beacon (or gossip) that announced it
        until its HELLO (it enters and is in :meth:`peers`) or until
        ``handshake_timeout`` (it is dropped, and comes back with its next
        beacon).  For a decision that must not be taken while a peer may
        be on its way: under packet loss a handshake can take seconds.
        Anyone can forge beacons, so bound such a wait.  Raises
        ``trio.ClosedResourceError`` once the node has stopped.
        """
        self._check_open()
        return [p.uuid for p in self._peers.values() if not p.protocol.ready]

    def peers_by_group(self, group: str) -> list[UUID]:
        """The present peers that are in ``group`` (case-sensitive)."""
        return [p.uuid for p in self._entered() if group in p.protocol.groups]

    def own_groups(self) -> list[str]:
        """The groups this node has joined, sorted."""
        self._check_open()
        return sorted(self._groups)

    def peer_groups(self) -> list[str]:
        """Every group that at least one present peer is in, sorted."""
        groups: set[str] = set()
        for peer in self._entered():
            groups.update(peer.protocol.groups)
        return sorted(groups)

    def _present(self, peer: UUID) -> PeerSession:
        found = self._peers.get(peer)
        if found is None or not found.protocol.ready:
            self._check_open()  # a stopped node has no peers: checked here, off the hot path
            if not isinstance(peer, UUID):
                hint = (
                    f"; node.peer_by_name({peer!r}) finds a peer's UUID by name"
                    if isinstance(peer, str)
                    else ""
                )
                raise TypeError(f"a peer is a uuid.UUID, got {type(peer).__name__}{hint}")
            raise UnknownPeer(peer)
        return found

    def peer_name(self, peer: UUID) -> str:
        """The name a present peer gave in its HELLO; :class:`UnknownPeer` otherwise.

        A ``peer`` that is not a ``uuid.UUID`` raises ``TypeError``.
        """
        return self._present(peer).protocol.name

    def peer_headers(self, peer: UUID) -> dict[str, str]:
        """The headers a present peer gave in its HELLO; :class:`UnknownPeer` otherwise."""
        return dict(self._present(peer).protocol.headers)

    def peer_address(self, peer: UUID) -> str:
        """The ``tcp://ip:port`` endpoint of a present peer; :class:`UnknownPeer` otherwise."""
        return self._present(peer).protocol.endpoint

    def peer_is_responsive(self, peer: UUID) -> bool:
        """False while a present peer is evasive or silent: it left a PING unanswered.

        It turns false when :class:`~trizre.Evasive` is reported, and true
        again with anything from the peer (see ``docs/node.md``, Presence).

        Raises :class:`UnknownPeer` if the peer is not present.
        """
        return self._present(peer).protocol.responsive

    def peer_last_heard(self, peer: UUID) -> float:
        """When a present peer last proved it is alive, on ``trio.current_time()``'s clock.

        Any message from it counts, and its beacons too when the node was
        opened with ``beacons_refresh=True``: beacons are UDP, so they keep
        arriving while a lossy network stalls the TCP link.  A peer in this
        same process (an in-memory link) is alive while it is present: now.
        Raises :class:`UnknownPeer` if the peer is not present.
        """
        session = self._present(peer)
        if session.link.in_process:
            return trio.current_time()
        return session.protocol.presence.last_heard

    def find_peers(self, name: str) -> list[UUID]:
        """The present peers whose HELLO gave ``name`` (names need not be unique)."""
        return [p.uuid for p in self._entered() if p.protocol.name == name]

    def peer_by_name(self, name: str) -> UUID | None:
        """The peer to use for ``name``: the newest responsive one, or ``None``.

        A server that crashed stays present until it expires, beside its
        restarted successor of the same name; this picks the successor.
        With no responsive one, the newest of those present.
        """
        found = [p for p in self._entered() if p.protocol.name == name]
        if not found:
            return None
        responsive = [p for p in found if p.protocol.responsive]
        return (responsive or found)[-1].uuid

    async def wait_for_peer(self, peer: str | UUID) -> UUID:
        """Wait until a peer with this name (``str``) or UUID is present; return its UUID.

        Returns at once if one already is (with a checkpoint); with several
        of the same name, the one :meth:`peer_by_name` picks.  Cancellation:
        nothing changes; bound it with ``trio.fail_after``.  Bad input:
        anything but a ``str`` or ``uuid.UUID`` raises ``TypeError``.
        Raises ``trio.ClosedResourceError`` if the node stops meanwhile.
        """
        if not isinstance(peer, str | UUID):
            raise TypeError(f"a peer is a name (str) or a uuid.UUID, got {type(peer).__name__}")
        while True:
            if isinstance(peer, UUID):
                found = self._peers.get(peer)
                self._check_open()
                if found is not None and found.protocol.ready:
                    await trio.lowlevel.checkpoint()
                    return peer
            elif (match := self.peer_by_name(peer)) is not None:
                await trio.lowlevel.checkpoint()
                return match
            await self._peers_changed.wait()

    def events(
        self,
        *,
        max_buffer: int = 1000,
        overflow: Overflow = "block",
        idle_timeout: float | None = None,
    ) -> EventStream:
        """Subscribe to this node's events from now on.

        Every subscription sees every event; see :mod:`trizre.node._fanout` and
        ``docs/node.md`` for what happens when a subscriber falls behind
        (``overflow="block"``: the node waits for it; ``"raise"``: it is
        cut off with :class:`~trizre.EventsOverflowed`).  With
        ``idle_timeout``, waiting that many seconds for the next event
        raises :class:`~trizre.EventsIdle` (the subscription stays open):
        an idle timeout that costs nothing while events flow, unlike a
        cancel scope around each read.  A subscription made after the
        node stopped yields only :class:`~trizre.Stop`.  Bad input:
        ``max_buffer < 1``, another ``overflow`` or an ``idle_timeout``
        that is not a positive finite number raise ``ValueError``; an
        ``idle_timeout`` that is not a number raises ``TypeError``.
        """
        return self._fanout.subscribe(max_buffer, overflow, idle_timeout)

    # ------------------------------------------------------------- sending

    async def whisper(self, peer: UUID, *frames: bytes) -> None:
        """Send zero or more frames to one present peer.

        Waits while the peer's send queue is full (backpressure; a peer
        that never reads holds the caller until it expires).  Raises
        :class:`UnknownPeer` if the peer is not present,
        :class:`PeerDisconnected` if it went away while we waited (the
        message was not sent), ``TypeError`` for a ``peer`` that is not a
        ``uuid.UUID`` or frames that are not bytes.  Cancellation: the
        message was sent exactly once if the call returned, not at all if
        it raised; it is checked on every call, while the schedule point
        of a send that did not have to wait comes once every 32 such calls
        (the cost of a flood is mostly schedule points otherwise).

        A message whose encoded frames together exceed this node's
        ``max_message_size`` raises :class:`~trizre.MessageTooLarge` before
        anything is sent (no sequence number is used): a receiver with the
        same setting would drop the link.  What a normal return guarantees
        is in ``docs/node.md`` (Send guarantee).
        """
        target = self._present(peer)
        content = _frames(frames)
        self._check_size(_WHISPER_HEAD, content)
        version = self._version

        def build(seq: int) -> list[bytes]:
            return wire.encode_whisper(seq, content, version)

        # _send, inline: one coroutine less on a flood's per-message path.
        await trio.lowlevel.checkpoint_if_cancelled()
        if (seq := target.send_nowait(build)) is None:
            seq = await target.send(build)
        elif self._yield_due():
            await trio.lowlevel.cancel_shielded_checkpoint()
        if self._tracer is not None:
            self._tracer.message(kinds.WHISPER_SENT, target.hex, seq)

    def whisper_nowait(self, peer: UUID, *frames: bytes) -> bool:
        """Queue a WHISPER only if the peer has room right now; never waits.

        Returns ``False``, having sent nothing, when the peer's queue is
        full or a waiting sender is ahead of us (use :meth:`whisper` then).
        Raises as :meth:`whisper` does.  Not a checkpoint: for senders that
        queue many messages back to back and yield once, which is much
        cheaper for libzmq than one wake-up per message.
        """
        target = self._present(peer)
        content = _frames(frames)
        self._check_size(_WHISPER_HEAD, content)
        version = self._version
        seq = target.send_nowait(lambda seq: wire.encode_whisper(seq, content, version))
        if seq is None:
            return False
        if self._tracer is not None:
            self._tracer.message(kinds.WHISPER_SENT, target.hex, seq)
        return True

    async def ping(self, peer: UUID) -> float:
        """Send a ZRE PING to a present peer, wait for its PING-OK; the round trip in seconds.

        Every ZRE peer answers PING (zyre and pyre too), so this measures
        the path and the peer's reader, nothing of the application.  PING-OK
        carries no correlation, so concurrent pings of one peer may return
        on the same answer.  Cancellation: the PING may still go out; its
        PING-OK is ignored.  Raises :class:`UnknownPeer` if the peer is not
        present, :class:`PeerDisconnected` if it leaves before answering,
        ``trio.ClosedResourceError`` if the node stops, ``TypeError`` for
        anything but a ``uuid.UUID``.  Bound the wait with
        ``trio.fail_after``: a peer that never answers is waited for until
        it expires.
        """
        session = self._present(peer)
        protocol = session.protocol
        answered = protocol.pongs
        start = trio.current_time()
        protocol.queue(wire.Ping(0, version=protocol.version))
        session.flush()
        self._pinging += 1
        try:
            while protocol.pongs == answered:
                self._check_open()
                if self._peers.get(peer) is not session:
                    raise PeerDisconnected(peer, f"peer {peer} left before answering a ping")
                await self._pongs.wait()
        finally:
            self._pinging -= 1
        return trio.current_time() - start

    async def shout(self, group: str, *frames: bytes) -> None:
        """Send zero or more frames to every present peer in ``group``.

        We need not be in the group ourselves.  It goes at once to every
        member with room, then waits for room at the others in turn
        (backpressure).  A member that leaves while we wait for it is
        skipped: it is no longer a member.  Cancellation: members with room
        and those waited for before the cancellation got the message, the
        rest did not.  Bad input: an empty group name or one over 255
        UTF-8 bytes raises ``ValueError``, frames that are not bytes
        ``TypeError``, a message over ``max_message_size`` (as
        :meth:`whisper`) :class:`~trizre.MessageTooLarge`, before it goes
        to any member.
        """
        _check_group(group)
        content = _frames(frames)
        self._check_size(_SHOUT_HEAD + len(group.encode()), content)
        members = [p for p in self._entered() if group in p.protocol.groups]
        await trio.lowlevel.checkpoint_if_cancelled()
        version = self._version

        def build(seq: int) -> list[bytes]:
            return wire.encode(wire.Shout(seq, group, content, version=version))

        tracer = self._tracer
        full: list[PeerSession] = []
        for peer in members:
            try:
                seq = peer.send_nowait(build)
            except PeerDisconnected:
                continue
            if seq is None:
                full.append(peer)
            elif tracer is not None:
                tracer.message(kinds.SHOUT_SENT, peer.hex, seq, group)
        for peer in full:
            try:
                seq = await self._send(peer, build)
            except PeerDisconnected:
                continue
            if tracer is not None:
                tracer.message(kinds.SHOUT_SENT, peer.hex, seq, group)
        if not full:
            await trio.lowlevel.cancel_shielded_checkpoint()

    async def join(self, group: str) -> None:
        """Join ``group`` and tell every peer; a no-op if already joined.

        Peers are told with a JOIN queued behind anything already queued
        for them, so this never waits for a slow peer.  Bad input: an empty
        name or one over 255 UTF-8 bytes raises ``ValueError``.
        """
        await self._change_groups(group, joining=True)

    async def leave(self, group: str) -> None:
        """Leave ``group`` and tell every peer; a no-op if not joined.

        Bad input as :meth:`join`.
        """
        await self._change_groups(group, joining=False)

    async def _change_groups(self, group: str, *, joining: bool) -> None:
        _check_group(group)
        self._check_open()
        await trio.lowlevel.checkpoint()
        if (group in self._groups) == joining:
            return
        if joining:
            self._groups.add(group)
        else:
            self._groups.discard(group)
        self._status = (self._status + 1) % 256
        kind = wire.Join if joining else wire.Leave
        message = kind(0, group, self._status, version=self._version)
        for peer in list(self._peers.values()):
            peer.protocol.queue(message)
            peer.flush()
        if joining:
            # Our JOIN is queued first: members see it before our ELECT.
            now = trio.current_time()
            await self._elect(self._elections.start(group, self._members(group), now))
        else:
            self._elections.forget(group)

    def _check_size(self, head: int, content: tuple[bytes, ...]) -> None:
        """Refuse a data message whose frames total more than max_message_size.

        ``head``: the size of its frame 0.  The receiver's limit is not
        known; peers are meant to share the setting (docs/security.md).
        """
        size = head + sum(map(len, content))
        if size > self._limits.message_size:
            raise MessageTooLarge(size, self._limits.message_size)

    async def _send(self, peer: PeerSession, build: Build) -> int:
        """Send one data message in sequence, waiting for room; its sequence number."""
        await trio.lowlevel.checkpoint_if_cancelled()
        if (seq := peer.send_nowait(build)) is None:
            return await peer.send(build)
        if self._yield_due():
            await trio.lowlevel.cancel_shielded_checkpoint()
        return seq

    def _yield_due(self) -> bool:
        """Count a send that did not wait; True once every _YIELD_EVERY.

        Cancellation is honoured on every send; the schedule point comes
        every _YIELD_EVERY sends that did not wait, which is a third of a
        flooding sender's cost otherwise.
        """
        self._unyielded += 1
        if self._unyielded >= _YIELD_EVERY:
            self._unyielded = 0
            return True
        return False

    # --------------------------------------------------------- peer table

    def _add_peer(
        self,
        peer_uuid: UUID,
        endpoint: str,
        *,
        beacon_from: str | None = None,
        key: bytes | None = None,
        answering: bool = False,
    ) -> PeerSession | None:
        """Link to a new peer and queue our HELLO to it.

        ``beacon_from``: the address of the beacon that announced it, whose
        new TCP peers are throttled (a HELLO needs a real connection).
        ``key``: its CURVE public key, required in CURVE mode.
        ``answering``: linked on hearing its HELLO (see PeerProtocol).
        """
        gossiping = self._config.discovery == "gossip"
        if gossiping:
            # Gossip reaches beyond one subnet by design: any tcp or ipc endpoint.
            if not endpoint.startswith(("tcp://", "ipc://")):
                self._log_rarely(
                    "not-tcp",
                    logging.DEBUG,
                    f"ignoring peer {peer_uuid} at {endpoint!r}: not tcp:// or ipc://",
                )
                return None
        else:
            endpoint = self._scoped(endpoint)
        curve: CurveClient | None = None
        if self._curve is not None:
            curve = self._curve_client(peer_uuid, key)
            if curve is None:
                return None
        link: Link
        inbox = (
            lookup(peer_uuid, endpoint, self._version)
            if self._config.local_links and curve is None
            else None
        )
        # The budget first: under a flood of forged beacons most stop here,
        # before the costlier checks below.
        if (
            inbox is None
            and beacon_from is not None
            and (refused := self._throttle.admit(beacon_from, trio.current_time()))
        ):
            if refused == "source":
                self._warn_crowded("%s announces more new peers than allowed", beacon_from)
            else:
                self._warn_crowded("beacons from all sources announce more new peers than allowed")
            return None
        if not gossiping:
            host = _endpoint_host(endpoint)
            if host is None or not self._interface.contains(host):
                # Never connect outside our interface's network, whatever a
                # beacon or HELLO claims.
                self._log_rarely(
                    "outside",
                    logging.DEBUG,
                    f"ignoring peer {peer_uuid} at {endpoint!r}: outside {self._interface}",
                )
                return None
        if inbox is not None:
            link = LocalLink(inbox, self._identity, self._config.send_hwm)
            # The presence keeper removes a peer whose node closed our link:
            # at once, not at its next pass (issue 25: nothing sent after is
            # taken silently).
            link.on_close = lambda: self._presence_due(trio.current_time())
        else:
            try:
                link = TcpLink.connect(
                    endpoint,
                    self._identity,
                    self._config.send_hwm,
                    curve=curve,
                    linger_ms=_GOODBYE_LINGER_MS if gossiping else 0,
                    ipv6=self._config.ipv6,
                )
            except zmq.ZMQError as exc:
                # Out of sockets or descriptors: this peer waits for its next
                # beacon; the node itself carries on.
                self._log_rarely(
                    "no-socket",
                    logging.WARNING,
                    f"cannot open a socket for peer {peer_uuid} at {endpoint}: {exc}",
                )
                return None
        hello = wire.Hello(
            wire.HELLO_SEQUENCE,
            self._advertised,
            tuple(sorted(self._groups)),
            self._status,
            self._name,
            self._config.hello_headers,
            version=self._version,
        )
        protocol = PeerProtocol(
            peer_uuid,
            endpoint,
            hello,
            now=trio.current_time(),
            evasive=self._config.evasive_timeout,
            expired=self._config.expired_timeout,
            handshake=self._handshake_for(peer_uuid),
            key=None if curve is None else z85(curve.server),
            answering=answering,
            deafness=self._deafness,
            limits=self._limits,
        )
        peer = PeerSession(protocol, link)
        if not link.in_process:
            self._bound_unready(peer)
        self._peers[peer_uuid] = peer
        self._by_identity[protocol.route] = peer
        peer.flush()
        self._presence_due(protocol.deadline())
        return peer

    def _handshake_for(self, peer_uuid: UUID) -> float:
        """How long a new link to this peer may wait for its HELLO.

        ``handshake_timeout``, doubled for each handshake the peer missed in
        a row, up to ``expired_timeout``.  A real peer whose HELLO is late
        (its process overloaded) is dropped and linked again at its next
        beacon, and our new HELLO makes it start over with us too (a second
        HELLO is a restart): with a fixed window, an overloaded mesh kept
        redoing handshakes that made it more overloaded.  Forged peers stay
        bounded by ``max_pending_peers``.
        """
        base = self._config.handshake_timeout
        misses = self._missed_handshakes.get(peer_uuid, 0)
        return min(base * 2.0**misses, max(base, self._config.expired_timeout))

    def _missed_handshake(self, peer_uuid: UUID) -> None:
        misses = self._missed_handshakes.pop(peer_uuid, 0)
        self._missed_handshakes[peer_uuid] = min(misses + 1, 16)
        while len(self._missed_handshakes) > _MISSES_KEPT:
            self._missed_handshakes.popitem(last=False)

    def _forget(self, peer: PeerSession, reason: ExitReason, detail: str = "") -> bool:
        """Drop a peer from every table and close our link to it; False if already gone."""
        if self._peers.get(peer.uuid) is not peer:
            return False
        if reason is ExitReason.HANDSHAKE and not peer.protocol.ready:
            self._missed_handshake(peer.uuid)
        del self._peers[peer.uuid]
        del self._by_identity[peer.protocol.route]
        self._settle(peer)
        if peer.beacon_key is not None:
            self._quiet.pop(peer.beacon_key, None)
        self._leave_hints.forget(peer.uuid)  # a new link under its UUID starts afresh
        peer.link.close()  # wakes its waiting senders with PeerDisconnected
        self._departed += 1
        if self._departed >= _CROWD:
            # Many gone, however they went (expired together, their links
            # broke, a flood's pending peers): their sockets' memory goes back.
            self._trim_soon()
        if self._gossip is not None:
            # As zyre: forget its tuple, so that only news of it links again.
            self._gossip.unpublish(node_id(peer.uuid))
        if log.isEnabledFor(logging.DEBUG):  # forged peers go by the thousand: rate-limited
            self._log_rarely(
                f"removed-{reason}",
                logging.DEBUG,
                f"peer {peer.uuid} ({peer.protocol.name}) removed: {reason} {detail}",
            )
        self._peers_changed.set()
        if self._pinging:
            self._pongs.set()
        return True

    def _scoped(self, endpoint: str) -> str:
        """IPv6: a link-local endpoint without scope gets ours (zyre's rule for HELLOs)."""
        if not isinstance(self._interface, Interface6):
            return endpoint
        host = _endpoint_host(endpoint)
        if host is None or "%" in host or not self._interface.contains(host):
            return endpoint
        port = endpoint.rsplit(":", 1)[1]
        return f"tcp://{host}%{self._interface.name}:{port}"

    def _curve_client(self, peer_uuid: UUID, key: bytes | None) -> CurveClient | None:
        """Our CURVE link's keys towards a peer, or ``None`` if we must not link to it."""
        cert = self._curve
        assert cert is not None and cert.secret is not None
        if key is None:
            return None  # never: beacons and HELLOs without a key are turned away first
        allowed = self._config.curve_allow
        if isinstance(allowed, frozenset) and key not in allowed:
            # It could not link back to us: do not half-connect.
            self._log_rarely(
                "not-allowed",
                logging.INFO,
                f"not linking to peer {peer_uuid}: its key {z85(key)} is not in curve_allow",
            )
            return None
        return CurveClient(cert.public, cert.secret, key)

    def _settle(self, peer: PeerSession) -> None:
        """``peer`` no longer waits for its HELLO (it said it, or it is gone).

        When nobody waits any more and a crowd did (a forged-beacon flood),
        the memory its sockets held goes back to the OS.
        """
        if self._unready.pop(peer.uuid, None) is not None and not self._unready:
            if self._unready_peak >= _CROWD:
                self._trim_soon()
            self._unready_peak = 0

    def _trim_soon(self) -> None:
        """Hand freed memory back to the OS shortly (libzmq's reaper frees closed sockets late)."""
        self._departed = 0
        if self._trim_at == math.inf:
            self._trim_at = trio.current_time() + _TRIM_DELAY
            self._presence_due(self._trim_at)

    def _bound_unready(self, newcomer: PeerSession) -> None:
        """Make room for ``newcomer`` among the TCP peers that have not said HELLO."""
        unready = self._unready
        while len(unready) >= self._config.max_pending_peers:
            oldest = next(iter(unready.values()))
            self._forget(oldest, ExitReason.HANDSHAKE, "too many peers without HELLO")
            self._warn_crowded(
                f"more than {self._config.max_pending_peers} peers have not said HELLO: "
                "dropping the oldest"
            )
        unready[newcomer.uuid] = newcomer
        self._unready_peak = max(self._unready_peak, len(unready))

    def _warn_crowded(self, what: str, *args: object) -> None:
        # Formatted only when written: a flood calls this per beacon.
        log_rarely(
            log,
            self._log_limiter,
            "crowded",
            logging.WARNING,
            what + " (forged beacons?)",
            *args,
            now=trio.current_time(),
        )

    def _log_rarely(self, topic: str, level: int, what: str) -> None:
        """Log ``what`` unless this topic was logged in the last 10 s (floods log per packet).

        Every line a remote party can trigger goes through here (or the
        same limiter elsewhere): a flood writes one line a topic every 10 s.
        """
        limiter = self._debug_limiter if level <= logging.DEBUG else self._log_limiter
        log_rarely(log, limiter, topic, level, "%s", what, now=trio.current_time())

    async def _watch_link(self, peer: PeerSession, link: TcpLink) -> None:
        """End an entered peer when our TCP link to it breaks (issue 25).

        libzmq would reconnect and go on sending, but what was in flight is
        lost and the peer will see a gap: its messages after it would be
        lost too, silently, while our calls returned.  Ending it reports
        Exit, and later sends raise, until it enters again (its next
        beacon, or its HELLO, links anew).  Started when the peer enters:
        a peer that has not said HELLO is left to the handshake timeout (a
        CURVE server refusing our key breaks the connection at each try)
        and costs no socket monitor.
        """
        try:
            while True:
                await link.broken()
                if self._peers.get(peer.uuid) is not peer:
                    return
                if peer.protocol.ready:
                    break
        except trio.ClosedResourceError:
            return  # the link was closed: the peer is gone already
        except zmq.ZMQError as exc:  # out of descriptors: its presence still ends it
            self._log_rarely("no-monitor", logging.WARNING, f"cannot watch a link: {exc}")
            return
        # Not logged beyond _forget's debug line: a killed process breaks
        # every link to it at once, and the Exit (trace reason link) says it.
        await self._remove_peer(peer, ExitReason.LINK, "our TCP connection to it broke")

    async def _remove_peer(self, peer: PeerSession, reason: ExitReason, detail: str = "") -> None:
        """Forget a peer, close our link to it, and report Exit if it had entered."""
        if self._forget(peer, reason, detail) and peer.protocol.ready:
            name = peer.protocol.name
            if (tracer := self._tracer) is not None:
                tracer.record(kinds.EXIT, peer=peer.hex, peer_name=name, reason=reason)
            await self._publish(Exit(peer.uuid, name))
            for group in sorted(peer.protocol.groups & self._groups):
                await self._member_left(group, peer)

    # ----------------------------------------------------------- elections

    async def contest(self, group: str) -> None:
        """Stand in ``group``'s leader elections, as zyre's ``set_contest_in_group``.

        Elections are zyre's (ELECT and LEADER on the wire, interoperable
        with it; ``docs/elections.md``): one runs whenever the group's
        membership changes, the contester with the lowest UUID wins, and
        every member of the group, contesting or not, reports a
        :class:`~trizre.Leader` event when the leader changes.  Call it
        before or after joining: in the group already, with peers, an
        election starts now.  There is no way back (zyre has none).

        Cancellation: either done or not; nothing half-done.  Bad input: a
        group name that is empty, too long or not a ``str`` raises
        ``ValueError`` or ``TypeError``, as :meth:`join`; after the node
        stopped, ``trio.ClosedResourceError``.
        """
        _check_group(group)
        self._check_open()
        await trio.lowlevel.checkpoint()
        self._elections.contest(group)
        members = self._members(group)
        if group in self._groups and members:
            await self._elect(self._elections.start(group, members, trio.current_time()))

    def leader(self, group: str) -> UUID | None:
        """The leader last elected in ``group`` (our own UUID if we won), or ``None``.

        ``None`` before any election ended here, after the leader left
        (until the next one ends), and after we left the group.  It stays
        the last leader while a new election runs.  Bad input as
        :meth:`join`; after the node stopped, ``trio.ClosedResourceError``.
        """
        _check_group(group)
        self._check_open()
        found = self._elections.leaders.get(group)
        return None if found is None else UUID(hex=found)

    def _members(self, group: str) -> list[UUID]:
        return [
            p.uuid for p in self._peers.values() if p.protocol.ready and group in p.protocol.groups
        ]

    async def _member_left(self, group: str, peer: PeerSession) -> None:
        members = self._members(group)
        actions = self._elections.member_left(group, peer.uuid, members, trio.current_time())
        await self._elect(actions)

    async def _ballot(self, peer: PeerSession, ballot: Ballot) -> None:
        if ballot.group not in self._groups:
            return  # we left it (or never joined): not ours to elect, and no state kept
        members = self._members(ballot.group)
        if log.isEnabledFor(logging.DEBUG):  # a peer can send any number: rate-limited
            self._log_rarely(
                "ballot",
                logging.DEBUG,
                f"{self._name}: {'LEADER' if ballot.leader else 'ELECT'} {ballot.group} "
                f"{ballot.candidate} from {peer.protocol.name}",
            )
        if ballot.leader:
            actions = self._elections.leader(
                peer.uuid, ballot.group, ballot.candidate, members, trio.current_time()
            )
        else:
            actions = self._elections.elect(
                peer.uuid, ballot.group, ballot.candidate, members, trio.current_time()
            )
        await self._elect(actions)

    async def _announce_leader(self, peer: PeerSession) -> None:
        """A peer entered that some group elected before we knew it: say so now.

        Ballots travel other links than HELLOs, so a node can hear a wave
        end, naming a winner, before the winner's own HELLO reaches it.
        Such a winner's Leader event waits for its Enter instead of being
        dropped.
        """
        elected = node_id(peer.uuid)
        for group, leader in sorted(self._elections.leaders.items()):
            if leader == elected and group in self._groups:
                await self._publish(Leader(peer.uuid, peer.protocol.name, group))

    async def _elect(self, actions: Sequence[ElectionAction]) -> None:
        """Send what the elections ask, report what they decided."""
        if actions or self._elections.deadline() < math.inf:
            # An election may have begun, or (with nothing to send) a repair
            # been set to rerun the leader's wave: the keeper must wake for it.
            self._presence_due(self._elections.deadline())
        if actions and log.isEnabledFor(logging.DEBUG):  # peers' ballots cause these: rate-limited
            self._log_rarely("elections", logging.DEBUG, f"{self._name}: elections: {actions}")
        for action in actions:
            if isinstance(action, Elected):
                winner = UUID(hex=action.leader)
                if winner == self._uuid:
                    await self._publish(Leader(winner, self._name, action.group))
                elif (found := self._peers.get(winner)) is not None and found.protocol.ready:
                    await self._publish(Leader(winner, found.protocol.name, action.group))
                # Else the others decided before its HELLO reached us: its
                # Enter announces it (_announce_leader).
                continue
            if isinstance(action, SendElect):
                body = wire.election_body(action.group, action.candidate)
                message: wire.Message = wire.Elect(0, body, version=self._version)
            else:
                body = wire.election_body(action.group, action.leader)
                message = wire.Leader(0, body, version=self._version)
            for target in action.to:
                if (member := self._peers.get(target)) is not None:
                    member.protocol.queue(message)
                    member.flush()

    # ------------------------------------------------------------- inbound

    async def _reader(self, inbox: Inbox) -> None:
        self._readers.add(trio.lowlevel.current_task())  # its waits make us deaf
        by_identity = self._by_identity
        publish_nowait = self._fanout.publish_nowait
        tracer = self._tracer
        while True:
            batch = await inbox.receive_batch(_BATCH)
            now = trio.current_time()  # one clock read per batch
            for frames in batch:
                peer = by_identity.get(frames[0])
                if peer is None:
                    await self._greet(frames, now)
                    continue
                protocol = peer.protocol
                events = protocol.receive(frames, now)
                # Nearly all traffic: a WHISPER, subscribers with room, no coroutine.
                if (
                    len(events) == 1
                    and type(events[0]) is Whisper
                    and protocol.ended is None
                    and publish_nowait(events[0])
                ):
                    if tracer is not None:
                        self._trace(peer, events[0])
                    continue
                await self._after_receive(peer, frames, events)

    async def _greet(self, frames: Sequence[bytes], now: float) -> None:
        """A message from a sender we do not know: a HELLO makes it a peer.

        In CURVE mode the sender is known by its key and UUID together: a
        HELLO for a UUID we know under another key is refused, so nobody
        can speak as another peer, whatever key the allow-list gave them.
        """
        if len(frames) > 1 and frames[1] is OVERSIZE:
            # The inbox refused a message over max_message_size (see
            # PeerProtocol.receive) from a sender we do not know.
            self._log_rarely(
                "oversize",
                logging.WARNING,
                f"dropped a message over max_message_size ({self._limits.message_size} octets) "
                "from an unknown sender",
            )
            return
        if (excess := self._limits.hello_excess(frames[1])) is not None:
            self._log_rarely("limits", logging.WARNING, f"refused a HELLO that {excess}")
            return
        # Measured just above, with a log line: not again.
        found = hello_from_stranger(
            frames, self._version, curve=self._curve is not None, limits=None
        )
        if found is None:
            return  # commands before HELLO are ignored (and key-less HELLOs in CURVE mode)
        peer_uuid, hello, key = found
        known = self._peers.get(peer_uuid)
        if key is not None and known is not None and known.protocol.key != key:
            self._log_rarely(
                "spoof",
                logging.WARNING,
                f"refused a HELLO from key {key} for peer {peer_uuid}, "
                f"which is known under key {known.protocol.key}",
            )
            return
        raw_key = None if key is None else curve_key(key)
        peer = self._add_peer(peer_uuid, hello.endpoint, key=raw_key, answering=True)
        if peer is not None:
            await self._after_receive(peer, frames, peer.protocol.receive(frames, now))

    async def _after_receive(
        self, peer: PeerSession, frames: Sequence[bytes], events: Sequence[PeerEvent]
    ) -> None:
        protocol = peer.protocol
        entered = bool(events) and type(events[0]) is Enter
        if entered:
            self._settle(peer)
            self._missed_handshakes.pop(peer.uuid, None)
            self._peers_changed.set()  # for wait_for_peer
            if isinstance(peer.link, TcpLink) and self._nursery is not None:
                self._nursery.start_soon(self._watch_link, peer, peer.link)
        for event in events:
            if isinstance(event, Ballot):
                await self._ballot(peer, event)
                continue
            await self._publish_from(peer, event)
            if type(event) is Join and event.group in self._groups:
                members = self._members(event.group)
                now = trio.current_time()
                actions = self._elections.member_joined(event.group, peer.uuid, members, now)
                await self._elect(actions)
            elif type(event) is Leave and event.group in self._groups:
                await self._member_left(event.group, peer)
        if entered:
            await self._announce_leader(peer)
        if self._pinging:
            self._pongs.set()
        if protocol.has_queued:
            peer.flush()  # a PING-OK
        if protocol.ended is not None:
            if protocol.ended is ExitReason.LIMITS:
                self._log_rarely(
                    "limits",
                    logging.WARNING,
                    f"dropped peer {peer.uuid} ({protocol.name}): {protocol.detail}",
                )
                if self._local is not None:
                    # As libzmq drops an oversize frame's connection: its
                    # node learns at once that we took nothing more from it.
                    self._local.drop(protocol.route)
            await self._remove_peer(peer, protocol.ended, protocol.detail)
            if protocol.ended is ExitReason.HELLO:
                await self._greet(frames, trio.current_time())  # it starts anew

    # -------------------------------------------------------------- events

    async def _publish_from(self, peer: PeerSession, event: Published) -> None:
        if self._tracer is not None:
            self._trace(peer, event)
        await self._publish(event)

    def _trace(self, peer: PeerSession, event: Published) -> None:
        tracer = self._tracer
        assert tracer is not None
        if isinstance(event, Whisper):
            tracer.message(kinds.WHISPER_RECEIVED, peer.hex, peer.protocol.in_seq)
        elif isinstance(event, Shout):
            tracer.message(kinds.SHOUT_RECEIVED, peer.hex, peer.protocol.in_seq, event.group)
        elif isinstance(event, Join | Leave):
            kind = _TRACE_KINDS[type(event)]
            tracer.record(kind, peer=peer.hex, peer_name=event.name, group=event.group)
        else:
            tracer.record(_TRACE_KINDS[type(event)], peer=peer.hex, peer_name=event.name)

    async def _publish(self, event: Event) -> None:
        # Not a checkpoint when every subscriber has room (the common case).
        if self._fanout.publish_nowait(event):
            return
        if trio.lowlevel.current_task() not in self._readers:
            # The presence keeper, a leaver, an election: the readers go on
            # reading meanwhile, so nobody's silence is ours.
            await self._fanout.publish(event)
            return
        # A reader waits for a full subscriber: while it waits we read
        # nothing, and peers' messages wait unread.  Each peer's clock
        # leaves that time out, up to expired_timeout (see Deafness): only
        # the time we really could not read, and bounded, so that peers
        # that died meanwhile still expire however slow the application.
        deafness = self._deafness
        deafness.stopped(trio.current_time())
        if self._local is not None and self._local.deaf_since is None:
            self._local.deaf_since = deafness.since  # local peers read this
        try:
            await self._fanout.publish(event)
        finally:
            deafness.resumed(trio.current_time())
            if not deafness.deaf:
                if self._local is not None:
                    self._local.deaf_since = None
                if self._planned_deaf:
                    # Its deadlines took the whole credit: too late now.
                    self._presence_due(trio.current_time())

    # ------------------------------------------------------------ presence

    def _presence_due(self, at: float) -> None:
        """Have the presence keeper pass over the peers by ``at``.

        While it sleeps, its wake-up time moves earlier, if need be: a pass
        looks at every peer, and a pass per new peer made a mesh of N peers
        that relinks at once cost N² looks (make scale: hundreds of new
        peers after a kill -9).  During a pass, it passes again after.
        """
        sleep = self._presence_sleep
        if sleep is None:
            self._presence_wakeup.set()
        elif at < sleep.deadline:
            sleep.deadline = at

    async def _presence_keeper(self) -> None:
        # Not a RepeatedEvent: this waits for a wake-up *or* a deadline.  A
        # fresh Event is made before each pass, so a peer added while the
        # pass awaits (publishing, removing) still wakes the next wait.
        while True:
            self._presence_wakeup = wakeup = trio.Event()
            now = trio.current_time()
            if now >= self._trim_at:
                self._trim_at = math.inf
                if not self._unready:  # else a new crowd: its end will trim
                    release_freed_memory()
            if now >= self._elections.deadline():
                await self._elect(self._elections.poll(now, self._members))
            # In-process peers that read are skipped below: look again then.
            deadline = min(
                now + self._config.evasive_timeout, self._trim_at, self._elections.deadline()
            )
            for peer in list(self._peers.values()):
                protocol, link = peer.protocol, peer.link
                if protocol.has_queued:
                    peer.flush()  # what found the link full earlier
                if link.closed:
                    # Only an in-process peer's node closes our link: it
                    # stopped without a GOODBYE to us, having dropped us.
                    await self._remove_peer(peer, ExitReason.GOODBYE)
                    continue
                seen = link.liveness(now)
                if seen == now:
                    protocol.heard(now)  # its node reads: alive, nothing can be due
                    continue
                if seen is not None and seen > protocol.presence.last_heard:
                    protocol.heard(seen)
                events = protocol.poll(now)
                if protocol.has_queued:
                    peer.flush()  # PINGs
                for event in events:
                    await self._publish_from(peer, event)
                if protocol.ended is not None:
                    if protocol.ended is ExitReason.EXPIRED and protocol.detail:
                        # Its beacons arrive but its link is deaf: worth an
                        # operator's eye (libzmq dropped what it carried).
                        self._log_rarely(
                            "deaf-link",
                            logging.WARNING,
                            f"peer {peer.uuid} ({protocol.name}) removed: {protocol.detail}; "
                            "linking again at its next beacon",
                        )
                    await self._remove_peer(peer, protocol.ended, protocol.detail)
                else:
                    deadline = min(deadline, protocol.deadline())
            deadline = min(deadline, self._trim_at)  # peers removed above may have set it
            self._planned_deaf = self._deafness.deaf
            with trio.move_on_at(deadline) as self._presence_sleep:
                await wakeup.wait()
            self._presence_sleep = None

    # ------------------------------------------------------------- beacons

    def _beacon(self, port: int) -> wire.Beacon:
        """Our beacon: 36/ZRE's version 1, 43/ZRE's version 3, with our key in CURVE mode."""
        if self._curve is not None:
            return wire.Beacon(self._uuid, port, 3, self._curve.public)
        return wire.Beacon(self._uuid, port, version=1 if self._version == 2 else 3)

    async def _beacon_sender(self) -> None:
        assert self._discovery is not None
        port = int(self._endpoint.rsplit(":", 1)[1])
        beacon = self._beacon(port)
        interval = self._config.beacon_interval
        while True:
            await self._discovery.send(beacon)
            # Beacon on the run clock's multiples of the interval, so that
            # the nodes of one process wake together: one run-loop wake-up
            # a beacon interval, not one per node.
            await trio.sleep_until(_next_multiple(trio.current_time(), interval))

    def _on_beacon(self, beacon: wire.Beacon, address: str, key: bytes) -> None:
        """Called by the discovery, synchronously, for every beacon.

        Most beacons are ours or come from peers we know and need nothing:
        ``_quiet`` remembers them by the discovery's key, so that costs one
        lookup (100 nodes in a process: 10,000 calls a second).  A leaving
        peer is handed to ``_remove_leavers``.
        """
        quiet = self._quiet
        if key in quiet:
            refresh = quiet[key]
            if refresh is not None and refresh.protocol.ready:
                refresh.protocol.beacon_heard(trio.current_time())
            return
        if self._stopped:
            return
        if beacon.uuid == self._uuid:
            quiet[key] = None
            return
        if not self._speaks(beacon, address):
            return
        peer = self._peers.get(beacon.uuid)
        endpoint = f"tcp://{address}:{beacon.port}"
        if beacon.leaving:
            # An in-process peer says GOODBYE over its link, after its last messages.
            if peer is not None and not peer.link.in_process:
                self._leaving(peer, beacon, address)
            return
        if peer is None:
            peer = self._add_peer(beacon.uuid, endpoint, beacon_from=address, key=beacon.public_key)
        if peer is None:
            return
        # An in-process peer's liveness is read from its link, never from beacons.
        refreshed = self._config.beacons_refresh and not peer.link.in_process
        if peer.protocol.endpoint == endpoint:
            quiet[key] = peer if refreshed else None
            peer.beacon_key = key
        if refreshed and peer.protocol.ready:
            peer.protocol.beacon_heard(trio.current_time())

    def _leaving(self, peer: PeerSession, beacon: wire.Beacon, address: str) -> None:
        """A port-0 beacon names ``peer``: a hint that it left, never proof (anyone can forge it).

        From another host than the peer's, or (CURVE) with another key than
        the one its link authenticates, it is ignored.  Otherwise the peer
        is PINGed, and ``_check_leavers`` ends it if no PING-OK comes
        within a second (see :class:`~trizre.sansio._guard.LeaveHints`): a live
        peer answers and stays, one that left answers nothing.  Its link
        ends it otherwise, as any peer.
        """
        protocol = peer.protocol
        key = None if protocol.key is None else curve_key(protocol.key)
        if not credible_leave(address, beacon.public_key, protocol.endpoint, key):
            self._log_rarely(
                "forged-leave",
                logging.INFO,
                f"ignoring a leaving beacon for peer {peer.uuid} from {address}: "
                "not from its host, or not with its key (forged?)",
            )
            return
        now = trio.current_time()
        if self._leave_hints.hint(peer.uuid, now, protocol.pongs, self._deafness.mark(now)):
            self._ping(peer)
            self._leavers_lot.unpark_all()

    @staticmethod
    def _ping(peer: PeerSession) -> None:
        protocol = peer.protocol
        protocol.queue(wire.Ping(0, version=protocol.version))
        peer.flush()

    def _speaks(self, beacon: wire.Beacon, address: str) -> bool:
        """Whether a beacon announces a node we can talk to; logs (rarely) why not.

        A CURVE node takes only beacons carrying a key: a key-less one is a
        downgrade, ignored as zyre does.  A plain node ignores those with a
        key (it could not connect to a CURVE inbox) and those of the other
        protocol version (version-1 beacons announce 36/ZRE, version-3 ones
        43/ZRE), which would only half-connect.
        """
        if self._curve is not None:
            if beacon.public_key is not None:
                return True
            self._log_rarely(
                "downgrade",
                logging.INFO,
                f"ignoring beacons without a CURVE key (from {address}, among others): "
                "this node talks CURVE only",
            )
            return False
        if beacon.public_key is not None:
            self._log_rarely(
                "curve-beacon",
                logging.INFO,
                f"ignoring CURVE beacons (from {address}, among others): "
                "this node has no certificate (open_node(curve=...))",
            )
            return False
        return beacon.version == (1 if self._version == 2 else 3)

    # -------------------------------------------------------------- gossip

    async def _gossip_discovery(self) -> None:
        """Gossip discovery: publish ``uuid -> endpoint`` and link to what others publish.

        As zyre's gossip mode: the key is the UUID as 32 upper-case hex
        digits, the value our inbox endpoint, ``|`` our Z85 key with CURVE.
        """
        config = self._config
        bind = [config.gossip_bind] if config.gossip_bind else []
        # With CURVE our hub is a CURVE server under our key, judged by curve_allow.
        allow: CurvePolicy | None = None
        if self._curve is not None:
            allowed = None if config.curve_allow == CURVE_ALLOW_ANY else config.curve_allow
            assert not isinstance(allowed, str)
            allow = CurvePolicy(config.zap_domain, allowed)
        async with open_gossip(
            bind,
            config.gossip_connect,
            heard=self._on_gossip,
            curve=self._curve,
            server_key=(
                dict(keys) if isinstance(keys := config.gossip_server_key, tuple) else keys
            ),
            allow=allow,
        ) as gossip:
            self._gossip = gossip
            value = self._endpoint
            if self._curve is not None:
                value += "|" + self._curve.public_z85
            gossip.publish(node_id(self._uuid), value, round(config.gossip_ttl * 1000))
            await trio.sleep_forever()

    def _on_gossip(self, news: Deliver | Forget) -> None:
        """A tuple from the gossip network: a peer to link to, or one gone quiet."""
        if self._stopped:
            return
        try:
            peer_uuid = UUID(hex=news.key)
        except ValueError:
            return  # not a node's tuple: gossip carries anything
        if peer_uuid == self._uuid:
            return
        known = self._peers.get(peer_uuid)
        if isinstance(news, Forget):
            # Its publisher stopped refreshing it; one that never said HELLO goes.
            if known is not None and not known.protocol.ready:
                self._forget(known, ExitReason.HANDSHAKE, "its gossip tuple expired")
            return
        endpoint, _, key_text = news.value.partition("|")
        if known is not None or endpoint == self._endpoint:
            return
        key: bytes | None = None
        if key_text:
            try:
                key = curve_key(key_text)
            except ValueError:
                self._log_rarely(
                    "gossip-key",
                    logging.DEBUG,
                    f"ignoring gossip for {peer_uuid}: bad key {key_text!r}",
                )
                return
        if (self._curve is None) != (key is None):
            self._log_rarely(
                "gossip-curve",
                logging.INFO,
                f"ignoring gossip for peer {peer_uuid}: "
                + (
                    "no CURVE key (this node talks CURVE only)"
                    if key is None
                    else "it talks CURVE and this node has no certificate"
                ),
            )
            return
        self._add_peer(peer_uuid, endpoint, key=key)

    async def _check_leavers(self) -> None:
        """End the peers announced leaving that did not answer their PING in time."""
        hints = self._leave_hints

        def pongs(peer_uuid: UUID) -> int | None:
            found = self._peers.get(peer_uuid)
            return None if found is None else found.protocol.pongs

        while True:
            with trio.move_on_at(hints.deadline()):
                await self._leavers_lot.park()
            now = trio.current_time()
            left, again = hints.due(now, pongs, self._deafness.mark(now))
            for peer_uuid in again:
                self._ping(self._peers[peer_uuid])
            for peer_uuid in left:
                if (peer := self._peers.get(peer_uuid)) is not None:
                    await self._remove_peer(
                        peer, ExitReason.BEACON, "it announced leaving and did not answer a PING"
                    )

    # ---------------------------------------------------------- lifecycle

    async def _start(self, nursery: trio.Nursery, discovery: Discovery | None) -> None:
        """Bind the inbox and start the node's tasks.

        The schedule point comes first: once the tasks are started nothing
        here waits, so none of them runs before ``open_node``'s body does,
        and a subscription made first thing in the body sees every event
        (a HELLO can arrive within milliseconds, over gossip especially).
        """
        await trio.lowlevel.checkpoint()
        curve: CurveServer | None = None
        if (cert := self._curve) is not None:
            assert cert.secret is not None
            if cert.hidden_from_zyre:
                log.warning(
                    "CURVE public key %s starts with a zero octet: zyre ignores this "
                    "node's beacons (make a new certificate to be found by zyre)",
                    cert.public_z85,
                )
            curve = CurveServer(cert.public, cert.secret, self._config.zap_domain, self._zap_id)
        interface = self._interface
        self._nursery = nursery
        self._inbox, self._endpoint = bind_inbox(
            interface.scoped if isinstance(interface, Interface6) else str(interface.address),
            self._config.max_message_size,
            curve=curve,
            endpoint=self._config.endpoint,
            ipv6=isinstance(interface, Interface6),
        )
        # What HELLO says: a link-local scope means nothing to the peer (zyre).
        self._advertised = self._endpoint
        if isinstance(interface, Interface6):
            self._advertised = self._endpoint.replace(f"%{interface.name}", "", 1)
        self._discovery = discovery
        nursery.start_soon(self._reader, self._inbox)
        # CURVE peers are all reached over CURVE: an in-memory link would
        # bypass the allow-list.
        if self._config.local_links and curve is None:
            self._local = LocalInbox(self._endpoint, self._version, self._config.max_message_size)
            register(self._uuid, self._local)
            nursery.start_soon(self._reader, self._local)
        if discovery is not None:
            nursery.start_soon(discovery.listen, self._on_beacon)
            nursery.start_soon(self._check_leavers)
            nursery.start_soon(self._beacon_sender)
        else:
            nursery.start_soon(self._gossip_discovery)
        nursery.start_soon(self._presence_keeper)
        if self._tracer is not None:
            self._tracer.record(kinds.NODE_START, endpoint=self._endpoint)

    async def _shutdown(self) -> None:
        """Say goodbye, close every link and socket, end every subscription."""
        if self._stopped:
            return
        self._stopped = True
        self._peers_changed.set()  # waiters in wait_for_peer raise ClosedResourceError
        self._pongs.set()
        if self._local is not None:
            unregister(self._uuid)
            self._local.close()
        for peer in self._peers.values():
            # In-process peers get what is queued, then GOODBYE; TCP drops
            # it, except in gossip mode (no leaving beacon there), where the
            # link lingers to deliver it, as zyre does.
            peer.link.close(peer.protocol.farewell())
        if self._discovery is not None:
            with trio.CancelScope(shield=True), trio.move_on_after(1):
                try:
                    await self._discovery.send(self._beacon(0))
                except (OSError, trio.ClosedResourceError) as exc:
                    log.debug("could not send the leaving beacon: %s", exc)
        self._peers.clear()
        self._by_identity.clear()
        if self._inbox is not None:
            self._inbox.close()
        self._fanout.close()
        if self._tracer is not None:
            self._tracer.record(kinds.NODE_STOP)
            self._tracer.close()


def _next_multiple(now: float, interval: float) -> float:
    """The first multiple of ``interval`` strictly after ``now``.

    Strictly: with a clock that stands still (``trio.testing.MockClock``)
    a deadline rounded down to ``now`` would make the beacon loop spin.
    """
    deadline = (math.floor(now / interval) + 1) * interval
    while deadline <= now:
        deadline += interval
    return deadline


def _frames(frames: Iterable[bytes]) -> tuple[bytes, ...]:
    content = tuple(frames)
    for frame in content:
        if not isinstance(frame, bytes):
            raise TypeError(f"frames must be bytes, got {type(frame).__name__}")
    return content


def _check_group(group: str) -> None:
    if not isinstance(group, str):
        raise TypeError(f"a group name is a str, got {type(group).__name__}")
    if not group:
        raise ValueError("a group name cannot be empty")
    if len(group.encode("utf-8")) > 255:
        raise ValueError(f"group name {group[:20]!r}... is over 255 UTF-8 bytes")


def _endpoint_host(endpoint: str) -> str | None:
    """The numeric host of a ``tcp://`` endpoint: IPv4, or IPv6 with its ``%scope`` if any.

    IPv6 may come bracketed (libzmq's form) or not (zyre's); names are
    never resolved: ``None``.
    """
    if not endpoint.startswith("tcp://"):
        return None
    host = endpoint[6:].rsplit(":", 1)[0].strip("[]")
    try:
        address = ipaddress.ip_address(host.partition("%")[0])
    except ValueError:
        return None
    return host if address.version == 6 else str(address)


def _open_discovery(
    kind: DiscoveryKind, interface: Interface | Interface6, port: int
) -> AbstractAsyncContextManager[Discovery | None]:
    if kind == "memory":
        assert isinstance(interface, Interface)
        return open_memory_discovery(interface, port)
    if kind == "gossip":
        return nullcontext()  # the node runs its gossip service itself
    return open_beacon_hub(interface, port)


def _open_zap(node: Node) -> AbstractAsyncContextManager[None]:
    config = node.config
    if config.curve is None:
        return nullcontext()
    allowed = None if config.curve_allow == CURVE_ALLOW_ANY else config.curve_allow
    assert not isinstance(allowed, str)
    return open_zap(node._zap_id, CurvePolicy(config.zap_domain, allowed))


@asynccontextmanager
async def open_node(
    name: str | None = None,
    *,
    headers: Mapping[str, str] | None = None,
    interface: str | None = None,
    beacon_port: int = wire.DISCOVERY_PORT,
    beacon_interval: float = 1.0,
    evasive_timeout: float = 5.0,
    expired_timeout: float = 30.0,
    handshake_timeout: float = 5.0,
    election_timeout: float = 5.0,
    max_pending_peers: int = 256,
    new_peers_per_source: float = 20.0,
    protocol_version: int = 2,
    send_hwm: int = 1000,
    max_message_size: int = 16 * 1024 * 1024,
    max_peer_groups: int = 10_000,
    max_headers: int = 10_000,
    max_header_bytes: int = 1024 * 1024,
    beacons_refresh: bool = False,
    local_links: bool | None = None,
    discovery: DiscoveryKind = "udp",
    ipv6: bool = False,
    trace_dir: str | os.PathLike[str] | None = None,
    trace_max_bytes: int = 64 * 1024 * 1024,
    endpoint: str | None = None,
    gossip_bind: str | None = None,
    gossip_connect: str | Sequence[str] = (),
    gossip_ttl: float = 30.0,
    gossip_server_key: CurveKey | Mapping[str, CurveKey] | None = None,
    curve: Certificate | None = None,
    curve_allow: str | os.PathLike[str] | Iterable[CurveKey] | None = None,
    zap_domain: str = "global",
) -> AsyncIterator[Node]:
    """Start a ZRE node; stop it when the block ends.

    Args:
        name: the public name peers see (default: the first 6 hex digits of
            the UUID, as zyre).  At most 255 UTF-8 bytes.
        headers: properties sent to every peer in HELLO.
        interface: a name (``"lo"``, ``"eth0"``) or an IPv4 address; ``None``
            reads ``$TRIZRE_INTERFACE``, else takes the first up,
            broadcast-capable, non-loopback interface (zyre's rule).  With
            ``"lo"`` beacons go to 127.255.255.255.
        beacon_port: the UDP discovery port (5670 is ZRE's).
        beacon_interval: seconds between beacons (zyre: 1 s).
        evasive_timeout: silence after which a peer is pinged (zyre: 5 s);
            :class:`~trizre.Evasive` if it does not answer within
            ``min(1 s, evasive_timeout / 2)``.
        expired_timeout: silence after which a peer is removed and reported
            :class:`~trizre.Exit` (zyre: 30 s); greater than
            ``evasive_timeout``.
        handshake_timeout: a peer we heard of (by beacon) that has not said
            HELLO this long after we linked to it is dropped, with its
            socket (anyone can forge a beacon); it comes back with its next
            beacon if it is real, and then has twice as long (doubling for
            each miss in a row, up to ``expired_timeout``), so that a real
            peer too loaded to answer in time gets its chance.
        election_timeout: how long an election may run before this node
            ends it (``docs/elections.md``): a contester whose wave is
            lowest declares it won, as it must when a zyre peer miscounts.
        max_pending_peers: at most this many peers without HELLO hold a TCP
            socket; beyond that the oldest is dropped (a warning is logged,
            at most every 10 s).  Beacons from all sources together may
            announce this many new TCP peers at once, then this many per
            ``handshake_timeout`` (forgers spoofing many source addresses;
            ``docs/security.md``).
        new_peers_per_source: new TCP peers one address may announce by
            beacon, per second, after a burst of 64; beacons beyond that are
            ignored (the peer is taken at a later beacon, or at its HELLO).
        protocol_version: 2 speaks 36/ZRE as zyre and pyre do; 3 speaks
            43/ZRE as written.  Nodes of different versions ignore each other.
        send_hwm: messages queued per peer before sends wait (backpressure).
        max_message_size: the largest message, all its frames together
            (bytes; default 16 MiB), this node sends or takes.  ``whisper``
            and ``shout`` raise :class:`~trizre.MessageTooLarge` for a
            larger one.  A TCP peer that sends a larger frame is
            disconnected by libzmq before the frame is buffered; a larger
            message of smaller frames is discarded uncopied; either way
            the peer is dropped (Exit, reason ``limits``).  Peers should
            share the setting (``docs/security.md``).  A peer can still
            make a node buffer about ``1000 * max_message_size`` (libzmq's
            receive queue): keep it near your largest message.
        max_peer_groups: groups one peer may be in (its HELLO's list, then
            its JOINs); a peer past it is dropped (Exit, reason ``limits``).
        max_headers: headers one peer's HELLO may carry; more: dropped.
        max_header_bytes: octets of names and values together one peer's
            HELLO headers may hold; more: dropped.
        beacons_refresh: count a peer's beacons as signs of life, as pyre
            does.  Off by default (zyre's rule): only TCP traffic proves
            the link works.  On, a peer is PINGed only after
            ``expired_timeout`` with nothing over its link, and removed
            after twice that even while its beacons arrive (a deaf link
            must end; see ``docs/node.md``, Presence).
        local_links: talk to peers in this same Trio run (other nodes
            opened here) over in-memory links instead of TCP: the same ZRE
            messages, sequence numbers and backpressure (``send_hwm``), but
            no sockets, and no PINGs, since such a peer's liveness is read
            directly (see ``docs/node.md``).  Both nodes must allow it.
            Off: every peer gets a TCP link, as in zyre and pyre.  ``None``
            (the default) means on, unless ``$TRIZRE_LOCAL_LINKS`` is ``0``.
        discovery: ``"udp"``, ZRE's UDP beacons; ``"gossip"``, zyre's
            gossip discovery (below, and ``docs/discovery.md``); ``"memory"``, nodes of
            this Trio run find each other in memory with no beacon socket
            (for tests and simulations: it runs under
            ``trio.testing.MockClock`` with exact virtual times).
        trace_dir: record a trace (``docs/traces.md``) of this node and of
            the patterns running on it into this directory; off by default.
        trace_max_bytes: rotate a trace file past this size (at least 4096).
        ipv6: beacon over IPv6 as zyre does with ``ZSYS_IPV6=1``: to the
            all-nodes group ``ff02::1`` of ``interface`` (a name; default:
            the first up, multicast-capable, non-loopback interface with a
            link-local address), peers reached at their link-local
            addresses with the interface's scope
            (``tcp://fe80::1%eth0:port``); HELLO gives the endpoint without
            it, as zyre.  Loopback cannot multicast: ``InterfaceError``.
        endpoint: gossip mode: where the inbox binds and what the node
            publishes (``tcp://host:port``, ``tcp://host:*`` for a free
            port, ``ipc://path``); a concrete address peers can reach.
            Default: a free port of the interface's address.
        gossip_bind: gossip mode: serve the gossip network here (a hub
            that other nodes, zyre's too, connect to).
        gossip_connect: gossip mode: the gossip services (hubs) to join.
            Gossip needs ``gossip_bind``, ``gossip_connect`` or both; it
            sends no beacons, and a stopping node tells its peers with
            GOODBYE, as zyre does.
        gossip_ttl: seconds our tuple lives in the gossip network unless
            refreshed (it is, every third of that, while the node runs), so
            a node that dies without GOODBYE is forgotten; 0 keeps it
            forever, as zyre.  czmq's zgossip hubs keep tuples forever.
        gossip_server_key: gossip over CURVE: the public key of the
            ``gossip_connect`` hubs (a :data:`~trizre.CurveKey`), which the
            node reaches as a CURVE client with its own ``curve`` key pair
            (zyre's ``zyre_gossip_connect_curve``); needs ``curve``.  Hubs
            with keys of their own: a mapping of ``gossip_connect``
            endpoints to keys (hubs it does not name are reached in the
            clear).  Without it the node connects in the clear.  A CURVE node's
            ``gossip_bind`` hub is always a CURVE server under the node's
            key, letting in the client keys of ``curve_allow`` (as zyre's
            hub with a certificate); see ``docs/security.md``.
        curve: this node's :class:`~trizre.Certificate` (a key pair): talk
            CURVE as 43/ZRE and zyre do (``docs/security.md``).  The node
            then beacons its public key (54-octet version-3 beacons), its
            inbox is a CURVE server, every link encrypted and keyed from
            the peer's beacon, and its HELLO carries ``X-PUBLICKEY``.  It
            ignores beacons and HELLOs without a key (downgrade
            protection), and peers without CURVE ignore it.  Every peer is
            reached over TCP (no in-memory links).
        curve_allow: required with ``curve``: the client keys allowed to
            connect: an iterable of keys (32 bytes, Z85 text or
            certificates), a directory of public certificate files (czmq's
            ``zcertstore``), or :data:`~trizre.CURVE_ALLOW_ANY` (anyone who
            can reach the node; logged as a warning).  Peers whose keys are
            not allowed are not linked to either.  A client that connects
            with an allowed key but claims the UUID of a peer known under
            another key is refused.
        zap_domain: the ZAP domain of the inbox (zyre's default ``"global"``).

    The options are checked together (:class:`~trizre.NodeConfig`), before
    anything starts: bad input raises ``TypeError`` or ``ValueError``
    (``InterfaceError``, a ``ValueError``, for an unknown interface);
    an unusable beacon port raises ``OSError`` naming it.

    On leaving the block (normally, by an exception, or by cancellation)
    the node tells its peers it leaves (a port-0 beacon; GOODBYE to peers
    in this Trio run), closes its sockets with LINGER 0, ends every
    subscription with :class:`~trizre.Stop` and returns promptly.  From
    then on its methods raise ``trio.ClosedResourceError``.
    """
    if local_links is None:
        local_links = os.environ.get("TRIZRE_LOCAL_LINKS", "1") != "0"
    config = NodeConfig(
        name=name,
        headers=headers,
        interface=interface,
        beacon_port=beacon_port,
        beacon_interval=beacon_interval,
        evasive_timeout=evasive_timeout,
        expired_timeout=expired_timeout,
        handshake_timeout=handshake_timeout,
        election_timeout=election_timeout,
        max_pending_peers=max_pending_peers,
        new_peers_per_source=new_peers_per_source,
        protocol_version=protocol_version,
        send_hwm=send_hwm,
        max_message_size=max_message_size,
        max_peer_groups=max_peer_groups,
        max_headers=max_headers,
        max_header_bytes=max_header_bytes,
        beacons_refresh=beacons_refresh,
        local_links=local_links,
        discovery=discovery,
        ipv6=ipv6,
        trace_dir=trace_dir,
        trace_max_bytes=trace_max_bytes,
        endpoint=endpoint,
        gossip_bind=gossip_bind,
        gossip_connect=gossip_connect if isinstance(gossip_connect, str) else tuple(gossip_connect),
        gossip_ttl=gossip_ttl,
        gossip_server_key=gossip_server_key,
        curve=curve,
        curve_allow=curve_allow,
        zap_domain=zap_domain,
    )
    if config.curve_allow == CURVE_ALLOW_ANY:
        log.warning(
            "CURVE node %r lets any key connect (curve_allow=CURVE_ALLOW_ANY): traffic is "
            "encrypted, but anyone on the network can join",
            config.name,
        )
    # Gossip at an explicit endpoint needs no interface: name lo, unused, then.
    gossip_only = config.discovery == "gossip" and config.endpoint is not None
    spec = "lo" if gossip_only and config.interface is None else config.interface
    node = Node(config, select_interface6(spec) if config.ipv6 else select_interface(spec))
    if config.trace_dir is not None:
        node._tracer = Tracer(
            config.trace_dir, node.uuid, node.name, max_bytes=config.trace_max_bytes
        )
    try:
        with unwrap_single_exception_group():
            async with (
                _open_zap(node),
                _open_discovery(config.discovery, node.interface, beacon_port) as found,
            ):
                try:
                    async with trio.open_nursery() as nursery:
                        await node._start(nursery, found)
                        try:
                            yield node
                        finally:
                            nursery.cancel_scope.cancel()
                finally:
                    await node._shutdown()
    finally:
        if node._tracer is not None:
            node._tracer.close()  # also when the beacon socket could not open
