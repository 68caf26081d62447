"""Who is a peer, for how long, and what the node owes it: the node's rules, sans I/O.

:class:`NodeCore` owns the peer table (by UUID and by route), our groups and
status, a :class:`Group` record per group (members, ours, contested), the
pending-handshake bookkeeping, the new-peer budgets, the leaving-beacon rule,
the CURVE key rules, gossip tuples and the :class:`~trizre.sansio._election.Elections`.
It composes the other rules (:class:`~trizre.sansio._peer.PeerProtocol`,
:mod:`~trizre.sansio._guard`, the elections) and rewrites none of them.

Every input carries the time; every output is an action the node's shell
carries out, in order (the convention of :mod:`~trizre.sansio._election`):

* :class:`Connect`: link to a peer (the shell makes the link, asks
  :meth:`NodeCore.admit`, then hands the new session to :meth:`NodeCore.add`);
* :class:`Flush`: messages were queued on a peer's protocol, send them;
* :class:`Publish`: report an event to subscribers (``peer``: who caused it);
* :class:`Drop`: the peer is out of every table already; close its link;
* :class:`WakeAt`: call :meth:`NodeCore.poll` (or look at the peers) by then;
* :class:`Trim`: hand freed socket memory back to the OS.

It never calls the shell.  The table holds the shell's own per-peer objects
(``S``, any :class:`Held`: the node's ``PeerSession``), so the shell needs no
second table; the core reads only their protocol, ``in_process`` and
``beacon_key``.  Lines a remote party can trigger are logged through a
:class:`~trizre.sansio._guard.LogLimiter` (one a topic every 10 s).
"""

from __future__ import annotations

import ipaddress
import logging
import math
from collections import OrderedDict
from collections.abc import Callable, Collection, Iterator, Sequence
from typing import Final, Generic, Protocol, TypeAlias, TypeVar, final
from uuid import UUID

import attrs

from .. import wire
from ..trace._contract import ExitReason
from ..wire import OVERSIZE
from ._election import Elected, ElectionAction, Elections, SendElect
from ._events import Enter, Event, Exit, Join, Leader, Leave
from ._gossip import Deliver, Forget
from ._guard import LeaveHints, LogLimiter, NewPeerBudget, credible_leave, log_rarely
from ._peer import Ballot, PeerEvent, PeerLimits, PeerProtocol, hello_from_stranger, node_id
from ._presence import Deafness

__all__ = [
    "Action",
    "Connect",
    "CoreRules",
    "Drop",
    "Flush",
    "Group",
    "Held",
    "NodeCore",
    "Publish",
    "Trim",
    "WakeAt",
    "endpoint_host",
]

log = logging.getLogger("trizre.node")

CROWD: Final = 64
"""Peers without HELLO at once, or gone since the last trim: worth handing memory back after."""
TRIM_DELAY: Final = 1.0  # seconds after the crowd dissolved (libzmq's reaper frees late)
MISSES_KEPT: Final = 1024  # peers whose missed handshakes we remember (forged UUIDs are free)
SOURCE_BURST: Final = 64  # new peers one beacon source may announce at once
_NONE: Final[tuple[()]] = ()


class Held(Protocol):
    """What the core reads of the shell's per-peer object (the node's ``PeerSession``)."""

    beacon_key: bytes | None  # the discovery's key of its beacon; the core sets it

    @property
    def protocol(self) -> PeerProtocol: ...

    @property
    def uuid(self) -> UUID: ...

    @property
    def in_process(self) -> bool: ...


S = TypeVar("S", bound=Held)


@final
@attrs.frozen
class Connect:
    """Link to ``uuid`` at ``endpoint``; ``key``: its raw CURVE key (CURVE mode).

    ``source``: the beacon's sender (its new TCP peers are budgeted);
    ``answering``: linked on hearing its HELLO (see PeerProtocol).
    """

    uuid: UUID
    endpoint: str
    key: bytes | None = None
    source: str | None = None
    answering: bool = False


@final
@attrs.frozen
class Flush(Generic[S]):
    """Protocol messages wait in ``peer``'s queue: hand them to its link."""

    peer: S


@final
@attrs.frozen
class Publish(Generic[S]):
    """Report ``event`` to subscribers; ``peer``: the peer it came from, if any (traces)."""

    event: Event
    peer: S | None = None


@final
@attrs.frozen
class Drop(Generic[S]):
    """``peer`` is out of every table: close its link; ``reason`` and ``detail`` say why."""

    peer: S
    reason: ExitReason
    detail: str = ""


@final
@attrs.frozen
class WakeAt:
    """Something is due at ``at``: :meth:`NodeCore.poll`, or a peer's presence clock."""

    at: float


@final
@attrs.frozen
class Trim:
    """A crowd of sockets was closed a while ago: hand their memory back to the OS."""


Action: TypeAlias = Connect | Flush[S] | Publish[S] | Drop[S] | WakeAt | Trim


@final
@attrs.frozen
class CoreRules:
    """The options the rules read (the node's :class:`~trizre.NodeConfig`, narrowed).

    ``curve``: our raw public key in CURVE mode, else ``None``;
    ``curve_allow``: the raw keys we may link to (``None``: any);
    ``gossiping``: peers come by gossip (any tcp:// or ipc:// endpoint) rather
    than by beacons on one interface.
    """

    name: str
    version: int = 2
    headers: tuple[tuple[str, str], ...] = ()
    gossiping: bool = False
    curve: bytes | None = None
    curve_allow: frozenset[bytes] | None = None
    beacons_refresh: bool = False
    evasive_timeout: float = 5.0
    expired_timeout: float = 30.0
    handshake_timeout: float = 5.0
    election_timeout: float = 5.0
    max_pending_peers: int = 256
    new_peers_per_source: float = 20.0
    limits: PeerLimits = attrs.Factory(PeerLimits)


@final
@attrs.define(slots=True, eq=False)
class Group:
    """One group as this node sees it: its present members, whether we are in it.

    ``members``: the entered peers in it, in joining order (O(1) to update
    and to ask; nothing scans the peer table).  ``joined``: we joined it.
    Its leader is the elections' (:meth:`NodeCore.leader`); whether we
    contest it, theirs too.
    """

    name: str
    members: dict[UUID, None] = attrs.Factory(dict)
    joined: bool = False


def endpoint_host(endpoint: str) -> str | None:
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


def _always(_host: str) -> bool:
    return True


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
        contains: Callable[[str], bool] = _always,
        scope: str | None = None,
        key_text: Callable[[bytes], str] = bytes.hex,
        key_bytes: Callable[[str], bytes] = bytes.fromhex,
        deafness: Deafness | None = None,
    ) -> None:
        self.me = me
        self.rules = rules
        self.deafness = deafness if deafness is not None else Deafness()
        self._contains = contains
        self._scope = scope
        self._key_text = key_text
        self._key_bytes = key_bytes
        self.peers: dict[UUID, S] = {}
        self.by_route: dict[bytes, S] = {}
        self.groups: dict[str, Group] = {}
        self.status = 0
        self.endpoint = ""  # our inbox; gossip news of it is ours
        self.advertised = ""  # the endpoint our HELLO gives
        self.stopped = False
        # Beacons seen before, by the discovery's key: None, nothing to do;
        # a peer, refresh its presence (beacons_refresh).
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
        self._log_limiter = LogLimiter()
        self._debug_limiter = LogLimiter(burst=10)  # DEBUG: a few more details
        self.elections = Elections(me, timeout=rules.election_timeout)
        # New peers by beacon: per source, and all sources together (spoofed
        # sources): no faster than handshakes time out, so the pending
        # table does not churn sockets (see docs/security.md).
        self.budget = NewPeerBudget(
            rules.new_peers_per_source,
            SOURCE_BURST,
            total_rate=max(
                rules.new_peers_per_source, rules.max_pending_peers / rules.handshake_timeout
            ),
            total_burst=max(SOURCE_BURST, rules.max_pending_peers),
        )
        self.now = 0.0  # the time of the latest input (log limits read it)

    # ------------------------------------------------------------- queries

    def entered(self) -> Iterator[S]:
        """The peers that said HELLO, oldest first."""
        return (p for p in self.peers.values() if p.protocol.ready)

    def members(self, group: str) -> Collection[UUID]:
        """The entered peers in ``group`` (a live view; copy it to keep it)."""
        found = self.groups.get(group)
        return () if found is None else found.members.keys()

    def own_groups(self) -> list[str]:
        """The groups we joined, sorted."""
        return sorted(name for name, group in self.groups.items() if group.joined)

    def joined(self, group: str) -> bool:
        """Whether we are in ``group``."""
        found = self.groups.get(group)
        return found is not None and found.joined

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
        self.now = now
        if beacon.uuid == self.me:
            quiet[key] = None
            return _NONE
        if not self._speaks(beacon, source):
            return _NONE
        peer = self.peers.get(beacon.uuid)
        if beacon.leaving:
            # An in-process peer says GOODBYE over its link, after its last messages.
            if peer is not None and not peer.in_process:
                return self._leaving(peer, beacon, source, now)
            return _NONE
        if peer is None:
            endpoint = f"tcp://{source}:{beacon.port}"
            connect = self._connect(beacon.uuid, endpoint, beacon.public_key, source=source)
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

    def _speaks(self, beacon: wire.Beacon, source: str) -> bool:
        """Whether a beacon announces a node we can talk to; logs (rarely) why not.

        A CURVE node takes only beacons carrying a key: a key-less one is a
        downgrade, ignored as zyre does.  A plain node ignores those with a
        key (it could not connect to a CURVE inbox) and those of the other
        protocol version (version-1 beacons announce 36/ZRE, version-3 ones
        43/ZRE), which would only half-connect.
        """
        if self.rules.curve is not None:
            if beacon.public_key is not None:
                return True
            self._log(
                "downgrade",
                logging.INFO,
                f"ignoring beacons without a CURVE key (from {source}, among others): "
                "this node talks CURVE only",
            )
            return False
        if beacon.public_key is not None:
            self._log(
                "curve-beacon",
                logging.INFO,
                f"ignoring CURVE beacons (from {source}, among others): "
                "this node has no certificate (open_node(curve=...))",
            )
            return False
        return beacon.version == (1 if self.rules.version == 2 else 3)

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
        protocol = peer.protocol
        key = None if protocol.key is None else self._key_bytes(protocol.key)
        if not credible_leave(source, beacon.public_key, protocol.endpoint, key):
            self._log(
                "forged-leave",
                logging.INFO,
                f"ignoring a leaving beacon for peer {peer.uuid} from {source}: "
                "not from its host, or not with its key (forged?)",
            )
            return _NONE
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
        self.now = now
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
        endpoint, _, key_text = news.value.partition("|")
        if known is not None or endpoint == self.endpoint:
            return _NONE
        key: bytes | None = None
        if key_text:
            try:
                key = self._key_bytes(key_text)
            except ValueError:
                self._log(
                    "gossip-key",
                    logging.DEBUG,
                    f"ignoring gossip for {peer_uuid}: bad key {key_text!r}",
                )
                return _NONE
        if (self.rules.curve is None) != (key is None):
            self._log(
                "gossip-curve",
                logging.INFO,
                f"ignoring gossip for peer {peer_uuid}: "
                + (
                    "no CURVE key (this node talks CURVE only)"
                    if key is None
                    else "it talks CURVE and this node has no certificate"
                ),
            )
            return _NONE
        connect = self._connect(peer_uuid, endpoint, key)
        return _NONE if connect is None else (connect,)

    # ------------------------------------------------------------- greeting

    def on_stranger(self, frames: Sequence[bytes], now: float) -> Connect | None:
        """A message from a sender not in the table: a HELLO makes it a peer (:class:`Connect`).

        Commands before HELLO are ignored, so are oversize messages (the
        inbox marks them) and HELLOs over the limits.  In CURVE mode the
        sender is known by its key and UUID together: a HELLO for a UUID we
        know under another key is refused, so nobody can speak as another
        peer, whatever key the allow-list gave them.
        """
        self.now = now
        limits = self.rules.limits
        if len(frames) > 1 and frames[1] is OVERSIZE:
            # The inbox refused a message over max_message_size (see
            # PeerProtocol.receive) from a sender we do not know.
            self._log(
                "oversize",
                logging.WARNING,
                f"dropped a message over max_message_size ({limits.message_size} octets) "
                "from an unknown sender",
            )
            return None
        if len(frames) < 2:
            return None
        if (excess := limits.hello_excess(frames[1])) is not None:
            self._log("limits", logging.WARNING, f"refused a HELLO that {excess}")
            return None
        # Measured just above, with a log line: not again.
        found = hello_from_stranger(
            frames, self.rules.version, curve=self.rules.curve is not None, limits=None
        )
        if found is None:
            return None  # commands before HELLO are ignored (and key-less HELLOs in CURVE mode)
        peer_uuid, hello, key = found
        known = self.peers.get(peer_uuid)
        if key is not None and known is not None and known.protocol.key != key:
            self._log(
                "spoof",
                logging.WARNING,
                f"refused a HELLO from key {key} for peer {peer_uuid}, "
                f"which is known under key {known.protocol.key}",
            )
            return None
        raw_key = None if key is None else self._key_bytes(key)
        return self._connect(peer_uuid, hello.endpoint, raw_key, answering=True)

    # ----------------------------------------------------------- admission

    def _connect(
        self,
        peer_uuid: UUID,
        endpoint: str,
        key: bytes | None,
        *,
        source: str | None = None,
        answering: bool = False,
    ) -> Connect | None:
        """The endpoint and key rules, before any budget is spent."""
        if self.rules.gossiping:
            # Gossip reaches beyond one subnet by design: any tcp or ipc endpoint.
            if not endpoint.startswith(("tcp://", "ipc://")):
                self._log(
                    "not-tcp",
                    logging.DEBUG,
                    f"ignoring peer {peer_uuid} at {endpoint!r}: not tcp:// or ipc://",
                )
                return None
        else:
            endpoint = self._scoped(endpoint)
        if self.rules.curve is not None:
            if key is None:
                return None  # never: beacons and HELLOs without a key are turned away first
            allowed = self.rules.curve_allow
            if allowed is not None and key not in allowed:
                # It could not link back to us: do not half-connect.
                self._log(
                    "not-allowed",
                    logging.INFO,
                    f"not linking to peer {peer_uuid}: its key {self._key_text(key)} "
                    "is not in curve_allow",
                )
                return None
        else:
            key = None
        return Connect(peer_uuid, endpoint, key, source, answering)

    def admit(self, connect: Connect, *, in_process: bool, now: float) -> bool:
        """Whether to make the link ``connect`` asks for: the budgets, then our network.

        An in-process peer (a link without a socket) spends no budget; a TCP
        peer announced by a beacon spends one token of its source and one
        of all sources'.  Never a TCP endpoint outside our interface's
        network, whatever a beacon or HELLO claims.
        """
        self.now = now
        # The budget first: under a flood of forged beacons most stop here,
        # before the costlier checks below.
        if (
            not in_process
            and connect.source is not None
            and (refused := self.budget.admit(connect.source, now))
        ):
            if refused == "source":
                self._warn_crowded(f"{connect.source} announces more new peers than allowed")
            else:
                self._warn_crowded("beacons from all sources announce more new peers than allowed")
            return False
        if not self.rules.gossiping:
            host = endpoint_host(connect.endpoint)
            if host is None or not self._contains(host):
                self._log(
                    "outside",
                    logging.DEBUG,
                    f"ignoring peer {connect.uuid} at {connect.endpoint!r}: outside our network",
                )
                return False
        return True

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
            key=None if connect.key is None else self._key_text(connect.key),
            answering=connect.answering,
            deafness=self.deafness,
            limits=rules.limits,
        )

    def add(self, peer: S, now: float) -> Sequence[Action[S]]:
        """Enter ``peer`` (its protocol from :meth:`protocol_for`) in the table.

        A TCP peer joins those waiting for HELLO; if there are
        ``max_pending_peers`` already, the oldest is dropped first.
        Returns those drops, then the flush of our HELLO and the peer's
        first deadline.
        """
        self.now = now
        actions: list[Action[S]] = []
        if not peer.in_process:
            unready = self.unready
            while len(unready) >= self.rules.max_pending_peers:
                oldest = next(iter(unready.values()))
                actions += self.remove(
                    oldest, ExitReason.HANDSHAKE, now, "too many peers without HELLO"
                )
                self._warn_crowded(
                    f"more than {self.rules.max_pending_peers} peers have not said HELLO: "
                    "dropping the oldest"
                )
            unready[peer.uuid] = peer
            self._unready_peak = max(self._unready_peak, len(unready))
        self.peers[peer.uuid] = peer
        self.by_route[peer.protocol.route] = peer
        actions.append(Flush(peer))
        actions.append(WakeAt(peer.protocol.deadline()))
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
        self.now = now
        protocol = peer.protocol
        if reason is ExitReason.HANDSHAKE and not protocol.ready:
            self._missed_handshake(peer.uuid)
        del self.peers[peer.uuid]
        del self.by_route[protocol.route]
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
            self._log(
                f"removed-{reason}",
                logging.DEBUG,
                f"peer {peer.uuid} ({protocol.name}) removed: {reason} {detail}",
            )
        if protocol.ready:
            actions.append(Publish(Exit(peer.uuid, protocol.name)))  # traced by its Drop
            for group in sorted(protocol.groups):
                found = self.groups.get(group)
                if found is None:
                    continue
                found.members.pop(peer.uuid, None)
                if found.joined:
                    members = found.members.keys()
                    self._elect(self.elections.member_left(group, peer.uuid, members, now), actions)
                self._prune(found)
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

    def _prune(self, group: Group) -> None:
        if not group.joined and not group.members:
            del self.groups[group.name]

    # ------------------------------------------------------------- inbound

    def received(self, peer: S, events: Sequence[PeerEvent], now: float) -> list[Action[S]]:
        """What ``peer``'s protocol reported on a message: publish, elect, flush, drop.

        Events are published in order; ballots go to the elections; a
        JOIN or LEAVE of one of our groups may start or repair an election;
        a peer that enters is announced leader of the groups that elected
        it before its HELLO reached us.  If its protocol ended, the
        removal's actions come last.
        """
        self.now = now
        actions: list[Action[S]] = []
        protocol = peer.protocol
        entered = bool(events) and type(events[0]) is Enter
        if entered:
            self._settle(peer, now, actions)
            self.missed_handshakes.pop(peer.uuid, None)
        for event in events:
            if type(event) is Ballot:
                self._ballot(peer, event, now, actions)
                continue
            actions.append(Publish(event, peer))
            if type(event) is Join:
                group = self.groups.get(event.group)
                if group is None:
                    group = self.groups[event.group] = Group(event.group)
                group.members[peer.uuid] = None
                if group.joined:
                    members = group.members.keys()
                    self._elect(
                        self.elections.member_joined(event.group, peer.uuid, members, now),
                        actions,
                    )
            elif type(event) is Leave and (group := self.groups.get(event.group)) is not None:
                group.members.pop(peer.uuid, None)
                if group.joined:
                    members = group.members.keys()
                    self._elect(
                        self.elections.member_left(event.group, peer.uuid, members, now), actions
                    )
                self._prune(group)
        if entered:
            self._announce_leader(peer, actions)
        if protocol.has_queued:
            actions.append(Flush(peer))  # a PING-OK
        if protocol.ended is not None:
            if protocol.ended is ExitReason.LIMITS:
                self._log(
                    "limits",
                    logging.WARNING,
                    f"dropped peer {peer.uuid} ({protocol.name}): {protocol.detail}",
                )
            actions += self.remove(peer, protocol.ended, now, protocol.detail)
        return actions

    def _announce_leader(self, peer: S, actions: list[Action[S]]) -> None:
        """A peer entered that some group elected before we knew it: say so now.

        Ballots travel other links than HELLOs, so a node can hear a wave
        end, naming a winner, before the winner's own HELLO reaches it.
        Such a winner's Leader event waits for its Enter instead of being
        dropped.
        """
        elected = node_id(peer.uuid)
        for group, leader in sorted(self.elections.leaders.items()):
            if leader == elected and self.joined(group):
                actions.append(Publish(Leader(peer.uuid, peer.protocol.name, group)))

    # ----------------------------------------------------------- elections

    def _ballot(self, peer: S, ballot: Ballot, now: float, actions: list[Action[S]]) -> None:
        group = self.groups.get(ballot.group)
        if group is None or not group.joined:
            return  # we left it (or never joined): not ours to elect, and no state kept
        members = group.members.keys()
        if log.isEnabledFor(logging.DEBUG):  # a peer can send any number: rate-limited
            self._log(
                "ballot",
                logging.DEBUG,
                f"{self.rules.name}: {'LEADER' if ballot.leader else 'ELECT'} {ballot.group} "
                f"{ballot.candidate} from {peer.protocol.name}",
            )
        if ballot.leader:
            decided = self.elections.leader(peer.uuid, ballot.group, ballot.candidate, members, now)
        else:
            decided = self.elections.elect(peer.uuid, ballot.group, ballot.candidate, members, now)
        self._elect(decided, actions)

    def _elect(self, decided: Sequence[ElectionAction], actions: list[Action[S]]) -> None:
        """Queue what the elections ask to send, publish what they decided."""
        if decided or self.elections.deadline() < math.inf:
            # An election may have begun, or (with nothing to send) a repair
            # been set to rerun the leader's wave: poll must come for it.
            actions.append(WakeAt(self.elections.deadline()))
        if decided and log.isEnabledFor(logging.DEBUG):  # peers' ballots cause these
            self._log("elections", logging.DEBUG, f"{self.rules.name}: elections: {decided}")
        version = self.rules.version
        for action in decided:
            if isinstance(action, Elected):
                winner = UUID(hex=action.leader)
                if winner == self.me:
                    actions.append(Publish(Leader(winner, self.rules.name, action.group)))
                elif (found := self.peers.get(winner)) is not None and found.protocol.ready:
                    actions.append(Publish(Leader(winner, found.protocol.name, action.group)))
                # Else the others decided before its HELLO reached us: its
                # Enter announces it (_announce_leader).
                continue
            if isinstance(action, SendElect):
                body = wire.election_body(action.group, action.candidate)
                message: wire.Message = wire.Elect(0, body, version=version)
            else:
                body = wire.election_body(action.group, action.leader)
                message = wire.Leader(0, body, version=version)
            for target in action.to:
                if (member := self.peers.get(target)) is not None:
                    member.protocol.queue(message)
                    actions.append(Flush(member))

    def join(self, group: str, now: float) -> list[Action[S]]:
        """Join ``group``: a JOIN queued to every peer, then an election if we contest it.

        Nothing if we are in it already.  Our JOIN is queued first, so
        members see it before our ELECT.
        """
        found = self.groups.get(group)
        if found is not None and found.joined:
            return []
        if found is None:
            found = self.groups[group] = Group(group)
        found.joined = True
        actions = self._tell_groups(wire.Join, group)
        self._elect(self.elections.start(group, found.members.keys(), now), actions)
        return actions

    def leave(self, group: str, now: float) -> list[Action[S]]:
        """Leave ``group``: a LEAVE queued to every peer; its election state is dropped."""
        found = self.groups.get(group)
        if found is None or not found.joined:
            return []
        found.joined = False
        self._prune(found)
        actions = self._tell_groups(wire.Leave, group)
        self.elections.forget(group)
        return actions

    def _tell_groups(self, kind: type[wire.Join | wire.Leave], group: str) -> list[Action[S]]:
        self.status = (self.status + 1) % 256
        message = kind(0, group, self.status, version=self.rules.version)
        actions: list[Action[S]] = []
        for peer in self.peers.values():
            peer.protocol.queue(message)
            actions.append(Flush(peer))
        return actions

    def contest(self, group: str, now: float) -> list[Action[S]]:
        """Stand in ``group``'s elections; in it already, with members, one starts now."""
        self.elections.contest(group)
        actions: list[Action[S]] = []
        found = self.groups.get(group)
        if found is not None and found.joined and found.members:
            self._elect(self.elections.start(group, found.members.keys(), now), actions)
        return actions

    # ---------------------------------------------------------------- clock

    def poll(self, now: float, pongs: Callable[[UUID], int | None]) -> list[Action[S]]:
        """Apply the clock at ``now``: trim, end stuck elections, judge leaving hints.

        ``pongs(peer)``: the PING-OKs the peer has sent us by now, ``None``
        if it is gone.  A peer that announced leaving and did not answer
        its PING in time is removed (reason ``beacon``); one whose check
        must open again is PINGed again.
        """
        self.now = now
        actions: list[Action[S]] = []
        if now >= self.trim_at:
            self.trim_at = math.inf
            if not self.unready:  # else a new crowd: its end will trim
                actions.append(Trim())
        if now >= self.elections.deadline():
            self._elect(self.elections.poll(now, self.members), actions)
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

    def _scoped(self, endpoint: str) -> str:
        """IPv6: a link-local endpoint without scope gets ours (zyre's rule for HELLOs)."""
        if self._scope is None:
            return endpoint
        host = endpoint_host(endpoint)
        if host is None or "%" in host or not self._contains(host):
            return endpoint
        port = endpoint.rsplit(":", 1)[1]
        return f"tcp://{host}%{self._scope}:{port}"

    def _warn_crowded(self, what: str) -> None:
        log_rarely(
            log,
            self._log_limiter,
            "crowded",
            logging.WARNING,
            "%s (forged beacons?)",
            what,
            now=self.now,
        )

    def _log(self, topic: str, level: int, what: str) -> None:
        """Log ``what`` unless this topic was logged in the last 10 s (floods log per packet)."""
        limiter = self._debug_limiter if level <= logging.DEBUG else self._log_limiter
        log_rarely(log, limiter, topic, level, "%s", what, now=self.now)

    def log_rarely(self, topic: str, level: int, what: str, now: float) -> None:
        """The shell's lines that a remote party can trigger, under the same limits."""
        self.now = now
        self._log(topic, level, what)
