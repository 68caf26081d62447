"""Who is a peer, for how long, and what the node owes it: the node's rules, sans I/O.

:class:`NodeCore` owns the peer table (by UUID and by route), the
pending-handshake bookkeeping and back-off, the pending bound, the new-peer
budgets, the beacon, leaving-beacon, CURVE-key and gossip-tuple rules, and
(through :class:`~trizre.sansio.node_core._groups.Membership`) our groups
and the elections.  It composes the other rules and rewrites none of them.
See the package's docstring for the actions it returns.
"""

from __future__ import annotations

import logging
import math
from collections import OrderedDict
from collections.abc import Callable, Collection, Iterator, Sequence
from typing import Final, Generic, final
from uuid import UUID

from ... import wire
from ...trace._contract import ExitReason
from .._election import Elections
from .._events import Enter, Exit, Join, Leave
from .._gossip import Deliver, Forget
from .._guard import LeaveHints
from .._peer import Ballot, PeerEvent, PeerProtocol
from .._presence import Deafness
from ._actions import Action, Connect, Drop, Flush, Publish, S, Trim, WakeAt
from ._admission import Admission, CoreRules, Voice
from ._due import Due
from ._groups import Group, Membership

__all__ = ["NodeCore"]

log = logging.getLogger("trizre.node")

CROWD: Final = 64
"""Peers without HELLO at once, or gone since the last trim: worth handing memory back after."""
TRIM_DELAY: Final = 1.0  # seconds after the crowd dissolved (libzmq's reaper frees late)
MISSES_KEPT: Final = 1024  # peers whose missed handshakes we remember (forged UUIDs are free)
_NONE: Final[tuple[()]] = ()


@final
class NodeCore(Generic[S]):
    """A node's peer table and the rules that fill and empty it.

    ``me``: our UUID; ``rules``: the options; ``contains(host)``: whether a
    numeric host is on our interface's network (never link outside it);
    ``scope``: the IPv6 interface name whose link-local endpoints get it
    (``None`` on IPv4); ``key_text``/``key_bytes``: the Z85 codec of CURVE
    keys (raw 32 octets <-> 40 characters; ``key_bytes`` raises
    ``ValueError`` on bad text); ``deafness``: the shell's record of when
    its readers could not read, shared with every peer's presence clock.
    """

    def __init__(
        self,
        me: UUID,
        rules: CoreRules,
        *,
        contains: Callable[[str], bool] = lambda _host: True,
        scope: str | None = None,
        key_text: Callable[[bytes], str] = bytes.hex,
        key_bytes: Callable[[str], bytes] = bytes.fromhex,
        deafness: Deafness | None = None,
    ) -> None:
        self.me = me
        self.rules = rules
        self.deafness = deafness if deafness is not None else Deafness()
        self.peers: dict[UUID, S] = {}
        self._voice = voice = Voice()
        self.admission: Admission[S] = Admission(
            rules,
            self.peers,
            voice,
            contains=contains,
            scope=scope,
            key_text=key_text,
            key_bytes=key_bytes,
        )
        self.by_route: dict[bytes, S] = {}
        # Each entered TCP peer, by its endpoint: a new UUID naming one is
        # refused (see admit).
        self.entered_at: dict[str, S] = {}
        self.endpoint = ""  # our inbox; gossip news of it is ours
        self.advertised = ""  # the endpoint our HELLO gives
        self.stopped = False
        # Beacons seen before, by the discovery's key: None, nothing to do;
        # a peer, refresh its presence (beacons_refresh).  The shell hands
        # this dict to the discovery, which skips the None keys itself: it
        # is never replaced, and None must mean on_beacon does nothing.
        self.quiet: dict[bytes, S | None] = {}
        # Peers announced leaving (port 0), PINGed: ended unless they answer.
        self.leave_hints = LeaveHints()
        # TCP peers that have not said HELLO, oldest first: at most
        # max_pending_peers of them hold a socket (forged beacons are cheap).
        self.unready: dict[UUID, S] = {}
        self._unready_peak = 0  # since the crowd last dissolved (see _settle)
        # Handshakes missed in a row, per peer: its next one gets twice as
        # long (see handshake_for).
        self.missed_handshakes: OrderedDict[UUID, int] = OrderedDict()
        self.trim_at = math.inf  # when to hand a dissolved crowd's memory back
        self._departed = 0  # peers forgotten since memory was last handed back
        self.elections = Elections(me, timeout=rules.election_timeout)
        # When each peer's presence clock next needs a look (the shell's clock
        # looks at those due and schedules them again).
        self.due: Due[UUID, S] = Due()
        # Peers removed, by reason: every ExitReason a key (bounded), counted
        # in remove, the one place a peer leaves the table (statistics).
        self.dropped: dict[ExitReason, int] = dict.fromkeys(ExitReason, 0)
        self.membership: Membership[S] = Membership(
            me,
            name=rules.name,
            version=rules.version,
            elections=self.elections,
            peers=self.peers,
            say=voice.say,
        )
        self.groups: dict[str, Group[S]] = self.membership.groups

    # ------------------------------------------------------------- queries

    def entered(self) -> Iterator[S]:
        """The peers that said HELLO, oldest first."""
        return (p for p in self.peers.values() if p.protocol.ready)

    def members(self, group: str) -> Collection[UUID]:
        """The entered peers in ``group`` (a live view; copy it to keep it)."""
        return self.membership.members(group)

    def own_groups(self) -> list[str]:
        """The groups we joined, sorted."""
        return self.membership.own_groups()

    @property
    def beacons_ignored(self) -> dict[str, int]:
        """Beacons the rules ignored so far, by reason (:data:`BEACONS_IGNORED`): a live view."""
        return self.admission.ignored

    @property
    def status(self) -> int:
        """Our group status: our JOINs and LEAVEs, counted modulo 256."""
        return self.membership.status

    def leader(self, group: str) -> UUID | None:
        """The leader last elected in ``group`` (``me`` if we won), or ``None``."""
        found = self.elections.leaders.get(group)
        return None if found is None else UUID(hex=found)

    def deadline(self) -> float:
        """When :meth:`poll` next has something to do (peers' own clocks apart)."""
        return min(self.trim_at, self.elections.deadline(), self.leave_hints.deadline())

    # --------------------------------------------------------------- hello

    def hello(self) -> wire.Hello:
        """Our HELLO, as a new peer gets it now."""
        rules = self.rules
        return wire.Hello(
            wire.HELLO_SEQUENCE,
            self.advertised,
            tuple(self.own_groups()),
            self.status,
            rules.name,
            rules.headers,
            version=rules.version,
        )

    def beacon(self, port: int) -> wire.Beacon:
        """Our beacon: 36/ZRE's version 1, 43/ZRE's version 3, with our key in CURVE mode."""
        if self.rules.curve is not None:
            return wire.Beacon(self.me, port, 3, self.rules.curve)
        return wire.Beacon(self.me, port, version=1 if self.rules.version == 2 else 3)

    # ------------------------------------------------------------- beacons

    def on_beacon(
        self, beacon: wire.Beacon, source: str, key: bytes, now: float
    ) -> Sequence[Action[S]]:
        """A beacon from ``source`` (``key``: the discovery's key of its datagram).

        Most beacons are ours or come from peers we know and need nothing:
        :attr:`quiet` remembers them by ``key``, so that costs one lookup
        (100 nodes in a process: 10,000 calls a second).  An unknown UUID
        that speaks our protocol gives :class:`Connect`; a leaving beacon
        (port 0) credible for a TCP peer PINGs it (:class:`Flush`) and sets
        a check due (:class:`WakeAt`): see :meth:`_leaving`.
        """
        quiet = self.quiet
        if key in quiet:
            refresh = quiet[key]
            if refresh is not None and refresh.protocol.ready:
                refresh.protocol.beacon_heard(now)
            return _NONE
        if self.stopped:
            return _NONE
        self._voice.now = now
        if beacon.uuid == self.me:
            quiet[key] = None
            return _NONE
        if not self.admission.speaks(beacon, source):
            return _NONE
        peer = self.peers.get(beacon.uuid)
        if beacon.leaving:
            # An in-process peer says GOODBYE over its link, after its last messages.
            if peer is not None and not peer.in_process:
                return self._leaving(peer, beacon, source, now)
            return _NONE
        if peer is None:
            endpoint = f"tcp://{source}:{beacon.port}"
            connect = self.admission.connect(
                beacon.uuid, endpoint, beacon.public_key, source=source
            )
            return _NONE if connect is None else (connect,)
        self.beacon_seen(peer, beacon, source, key, now)
        return _NONE

    def beacon_seen(
        self, peer: S, beacon: wire.Beacon, source: str, key: bytes, now: float
    ) -> None:
        """A beacon from ``source`` names ``peer`` (just linked, or known).

        If it gives the peer's endpoint, its ``key`` is quiet from now on
        (with ``beacons_refresh``, each one refreshes the peer's presence).
        """
        # An in-process peer's liveness is read from its link, never from beacons.
        refreshed = self.rules.beacons_refresh and not peer.in_process
        if f"tcp://{source}:{beacon.port}" == peer.protocol.endpoint:
            self.quiet[key] = peer if refreshed else None
            peer.beacon_key = key
        if refreshed and peer.protocol.ready:
            peer.protocol.beacon_heard(now)

    def _leaving(
        self, peer: S, beacon: wire.Beacon, source: str, now: float
    ) -> Sequence[Action[S]]:
        """A port-0 beacon names ``peer``: a hint that it left, never proof (anyone can forge it).

        From another host than the peer's, or (CURVE) with another key than
        the one its link authenticates, it is ignored.  Otherwise the peer
        is PINGed, and :meth:`poll` ends it if no PING-OK comes within a
        second (see :class:`~trizre.sansio._guard.LeaveHints`): a live
        peer answers and stays, one that left answers nothing.  Its link
        ends it otherwise, as any peer.
        """
        if not self.admission.credible_leave(peer, beacon, source):
            return _NONE
        protocol = peer.protocol
        if self.leave_hints.hint(peer.uuid, now, protocol.pongs, self.deafness.mark(now)):
            protocol.queue(wire.Ping(0, version=protocol.version))
            return (Flush(peer), WakeAt(self.leave_hints.deadline()))
        return _NONE

    # -------------------------------------------------------------- gossip

    def on_gossip(self, news: Deliver | Forget, now: float) -> Sequence[Action[S]]:
        """A tuple from the gossip network: a peer to link to, or one gone quiet.

        As zyre's gossip mode: a key is a UUID as 32 hex digits, a value an
        inbox endpoint, ``|`` its Z85 key with CURVE.  Other tuples are
        ignored (gossip carries anything).  A :class:`Forget` drops a peer
        that never said HELLO; an entered one is left to its link.
        """
        if self.stopped:
            return _NONE
        self._voice.now = now
        try:
            peer_uuid = UUID(hex=news.key)
        except ValueError:
            return _NONE
        if peer_uuid == self.me:
            return _NONE
        known = self.peers.get(peer_uuid)
        if isinstance(news, Forget):
            # Its publisher stopped refreshing it; one that never said HELLO goes.
            if known is not None and not known.protocol.ready:
                return self.remove(known, ExitReason.HANDSHAKE, now, "its gossip tuple expired")
            return _NONE
        if known is not None or news.value.partition("|")[0] == self.endpoint:
            return _NONE
        connect = self.admission.gossip_value(peer_uuid, news.value)
        return _NONE if connect is None else (connect,)

    # ------------------------------------------------------------- greeting

    def on_stranger(self, frames: Sequence[bytes], now: float) -> Connect | None:
        """A message from a sender not in the table: a HELLO makes it a peer (:class:`Connect`).

        See :meth:`Admission.stranger`: commands before HELLO, oversize
        messages, HELLOs over the limits and (CURVE) HELLOs for a UUID known
        under another key are refused.
        """
        self._voice.now = now
        return self.admission.stranger(frames)

    # ----------------------------------------------------------- admission

    def admit(self, connect: Connect, *, in_process: bool, now: float) -> bool:
        """Whether to make the link ``connect`` asks for (:meth:`Admission.admit`).

        Also never a TCP link for a new UUID that a beacon puts at our own
        endpoint or at an entered peer's (``claimed``).  Our DEALER carries
        our identity, and a plain inbox hands a known identity's route to
        its newest connection: the peer would take our HELLO over it for
        our restart and end us, and we it in turn (a forged beacon,
        repeated, kept two nodes ending each other).  A peer that really
        restarted there under a new UUID is linked at a beacon after the
        old one is ended: at once when its connection into our inbox
        closes (``watch_links``), else when it expires.  A HELLO or gossip
        news is not held to this: neither can be forged by one datagram,
        and gossip news of a restart may not come again.
        """
        self._voice.now = now
        if not self.admission.admit(connect, in_process=in_process, now=now):
            return False
        if in_process or connect.source is None:
            return True
        endpoint = connect.endpoint
        holder = self.entered_at.get(endpoint)
        if (holder is None or holder.uuid == connect.uuid) and endpoint not in (
            self.endpoint,
            self.advertised,
        ):
            return True
        self.admission.ignored["claimed"] += 1
        self._voice.say(
            "claimed",
            logging.DEBUG,
            f"ignoring peer {connect.uuid} at {endpoint!r}: "
            + ("ours" if holder is None else f"peer {holder.uuid}'s"),
        )
        return False

    def protocol_for(self, connect: Connect, now: float) -> PeerProtocol:
        """A new conversation with the peer ``connect`` names, our HELLO queued."""
        rules = self.rules
        return PeerProtocol(
            connect.uuid,
            connect.endpoint,
            self.hello(),
            now=now,
            evasive=rules.evasive_timeout,
            expired=rules.expired_timeout,
            handshake=self.handshake_for(connect.uuid),
            key=None if connect.key is None else self.admission.key_text(connect.key),
            answering=connect.answering,
            deafness=self.deafness,
            limits=rules.limits,
        )

    def add(self, peer: S, now: float, look_by: float = math.inf) -> Sequence[Action[S]]:
        """Enter ``peer`` (its protocol from :meth:`protocol_for`) in the table.

        A TCP peer joins those waiting for HELLO; if there are
        ``max_pending_peers`` already, the oldest is dropped first.
        Returns those drops, then the flush of our HELLO and the peer's
        first look: its first deadline, or ``look_by`` if sooner (the
        shell's sweep), also scheduled in :attr:`due`.
        """
        self._voice.now = now
        actions: list[Action[S]] = []
        if not peer.in_process:
            unready = self.unready
            while len(unready) >= self.rules.max_pending_peers:
                oldest = next(iter(unready.values()))
                actions += self.remove(
                    oldest, ExitReason.HANDSHAKE, now, "too many peers without HELLO"
                )
                self._voice.warn(
                    f"more than {self.rules.max_pending_peers} peers have not said HELLO: "
                    "dropping the oldest"
                )
            unready[peer.uuid] = peer
            self._unready_peak = max(self._unready_peak, len(unready))
        self.peers[peer.uuid] = peer
        self.by_route[peer.protocol.route] = peer
        actions.append(Flush(peer))
        first = min(peer.protocol.deadline(), look_by)
        self.due.schedule(peer.uuid, peer, first)
        actions.append(WakeAt(first))
        return actions

    def handshake_for(self, peer_uuid: UUID) -> float:
        """How long a new link to this peer may wait for its HELLO.

        ``handshake_timeout``, doubled for each handshake the peer missed in
        a row, up to ``expired_timeout``.  A real peer whose HELLO is late
        (its process overloaded) is dropped and linked again at its next
        beacon, and our new HELLO makes it start over with us too (a second
        HELLO is a restart): with a fixed window, an overloaded mesh kept
        redoing handshakes that made it more overloaded.  Forged peers stay
        bounded by ``max_pending_peers``.
        """
        base = self.rules.handshake_timeout
        misses = self.missed_handshakes.get(peer_uuid, 0)
        return min(base * 2.0**misses, max(base, self.rules.expired_timeout))

    def _missed_handshake(self, peer_uuid: UUID) -> None:
        misses = self.missed_handshakes.pop(peer_uuid, 0)
        self.missed_handshakes[peer_uuid] = min(misses + 1, 16)
        while len(self.missed_handshakes) > MISSES_KEPT:
            self.missed_handshakes.popitem(last=False)

    # ------------------------------------------------------------- removal

    def remove(
        self, peer: S, reason: ExitReason, now: float, detail: str = ""
    ) -> Sequence[Action[S]]:
        """Take ``peer`` out of every table; nothing if it is gone already.

        Returns :class:`Drop` (close its link), then for an entered peer its
        :class:`~trizre.Exit` and what its leaving our groups makes the
        elections do; a crowd gone makes a :class:`Trim` due.
        """
        if self.peers.get(peer.uuid) is not peer:
            return _NONE
        self._voice.now = now
        protocol = peer.protocol
        if reason is ExitReason.HANDSHAKE and not protocol.ready:
            self._missed_handshake(peer.uuid)
        del self.peers[peer.uuid]
        del self.by_route[protocol.route]
        if self.entered_at.get(protocol.endpoint) is peer:
            del self.entered_at[protocol.endpoint]
        self.due.forget(peer.uuid)
        self.dropped[reason] += 1
        actions: list[Action[S]] = [Drop(peer, reason, detail)]
        self._settle(peer, now, actions)
        if peer.beacon_key is not None:
            self.quiet.pop(peer.beacon_key, None)
        self.leave_hints.forget(peer.uuid)  # a new link under its UUID starts afresh
        self._departed += 1
        if self._departed >= CROWD:
            # Many gone, however they went (expired together, their links
            # broke, a flood's pending peers): their sockets' memory goes back.
            self._trim_soon(now, actions)
        if log.isEnabledFor(logging.DEBUG):  # forged peers go by the thousand: rate-limited
            self._voice.say(
                f"removed-{reason}",
                logging.DEBUG,
                f"peer {peer.uuid} ({protocol.name}) removed: {reason} {detail}",
            )
        if protocol.ready:
            actions.append(Publish(Exit(peer.uuid, protocol.name)))  # traced by its Drop
            for group in sorted(protocol.groups):
                self.membership.left_by(peer, group, now, actions)
        return actions

    def _settle(self, peer: S, now: float, actions: list[Action[S]]) -> None:
        """``peer`` no longer waits for its HELLO (it said it, or it is gone).

        When nobody waits any more and a crowd did (a forged-beacon flood),
        the memory its sockets held goes back to the OS.
        """
        if self.unready.pop(peer.uuid, None) is not None and not self.unready:
            if self._unready_peak >= CROWD:
                self._trim_soon(now, actions)
            self._unready_peak = 0

    def _trim_soon(self, now: float, actions: list[Action[S]]) -> None:
        self._departed = 0
        if self.trim_at == math.inf:
            self.trim_at = now + TRIM_DELAY
            actions.append(WakeAt(self.trim_at))

    # ------------------------------------------------------------- inbound

    def received(self, peer: S, events: Sequence[PeerEvent], now: float) -> list[Action[S]]:
        """What ``peer``'s protocol reported on a message: publish, elect, flush, drop.

        Events are published in order; ballots go to the elections; a
        JOIN or LEAVE of one of our groups may start or repair an election;
        a peer that enters is announced leader of the groups that elected
        it before its HELLO reached us.  If its protocol ended, the
        removal's actions come last.
        """
        self._voice.now = now
        actions: list[Action[S]] = []
        protocol = peer.protocol
        entered = bool(events) and type(events[0]) is Enter
        if entered:
            self._settle(peer, now, actions)
            self.missed_handshakes.pop(peer.uuid, None)
            if not peer.in_process:
                self.entered_at[protocol.endpoint] = peer
        membership = self.membership
        for event in events:
            if type(event) is Ballot:
                membership.ballot(peer, event, now, actions)
                continue
            actions.append(Publish(event, peer))
            if type(event) is Join:
                membership.joined_by(peer, event.group, now, actions)
            elif type(event) is Leave:
                membership.left_by(peer, event.group, now, actions)
        if entered:
            membership.entered(peer, actions)
        if protocol.has_queued:
            actions.append(Flush(peer))  # a PING-OK
        if protocol.ended is not None:
            if protocol.ended is ExitReason.LIMITS:
                self._voice.say(
                    "limits",
                    logging.WARNING,
                    f"dropped peer {peer.uuid} ({protocol.name}): {protocol.detail}",
                )
            actions += self.remove(peer, protocol.ended, now, protocol.detail)
        return actions

    # ------------------------------------------------------------ our groups

    def join(self, group: str, now: float) -> list[Action[S]]:
        """Join ``group``: a JOIN queued to every peer, then an election if we contest it."""
        return self.membership.join(group, now)

    def leave(self, group: str, now: float) -> list[Action[S]]:
        """Leave ``group``: a LEAVE queued to every peer; its election state is dropped."""
        return self.membership.leave(group)

    def contest(self, group: str, now: float) -> list[Action[S]]:
        """Stand in ``group``'s elections; in it already, with members, one starts now."""
        return self.membership.contest(group, now)

    # ---------------------------------------------------------------- clock

    def poll(self, now: float, pongs: Callable[[UUID], int | None]) -> list[Action[S]]:
        """Apply the clock at ``now``: trim, end stuck elections, judge leaving hints.

        ``pongs(peer)``: the PING-OKs the peer has sent us by now, ``None``
        if it is gone.  A peer that announced leaving and did not answer
        its PING in time is removed (reason ``beacon``); one whose check
        must open again is PINGed again.
        """
        self._voice.now = now
        actions: list[Action[S]] = []
        if now >= self.trim_at:
            self.trim_at = math.inf
            if not self.unready:  # else a new crowd: its end will trim
                actions.append(Trim())
        self.membership.poll(now, actions)
        if now >= self.leave_hints.deadline():
            left, again = self.leave_hints.due(now, pongs, self.deafness.mark(now))
            for peer_uuid in again:
                if (peer := self.peers.get(peer_uuid)) is not None:
                    protocol = peer.protocol
                    protocol.queue(wire.Ping(0, version=protocol.version))
                    actions.append(Flush(peer))
            for peer_uuid in left:
                if (peer := self.peers.get(peer_uuid)) is not None:
                    actions += self.remove(
                        peer,
                        ExitReason.BEACON,
                        now,
                        "it announced leaving and did not answer a PING",
                    )
        return actions

    # -------------------------------------------------------------- helpers

    def log_rarely(self, topic: str, level: int, what: str, now: float) -> None:
        """The shell's lines that a remote party can trigger, under the same limits."""
        self._voice.now = now
        self._voice.say(topic, level, what)
