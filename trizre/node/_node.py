"""The ZRE node's public API: :class:`Node`, mostly docstrings and delegation.

What a node does lives elsewhere, each in one place: who is a peer, our
groups and elections in :class:`~trizre.sansio.node_core.NodeCore`; the
conversation with one peer in :mod:`trizre.sansio._peer`; the tasks that
feed them and carry out their actions in :mod:`trizre.node._shell`; starting
and stopping in :mod:`trizre.node._open` (:func:`open_node`); the options in
:mod:`trizre.node._config`.  ``docs/architecture.md`` has the map.

Sending never drops: a message takes its sequence number only once the
link took it (:meth:`PeerProtocol.sent`).  Data (WHISPER, SHOUT) waits for
room; protocol messages wait in the peer's queue and go before the next
data message.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Final, final
from uuid import UUID, uuid4

import attrs
import trio

from .. import wire
from .._concurrency import cancel_shielded_checkpoint, checkpoint, checkpoint_if_cancelled
from .._errors import MessageTooLarge, PeerDisconnected, UnknownPeer
from ..sansio._presence import Liveness
from ..sansio.node_core import endpoint_host as _endpoint_host
from ..trace import _contract as kinds
from ..trace._writer import Tracer
from ..transport._discovery import BeaconHub
from ..transport._interfaces import Interface, Interface6
from ..transport._session import Build, PeerSession, send_each
from ._config import NodeConfig
from ._discovery_tasks import next_multiple as _next_multiple
from ._fanout import EventStream, Overflow
from ._memory import release_freed_memory
from ._shell import NodeShell

__all__ = ["Node", "NodeStatistics"]

# Kept importable here for the tests that read them.
__all__ += ["_endpoint_host", "_next_multiple"]

_YIELD_EVERY: Final = 32
_SHOUT_SHARE: Final = 8  # members per send a SHOUT counts towards _YIELD_EVERY
_WHISPER_HEAD: Final = len(wire.encode_whisper(0, (), 2)[0])  # signature, command, version, seq
_SHOUT_HEAD: Final = _WHISPER_HEAD + 1  # and the group's length octet
_GROUP_TAILS: Final = 256  # groups whose encoded name a node keeps for its SHOUTs


_PRESENCE: Final = {
    Liveness.ALIVE: "alive",
    Liveness.PINGED: "alive",  # pinged, its answer not due yet: still responsive
    Liveness.EVASIVE: "evasive",
    Liveness.SILENT: "silent",
}


@final
@attrs.frozen(kw_only=True)
class NodeStatistics:
    """What a node counted since it opened: :meth:`Node.statistics`.

    Every count is cumulative since ``open_node`` (it never goes down);
    ``peers`` and ``pending_peers`` are the state now.

    * ``messages_in`` / ``bytes_in``: ZRE messages the node read from its
      inboxes (TCP and in-process), any command and any sender (a HELLO
      from a stranger, a message that ended its peer, all count), and
      their octets as the wire carries ZRE: every frame after the routing
      id (ZMTP framing and CURVE's encryption not included);
    * ``messages_out`` / ``bytes_out``: ZRE messages handed to peers'
      links, protocol messages (HELLO, JOIN, PING...) and data (each
      member of a SHOUT counts once), measured the same way.  The last
      words of a stopping node (its GOODBYEs) are not counted;
    * ``peers_dropped``: peers removed from the node's table, by reason:
      every reason an ``exit`` trace line gives (``beacon``, ``expired``,
      ``goodbye``, ``sequence``, ``malformed``, ``hello``, ``handshake``,
      ``key``, ``limits``, ``link``), the orderly (``goodbye``,
      ``beacon``: it left) as the others; peers pending a HELLO count too;
    * ``beacons_ignored``: beacons the node's rules turned away, by reason
      (``version``, ``downgrade``, ``curve``, ``forged_leave``,
      ``throttled``, ``outside``, ``not_allowed``; ``docs/operations.md``
      says what each means), and ``undecodable``: datagrams on the beacon
      port that are not beacons (counted by the beacon socket, which the
      nodes of one Trio run on an interface and port share: each reports
      the socket's count);
    * ``peers``: entered peers by presence (``alive``, ``evasive``,
      ``silent``); ``pending_peers``: linked peers whose HELLO has not come.
    """

    messages_in: int
    bytes_in: int
    messages_out: int
    bytes_out: int
    peers_dropped: Mapping[str, int]
    beacons_ignored: Mapping[str, int]
    peers: Mapping[str, int]
    pending_peers: int


@final
class Node(NodeShell):
    """A running ZRE node.  Create it with :func:`open_node`, never directly.

    Query methods are synchronous and see the node's current state; sending
    methods are async, wait for room (backpressure), and are safe to call
    from any number of tasks.  Once the node's block has ended every
    method raises ``trio.ClosedResourceError`` at once, except
    :meth:`events` (its subscription yields only :class:`~trizre.Stop`)
    and the identity properties.
    """

    def __init__(self, config: NodeConfig, interface: Interface | Interface6) -> None:
        super().__init__(uuid4(), config, interface)
        self._unyielded = 0  # sends since the last schedule point (see _yield_due)
        # Group names checked and encoded for SHOUTs (wire.group_string), at
        # most _GROUP_TAILS of them: a loop of SHOUTs to one group checks and
        # encodes its name once, not three times a SHOUT.
        self._group_tails: dict[str, bytes] = {}

    def _trim_memory(self) -> None:
        release_freed_memory()  # looked up here: tests count the calls

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

    def statistics(self) -> NodeStatistics:
        """What this node counted since it opened (see :class:`NodeStatistics`).

        Cheap (counters the node keeps as it goes, and one look at each
        peer for ``peers``), synchronous and never a checkpoint, so a
        Prometheus collector may call it on every scrape.  After the node
        stopped it still answers, with the final counts and no peers.
        """
        messages_in = bytes_in = 0
        for inbox in (self._inbox, self._local):
            if inbox is not None:
                messages_in += inbox.received_messages
                bytes_in += inbox.received_bytes
        core = self._core
        peers = dict.fromkeys(("alive", "evasive", "silent"), 0)
        if not self._stopped:
            for session in core.entered():
                peers[_PRESENCE[session.protocol.presence.liveness]] += 1
        return NodeStatistics(
            messages_in=messages_in,
            bytes_in=bytes_in,
            messages_out=self._sent.messages,
            bytes_out=self._sent.octets,
            peers_dropped={str(reason): n for reason, n in core.dropped.items()},
            beacons_ignored={**core.beacons_ignored, "undecodable": self._undecodable()},
            peers=peers,
            pending_peers=len(core.unready) if not self._stopped else 0,
        )

    def _undecodable(self) -> int:
        """Datagrams our beacon socket could not decode (shared by the run's nodes on it)."""
        discovery = self._discovery
        if isinstance(discovery, BeaconHub) and discovery.socket is not None:
            return discovery.socket.undecodable
        return 0  # in memory, or gossip: no datagrams

    def _check_open(self) -> None:
        if self._stopped:
            raise trio.ClosedResourceError(f"node {self._name!r} has stopped")

    def _entered(self) -> Iterator[PeerSession]:
        self._check_open()
        return self._core.entered()

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
        return [p.uuid for p in self._core.peers.values() if not p.protocol.ready]

    def peers_by_group(self, group: str) -> list[UUID]:
        """The present peers that are in ``group`` (case-sensitive)."""
        self._check_open()
        # The core's table, not core.members(): a services client asks on
        # every request, and that is two Python calls more.
        found = self._core.groups.get(group)
        return [] if found is None else list(found.members)

    def own_groups(self) -> list[str]:
        """The groups this node has joined, sorted."""
        self._check_open()
        return self._core.own_groups()

    def peer_groups(self) -> list[str]:
        """Every group that at least one present peer is in, sorted."""
        self._check_open()
        return sorted(name for name, group in self._core.groups.items() if group.members)

    def _present(self, peer: UUID) -> PeerSession:
        found = self._core.peers.get(peer)
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
        # The presence's own property: protocol.responsive would be one call more.
        return self._present(peer).protocol.presence.responsive

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
                found = self._core.peers.get(peer)
                self._check_open()
                if found is not None and found.protocol.ready:
                    await checkpoint()
                    return peer
            elif (match := self.peer_by_name(peer)) is not None:
                await checkpoint()
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
        content = frames
        size = self._measure(_WHISPER_HEAD, content)
        version = self._version

        def build(seq: int) -> list[bytes]:
            return wire.encode_whisper(seq, content, version)

        # _send, inline: one coroutine less on a flood's per-message path.
        await checkpoint_if_cancelled()
        sent = self._sent
        if (seq := target.send_nowait(build)) is None:
            seq = await target.send(build)
            sent.messages += 1
            sent.octets += size
        else:
            sent.messages += 1
            sent.octets += size
            self._unyielded += 1  # _yield_due, inline
            if self._unyielded >= _YIELD_EVERY:
                self._unyielded = 0
                await cancel_shielded_checkpoint()
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
        content = frames
        size = self._measure(_WHISPER_HEAD, content)
        version = self._version
        seq = target.send_nowait(lambda seq: wire.encode_whisper(seq, content, version))
        if seq is None:
            return False
        sent = self._sent
        sent.messages += 1
        sent.octets += size
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
        self._flush(session)
        self._pinging += 1
        try:
            while protocol.pongs == answered:
                self._check_open()
                if self._core.peers.get(peer) is not session:
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
        skipped: it is no longer a member.  Cancellation: checked on every
        call; members with room and those waited for before the
        cancellation got the message, the rest did not.  The schedule
        point of a SHOUT that did not have to wait comes once every 32
        sends, as :meth:`whisper`'s does, a SHOUT counting one send per 8
        members it reached (at least one): a loop of SHOUTs to a small
        group yields every 32 of them, to a large one more often.  Bad
        input: an empty group name or one over 255 UTF-8 bytes raises
        ``ValueError``, frames that are not bytes ``TypeError``, a message
        over ``max_message_size`` (as :meth:`whisper`)
        :class:`~trizre.MessageTooLarge`, before it goes to any member.
        """
        tails = self._group_tails
        tail = tails.get(group) if type(group) is str else None
        if tail is None:
            _check_group(group)  # bad input raises here, as it always did
            tail = wire.group_string(group)
            if len(tails) >= _GROUP_TAILS:
                tails.clear()  # a sender of SHOUTs to ever new groups: bounded
            tails[group] = tail
        content = frames
        size = self._measure(_SHOUT_HEAD - 1 + len(tail), content)
        self._check_open()
        await checkpoint_if_cancelled()
        # Frame 0 differs per member (its sequence number), the content
        # frames do not: the group is encoded once, the content shared.
        build = wire.shout_builder(tail, content, self._version)
        tracer = self._tracer
        sent = self._sent
        full: list[PeerSession] = []
        # Every member with room, in one pass without a schedule point: the
        # members' sessions straight from the group (no UUID hashed a member).
        numbered: list[tuple[PeerSession, int]] | None = None if tracer is None else []
        try:
            found = self._core.groups.get(group)
            members = () if found is None else found.members.values()
            delivered = send_each(members, build, size, sent, full, numbered=numbered)
        finally:
            if numbered:  # traced as sent, also those before an error
                assert tracer is not None
                for peer, seq in numbered:
                    tracer.message(kinds.SHOUT_SENT, peer.hex, seq, group)
        for peer in full:
            try:
                seq = await self._send(peer, build)
            except PeerDisconnected:
                continue
            sent.messages += 1
            sent.octets += size
            if tracer is not None:
                tracer.message(kinds.SHOUT_SENT, peer.hex, seq, group)
        # Not a schedule point per SHOUT: a loop that yielded on each woke
        # every receiver per message (a batch of one each time) and gave
        # every TCP link one message a turn, which libzmq cannot batch.  A
        # large group counts more: a turn stays a few hundred deliveries.
        if not full and self._yield_due(max(1, delivered // _SHOUT_SHARE)):
            await cancel_shielded_checkpoint()

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
        await checkpoint()
        now = trio.current_time()
        core = self._core
        await self._apply(core.join(group, now) if joining else core.leave(group, now))

    def _measure(self, head: int, content: tuple[bytes, ...]) -> int:
        """A data message's octets on the wire; its frames checked, in one pass.

        ``content``: the caller's ``*frames`` (a tuple already); ``head``:
        the size of its frame 0.  Raises ``TypeError`` for a frame that is
        not ``bytes`` and :class:`~trizre.MessageTooLarge` over
        ``max_message_size`` (the receiver's limit is not known; peers are
        meant to share the setting, docs/security.md).
        """
        size = head
        for frame in content:
            if not isinstance(frame, bytes):
                raise TypeError(f"frames must be bytes, got {type(frame).__name__}")
            size += len(frame)
        if size > self._limits.message_size:
            raise MessageTooLarge(size, self._limits.message_size)
        return size  # counted in statistics() once sent

    async def _send(self, peer: PeerSession, build: Build) -> int:
        """Send one data message in sequence, waiting for room; its sequence number."""
        await checkpoint_if_cancelled()
        if (seq := peer.send_nowait(build)) is None:
            return await peer.send(build)
        if self._yield_due():
            await cancel_shielded_checkpoint()
        return seq

    def _yield_due(self, sends: int = 1) -> bool:
        """Count ``sends`` that did not wait; True once every _YIELD_EVERY.

        Cancellation is honoured on every send; the schedule point comes
        every _YIELD_EVERY sends that did not wait, which is a third of a
        flooding sender's cost otherwise.
        """
        self._unyielded += sends
        if self._unyielded >= _YIELD_EVERY:
            self._unyielded = 0
            return True
        return False

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
        await checkpoint()
        await self._apply(self._core.contest(group, trio.current_time()))

    def leader(self, group: str) -> UUID | None:
        """The leader last elected in ``group`` (our own UUID if we won), or ``None``.

        ``None`` before any election ended here, after the leader left
        (until the next one ends), and after we left the group.  It stays
        the last leader while a new election runs.  Bad input as
        :meth:`join`; after the node stopped, ``trio.ClosedResourceError``.
        """
        _check_group(group)
        self._check_open()
        return self._core.leader(group)


def _check_group(group: str) -> None:
    if not isinstance(group, str):
        raise TypeError(f"a group name is a str, got {type(group).__name__}")
    if not group:
        raise ValueError("a group name cannot be empty")
    if len(group.encode("utf-8")) > 255:
        raise ValueError(f"group name {group[:20]!r}... is over 255 UTF-8 bytes")
