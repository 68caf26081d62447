"""The ZRE node: discovery, peers, groups, presence, and the events channel.

Data flows one way: beacons and inbox frames come in, the wire codec turns
them into messages, the peer table and presence clocks turn those into
events, and the fan-out hands the events to every subscriber.

Tasks (all in the node's own nursery):

* beacons out: one beacon at start, then every ``beacon_interval``;
* beacons in: read once per process by a shared hub (``_discovery``), which
  calls every node's ``_on_beacon``; an unknown UUID with a port becomes a
  peer, port 0 removes it (through the leavers task);
* inbox: drains the ROUTER in batches and dispatches each message;
* local inbox: the same for peers in this Trio run, whose messages come
  over in-memory links (``_local``) rather than TCP;
* presence: sleeps until the earliest peer deadline, then pings/reports.

Sending never drops: a message goes out with the next sequence number only
if libzmq took it, so cancellation or a full queue can never open a
sequence gap.  Data sends (WHISPER, SHOUT) wait for room (backpressure);
protocol messages (HELLO, JOIN, LEAVE, PING, PING-OK) are queued per peer
and flushed, in order, before the next data message.
"""

from __future__ import annotations

import ipaddress
import logging
import math
import os
import random
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from contextlib import asynccontextmanager
from typing import Any, Final, final
from uuid import UUID, uuid4

import trio
import zmq

from . import wire
from ._discovery import BeaconHub, BeaconSocket, open_beacon_hub
from ._events import (
    Enter,
    Evasive,
    Event,
    Exit,
    Join,
    Leave,
    PeerDisconnected,
    Shout,
    Silent,
    UnknownPeer,
    Whisper,
)
from ._fanout import EventStream, Fanout, Overflow
from ._interfaces import Interface, select_interface
from ._local import LocalInbox, LocalLink, lookup, register, unregister
from ._presence import Liveness, Presence, PresenceAction
from ._trace import Tracer
from ._util import unwrap_single_exception_group
from ._zsock import ZSocket, context

__all__ = ["Node", "open_node"]

log = logging.getLogger("trizre.node")

_Factory = Callable[[int], list[bytes]]
_EPHEMERAL_PORTS: Final = (0xC000, 0x10000)  # 36/ZRE: bind in %xC000-%xFFFF
_BATCH: Final = 256
_YIELD_EVERY: Final = 32
_NO_GROUPS: Final[frozenset[str]] = frozenset()
# Tests set this False to run the whole suite over TCP only (conftest --links).
_LOCAL_LINKS_ALLOWED = True


@final
class _Peer:
    """What we know about one remote node, and our DEALER (or local link) to it."""

    # A process may hold thousands of these (100 local nodes: 9,900), so
    # what most peers never need (a send queue, a lock, a group set) is
    # made on first use.
    __slots__ = (
        "_hex",
        "_lock",
        "beacon_key",
        "endpoint",
        "groups",
        "headers",
        "in_seq",
        "name",
        "pending",
        "presence",
        "ready",
        "sent_seq",
        "sock",
        "status",
        "uuid",
        "waiting",
    )

    def __init__(
        self, peer: UUID, endpoint: str, sock: ZSocket | LocalLink, presence: Presence
    ) -> None:
        self.uuid = peer
        self._hex: str | None = None
        self.beacon_key: bytes | None = None  # see Node._on_beacon
        self.endpoint = endpoint
        self.sock = sock
        self.presence = presence
        self.name = ""
        self.headers: tuple[tuple[str, str], ...] = ()
        self.groups = _NO_GROUPS
        self.status = 0
        self.ready = False  # True once its HELLO arrived (and Enter was reported)
        self.in_seq = 0  # last sequence received
        self.sent_seq = 0  # last sequence libzmq accepted from us
        self.pending: deque[_Factory] | None = None  # protocol messages awaiting room
        self.waiting = 0  # data senders queued on the lock
        self._lock: trio.StrictFIFOLock | None = None

    @property
    def hex(self) -> str:
        """The UUID in hex, as traces name peers (computed once, when first traced)."""
        if self._hex is None:
            self._hex = self.uuid.hex
        return self._hex

    @property
    def lock(self) -> trio.StrictFIFOLock:
        """Held by the data sender that waits for room (made for the first one)."""
        if self._lock is None:
            self._lock = trio.StrictFIFOLock()
        return self._lock


@final
class Node:
    """A running ZRE node.  Create it with :func:`open_node`, never directly.

    Query methods are synchronous and see the node's current state; sending
    methods are async, wait for room (backpressure), and are safe to call
    from any number of tasks.
    """

    def __init__(
        self,
        name: str,
        *,
        headers: tuple[tuple[str, str], ...],
        interface: Interface,
        beacon_port: int,
        beacon_interval: float,
        evasive_timeout: float,
        expired_timeout: float,
        protocol_version: int,
        send_hwm: int,
        beacons_refresh: bool,
        local_links: bool,
    ) -> None:
        self._uuid = uuid4()
        self._name = name
        self._headers = headers
        self._interface = interface
        self._beacon_port = beacon_port
        self._beacon_interval = beacon_interval
        self._evasive = evasive_timeout
        self._expired = expired_timeout
        self._version = protocol_version
        self._send_hwm = send_hwm
        self._beacons_refresh = beacons_refresh
        self._local_links = local_links and _LOCAL_LINKS_ALLOWED
        self._local: LocalInbox | None = None
        self._deaf = 0  # publishers waiting for a full subscriber
        self._identity = b"\x01" + self._uuid.bytes
        self._peers: dict[UUID, _Peer] = {}
        self._by_identity: dict[bytes, _Peer] = {}
        self._groups: set[str] = set()
        self._status = 0
        self._fanout = Fanout()
        self._inbox: ZSocket | None = None
        self._beacons: BeaconSocket | None = None
        self._endpoint = ""
        self._stopped = False
        self._presence_wakeup = trio.Event()
        self._peers_changed = trio.Event()
        self._tracer: Tracer | None = None
        # Beacons seen before, by the hub's key: None, nothing to do; a peer,
        # refresh its presence (beacons_refresh).
        self._quiet: dict[bytes, _Peer | None] = {}
        self._leavers: deque[_Peer] = deque()  # announced port 0, to be removed
        self._leavers_lot = trio.lowlevel.ParkingLot()
        self._unyielded = 0  # sends since the last schedule point (see _send)
        self._batch_time = 0.0  # when the inbox batch being dispatched arrived

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
    def tracer(self) -> Tracer | None:
        """The trace recorder when ``open_node(trace_dir=...)`` asked for one."""
        return self._tracer

    @property
    def interface(self) -> Interface:
        """The network interface this node beacons on."""
        return self._interface

    # ------------------------------------------------------------- queries

    def peers(self) -> list[UUID]:
        """The UUIDs of the peers that have entered (said HELLO) and not exited."""
        return [p.uuid for p in self._peers.values() if p.ready]

    def peers_by_group(self, group: str) -> list[UUID]:
        """The present peers that are in ``group`` (case-sensitive)."""
        return [p.uuid for p in self._peers.values() if p.ready and group in p.groups]

    def own_groups(self) -> list[str]:
        """The groups this node has joined, sorted."""
        return sorted(self._groups)

    def peer_groups(self) -> list[str]:
        """Every group that at least one present peer is in, sorted."""
        groups: set[str] = set()
        for peer in self._peers.values():
            if peer.ready:
                groups |= peer.groups
        return sorted(groups)

    def _present(self, peer: UUID) -> _Peer:
        found = self._peers.get(peer)
        if found is None or not found.ready:
            raise UnknownPeer(peer)
        return found

    def peer_name(self, peer: UUID) -> str:
        """The name a present peer gave in its HELLO; :class:`UnknownPeer` otherwise."""
        return self._present(peer).name

    def peer_headers(self, peer: UUID) -> dict[str, str]:
        """The headers a present peer gave in its HELLO; :class:`UnknownPeer` otherwise."""
        return dict(self._present(peer).headers)

    def peer_address(self, peer: UUID) -> str:
        """The ``tcp://ip:port`` endpoint of a present peer; :class:`UnknownPeer` otherwise."""
        return self._present(peer).endpoint

    def peer_is_responsive(self, peer: UUID) -> bool:
        """False while a present peer is evasive or silent (see presence).

        Raises :class:`UnknownPeer` if the peer is not present.
        """
        return self._present(peer).presence.liveness is Liveness.ALIVE

    def find_peers(self, name: str) -> list[UUID]:
        """The present peers whose HELLO gave ``name`` (names need not be unique)."""
        return [p.uuid for p in self._peers.values() if p.ready and p.name == name]

    def peer_by_name(self, name: str) -> UUID | None:
        """The peer to use for ``name``: the newest responsive one, or ``None``.

        A server that crashed stays present until it expires, beside its
        restarted successor of the same name; this picks the successor.
        With no responsive one, the newest of those present.
        """
        found = [p for p in self._peers.values() if p.ready and p.name == name]
        if not found:
            return None
        responsive = [p for p in found if p.presence.liveness is Liveness.ALIVE]
        return (responsive or found)[-1].uuid

    async def wait_for_peer(self, peer: str | UUID) -> UUID:
        """Wait until a peer with this name (``str``) or UUID is present; return its UUID.

        Returns at once if one already is (with a checkpoint); with several
        of the same name, the one :meth:`peer_by_name` picks.  Cancellation: nothing changes;
        bound it with ``trio.fail_after``.  Bad input: anything but a
        ``str`` or ``uuid.UUID`` raises ``TypeError``.
        """
        if not isinstance(peer, str | UUID):
            raise TypeError(f"a peer is a name (str) or a uuid.UUID, got {type(peer).__name__}")
        while True:
            if isinstance(peer, UUID):
                found = self._peers.get(peer)
                if found is not None and found.ready:
                    await trio.lowlevel.checkpoint()
                    return peer
            elif (match := self.peer_by_name(peer)) is not None:
                await trio.lowlevel.checkpoint()
                return match
            await self._peers_changed.wait()

    def _announce_change(self) -> None:
        self._peers_changed.set()
        self._peers_changed = trio.Event()

    def events(self, *, max_buffer: int = 1000, overflow: Overflow = "block") -> EventStream:
        """Subscribe to this node's events from now on.

        Every subscription sees every event; see :mod:`trizre._fanout` and
        ``docs/node.md`` for what happens when a subscriber falls behind
        (``overflow="block"``: the node waits for it; ``"raise"``: it is
        cut off with :class:`~trizre.EventsOverflowed`).  A subscription
        made after the node stopped yields only :class:`~trizre.Stop`.
        Bad input: ``max_buffer < 1`` or another ``overflow`` raise
        ``ValueError``.
        """
        return self._fanout.subscribe(max_buffer, overflow)

    # ------------------------------------------------------------- sending

    async def whisper(self, peer: UUID, *frames: bytes) -> None:
        """Send zero or more frames to one present peer.

        Waits while the peer's send queue is full (backpressure; a peer
        that never reads holds the caller until it expires).  Raises
        :class:`UnknownPeer` if the peer is not present,
        :class:`PeerDisconnected` if it went away while we waited (the
        message was not sent), ``TypeError``/``ValueError`` for frames that
        are not bytes.  Cancellation: the message was sent exactly once if
        the call returned, not at all if it raised; it is checked on every
        call, while the schedule point of a send that did not have to wait
        comes once every 32 such calls (the cost of a flood is mostly
        schedule points otherwise).
        """
        target = self._present(peer)
        content = _frames(frames)
        version = self._version

        def build(seq: int) -> list[bytes]:
            return wire.encode_whisper(seq, content, version)

        # _send, inline: one coroutine less on a flood's per-message path.
        await trio.lowlevel.checkpoint_if_cancelled()
        if (seq := self._send_nowait(target, build)) is None:
            seq = await self._send_waiting(target, build)
        elif self._yield_due():
            await trio.lowlevel.cancel_shielded_checkpoint()
        if self._tracer is not None:
            self._tracer.message("whisper-sent", target.hex, seq)

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
        version = self._version
        seq = self._send_nowait(target, lambda seq: wire.encode_whisper(seq, content, version))
        if seq is None:
            return False
        if self._tracer is not None:
            self._tracer.message("whisper-sent", target.hex, seq)
        return True

    async def shout(self, group: str, *frames: bytes) -> None:
        """Send zero or more frames to every present peer in ``group``.

        We need not be in the group ourselves.  It goes at once to every
        member with room, then waits for room at the others in turn
        (backpressure).  A member that leaves while we wait for it is
        skipped: it is no longer a member.  Cancellation: members with room
        and those waited for before the cancellation got the message, the
        rest did not.  Bad input: a group name over 255 UTF-8 bytes raises
        ``ValueError``.
        """
        content = _frames(frames)
        version = self._version
        _check_group(group)
        await trio.lowlevel.checkpoint_if_cancelled()

        def build(seq: int) -> list[bytes]:
            return wire.encode(wire.Shout(seq, group, content, version=version))

        tracer = self._tracer
        full: list[_Peer] = []
        for peer in [p for p in self._peers.values() if p.ready and group in p.groups]:
            try:
                seq = self._send_nowait(peer, build)
            except PeerDisconnected:
                continue
            if seq is None:
                full.append(peer)
            elif tracer is not None:
                tracer.message("shout-sent", peer.hex, seq, group)
        for peer in full:
            try:
                seq = await self._send(peer, build)
            except PeerDisconnected:
                continue
            if tracer is not None:
                tracer.message("shout-sent", peer.hex, seq, group)
        if not full:
            await trio.lowlevel.cancel_shielded_checkpoint()

    async def join(self, group: str) -> None:
        """Join ``group`` and tell every peer; a no-op if already joined.

        Peers are told with a JOIN queued behind anything already queued
        for them, so this never waits for a slow peer.  Bad input: a name
        over 255 UTF-8 bytes raises ``ValueError``.
        """
        _check_group(group)
        await trio.lowlevel.checkpoint()
        if group in self._groups:
            return
        self._groups.add(group)
        self._status = (self._status + 1) % 256
        status, version = self._status, self._version
        for peer in list(self._peers.values()):
            self._queue_protocol(
                peer, lambda seq: wire.encode(wire.Join(seq, group, status, version=version))
            )

    async def leave(self, group: str) -> None:
        """Leave ``group`` and tell every peer; a no-op if not joined."""
        _check_group(group)
        await trio.lowlevel.checkpoint()
        if group not in self._groups:
            return
        self._groups.discard(group)
        self._status = (self._status + 1) % 256
        status, version = self._status, self._version
        for peer in list(self._peers.values()):
            self._queue_protocol(
                peer, lambda seq: wire.encode(wire.Leave(seq, group, status, version=version))
            )

    def _send_nowait(self, peer: _Peer, build: _Factory) -> int | None:
        """Send one data message in sequence if it can go at once; its sequence number."""
        if peer.pending:
            self._flush_protocol(peer)
        if peer.waiting or peer.pending:
            return None  # others are queued ahead of us: keep the order
        seq = (peer.sent_seq + 1) & 0xFFFF
        try:
            sent = peer.sock.send_nowait(build(seq))
        except trio.ClosedResourceError:
            raise PeerDisconnected(peer.uuid) from None
        if not sent:
            return None
        peer.sent_seq = seq
        return seq

    async def _send(self, peer: _Peer, build: _Factory) -> int:
        """Send one data message in sequence, waiting for room; its sequence number."""
        await trio.lowlevel.checkpoint_if_cancelled()
        if (sent := self._send_nowait(peer, build)) is None:
            return await self._send_waiting(peer, build)
        if self._yield_due():
            await trio.lowlevel.cancel_shielded_checkpoint()
        return sent

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

    async def _send_waiting(self, peer: _Peer, build: _Factory) -> int:
        """Wait for room, send what is queued for ``peer``, then this message."""
        peer.waiting += 1
        try:
            async with peer.lock:
                while pending := peer.pending:  # protocol messages queued earlier go first
                    seq = (peer.sent_seq + 1) & 0xFFFF
                    await peer.sock.send(pending[0](seq))
                    pending.popleft()
                    peer.sent_seq = seq
                peer.pending = None
                seq = (peer.sent_seq + 1) & 0xFFFF
                await peer.sock.send(build(seq))
                peer.sent_seq = seq
                return seq
        except trio.ClosedResourceError:
            raise PeerDisconnected(peer.uuid) from None
        finally:
            peer.waiting -= 1

    def _queue_protocol(self, peer: _Peer, build: _Factory) -> None:
        """Queue a protocol message for ``peer`` and send what fits now."""
        if peer.pending is None:
            peer.pending = deque()
        peer.pending.append(build)
        self._flush_protocol(peer)

    def _flush_protocol(self, peer: _Peer) -> None:
        if peer.waiting or peer.sock.closed:
            return  # a data sender holds the order; it flushes first
        pending = peer.pending
        if pending is None:
            return
        while pending:
            seq = (peer.sent_seq + 1) & 0xFFFF
            if not peer.sock.send_nowait(pending[0](seq)):
                return
            pending.popleft()
            peer.sent_seq = seq
        peer.pending = None  # an empty deque still holds ~600 bytes

    # --------------------------------------------------------- peer table

    def _hello(self, seq: int) -> list[bytes]:
        return wire.encode(
            wire.Hello(
                seq,
                self._endpoint,
                tuple(sorted(self._groups)),
                self._status,
                self._name,
                self._headers,
                version=self._version,
            )
        )

    def _add_peer(self, peer_uuid: UUID, endpoint: str) -> _Peer | None:
        """Connect a DEALER to a new peer and queue our HELLO to it."""
        host = _endpoint_host(endpoint)
        if host is None or not self._interface.contains(host):
            # Never connect outside our interface's network, whatever a
            # beacon or HELLO claims.
            log.debug("ignoring peer %s at %r: outside %s", peer_uuid, endpoint, self._interface)
            return None
        sock: ZSocket | LocalLink
        inbox = lookup(peer_uuid, endpoint, self._version) if self._local_links else None
        if inbox is not None:
            sock = LocalLink(inbox, self._identity, self._send_hwm)
        else:
            try:
                zsock = context().socket(zmq.DEALER)
            except zmq.ZMQError as exc:
                # Out of sockets or descriptors: this peer waits for its next
                # beacon; the node itself carries on.
                log.warning("cannot open a socket for peer %s at %s: %s", peer_uuid, endpoint, exc)
                return None
            zsock.setsockopt(zmq.IDENTITY, self._identity)
            zsock.setsockopt(zmq.SNDHWM, self._send_hwm)
            zsock.setsockopt(zmq.LINGER, 0)
            zsock.connect(endpoint)
            sock = ZSocket(zsock, cork=True)  # floods: one libzmq hand-over a batch
        peer = _Peer(
            peer_uuid, endpoint, sock, Presence(trio.current_time(), self._evasive, self._expired)
        )
        self._peers[peer_uuid] = peer
        self._by_identity[b"\x01" + peer_uuid.bytes] = peer
        self._queue_protocol(peer, self._hello)
        self._presence_wakeup.set()
        return peer

    async def _remove_peer(self, peer: _Peer, reason: str, detail: str = "") -> None:
        """Forget a peer, close our DEALER to it, and report Exit if it had entered.

        ``reason`` is one of the trace schema's exit reasons.
        """
        if self._peers.get(peer.uuid) is not peer:
            return
        del self._peers[peer.uuid]
        del self._by_identity[b"\x01" + peer.uuid.bytes]
        if peer.beacon_key is not None:
            self._quiet.pop(peer.beacon_key, None)
        peer.sock.close()  # wakes its waiting senders with PeerDisconnected
        log.debug("peer %s (%s) removed: %s %s", peer.uuid, peer.name, reason, detail)
        self._announce_change()
        if peer.ready:
            if (tracer := self._tracer) is not None:
                tracer.record(
                    "exit", peer=peer.hex, peer_name=peer.name, reason=reason, detail=detail
                )
            await self._publish(Exit(peer.uuid, peer.name))

    # -------------------------------------------------------------- events

    async def _publish(self, event: Event) -> None:
        # Not a checkpoint when every subscriber has room (the common case).
        if self._fanout.publish_nowait(event):
            return
        # Some subscriber is full: wait for it.  While we wait we read
        # nothing, so peers are not silent, we are deaf: their clocks
        # restart when we listen again.
        self._deaf += 1
        if self._local is not None and self._local.deaf_since is None:
            self._local.deaf_since = trio.current_time()  # local peers read this
        try:
            waited = await self._fanout.publish(event)
        finally:
            self._deaf -= 1
            if self._deaf == 0 and self._local is not None:
                self._local.deaf_since = None
        if waited:
            now = trio.current_time()
            for peer in self._peers.values():
                peer.presence.heard(now)

    # --------------------------------------------------------------- tasks

    async def _beacon_sender(self) -> None:
        assert self._beacons is not None
        port = int(self._endpoint.rsplit(":", 1)[1])
        beacon = wire.Beacon(self._uuid, port, version=1 if self._version == 2 else 3)
        interval = self._beacon_interval
        while True:
            await self._beacons.send(beacon)
            # Beacon on the run clock's multiples of the interval, so that
            # the nodes of one process wake together: one run-loop wake-up
            # a beacon interval, not one per node.
            await trio.sleep_until(_next_multiple(trio.current_time(), interval))

    def _on_beacon(self, beacon: wire.Beacon, address: str, key: bytes) -> None:
        """Called by the shared beacon hub, synchronously, for every beacon.

        Most beacons are ours or come from peers we know and need nothing:
        ``_quiet`` remembers them by the hub's key, so that costs one
        lookup (100 nodes in a process: 10,000 calls a second).  A leaving
        peer is handed to ``_remove_leavers``.
        """
        quiet = self._quiet
        if key in quiet:
            refresh = quiet[key]
            if refresh is not None and refresh.ready:
                refresh.presence.heard(trio.current_time())
            return
        if self._stopped:
            return
        if beacon.uuid == self._uuid:
            quiet[key] = None
            return
        peer = self._peers.get(beacon.uuid)
        if beacon.leaving:
            # A local peer says GOODBYE over its link, after its last messages.
            if peer is not None and not isinstance(peer.sock, LocalLink):
                self._leavers.append(peer)
                self._leavers_lot.unpark_all()
            return
        if peer is None:
            peer = self._add_peer(beacon.uuid, f"tcp://{address}:{beacon.port}")
        if peer is None:
            return
        # A local peer's liveness is read, never refreshed by beacons.
        refreshed = self._beacons_refresh and not isinstance(peer.sock, LocalLink)
        if peer.endpoint == f"tcp://{address}:{beacon.port}":
            quiet[key] = peer if refreshed else None
            peer.beacon_key = key
        if refreshed and peer.ready:
            peer.presence.heard(trio.current_time())

    async def _remove_leavers(self) -> None:
        while True:
            while not self._leavers:
                await self._leavers_lot.park()
            await self._remove_peer(self._leavers.popleft(), "beacon")

    async def _reader(self, inbox: ZSocket | LocalInbox) -> None:
        while True:
            batch = await inbox.receive_batch(_BATCH)
            self._batch_time = trio.current_time()  # one clock read per batch
            fast = self._whisper_nowait
            for frames in batch:
                if not fast(frames):
                    await self._dispatch(frames)

    def _whisper_nowait(self, frames: list[bytes]) -> bool:
        """Deliver an in-sequence WHISPER from an entered peer, if no subscriber is full.

        The flood's path: no coroutine, no message object.  Returns
        ``False`` having changed nothing for anything else, which
        :meth:`_dispatch` then handles from the start.
        """
        if len(frames) < 2:
            return False
        peer = self._by_identity.get(frames[0])
        if peer is None or not peer.ready:
            return False
        seq = wire.whisper_sequence(frames[1], self._version)
        if seq is None or seq != (peer.in_seq + 1) & 0xFFFF:
            return False
        if not self._fanout.publish_nowait(Whisper(peer.uuid, peer.name, tuple(frames[2:]))):
            return False
        peer.in_seq = seq
        peer.presence.heard(self._batch_time)
        if self._tracer is not None:
            self._tracer.message("whisper-received", peer.hex, seq)
        return True

    async def _dispatch(self, frames: list[bytes]) -> None:
        if len(frames) < 2:
            return
        identity = frames[0]
        peer = self._by_identity.get(identity)
        message: wire.Message | None = None  # stays None for a WHISPER (the hot path)
        seq = wire.whisper_sequence(frames[1], self._version)
        if seq is None:
            message = await self._decode(identity, peer, frames)
            if message is None:
                return
            seq = message.sequence
        if peer is None or not peer.ready:
            return  # commands before HELLO are ignored
        if seq == (peer.in_seq + 1) & 0xFFFF:  # inline: this runs for every message
            peer.in_seq = seq
            peer.presence.heard(self._batch_time)
        elif not await self._check_sequence(peer, seq):
            return
        tracer = self._tracer
        if message is None:
            if tracer is not None:
                tracer.message("whisper-received", peer.hex, seq)
            await self._publish(Whisper(peer.uuid, peer.name, tuple(frames[2:])))
        elif isinstance(message, wire.Shout):
            if tracer is not None:
                tracer.message("shout-received", peer.hex, message.sequence, message.group)
            await self._publish(Shout(peer.uuid, peer.name, message.group, message.content))
        elif isinstance(message, wire.Join):
            peer.status = message.status
            if message.group not in peer.groups:
                peer.groups = peer.groups | {message.group}
                if tracer is not None:
                    tracer.record("join", peer=peer.hex, peer_name=peer.name, group=message.group)
                await self._publish(Join(peer.uuid, peer.name, message.group))
        elif isinstance(message, wire.Leave):
            peer.status = message.status
            if message.group in peer.groups:
                peer.groups = peer.groups - {message.group}
                if tracer is not None:
                    tracer.record("leave", peer=peer.hex, peer_name=peer.name, group=message.group)
                await self._publish(Leave(peer.uuid, peer.name, message.group))
        elif isinstance(message, wire.Ping):
            version = self._version
            self._queue_protocol(peer, lambda seq: wire.encode(wire.PingOk(seq, version=version)))
        elif isinstance(message, wire.Goodbye):
            await self._remove_peer(peer, "goodbye")
        # PING-OK, ELECT and LEADER only refresh liveness (done above).

    async def _decode(
        self, identity: bytes, peer: _Peer | None, frames: list[bytes]
    ) -> wire.Message | None:
        """Decode what ``whisper_sequence`` did not take; ``None`` when handled here.

        A HELLO is handled here; so are what cannot be decoded and commands
        of a newer protocol, whose sequence number still counts.
        """
        try:
            message = wire.decode(frames[1:], self._version)
        except wire.UnknownCommand as exc:
            # A command from a newer protocol: skip it, keep its sequence.
            if peer is not None and peer.ready:
                await self._check_sequence(peer, exc.sequence)
            return None
        except wire.VersionMismatch:
            return None  # peers on other protocol versions ignore each other
        except wire.DecodeError as exc:
            if peer is not None and peer.ready and frames[1][:2] == wire.SIGNATURE:
                await self._remove_peer(peer, "malformed", str(exc))
            return None
        if isinstance(message, wire.Hello):
            await self._on_hello(identity, peer, message)
            return None
        return message

    async def _check_sequence(self, peer: _Peer, seq: int) -> bool:
        """Accept the next sequence number and refresh liveness, or drop the peer."""
        expected = (peer.in_seq + 1) & 0xFFFF
        if seq != expected:
            await self._remove_peer(peer, "sequence", f"{seq}, expected {expected}")
            return False
        peer.in_seq = seq
        peer.presence.heard(self._batch_time)
        return True

    async def _on_hello(self, identity: bytes, peer: _Peer | None, hello: wire.Hello) -> None:
        if len(identity) != 17 or identity[0] != 1 or hello.sequence != wire.HELLO_SEQUENCE:
            return
        peer_uuid = UUID(bytes=identity[1:])
        if peer is not None and peer.ready:
            # A HELLO from a peer we know: it restarted its link to us.
            await self._remove_peer(peer, "hello")
            peer = None
        if peer is None:
            peer = self._add_peer(peer_uuid, hello.endpoint)
            if peer is None:
                return
        peer.in_seq = hello.sequence
        peer.presence.heard(trio.current_time())
        peer.name = hello.name
        peer.headers = hello.headers
        peer.status = hello.status
        peer.groups = frozenset(hello.groups) if hello.groups else _NO_GROUPS
        peer.ready = True
        self._announce_change()
        if (tracer := self._tracer) is not None:
            tracer.record("enter", peer=peer.hex, peer_name=peer.name)
            for group in hello.groups:
                tracer.record("join", peer=peer.hex, peer_name=peer.name, group=group)
        await self._publish(Enter(peer.uuid, peer.name, peer.headers, peer.endpoint))
        for group in hello.groups:
            await self._publish(Join(peer.uuid, peer.name, group))

    async def _presence_keeper(self) -> None:
        while True:
            now = trio.current_time()
            deadline = now + self._evasive
            for peer in list(self._peers.values()):
                if peer.pending:
                    self._flush_protocol(peer)
                link = peer.sock
                if type(link) is LocalLink:
                    # Read a local peer's liveness instead of pinging it.
                    if link.closed:
                        # Its node stopped without a GOODBYE to us: it had
                        # already dropped us.
                        await self._remove_peer(peer, "goodbye")
                        continue
                    deaf_since = link.peer_deaf_since
                    if deaf_since is None:
                        peer.presence.heard(now)  # it reads: alive, nothing due
                        continue
                    if deaf_since > peer.presence.last_heard:
                        # Its node stopped reading (a full subscriber): that
                        # is its last sign of life, and from there it goes
                        # evasive, silent and expires as a TCP peer would.
                        peer.presence.heard(deaf_since)
                while (action := peer.presence.poll(now)) is not None:
                    if action is PresenceAction.EXPIRED:
                        await self._remove_peer(peer, "expired")
                        break
                    self._queue_protocol(peer, self._ping)
                    if peer.ready and action is PresenceAction.EVASIVE:
                        if self._tracer is not None:
                            self._tracer.record("evasive", peer=peer.hex, peer_name=peer.name)
                        await self._publish(Evasive(peer.uuid, peer.name))
                    elif peer.ready and action is PresenceAction.SILENT:
                        if self._tracer is not None:
                            self._tracer.record("silent", peer=peer.hex, peer_name=peer.name)
                        await self._publish(Silent(peer.uuid, peer.name))
                else:
                    deadline = min(deadline, peer.presence.deadline())
            self._presence_wakeup = trio.Event()
            with trio.move_on_at(deadline):
                await self._presence_wakeup.wait()

    def _ping(self, seq: int) -> list[bytes]:
        return wire.encode(wire.Ping(seq, version=self._version))

    # ---------------------------------------------------------- lifecycle

    async def _start(self, nursery: trio.Nursery, hub: BeaconHub) -> None:
        inbox = context().socket(zmq.ROUTER)
        inbox.setsockopt(zmq.LINGER, 0)
        inbox.setsockopt(zmq.ROUTER_HANDOVER, 1)
        address = str(self._interface.address)
        port = _bind_ephemeral(inbox, address)
        self._endpoint = f"tcp://{address}:{port}"
        self._inbox = ZSocket(inbox)
        self._beacons = hub.socket
        nursery.start_soon(self._reader, self._inbox)
        if self._local_links:
            self._local = LocalInbox(self._endpoint, self._version)
            register(self._uuid, self._local)
            nursery.start_soon(self._reader, self._local)
        nursery.start_soon(hub.listen, self._on_beacon)
        nursery.start_soon(self._remove_leavers)
        nursery.start_soon(self._presence_keeper)
        nursery.start_soon(self._beacon_sender)
        if self._tracer is not None:
            self._tracer.record("node-start", endpoint=self._endpoint)
        await trio.lowlevel.checkpoint()

    async def _shutdown(self) -> None:
        """Say goodbye by beacon, close every socket, end every subscription."""
        if self._stopped:
            return
        self._stopped = True
        if self._local is not None:
            unregister(self._uuid)
            self._local.close()
            for peer in self._peers.values():
                if isinstance(peer.sock, LocalLink):
                    self._say_goodbye(peer, peer.sock)
        if self._beacons is not None:
            with trio.CancelScope(shield=True), trio.move_on_after(1):
                try:
                    await self._beacons.send(wire.Beacon(self._uuid, 0))
                except OSError as exc:
                    log.debug("could not send the leaving beacon: %s", exc)
        for peer in self._peers.values():
            peer.sock.close()
        self._peers.clear()
        self._by_identity.clear()
        if self._inbox is not None:
            self._inbox.close()
        self._fanout.close()
        if self._tracer is not None:
            self._tracer.record("node-stop")
            self._tracer.close()

    def _say_goodbye(self, peer: _Peer, link: LocalLink) -> None:
        """Queue what is pending for a local peer, then GOODBYE, over any limit."""
        # A sender still waiting for room gets PeerDisconnected when the link
        # closes right after, before its message took a sequence number.
        version = self._version

        def goodbye(seq: int) -> list[bytes]:
            return wire.encode(wire.Goodbye(seq, version=version))

        for build in [*(peer.pending or ()), goodbye]:
            seq = (peer.sent_seq + 1) & 0xFFFF
            link.force(build(seq))
            peer.sent_seq = seq


def _next_multiple(now: float, interval: float) -> float:
    """The first multiple of ``interval`` strictly after ``now``.

    Strictly: with a clock that stands still (``trio.testing.MockClock``)
    a deadline rounded down to ``now`` would make the beacon loop spin.
    """
    deadline = (math.floor(now / interval) + 1) * interval
    while deadline <= now:
        deadline += interval
    return deadline


def _bind_ephemeral(sock: zmq.Socket[Any], address: str) -> int:
    """Bind to a random free port in %xC000-%xFFFF, as 36/ZRE asks."""
    for _ in range(1000):
        port = random.randrange(*_EPHEMERAL_PORTS)
        try:
            sock.bind(f"tcp://{address}:{port}")
        except zmq.ZMQError as exc:
            if exc.errno == zmq.EADDRINUSE:
                continue
            raise
        return port
    raise OSError(f"no free TCP port in {_EPHEMERAL_PORTS} on {address}")


def _frames(frames: Iterable[bytes]) -> tuple[bytes, ...]:
    content = tuple(frames)
    for frame in content:
        if not isinstance(frame, bytes):
            raise TypeError(f"frames must be bytes, got {type(frame).__name__}")
    return content


def _check_group(group: str) -> None:
    if not isinstance(group, str):
        raise TypeError(f"a group name is a str, got {type(group).__name__}")
    if len(group.encode("utf-8")) > 255:
        raise ValueError(f"group name {group[:20]!r}... is over 255 UTF-8 bytes")


def _endpoint_host(endpoint: str) -> str | None:
    if not endpoint.startswith("tcp://"):
        return None
    host = endpoint[6:].rsplit(":", 1)[0]
    try:
        return str(ipaddress.IPv4Address(host))
    except ValueError:
        return None


def _check_config(
    name: str,
    *,
    headers: tuple[tuple[str, str], ...],
    beacon_port: int,
    timers: Mapping[str, float],
    protocol_version: int,
    send_hwm: int,
) -> None:
    if not isinstance(name, str):
        raise TypeError(f"name must be a str, got {type(name).__name__}")
    if protocol_version not in wire.MESSAGE_VERSIONS:
        raise ValueError(f"protocol_version must be 2 or 3, got {protocol_version!r}")
    if not 1 <= beacon_port <= 65535:
        raise ValueError(f"beacon_port must be in 1..65535, got {beacon_port!r}")
    for what, value in timers.items():
        if not (isinstance(value, int | float) and value > 0 and math.isfinite(value)):
            raise ValueError(f"{what} must be a positive number of seconds, got {value!r}")
    if send_hwm < 1:
        raise ValueError(f"send_hwm must be at least 1, got {send_hwm!r}")
    # The HELLO carries name and headers: let the codec judge them now.
    wire.encode(wire.Hello(1, "tcp://127.0.0.1:1", (), 0, name, headers))


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
    protocol_version: int = 2,
    send_hwm: int = 1000,
    beacons_refresh: bool = False,
    local_links: bool = True,
    trace_dir: str | os.PathLike[str] | None = None,
    trace_max_bytes: int = 64 * 1024 * 1024,
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
        evasive_timeout: silence after which a peer is pinged and reported
            :class:`~trizre.Evasive` (zyre: 5 s).
        expired_timeout: silence after which a peer is removed and reported
            :class:`~trizre.Exit` (zyre: 30 s).
        protocol_version: 2 speaks 36/ZRE as zyre and pyre do; 3 speaks
            43/ZRE as written.  Nodes of different versions ignore each other.
        send_hwm: messages queued per peer before sends wait (backpressure).
        beacons_refresh: count a peer's beacons as signs of life, as pyre
            does.  Off by default (zyre's rule): only TCP traffic proves
            the link works.  On, an idle mesh sends no PINGs at all.
        local_links: talk to peers in this same Trio run (other nodes
            opened here) over in-memory links instead of TCP: the same ZRE
            messages, sequence numbers and backpressure (``send_hwm``), but
            no sockets, and no PINGs, since such a peer's liveness is read
            directly (see ``docs/node.md``).  Both nodes must allow it.
            Off: every peer gets a TCP link, as in zyre and pyre.
        trace_dir: record a trace (``docs/traces.md``) of this node and of
            the patterns running on it into this directory; off by default.
        trace_max_bytes: rotate a trace file past this size.

    On leaving the block (normally, by an exception, or by cancellation)
    the node sends a port-0 beacon, closes its sockets with LINGER 0, ends
    every subscription with :class:`~trizre.Stop` and returns promptly.
    Bad input raises ``ValueError``/``TypeError`` (``InterfaceError``, a
    ``ValueError``, for an unknown interface) before anything starts.
    """
    node_headers = wire.Hello(1, "", (), 0, "", dict(headers or {})).headers
    timers = {
        "beacon_interval": beacon_interval,
        "evasive_timeout": evasive_timeout,
        "expired_timeout": expired_timeout,
    }
    _check_config(
        name or "x",
        headers=node_headers,
        beacon_port=beacon_port,
        timers=timers,
        protocol_version=protocol_version,
        send_hwm=send_hwm,
    )
    iface = select_interface(interface)
    node = Node(
        name or "",
        headers=node_headers,
        interface=iface,
        beacon_port=beacon_port,
        beacon_interval=beacon_interval,
        evasive_timeout=evasive_timeout,
        expired_timeout=expired_timeout,
        protocol_version=protocol_version,
        send_hwm=send_hwm,
        beacons_refresh=beacons_refresh,
        local_links=local_links,
    )
    if not name:
        node._name = node.uuid.hex[:6].upper()
    if trace_dir is not None:
        node._tracer = Tracer(trace_dir, node.uuid, node.name, max_bytes=trace_max_bytes)
    try:
        with unwrap_single_exception_group():
            async with open_beacon_hub(iface, beacon_port) as hub:
                try:
                    async with trio.open_nursery() as nursery:
                        await node._start(nursery, hub)
                        try:
                            yield node
                        finally:
                            nursery.cancel_scope.cancel()
                finally:
                    await node._shutdown()
    finally:
        if node._tracer is not None:
            node._tracer.close()  # also when the beacon socket could not open
