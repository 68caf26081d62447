"""Binary Star over ZRE: a primary/backup pair that fails over on the client vote.

The two servers find each other by name, WHISPER their state to each
other every heartbeat (a STATE pattern message), and feed what they hear,
and every client request, to the pure state machine in ``_bstar_fsm``.
Only the active server answers requests; the other refuses them with 503
so that clients move on.

Each server is also a member of the group ``trizre/bstar`` while it serves.
A partner that is a member and whose node ZRE still hears from (its
messages, and its beacons with ``beacons_refresh=True``) is alive even when
its heartbeats are late: on a lossy network TCP can stall for seconds
while the UDP beacons get through, and a client vote then must not make a
second ACTIVE server.  A server stopped while its node runs leaves the
group, so its partner can take over.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from typing import final
from uuid import UUID

import trio
from trio_util import AsyncValue

from .. import Enter, Exit, Node, NodeError, Whisper
from .._concurrency import Wakeup, unwrap_single_exception_group
from ..trace import _contract as kinds
from . import _protocol as proto
from ._bstar_fsm import BinaryStarError, BinaryStarFSM, State, Transition
from ._open_server import open_server
from ._port import open_port
from ._server import Handler, IncomingRequest, ReplyCache, Server
from ._status import BSTAR_GROUP

__all__ = ["BinaryStarServer", "DuplicateServer", "open_binary_star_server"]

log = logging.getLogger("trizre.patterns.bstar")


class DuplicateServer(BinaryStarError):
    """Another node with this server's name is on the network: it was started twice.

    Raised by the server that starts second (it has not yet served or
    taken a side); the one already running logs an error and goes on,
    following only the partner it first heard.
    """


_UNDECIDED = (State.PRIMARY, State.BACKUP)
# Pairings that are fatal once the partner is known to have heard us (contract §7).
_CONFLICTING = (State.ACTIVE, State.PASSIVE)
_HISTORY = 20


@final
class BinaryStarServer:
    """One server of a Binary Star pair, as seen by the application.

    ``state`` is a trio-util ``AsyncValue``: read ``state.value`` or wait
    with ``await state.wait_value(State.ACTIVE)``.  ``transitions`` lists
    every change with the time it happened (``trio.current_time()``).
    """

    def __init__(self, node: Node, fsm: BinaryStarFSM, partner: str) -> None:
        self.node = node
        self.partner = partner
        self._fsm = fsm
        self.state: AsyncValue[State] = AsyncValue(fsm.state)
        self.transitions: list[tuple[float, Transition]] = []
        self.server: Server | None = None
        # The partner this server follows: the first node of that name it
        # heard.  Another node of that name (a second backup started by
        # mistake) is ignored while this one is present.
        self._partner_peer: UUID | None = None
        # The state last heard from it: each heartbeat says what its sender
        # has seen, so that a stale one can be told apart (contract §7).
        self._heard: tuple[UUID, State] | None = None
        # A partner still on envelope version 1 drops version-2 STATE: each
        # would take the other for silent and go ACTIVE.  So STATE goes in
        # the version last heard from the partner (2 until one is heard).
        self._partner_version = proto.VERSION
        self._warned: set[UUID] = set()
        self._role = "primary" if fsm.state is State.PRIMARY else "backup"
        # Until then a starting primary waits for peers in their handshake.
        self._handshakes_until = (
            trio.current_time() + fsm.failover_timeout + node.config.handshake_timeout
        )
        # The last transitions, with wall-clock times, for watchers (trizre watch).
        self._history: deque[tuple[float, str, str, str]] = deque(maxlen=_HISTORY)
        self._failovers = 0  # PASSIVE -> ACTIVE, for watchers (the history is bounded)
        # What the port's events made fatal, for _listen to raise in the server's block.
        self._failure: Exception | None = None
        self._failed = Wakeup()

    @property
    def failover_timeout(self) -> float:
        """How long the partner must be silent before this server may take over."""
        return self._fsm.failover_timeout

    def _record(self, transition: Transition) -> None:
        if transition.changed:
            self.transitions.append((trio.current_time(), transition))
            log.info(
                "%s: %s -> %s on %s",
                self.node.name,
                transition.old_state.name,
                transition.new_state.name,
                transition.event.name,
            )
            self.state.value = transition.new_state
            if transition.old_state is State.PASSIVE and transition.new_state is State.ACTIVE:
                self._failovers += 1
            self._history.append(
                (
                    time.time(),
                    transition.old_state.name,
                    transition.new_state.name,
                    transition.event.name,
                )
            )
            self._publish()
            if (tracer := self.node.tracer) is not None:
                tracer.record(
                    kinds.BSTAR_STATE,
                    old_state=transition.old_state.name,
                    state=transition.new_state.name,
                    event=transition.event.name,
                )

    def _publish(self) -> None:
        """Tell watchers this server's state and its recent transitions."""
        if self.server is None:
            return
        self.server.status.update(key="bstar", kind="bstar")
        self.server.set_status(
            role=self._role,
            partner=self.partner,
            state=self._fsm.state.name,
            failover_timeout=self._fsm.failover_timeout,
            transitions=[list(entry) for entry in self._history],
            failovers=self._failovers,
        )

    def _partner_seen(self) -> None:
        """Tell the machine when the partner's node was last heard while serving."""
        node = self.node
        for peer in node.peers_by_group(BSTAR_GROUP):
            with suppress(NodeError):
                if node.peer_name(peer) == self.partner:
                    self._fsm.partner_seen(node.peer_last_heard(peer))

    def _gate(self, _request: IncomingRequest) -> int | None:
        now = trio.current_time()
        if self._fsm.state in (State.PRIMARY, State.PASSIVE):  # a vote: is the partner alive?
            self._partner_seen()
        # A starting primary has not heard its partner yet: a peer still in
        # its handshake may be that partner, ACTIVE since a failover (make
        # chaos: under 20 % loss a handshake took 3 s, longer than the
        # failover timeout, and the pair had two ACTIVE servers).  Bounded,
        # since beacons can be forged.
        if (
            self._fsm.state is State.PRIMARY
            and now < self._handshakes_until
            and self.node.pending_peers()
        ):
            self._fsm.partner_seen(now)
        transition = self._fsm.client_request(now)
        self._record(transition)
        return None if transition.accepted else proto.Status.UNAVAILABLE

    async def _heartbeat(self) -> None:
        # The node's block may end before this server's: from then on every
        # node method raises ClosedResourceError.  Heartbeats have nowhere to
        # go (the partner saw this node exit), so they stop, quietly, and the
        # block ends when its body does rather than with an error.
        with suppress(trio.ClosedResourceError):
            while True:
                pinned = self._partner_peer
                targets = self.node.find_peers(self.partner)
                if pinned is not None and self._responsive(pinned):
                    targets = [pinned]
                for peer in targets:
                    heard = self._heard
                    seen = heard[1].value if heard is not None and heard[0] == peer else 0
                    state = proto.State(self._fsm.state.value, seen, version=self._partner_version)
                    message = proto.encode(state)
                    try:
                        await self.node.whisper(peer, *message)
                    except NodeError as exc:
                        log.debug("state to %s not sent: %s", peer, exc)
                await trio.sleep(self._fsm.heartbeat)

    def _responsive(self, peer: UUID) -> bool:
        """Present and not evasive or silent."""
        try:
            return self.node.peer_is_responsive(peer)
        except NodeError:  # UnknownPeer: gone
            return False

    def _namesake(self, peer: UUID) -> None:
        """Another node has our name: refuse to start, or say so if we are serving."""
        name = self.node.name
        if self._fsm.state in _UNDECIDED:
            raise DuplicateServer(
                f"another node named {name!r} ({peer}) is already on the network: this "
                f"Binary Star server was started twice (a second {self._role} by mistake?). "
                "Each name must run once; this one stops, the running one goes on."
            )
        if peer not in self._warned:
            self._warned.add(peer)
            log.error(
                "%s: another node named %r (%s) joined the network: a server started twice? "
                "It is ignored; only one node of each name may serve",
                name,
                name,
                peer,
            )

    async def _listen(self) -> None:
        """Check for a namesake already there, then raise what the port's events make fatal.

        The events themselves are handled by :meth:`on_peer_event`, in the
        node's pattern port, in order with the requests the gate sees.
        """
        for peer in self.node.find_peers(self.node.name):
            self._namesake(peer)  # already there when we started
        while self._failure is None:
            await self._failed.wait()
        raise self._failure

    def on_peer_event(self, event: Enter | Exit | Whisper, message: proto.State | None) -> None:
        """An Enter, an Exit, or a partner's STATE (from the port); never waits.

        A fatal pairing (two actives, two passives) or a namesake that
        makes this server refuse to start is raised out of the server's
        block by :meth:`_listen`, and this server hears nothing more.
        """
        if self._failure is not None:
            return
        try:
            self._on_peer_event(event, message)
        except Exception as exc:  # raised in the server's block, not the port's
            self._failure = exc
            self._failed.wake_all()

    def _on_peer_event(self, event: Enter | Exit | Whisper, message: proto.State | None) -> None:
        if isinstance(event, Enter):
            if event.name == self.node.name:
                self._namesake(event.peer)
            return
        if isinstance(event, Exit):
            if event.peer == self._partner_peer:
                self._partner_peer = None  # follow whichever node of that name comes next
            return
        if event.name != self.partner or message is None:
            return
        if self._partner_peer is None or not self._responsive(self._partner_peer):
            # The first heard, or a successor of one gone quiet (a crash
            # and restart: the dead one stays present until it expires).
            self._partner_peer = event.peer
        elif event.peer != self._partner_peer:
            if event.peer not in self._warned:
                self._warned.add(event.peer)
                log.error(
                    "%s: a second node named %r (%s) sends Binary Star state; "
                    "following %s, the first one heard",
                    self.node.name,
                    self.partner,
                    event.peer,
                    self._partner_peer,
                )
            return
        try:
            peer_state = State(message.state)
        except ValueError:
            log.warning("partner sent an unknown state %d", message.state)
            return
        self._heard = (event.peer, peer_state)
        self._partner_version = message.version
        informed = message.seen == self._fsm.state.value
        conflict = peer_state is self._fsm.state and peer_state in _CONFLICTING
        if conflict and not informed:
            log.warning(
                "%s: partner %s says %s too, without having heard this server %s: "
                "ignored as stale unless it goes on for %.3g s",
                self.node.name,
                self.partner,
                peer_state.name,
                peer_state.name,
                self._fsm.failover_timeout,
            )
        # A fatal pairing (two actives, two passives) raises out of here
        # and stops this server: an operator must look.
        self._record(self._fsm.peer_state(peer_state, trio.current_time(), informed=informed))


@asynccontextmanager
async def open_binary_star_server(
    node: Node,
    handler: Handler,
    *,
    primary: bool,
    partner: str,
    heartbeat: float = 1.0,
    reply_cache: ReplyCache | None = None,
) -> AsyncIterator[BinaryStarServer]:
    """Serve ``handler`` as one half of a Binary Star pair.

    ``primary`` says which half this is; ``partner`` is the other server's
    node name.  Both must use the same ``heartbeat``; the failover timeout
    is two heartbeats.  Recovery is manual: after a failover the pair does
    not fail back by itself.

    Raises ``SplitBrain`` (two active servers) or ``DualPassive`` out of
    the block when the pair is in a fatal state; the server stops.  If the
    node's block ends first, heartbeats stop (the partner sees this node
    exit), and the block ends without error when its body does.
    Bad input: ``partner`` equal to this node's name or a non-positive
    heartbeat raises ``ValueError``.
    """
    if partner == node.name:
        raise ValueError("a Binary Star server cannot be its own partner")
    fsm = BinaryStarFSM(primary=primary, heartbeat=heartbeat, now=trio.current_time())
    star = BinaryStarServer(node, fsm, partner)
    with unwrap_single_exception_group():
        async with (
            open_port(node) as port,
            open_server(node, handler, reply_cache=reply_cache, _gate=star._gate) as server,
            trio.open_nursery() as nursery,
        ):
            star.server = server
            star._publish()
            port.add_listener(star)
            try:
                nursery.start_soon(star._listen)
                nursery.start_soon(star._heartbeat)
                await node.join(BSTAR_GROUP)
                yield star
            finally:
                port.remove_listener(star)
                nursery.cancel_scope.cancel()
                # Say we no longer serve, if our node still runs (shielded:
                # this runs on cancellation too; bounded: never hangs a stop).
                with (
                    trio.CancelScope(shield=True),
                    trio.move_on_after(1.0),
                    suppress(trio.ClosedResourceError, NodeError),
                ):
                    await node.leave(BSTAR_GROUP)
