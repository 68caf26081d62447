"""The node's Trio shell: the tasks, the one interpreter of the core's actions, the lifecycle.

The rules live in :class:`~trizre.sansio.node_core.NodeCore` (who is a
peer, for how long, what our groups and elections ask); the conversation
with one peer in :class:`~trizre.sansio._peer.PeerProtocol`.  The shell
feeds them the time and what arrives, and carries out what they return
(:meth:`NodeShell._apply`):

* beacons out: one at start, then every ``beacon_interval``
  (:mod:`~trizre.node._discovery_tasks`, as the gossip service);
* beacons in: a :class:`~trizre.transport._discovery.Discovery` calls
  ``_on_beacon`` for each, which asks the core; a :class:`Connect` becomes a
  link (in memory, or TCP) and a :class:`~trizre.transport._session.PeerSession`;
* inboxes: the ROUTER, and the in-process inbox for peers of this Trio run;
  each message goes to its peer's protocol; a lone WHISPER is published at
  once (the fast path), anything else goes through the core;
* the clock: sleeps until the earliest deadline (the core's, or a peer's
  presence), then polls the core and lets each peer's protocol ping, report
  or expire it.

The public API is :class:`~trizre.node._node.Node`, a subclass.
"""

from __future__ import annotations

import logging
import math
from collections import deque
from collections.abc import Sequence
from typing import Final, TypeAlias
from uuid import UUID

import trio
import zmq
from trio_util import RepeatedEvent

from .. import wire
from .._concurrency import TaskSet, checkpoint
from ..sansio._election import Elections
from ..sansio._events import Enter, Evasive, Event, Join, Leave, Shout, Silent, Whisper
from ..sansio._gossip import Deliver, Forget
from ..sansio._peer import PeerEvent, Published, node_id
from ..sansio._presence import Deafness
from ..sansio.node_core import (
    Action,
    Connect,
    CoreRules,
    Drop,
    Flush,
    NodeCore,
    Publish,
    Trim,
    WakeAt,
)
from ..trace import _contract as kinds
from ..trace._contract import ExitReason
from ..trace._writer import Tracer
from ..transport._curve import curve_key, z85
from ..transport._discovery import Discovery
from ..transport._gossip_service import GossipService
from ..transport._inbox_watch import InboxWatch
from ..transport._interfaces import Interface, Interface6
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
from ..transport._session import PeerSession, Sent
from ..transport._zsock import ZSocket, untrack_events
from ._config import NodeConfig
from ._discovery_tasks import run_gossip, send_beacons
from ._fanout import Fanout
from ._lead import InboxLead

__all__ = ["NodeShell"]

log = logging.getLogger("trizre.node")

_BATCH: Final = 256
# The receive path's events: none of their fields can lead back to them (untrack_events).
_DATA_EVENTS: Final[tuple[type, ...]] = (Whisper, Shout)
# A message a leading subscriber left the reader: as read, or read with the core's verdict.
_Pending: TypeAlias = "list[bytes] | tuple[PeerSession, list[bytes], list[Action[PeerSession]]]"
_GOODBYE_LINGER_MS: Final = 500  # gossip mode: how long a stopped node's GOODBYE may take
_TRACE_KINDS: Final[dict[type, str]] = {
    Enter: kinds.ENTER,
    Join: kinds.JOIN,
    Leave: kinds.LEAVE,
    Evasive: kinds.EVASIVE,
    Silent: kinds.SILENT,
}


def _tcp_deadline(peer: PeerSession) -> float | None:
    """A TCP peer's real next deadline, for ``Due.settle``; ``None`` for an
    in-process one, whose entry may be a look asked for another reason."""
    return None if peer.link.in_process else peer.protocol.deadline()


class NodeShell:
    """The node's tasks and state outside the rules; :class:`~trizre.Node` adds the API."""

    def __init__(self, uuid: UUID, config: NodeConfig, interface: Interface | Interface6) -> None:
        self._uuid = uuid
        self._config = config
        # zyre's default name: the first 6 hex digits of the UUID.
        self._name = config.name or uuid.hex[:6].upper()
        self._interface = interface
        self._version = config.protocol_version
        self._identity = b"\x01" + uuid.bytes
        self._local: LocalInbox | None = None
        # When our readers waited for a full subscriber (see _publish).
        self._deafness = Deafness()
        self._readers = TaskSet()  # the inbox readers' tasks
        self._planned_deaf = False  # the clock's sleep was planned while deaf
        # Peers whose queued messages found their link full: the clock's
        # every pass tries them again.
        self._stuck: dict[UUID, PeerSession] = {}
        # In-process peers whose node read at their last look have no entry
        # in NodeCore.due: the clock's sweep (_sweep) looks at them all at
        # once.  Sweeps come every min(evasive, expired), before anything of
        # a peer heard at the last can be due, none while no such peer is
        # left; on multiples of that period on Trio's clock, so that the
        # nodes of a process sweep in one wake-up of the run (100 idle
        # nodes sweeping at phases of their own took 2.2 % of a core, not
        # 1.1-1.4 %; all at once, they spend ~10 ms every 5 s).
        self._sweep_at = math.inf
        self._sweep_period = min(config.evasive_timeout, config.expired_timeout)
        # How far ahead a pass moves early entries (Due.settle): half the
        # period, so that an entry moved to its real time (about a period
        # on, from its last beacon) lands past it and is asked once a pass.
        self._settle_horizon = self._sweep_period / 2
        self._local_link_closed = self._look_soon  # one bound method for all local links
        self._curve = config.curve
        # Each entered TCP peer's connection into our inbox, if
        # config.watch_links (issues 25, 28): the descriptors its HELLO
        # came on, noted by the inbox; the watch is made with the first
        # such peer, in the node's nursery.
        self._sources: dict[bytes, int] | None = None
        self._inbox_watch: InboxWatch[PeerSession] | None = None
        self._nursery: trio.Nursery | None = None
        allowed = config.curve_allow
        self._core: NodeCore[PeerSession] = NodeCore(
            uuid,
            CoreRules(
                name=self._name,
                version=self._version,
                headers=config.hello_headers,
                gossiping=config.discovery == "gossip",
                curve=None if config.curve is None else config.curve.public,
                curve_allow=allowed if isinstance(allowed, frozenset) else None,
                beacons_refresh=config.beacons_refresh,
                evasive_timeout=config.evasive_timeout,
                expired_timeout=config.expired_timeout,
                handshake_timeout=config.handshake_timeout,
                election_timeout=config.election_timeout,
                max_pending_peers=config.max_pending_peers,
                new_peers_per_source=config.new_peers_per_source,
                limits=config.peer_limits,
            ),
            contains=interface.contains,
            scope=interface.name if isinstance(interface, Interface6) else None,
            key_text=z85,
            key_bytes=curve_key,
            deafness=self._deafness,
        )
        self._fanout = Fanout()
        # Messages handed to peers' links (statistics): shared by the sessions.
        self._sent = Sent()
        self._inbox: ZSocket | None = None
        self._discovery: Discovery | None = None
        self._endpoint = ""
        self._stopped = False
        self._presence_wakeup = trio.Event()
        # The clock's sleep between passes (None during a pass).
        self._presence_sleep: trio.CancelScope | None = None
        self._peers_changed = RepeatedEvent()
        self._pongs = RepeatedEvent()  # set on traffic while ping() waits
        self._pinging = 0
        self._tracer: Tracer | None = None
        self._gossip: GossipService | None = None
        # The ZAP handler tells this node's inbox from others' by it.
        self._zap_id = b"trizre-zap-" + uuid.bytes
        self._limits = config.peer_limits
        # The TCP inbox's lead, and what a subscriber that led left the reader.
        self._lead: InboxLead | None = None
        self._backlog: deque[_Pending] = deque()

    # The core's tables, by the names the node's tests and tools know.

    @property
    def _peers(self) -> dict[UUID, PeerSession]:
        return self._core.peers

    @property
    def _missed_handshakes(self) -> dict[UUID, int]:
        return self._core.missed_handshakes

    @property
    def _elections(self) -> Elections:
        return self._core.elections

    def _handshake_for(self, peer_uuid: UUID) -> float:
        return self._core.handshake_for(peer_uuid)

    def _trim_memory(self) -> None:
        """Hand freed memory back to the OS (the node's module says how: tests replace it)."""
        raise NotImplementedError

    def _lead_of(self) -> InboxLead:
        assert self._lead is not None  # only a subscriber that leads asks
        return self._lead

    def _log_rarely(self, topic: str, level: int, what: str) -> None:
        self._core.log_rarely(topic, level, what, trio.current_time())

    # --------------------------------------------------------- interpreter

    def _do(self, action: Action[PeerSession]) -> None:
        """Carry out one action that needs no waiting (all but Publish, Connect)."""
        if type(action) is Flush:
            self._flush(action.peer)
        elif type(action) is WakeAt:
            self._presence_due(action.at)
        elif type(action) is Drop:
            self._dropped(action)
        elif type(action) is Trim:
            self._trim_memory()
        else:
            raise AssertionError(f"not an action to do at once: {action!r}")

    async def _apply(self, actions: Sequence[Action[PeerSession]]) -> None:
        """Carry out the core's actions in order; publishing may wait for subscribers."""
        for action in actions:
            if type(action) is Publish:
                if action.peer is not None and self._tracer is not None:
                    self._trace(action.peer, action.event)  # type: ignore[arg-type]
                await self._publish(action.event)
            elif type(action) is Connect:
                self._connect(action, trio.current_time())
            else:
                self._do(action)

    def _apply_nowait(self, actions: Sequence[Action[PeerSession]], now: float) -> None:
        """Carry out the actions of a callback that cannot wait (beacons, gossip)."""
        for action in actions:
            if type(action) is Connect:
                self._connect(action, now)
            else:
                self._do(action)  # never Publish: only entered peers make events

    def _connect(self, connect: Connect, now: float) -> PeerSession | None:
        """Make the link a :class:`Connect` asks for, if the core admits it; the new peer."""
        config = self._config
        inbox = (
            lookup(connect.uuid, connect.endpoint, self._version)
            if config.local_links and self._curve is None
            else None
        )
        if not self._core.admit(connect, in_process=inbox is not None, now=now):
            return None
        link: Link
        if inbox is not None:
            link = LocalLink(inbox, self._identity, config.send_hwm, peer=connect.uuid)
            # The clock removes a peer whose node closed our link: at once,
            # not at its next pass (issue 25: nothing sent after is taken
            # silently).
            link.on_close = self._local_link_closed
        else:
            curve: CurveClient | None = None
            if (cert := self._curve) is not None:
                assert cert.secret is not None and connect.key is not None
                curve = CurveClient(cert.public, cert.secret, connect.key)
            try:
                link = TcpLink.connect(
                    connect.endpoint,
                    self._identity,
                    config.send_hwm,
                    curve=curve,
                    linger_ms=_GOODBYE_LINGER_MS if config.discovery == "gossip" else 0,
                    ipv6=config.ipv6,
                )
            except zmq.ZMQError as exc:
                # Out of sockets or descriptors: this peer waits for its next
                # beacon; the node itself carries on.
                self._log_rarely(
                    "no-socket",
                    logging.WARNING,
                    f"cannot open a socket for peer {connect.uuid} at {connect.endpoint}: {exc}",
                )
                return None
        peer = PeerSession(self._core.protocol_for(connect, now), link, self._sent)
        # An in-process peer's first look on the sweep's grid, if no later
        # than its first deadline: a mesh's in-process peers, linked over a
        # second, are then looked at in a pass a node, not one each.
        look_by = math.inf if inbox is None else self._next_sweep(now)
        for action in self._core.add(peer, now, look_by):
            self._do(action)
        if self._deafness.deaf:
            self._planned_deaf = True  # its time took the whole credit
        return peer

    def _dropped(self, drop: Drop[PeerSession]) -> None:
        """The core dropped a peer: close our link to it and wake whoever waits on peers."""
        peer = drop.peer
        if drop.reason is ExitReason.LIMITS and self._local is not None:
            # As libzmq drops an oversize frame's connection: its node
            # learns at once that we took nothing more from it.
            self._local.drop(peer.protocol.route)
        peer.link.close()  # wakes its waiting senders with PeerDisconnected
        if self._inbox_watch is not None:
            self._inbox_watch.forget(peer)
        if self._gossip is not None:
            # As zyre: forget its tuple, so that only news of it links again.
            self._gossip.unpublish(node_id(peer.uuid))
        if peer.protocol.ready and (tracer := self._tracer) is not None:
            tracer.record(
                kinds.EXIT, peer=peer.hex, peer_name=peer.protocol.name, reason=drop.reason
            )
        self._peers_changed.set()
        if self._pinging:
            self._pongs.set()

    async def _remove_peer(self, peer: PeerSession, reason: ExitReason, detail: str = "") -> None:
        """Forget a peer, close our link to it, and report Exit if it had entered."""
        await self._apply(self._core.remove(peer, reason, trio.current_time(), detail))

    def _watch_source(self, peer: PeerSession, sources: dict[bytes, int]) -> None:
        """Watch the connection an entered TCP peer's HELLO came on (issues 25, 28).

        The node's watch (one monitor on the inbox) comes with the first.
        """
        fd = sources.pop(peer.protocol.route, None)
        if fd is None:
            return  # forgotten in a flood of HELLOs (SOURCES_MAX): presence ends it
        try:
            if (watch := self._inbox_watch) is None:
                assert self._nursery is not None and self._inbox is not None  # it entered
                watch = self._inbox_watch = InboxWatch(self._inbox)
                self._nursery.start_soon(self._end_broken_links, watch)
            watch.watch(fd, peer)
        except zmq.ZMQError as exc:  # out of descriptors: presence still ends it
            self._log_rarely("no-monitor", logging.WARNING, f"cannot watch the inbox: {exc}")

    async def _end_broken_links(self, watch: InboxWatch[PeerSession]) -> None:
        """End each entered peer whose connection into our inbox closed (issue 25).

        The peer died, stopped, ended us (and closed its link), or our
        inbox dropped it; libzmq would let it reconnect and go on after a
        gap, and our link to it may be as dead.  Ending it reports Exit,
        and later sends raise, until it enters again (its next beacon, or
        its HELLO, links anew).  A connection is watched from its peer's
        Enter: a stranger's costs nothing.
        """
        peers = self._core.peers
        while True:
            try:
                broken = await watch.broken()
            except trio.ClosedResourceError:
                return  # the node stopped
            for peer in broken:
                # Not logged beyond the core's debug line: a killed process
                # breaks every link to it at once, and the Exit (trace
                # reason link) says it.
                if peers.get(peer.uuid) is peer and peer.protocol.ready:
                    await self._remove_peer(peer, ExitReason.LINK, "its connection to us closed")

    # ------------------------------------------------------------- inbound

    async def _reader(self, inbox: Inbox) -> None:
        with self._readers.member():  # its waits make us deaf
            while True:
                await self._handle(await inbox.receive_batch(_BATCH))

    async def _lead_reader(self, inbox: ZSocket, lead: InboxLead) -> None:
        """The TCP inbox's reader, which lends the inbox to a lone subscriber (see _lead.py)."""
        backlog = self._backlog
        with self._readers.member():
            try:
                await self._lead_read(inbox, lead, backlog)
            finally:
                lead.reader_gone()  # its nursery closes: nothing may hand it more

    async def _lead_read(self, inbox: ZSocket, lead: InboxLead, backlog: deque[_Pending]) -> None:
        while True:
            if backlog:
                # Where a subscriber stopped: before anything read later.
                while backlog:
                    item = backlog.popleft()
                    if isinstance(item, tuple):
                        await self._carry_out(*item)
                    else:
                        await self._handle([item])
                lead.reader_done()
            elif await lead.reader_turn():
                await self._handle(await inbox.receive_batch(_BATCH))
                lead.reader_done()

    async def _handle(self, batch: list[list[bytes]]) -> None:
        """The reader's handling of a batch, in order, waiting where it must."""
        by_route = self._core.by_route
        run = self._run
        now = trio.current_time()  # one clock read per batch
        i, end = 0, len(batch)
        while i < end:
            frames = batch[i]
            peer = by_route.get(frames[0])
            if peer is None:
                await self._greet(frames, now)
            elif (after := run(peer, batch, i, now)) > i:
                i = after
                continue
            else:
                await self._after_receive(peer, frames, peer.protocol.receive(frames, now))
            i += 1

    def _run(self, peer: PeerSession, batch: list[list[bytes]], i: int, now: float) -> int:
        """The run of ``peer``'s data messages from ``batch[i]``, published; where it stopped.

        Nearly all traffic is WHISPERs and SHOUTs in sequence, in runs from
        one peer: they are decided by the protocol and published here, a
        run at a time, with no coroutine and no action list (the core has
        nothing to add to them, and they queue no reply), as many as every
        subscriber has room for.  ``i`` returned: that message needs more
        (anything else, or a subscriber is full); give it to the core.
        """
        fanout = self._fanout
        room = fanout.room()
        if not room:
            return i
        protocol = peer.protocol
        seq = protocol.in_seq  # the events' sequence numbers follow it, for the trace
        events, after = protocol.receive_run(batch, i, now, room)
        if events:
            # Out of the cyclic GC's sight while they wait in the queues:
            # a flood's worth of them made about a tenth of the reader's
            # time in collections (issue 28).
            untrack_events(events, _DATA_EVENTS)
            fanout.publish_run(events)
            if self._tracer is not None:
                for event in events:
                    seq = (seq + 1) & 0xFFFF
                    self._trace(peer, event, seq)
        return after

    def _take(self, batch: list[list[bytes]], now: float) -> None:
        """A leading subscriber's handling of a batch it read: what needs no waiting.

        As :meth:`_handle`'s fast path; at the first message that needs
        more, the core's verdict on it is taken now (as the reader takes it
        right after the protocol's), and it, its verdict and the rest of
        the batch go to the reader with the lead.
        """
        by_route = self._core.by_route
        run = self._run
        backlog = self._backlog
        i, end = 0, len(batch)
        while i < end:
            frames = batch[i]
            peer = by_route.get(frames[0])
            if peer is None:
                backlog.extend(batch[i:])  # a stranger: the reader greets it
            elif (after := run(peer, batch, i, now)) > i:
                i = after
                continue
            else:
                events = peer.protocol.receive(frames, now)
                backlog.append((peer, frames, self._verdict(peer, events, now)))
                backlog.extend(batch[i + 1 :])
            self._lead_of().hand_over()
            return

    async def _greet(self, frames: Sequence[bytes], now: float) -> None:
        """A message from a sender we do not know: the core says whether its HELLO makes a peer."""
        connect = self._core.on_stranger(frames, now)
        peer = None if connect is None else self._connect(connect, now)
        if peer is None:
            if self._sources is not None:
                self._sources.pop(frames[0], None)  # what the inbox noted of its HELLO
            return
        await self._after_receive(peer, frames, peer.protocol.receive(frames, now))

    async def _after_receive(
        self, peer: PeerSession, frames: Sequence[bytes], events: Sequence[PeerEvent]
    ) -> None:
        await self._carry_out(peer, frames, self._verdict(peer, events, trio.current_time()))

    def _verdict(
        self, peer: PeerSession, events: Sequence[PeerEvent], now: float
    ) -> list[Action[PeerSession]]:
        """The core's verdict on what a message gave: taken right after the protocol's."""
        untrack_events(events, _DATA_EVENTS)  # as _run does: these wait for a full subscriber
        if events and type(events[0]) is Enter:
            self._peers_changed.set()  # for wait_for_peer
            if (sources := self._sources) is not None and not peer.link.in_process:
                self._watch_source(peer, sources)
        return self._core.received(peer, events, now)

    async def _carry_out(
        self, peer: PeerSession, frames: Sequence[bytes], actions: list[Action[PeerSession]]
    ) -> None:
        await self._apply(actions)
        if self._pinging:
            self._pongs.set()
        if peer.protocol.ended is ExitReason.HELLO:
            await self._greet(frames, trio.current_time())  # it starts anew

    # -------------------------------------------------------------- events

    def _trace(self, peer: PeerSession, event: Published, seq: int | None = None) -> None:
        """Trace a published event; a WHISPER's or SHOUT's ``seq`` defaults to the last received."""
        tracer = self._tracer
        assert tracer is not None
        if seq is None:
            seq = peer.protocol.in_seq
        if isinstance(event, Whisper):
            tracer.message(kinds.WHISPER_RECEIVED, peer.hex, seq)
        elif isinstance(event, Shout):
            tracer.message(kinds.SHOUT_RECEIVED, peer.hex, seq, event.group)
        elif isinstance(event, Join | Leave):
            kind = _TRACE_KINDS[type(event)]
            tracer.record(kind, peer=peer.hex, peer_name=event.name, group=event.group)
        else:
            tracer.record(_TRACE_KINDS[type(event)], peer=peer.hex, peer_name=event.name)

    async def _publish(self, event: Event) -> None:
        # Not a checkpoint when every subscriber has room (the common case).
        if self._fanout.publish_nowait(event):
            return
        if not self._readers.has_current():
            # The clock, an election, a caller: the readers go on reading
            # meanwhile, so nobody's silence is ours.
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

    # --------------------------------------------------------------- clock

    def _presence_due(self, at: float) -> None:
        """Have the clock pass by ``at`` (it looks at the peers due then: ``NodeCore.due``).

        While it sleeps, its wake-up time moves earlier, if need be, rather
        than waking it at once: a mesh that relinks all at once (make scale:
        hundreds of new peers after a kill -9) then makes one pass, not one
        a peer.  During a pass, it passes again after.
        """
        sleep = self._presence_sleep
        if sleep is None:
            self._presence_wakeup.set()
        elif at < sleep.deadline:
            sleep.deadline = at

    def _look_soon(self, peer_uuid: UUID | None) -> None:
        """Have the clock look at this peer now (its in-process link was closed)."""
        if peer_uuid is not None and (peer := self._core.peers.get(peer_uuid)) is not None:
            now = trio.current_time()
            self._core.due.schedule(peer_uuid, peer, now)
            self._presence_due(now)

    def _pongs_of(self, peer_uuid: UUID) -> int | None:
        found = self._core.peers.get(peer_uuid)
        return None if found is None else found.protocol.pongs

    async def _presence_keeper(self) -> None:
        # Not a RepeatedEvent: this waits for a wake-up *or* a deadline.  A
        # fresh Event is made before each pass, so a peer added while the
        # pass awaits (publishing, removing) still wakes the next wait.
        core = self._core
        due, stuck = core.due, self._stuck
        while True:
            self._presence_wakeup = wakeup = trio.Event()
            now = trio.current_time()
            if now >= core.deadline():
                await self._apply(core.poll(now, self._pongs_of))
            if self._planned_deaf:
                # Times planned while deaf took the whole credit: all look again.
                visit = list(core.peers.values())
            else:
                visit = due.pop(now)
                more = self._sweep(now) if now >= self._sweep_at else []
                if stuck:
                    more += stuck.values()
                if more:  # once each (by identity: a UUID may be a new session)
                    visit = list({id(peer): peer for peer in (*visit, *more)}.values())
            reading = False
            for peer in visit:
                if self._reads(peer, now):
                    reading = True  # looked at again on the sweep
                else:
                    await self._look_at(peer, now)
            if reading:
                self._arm_sweep(now)
            if not self._deafness.deaf:
                # Entries made early by what was heard since (beacons, with
                # beacons_refresh) move to their real times together: one
                # wake-up for them all, not one each (issue 28, 500 nodes).
                due.settle(now + self._settle_horizon, _tcp_deadline)
            deadline = min(
                now + self._config.evasive_timeout, core.deadline(), due.next(), self._sweep_at
            )
            self._planned_deaf = self._deafness.deaf
            with trio.move_on_at(deadline) as self._presence_sleep:
                await wakeup.wait()
            self._presence_sleep = None

    async def _look_at(self, peer: PeerSession, now: float) -> None:
        """One peer's turn in a clock pass: its presence and its queue.

        It is scheduled again at its next deadline, unless it ended.
        """
        core = self._core
        if core.peers.get(peer.uuid) is not peer:
            if self._stuck.get(peer.uuid) is peer:
                del self._stuck[peer.uuid]
            return  # removed since it was due
        protocol, link = peer.protocol, peer.link
        if protocol.has_queued:
            self._flush(peer)  # what found the link full earlier
        if link.closed:
            # Only an in-process peer's node closes our link: it
            # stopped without a GOODBYE to us, having dropped us.
            await self._remove_peer(peer, ExitReason.GOODBYE)
            return
        seen = link.liveness(now)
        if seen == now:
            protocol.heard(now)  # its node reads: alive, nothing can be due
            # Looked at again on the next sweep, with the node's other
            # in-process peers: one pass for all, not one a peer at its time.
            self._arm_sweep(now)
            return
        if seen is not None and seen > protocol.presence.last_heard:
            protocol.heard(seen)
        events = protocol.poll(now)
        if protocol.has_queued:
            self._flush(peer)  # PINGs
        for event in events:
            if self._tracer is not None:
                self._trace(peer, event)
            await self._publish(event)
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
            return
        if core.peers.get(peer.uuid) is peer:  # publishing may have let it go
            core.due.schedule(peer.uuid, peer, protocol.deadline())

    def _sweep(self, now: float) -> list[PeerSession]:
        """Hear every in-process peer whose node reads; return the others, for a full look.

        The loop of the clock's passes before it had a schedule: no call a
        peer beyond the link's liveness, no await (100 idle nodes in one
        process spend most of their clock here).
        """
        look: list[PeerSession] = []
        reading = False
        for peer in self._core.peers.values():
            if not peer.link.in_process:
                continue  # TCP peers: NodeCore.due
            if self._reads(peer, now):
                reading = True
            else:
                look.append(peer)
        self._sweep_at = self._next_sweep(now) if reading else math.inf
        return look

    @staticmethod
    def _reads(peer: PeerSession, now: float) -> bool:
        """An in-process peer whose node reads now, with nothing queued: heard, nothing due.

        The clock's look at such a peer, without an await or a lookup (a
        closed link is a removed peer's too, and takes the full look).
        """
        link = peer.link
        if not link.in_process or link.closed or peer.protocol.has_queued:
            return False
        if link.liveness(now) != now:
            return False
        peer.protocol.heard(now)
        return True

    def _arm_sweep(self, now: float) -> None:
        """Have the next sweep come, for a peer just heard reading (one is due already, or now)."""
        if self._sweep_at == math.inf:
            self._sweep_at = self._next_sweep(now)

    def _next_sweep(self, now: float) -> float:
        """This node's first sweep after ``now``: before any deadline of a peer heard ``now``.

        A swept peer whose node stops reading is still PINGed, reported and
        expired at its exact times: the sweep after it stopped comes no
        later than its first deadline, and from there the clock looks at it
        at its own (``NodeCore.due``).
        """
        period = self._sweep_period
        at = (math.floor(now / period) + 1) * period
        if at <= now:  # rounding
            at += period
        return min(at, now + period)

    def _flush(self, peer: PeerSession) -> None:
        """Hand a peer's queued messages to its link; the clock's passes retry what did not fit."""
        if peer.flush():
            self._stuck.pop(peer.uuid, None)
        else:
            self._stuck[peer.uuid] = peer

    # ------------------------------------------------------------- beacons

    def _on_beacon(self, beacon: wire.Beacon, address: str, key: bytes, now: float) -> None:
        """Called by the discovery, synchronously, for every beacon: the core decides."""
        core = self._core
        for action in core.on_beacon(beacon, address, key, now):
            if type(action) is Connect:
                if (peer := self._connect(action, now)) is not None:
                    core.beacon_seen(peer, beacon, address, key, now)
            else:
                self._do(action)

    # -------------------------------------------------------------- gossip

    def _gossiping(self, gossip: GossipService) -> None:
        self._gossip = gossip  # dropped peers' tuples are unpublished through it

    def _on_gossip(self, news: Deliver | Forget) -> None:
        """A tuple from the gossip network: the core decides."""
        now = trio.current_time()
        self._apply_nowait(self._core.on_gossip(news, now), now)

    # ---------------------------------------------------------- lifecycle

    async def _start(self, nursery: trio.Nursery, discovery: Discovery | None) -> None:
        """Bind the inbox and start the node's tasks.

        The schedule point comes first: once the tasks are started nothing
        here waits, so none of them runs before ``open_node``'s body does,
        and a subscription made first thing in the body sees every event
        (a HELLO can arrive within milliseconds, over gossip especially).
        """
        await checkpoint()
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
            busy_poll=self._config.busy_poll,
        )
        if self._config.watch_links:
            self._sources = self._inbox.note_sources(wire.SIGNATURE + bytes([wire.Command.HELLO]))
        core = self._core
        core.endpoint = self._endpoint
        # What HELLO says: a link-local scope means nothing to the peer (zyre).
        core.advertised = self._endpoint
        if isinstance(interface, Interface6):
            core.advertised = self._endpoint.replace(f"%{interface.name}", "", 1)
        self._discovery = discovery
        # CURVE peers are all reached over CURVE: an in-memory link would
        # bypass the allow-list.
        if self._config.local_links and curve is None:
            self._local = LocalInbox(self._endpoint, self._version, self._config.max_message_size)
            register(self._uuid, self._local)
        self._lead = lead = InboxLead(self._inbox, self._fanout, self._local, self._take, _BATCH)
        self._fanout.lead = lead
        nursery.start_soon(self._lead_reader, self._inbox, lead)
        if self._local is not None:
            nursery.start_soon(self._reader, self._local)
        if discovery is not None:
            # The core's quiet keys: beacons it needs nothing for never reach it.
            nursery.start_soon(discovery.listen, self._on_beacon, self._core.quiet)
            port = int(self._endpoint.rsplit(":", 1)[1])
            beacon = self._core.beacon(port)
            nursery.start_soon(send_beacons, discovery, beacon, self._config.beacon_interval)
        else:
            nursery.start_soon(
                run_gossip,
                self._config,
                self._uuid,
                self._endpoint,
                self._on_gossip,
                self._gossiping,
            )
        nursery.start_soon(self._presence_keeper)
        if self._tracer is not None:
            self._tracer.record(kinds.NODE_START, endpoint=self._endpoint)

    async def _shutdown(self) -> None:
        """Say goodbye, close every link and socket, end every subscription."""
        if self._stopped:
            return
        self._stopped = True
        core = self._core
        core.stopped = True
        self._peers_changed.set()  # waiters in wait_for_peer raise ClosedResourceError
        self._pongs.set()
        if self._local is not None:
            unregister(self._uuid)
            self._local.close()
        for peer in core.peers.values():
            # In-process peers get what is queued, then GOODBYE; TCP drops
            # it, except in gossip mode (no leaving beacon there), where the
            # link lingers to deliver it, as zyre does.
            peer.link.close(peer.protocol.farewell())
        if self._inbox_watch is not None:
            self._inbox_watch.close()  # before the inbox: it stops the inbox's monitor
        if self._discovery is not None:
            with trio.CancelScope(shield=True), trio.move_on_after(1):
                try:
                    await self._discovery.send(core.beacon(0))
                except (OSError, trio.ClosedResourceError) as exc:
                    log.debug("could not send the leaving beacon: %s", exc)
        core.peers.clear()
        core.by_route.clear()
        if self._inbox is not None:
            self._inbox.close()
        self._fanout.close()
        if self._tracer is not None:
            self._tracer.record(kinds.NODE_STOP)
            self._tracer.close()
