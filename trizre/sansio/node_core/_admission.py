"""Whom a node links to: the beacon, gossip, HELLO, CURVE-key and budget rules, sans I/O.

Anyone who can send a datagram can announce any UUID at any endpoint, so
every way a peer can come is judged here before it costs a socket:
:meth:`Admission.speaks` (the protocol version and CURVE downgrades),
:meth:`Admission.connect` (endpoints on our network, keys on the
allow-list), :meth:`Admission.admit` (the new-peer budgets, per source and
for all sources together), :meth:`Admission.stranger` (a HELLO from a
sender we do not know, with the key-spoofing rule) and
:meth:`Admission.credible_leave` (a leaving beacon is only a hint).
Lines a remote party can trigger go through :class:`Voice` (one a topic
every 10 s).
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Callable, Sequence
from typing import Final, Generic, final
from uuid import UUID

import attrs

from ... import wire
from ...wire import OVERSIZE
from .._guard import LogLimiter, NewPeerBudget, credible_leave, log_rarely
from .._peer import PeerLimits, hello_from_stranger
from ._actions import Connect, S

__all__ = ["BEACONS_IGNORED", "SOURCE_BURST", "Admission", "CoreRules", "Voice", "endpoint_host"]

log = logging.getLogger("trizre.node")

SOURCE_BURST: Final = 64  # new peers one beacon source may announce at once

BEACONS_IGNORED: Final = (
    "version",
    "downgrade",
    "curve",
    "forged_leave",
    "throttled",
    "outside",
    "not_allowed",
    "claimed",
)
"""Why the rules ignore a beacon, as :attr:`Admission.ignored` counts them.

``version``: it announces the other ZRE version; ``downgrade``: no CURVE
key, and we talk CURVE only; ``curve``: a CURVE key, and we have no
certificate; ``forged_leave``: a leaving beacon not from the peer's host or
key; ``throttled``: a new peer over the new-peer budget (per source or for
all); ``outside``: an endpoint outside our interface's network;
``not_allowed``: a CURVE key not in ``curve_allow``; ``claimed``: a new
UUID naming our own endpoint or an entered peer's (a forged beacon could
otherwise make us link to that peer under our identity, which a plain
inbox takes for our restart).
"""


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


@final
class Voice:
    """The core's log lines, rate-limited: one a topic every 10 s (ten for DEBUG).

    ``now``: the time of the latest input, which the core sets.
    """

    def __init__(self) -> None:
        self.now = 0.0
        self._limiter = LogLimiter()
        self._debug_limiter = LogLimiter(burst=10)  # DEBUG: a few more details

    def say(self, topic: str, level: int, what: str) -> None:
        """Log ``what`` unless this topic was logged in the last 10 s (floods log per packet)."""
        limiter = self._debug_limiter if level <= logging.DEBUG else self._limiter
        log_rarely(log, limiter, topic, level, "%s", what, now=self.now)

    def warn(self, what: str) -> None:
        """A WARNING that a flood of forged beacons would repeat: topic ``crowded``."""
        log_rarely(
            log,
            self._limiter,
            "crowded",
            logging.WARNING,
            "%s (forged beacons?)",
            what,
            now=self.now,
        )


def _always(_host: str) -> bool:
    return True


@final
class Admission(Generic[S]):
    """The rules that decide whether to link to a peer; the core asks them.

    ``peers``: the core's table (read: a HELLO under a known UUID must
    carry its key); the other arguments as :class:`~trizre.sansio.node_core.NodeCore`'s.
    """

    def __init__(
        self,
        rules: CoreRules,
        peers: dict[UUID, S],
        voice: Voice,
        *,
        contains: Callable[[str], bool] = _always,
        scope: str | None = None,
        key_text: Callable[[bytes], str] = bytes.hex,
        key_bytes: Callable[[str], bytes] = bytes.fromhex,
    ) -> None:
        self.rules = rules
        self._peers = peers
        self._voice = voice
        self._contains = contains
        self._scope = scope
        self._key_text = key_text
        self._key_bytes = key_bytes
        # Beacons ignored, by reason: a fixed set of keys (bounded), read by
        # the shell's statistics.  Counted once per beacon that reaches a
        # rule; quiet beacons (ours, known peers') never do.
        self.ignored: dict[str, int] = dict.fromkeys(BEACONS_IGNORED, 0)
        # New peers by beacon: per source, and all sources together (spoofed
        # sources): no faster than handshakes time out, so the pending
        # table does not churn sockets (see docs/security.md).
        self._budget = NewPeerBudget(
            rules.new_peers_per_source,
            SOURCE_BURST,
            total_rate=max(
                rules.new_peers_per_source, rules.max_pending_peers / rules.handshake_timeout
            ),
            total_burst=max(SOURCE_BURST, rules.max_pending_peers),
        )

    def key_text(self, key: bytes) -> str:
        """A raw key's Z85 text."""
        return self._key_text(key)

    def speaks(self, beacon: wire.Beacon, source: str) -> bool:
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
            self.ignored["downgrade"] += 1
            self._voice.say(
                "downgrade",
                logging.INFO,
                f"ignoring beacons without a CURVE key (from {source}, among others): "
                "this node talks CURVE only",
            )
            return False
        if beacon.public_key is not None:
            self.ignored["curve"] += 1
            self._voice.say(
                "curve-beacon",
                logging.INFO,
                f"ignoring CURVE beacons (from {source}, among others): "
                "this node has no certificate (open_node(curve=...))",
            )
            return False
        if beacon.version == (1 if self.rules.version == 2 else 3):
            return True
        self.ignored["version"] += 1
        return False

    def credible_leave(self, peer: S, beacon: wire.Beacon, source: str) -> bool:
        """Whether a leaving beacon from ``source`` could be ``peer``'s own; logs (rarely) if not.

        From another host than the peer's, or (CURVE) with another key than
        the one its link authenticates, it is not: see
        :func:`~trizre.sansio._guard.credible_leave`.
        """
        protocol = peer.protocol
        key = None if protocol.key is None else self._key_bytes(protocol.key)
        if credible_leave(source, beacon.public_key, protocol.endpoint, key):
            return True
        self.ignored["forged_leave"] += 1
        self._voice.say(
            "forged-leave",
            logging.INFO,
            f"ignoring a leaving beacon for peer {peer.uuid} from {source}: "
            "not from its host, or not with its key (forged?)",
        )
        return False

    def gossip_value(self, peer_uuid: UUID, value: str) -> Connect | None:
        """A peer's gossip tuple value (``endpoint``, ``|`` its Z85 key with CURVE)."""
        endpoint, _, key_text = value.partition("|")
        key: bytes | None = None
        if key_text:
            try:
                key = self._key_bytes(key_text)
            except ValueError:
                self._voice.say(
                    "gossip-key",
                    logging.DEBUG,
                    f"ignoring gossip for {peer_uuid}: bad key {key_text!r}",
                )
                return None
        if (self.rules.curve is None) != (key is None):
            self._voice.say(
                "gossip-curve",
                logging.INFO,
                f"ignoring gossip for peer {peer_uuid}: "
                + (
                    "no CURVE key (this node talks CURVE only)"
                    if key is None
                    else "it talks CURVE and this node has no certificate"
                ),
            )
            return None
        return self.connect(peer_uuid, endpoint, key)

    def stranger(self, frames: Sequence[bytes]) -> Connect | None:
        """A message from a sender not in the table: a HELLO makes it a peer (:class:`Connect`).

        Commands before HELLO are ignored, so are oversize messages (the
        inbox marks them) and HELLOs over the limits.  In CURVE mode the
        sender is known by its key and UUID together: a HELLO for a UUID we
        know under another key is refused, so nobody can speak as another
        peer, whatever key the allow-list gave them.
        """
        limits = self.rules.limits
        if len(frames) > 1 and frames[1] is OVERSIZE:
            # The inbox refused a message over max_message_size (see
            # PeerProtocol.receive) from a sender we do not know.
            self._voice.say(
                "oversize",
                logging.WARNING,
                f"dropped a message over max_message_size ({limits.message_size} octets) "
                "from an unknown sender",
            )
            return None
        if len(frames) < 2:
            return None
        if (excess := limits.hello_excess(frames[1])) is not None:
            self._voice.say("limits", logging.WARNING, f"refused a HELLO that {excess}")
            return None
        # Measured just above, with a log line: not again.
        found = hello_from_stranger(
            frames, self.rules.version, curve=self.rules.curve is not None, limits=None
        )
        if found is None:
            return None  # commands before HELLO are ignored (and key-less HELLOs in CURVE mode)
        peer_uuid, hello, key = found
        known = self._peers.get(peer_uuid)
        if key is not None and known is not None and known.protocol.key != key:
            self._voice.say(
                "spoof",
                logging.WARNING,
                f"refused a HELLO from key {key} for peer {peer_uuid}, "
                f"which is known under key {known.protocol.key}",
            )
            return None
        raw_key = None if key is None else self._key_bytes(key)
        return self.connect(peer_uuid, hello.endpoint, raw_key, answering=True)

    def connect(
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
                self._voice.say(
                    "not-tcp",
                    logging.DEBUG,
                    f"ignoring peer {peer_uuid} at {endpoint!r}: not tcp:// or ipc://",
                )
                return None
        else:
            endpoint = self.scoped(endpoint)
        if self.rules.curve is not None:
            if key is None:
                return None  # never: beacons and HELLOs without a key are turned away first
            allowed = self.rules.curve_allow
            if allowed is not None and key not in allowed:
                # It could not link back to us: do not half-connect.
                if source is not None:
                    self.ignored["not_allowed"] += 1
                self._voice.say(
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
        # The budget first: under a flood of forged beacons most stop here,
        # before the costlier checks below.
        if (
            not in_process
            and connect.source is not None
            and (refused := self._budget.admit(connect.source, now))
        ):
            self.ignored["throttled"] += 1
            if refused == "source":
                self._voice.warn(f"{connect.source} announces more new peers than allowed")
            else:
                self._voice.warn("beacons from all sources announce more new peers than allowed")
            return False
        if not self.rules.gossiping:
            host = endpoint_host(connect.endpoint)
            if host is None or not self._contains(host):
                if connect.source is not None:
                    self.ignored["outside"] += 1
                self._voice.say(
                    "outside",
                    logging.DEBUG,
                    f"ignoring peer {connect.uuid} at {connect.endpoint!r}: outside our network",
                )
                return False
        return True

    def scoped(self, endpoint: str) -> str:
        """IPv6: a link-local endpoint without scope gets ours (zyre's rule for HELLOs)."""
        if self._scope is None:
            return endpoint
        host = endpoint_host(endpoint)
        if host is None or "%" in host or not self._contains(host):
            return endpoint
        port = endpoint.rsplit(":", 1)[1]
        return f"tcp://{host}%{self._scope}:{port}"
