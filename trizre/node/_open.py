"""Starting and stopping a node: :func:`open_node`, its options, its discovery and ZAP."""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager, nullcontext

import trio

from .. import wire
from .._concurrency import unwrap_single_exception_group
from ..trace._writer import Tracer
from ..transport._curve import CURVE_ALLOW_ANY, Certificate, CurveKey, CurvePolicy, open_zap
from ..transport._discovery import Discovery, open_beacon_hub, open_memory_discovery
from ..transport._interfaces import Interface, Interface6, select_interface, select_interface6
from ._config import DiscoveryKind, NodeConfig
from ._node import Node

__all__ = ["open_node"]

log = logging.getLogger("trizre.node")


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
    watch_links: bool = True,
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
    busy_poll: float = 0.0,
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
        watch_links: end an entered TCP peer at once (Exit, reason
            ``link``) when its connection into our inbox closes: it died
            or stopped, ended us, or our inbox dropped it
            (``docs/node.md``, Send guarantee).  One libzmq socket
            monitor on the inbox, two descriptors a node, nothing a
            link.  ``False``: a broken link ends its peer only by
            presence (evasive, expired) or the receiver's sequence check,
            as in zyre.  Not a bool: ``TypeError``.
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
        busy_poll: the low-latency mode, off by default (0): seconds, at
            most 0.001, that the TCP inbox polls for the next message after
            receiving one, first while the run's other tasks work (the
            application's reply goes out), then spinning without a
            checkpoint once they all wait, before it sleeps in the run
            loop.  Lower round-trip latency, paid in CPU: a spin of up
            to ``busy_poll`` after each message not followed by another
            in time; an idle node burns nothing more.  The
            spin holds the whole Trio run (timers, other descriptors) for
            at most ``busy_poll`` (one spin per run at a time).  In-memory
            links never poll.  See ``docs/node.md``, Low-latency mode.

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
        watch_links=watch_links,
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
        busy_poll=busy_poll,
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
