"""Discovery: how a node hears of its peers.  One interface, two implementations.

A node announces itself and hears others through a :class:`Discovery`:
``send`` a beacon, ``listen`` for everyone's.  Two implementations:

* :class:`BeaconHub`: ZRE's UDP beacons over IPv4 broadcast (22/ZRE-DISC),
  one socket per interface and port per Trio run (below);
* :class:`MemoryDiscovery`: the nodes of one Trio run hear each other's
  beacons in memory, without a socket, so tests and simulations run under
  ``trio.testing.MockClock`` with exact virtual times.

Gossip and IPv6 multicast will be further implementations.

The UDP beacon socket
---------------------

Why the socket is set up the way it is:

* ``SO_REUSEADDR`` + ``SO_REUSEPORT``: any number of nodes, in one process
  or several, share the discovery port on one host. The kernel hands each
  *broadcast* datagram to every socket bound to the port (unicast ones it
  would hand to just one, which is why beacons are never sent unicast).
* The socket is bound to the interface's **broadcast address**, not to
  ``0.0.0.0``. Measured on ``lo``: three sockets bound to
  ``127.255.255.255`` all receive a datagram sent to ``127.255.255.255``,
  exactly as three sockets bound to ``0.0.0.0`` do (and sockets bound to
  ``127.0.0.1`` receive nothing). But the broadcast-bound socket receives
  *only* datagrams addressed to that broadcast address: a node on ``lo``
  never sees a beacon broadcast on the LAN (to, say, ``192.0.2.255``), nor
  anything sent unicast to the port. (The price, by the kernel's rule that
  a bound address must equal the destination, not tested here since such a
  send would leave loopback: datagrams to the limited broadcast address
  ``255.255.255.255`` are not received either. Our senders always use the
  subnet's broadcast address.)
* Defence in depth: datagrams whose sender is outside the interface's
  subnet are dropped as well. A beacon's sender address is where the node
  will later open a TCP connection, so a node meant to stay on ``lo`` must
  never learn of a LAN peer, whatever the bind did or a future platform
  port does (binding to ``0.0.0.0`` where binding to a broadcast address
  is not possible, for instance).
* Invalid beacons are dropped silently, as 36/ZRE and 43/ZRE require, and
  logged at DEBUG on the ``trizre.discovery`` logger with the sender's
  address. Up to 255 octets are read per datagram, so an oversize datagram
  is seen at (truncated) oversize and rejected, never truncated into a
  valid 22- or 54-octet beacon.
* Own beacons are *not* filtered here: the socket receives what it sends,
  and the node drops its own by UUID.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import math
import socket
import struct
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from contextlib import asynccontextmanager
from typing import Final, Protocol, final

import trio
from trio_util import RepeatedEvent

from trizre._concurrency import RunLocal, checkpoint, clock_reader
from trizre.sansio._guard import LogLimiter, log_rarely
from trizre.transport._interfaces import Interface, Interface6
from trizre.wire import Beacon, DecodeError, decode_beacon, encode_beacon

__all__ = [
    "BeaconHub",
    "BeaconSocket",
    "Deliver",
    "Discovery",
    "Ignored",
    "MemoryDiscovery",
    "SourceThrottle",
    "open_beacon_hub",
    "open_beacon_socket",
    "open_memory_discovery",
]

logger = logging.getLogger("trizre.discovery")

_READ_SIZE: Final = 255
"""Octets read per datagram: above the largest beacon (54), so oversize is visible."""
_SENDERS_KEPT: Final = 4096
"""Senders whose place (in the subnet or not) a beacon socket remembers."""
_RUN_SLICE: Final = 0.001
"""Seconds a beacon socket's reader runs, once woken, before it lets other tasks run.

The nodes of a process send their beacons together: a checkpoint a
datagram was a turn of the run loop a beacon (100 nodes: 100 a second
idle), where the queue of cheap datagrams (beacons the nodes know) is
read in one or two.  Time, not a count: each datagram goes to every node
of the process, and a forged one costs each a new peer, so under a flood
a count of them could hold the run for many milliseconds."""


@final
class BeaconSocket:
    """A UDP socket that broadcasts and receives ZRE beacons on one interface.

    Made by :func:`open_beacon_socket`; do not construct it directly. Any
    number of tasks may call :meth:`send`; call :meth:`receive` from one
    task at a time (several would each get different beacons).
    """

    __slots__ = (
        "_closed",
        "_destination",
        "_inside",
        "_interface",
        "_logs",
        "_now",
        "_port",
        "_raw",
        "_sock",
        "_yield_at",
        "undecodable",
    )

    def __init__(self, interface: Interface | Interface6, port: int, raw: socket.socket) -> None:
        self._interface = interface
        self._port = port
        # The same socket twice: Trio's, to wait, and the standard one (left
        # non-blocking by Trio) to read what is queued, and to send what the
        # kernel takes at once, without a checkpoint.
        self._raw = raw
        self._sock = trio.socket.from_stdlib_socket(raw)
        self._now = clock_reader()  # made inside the run (open_beacon_socket is async)
        self._yield_at = -math.inf  # when the reader's slice ends: a checkpoint is due
        self._destination: tuple[str, int] | tuple[str, int, int, int] = (
            (str(interface.broadcast), port, 0, interface.index)
            if isinstance(interface, Interface6)
            else (str(interface.broadcast), port)
        )
        self._closed = False
        # Parsing an address costs more than the rest of a beacon: a flood
        # from many (spoofed) senders pays it once per sender.
        self._inside: dict[str, bool] = {}
        self._logs = LogLimiter(burst=10)  # anyone can send datagrams: rate-limited
        self.undecodable = 0  # datagrams from the subnet that are not beacons (statistics)

    @property
    def interface(self) -> Interface | Interface6:
        """The interface this socket beacons on."""
        return self._interface

    @property
    def port(self) -> int:
        """The UDP discovery port (the same for sending and receiving)."""
        return self._port

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"<BeaconSocket {self._interface.name} {self._destination[0]}:{self._port} {state}>"

    async def send(self, beacon: Beacon) -> None:
        """Broadcast *beacon* as one datagram to ``interface.broadcast:port``.

        Cancellation: a UDP send is all or nothing; if this raises
        :class:`trio.Cancelled` nothing was sent, otherwise one whole
        datagram was.  A datagram the kernel takes at once (nearly always)
        goes without a checkpoint: a beacon loop sleeps right after, and
        Trio's send costs a task step and ~30 Python calls, a beacon of
        each node of a process every interval.

        Raises:
            trio.ClosedResourceError: the socket has been closed.
            trizre.wire.EncodeError: *beacon* cannot be encoded (see
                :func:`~trizre.wire.encode_beacon`); nothing is sent.
            OSError: the kernel refused the datagram (for instance the
                interface went down).
        """
        if self._closed:
            raise trio.ClosedResourceError("beacon socket is closed")
        data = encode_beacon(beacon)
        try:
            self._raw.sendto(data, self._destination)
        except BlockingIOError:
            await self._sock.sendto(data, self._destination)  # no room: wait for it

    async def receive(self) -> tuple[Beacon, str]:
        """Wait for the next valid beacon; return it with its sender's IPv4 address.

        Datagrams that do not decode as a beacon, or whose sender is outside
        the interface's subnet, are discarded silently (logged at DEBUG on
        ``trizre.discovery``) and the wait goes on. Beacons this socket sent
        itself are returned like any other.

        Cancellation: a datagram is taken off the socket only by a call that
        then returns it (or discards it as invalid), so a cancelled receive
        loses no beacon it would have returned; the next call gets it.

        Raises:
            trio.ClosedResourceError: the socket has been closed, also when
                closed while this call was waiting.
            OSError: an unexpected socket error.
        """
        beacon, sender, _data = await self._receive()
        return beacon, sender

    async def _receive(self) -> tuple[Beacon, str, bytes]:
        """:meth:`receive`, also returning the datagram."""
        while True:
            if self._closed:
                raise trio.ClosedResourceError("beacon socket is closed")
            data = None
            if self._now() < self._yield_at:  # else a checkpoint is due
                with contextlib.suppress(BlockingIOError):  # nothing queued: wait below
                    data, address = self._raw.recvfrom(_READ_SIZE)
            if data is None:
                data, address = await self._sock.recvfrom(_READ_SIZE)
                self._yield_at = self._now() + _RUN_SLICE
            sender: str = address[0]
            if isinstance(self._interface, Interface6):
                if address[3] != self._interface.index:
                    continue  # another link's: its scope is not ours
                # Link-local addresses mean something only with their scope.
                sender = f"{sender.partition('%')[0]}%{self._interface.name}"
            inside = self._inside.get(sender)
            if inside is None:
                if len(self._inside) >= _SENDERS_KEPT:
                    self._inside.clear()
                inside = self._inside[sender] = self._interface.contains(sender)
            if not inside:
                log_rarely(
                    logger,
                    self._logs,
                    "outside",
                    logging.DEBUG,
                    "dropped a datagram from %s: outside %s's subnet %s",
                    sender,
                    self._interface.name,
                    self._interface.network,
                    now=trio.current_time(),
                )
                continue
            try:
                beacon = decode_beacon(data)
            except DecodeError as exc:
                self.undecodable += 1
                log_rarely(
                    logger,
                    self._logs,
                    "invalid",
                    logging.DEBUG,
                    "dropped an invalid beacon from %s: %s",
                    sender,
                    exc,
                    now=trio.current_time(),
                )
                continue
            return beacon, sender, data

    def _close(self) -> None:
        self._closed = True
        self._sock.close()


@asynccontextmanager
async def open_beacon_socket(
    interface: Interface | Interface6, port: int
) -> AsyncIterator[BeaconSocket]:
    """Open a :class:`BeaconSocket` on *interface* and UDP *port*.

    The socket is bound (to ``interface.broadcast:port``, sharing the port
    with any other beacon socket on this host) before the block is entered,
    so a beacon sent after entry is received. Leaving the block closes the
    socket: later calls, and calls waiting at that moment, raise
    :class:`trio.ClosedResourceError`.

    Raises:
        ValueError: *port* is not in 1..65535.
        TypeError: *port* is not an ``int``.
        OSError: the socket cannot be created or bound (for instance the
            broadcast address is not one of this host's, or another user's
            socket holds the port without ``SO_REUSEPORT``).
    """
    beacon_socket = await _bind(interface, port)
    try:
        yield beacon_socket
    finally:
        beacon_socket._close()


async def _bind(interface: Interface | Interface6, port: int) -> BeaconSocket:
    if not isinstance(port, int) or isinstance(port, bool):
        raise TypeError(f"port must be an int, got {port!r}")
    if not 1 <= port <= 0xFFFF:
        raise ValueError(f"port must be in 1..65535, got {port}")
    ipv6 = isinstance(interface, Interface6)
    beacon_socket = BeaconSocket(
        interface,
        port,
        socket.socket(socket.AF_INET6 if ipv6 else socket.AF_INET, socket.SOCK_DGRAM),
    )
    sock = beacon_socket._sock
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        if isinstance(interface, Interface6):
            # As zyre: join ff02::1 on the one interface, send through it.
            # Bound to the group (not ::), the socket hears nothing else.
            group = socket.inet_pton(socket.AF_INET6, str(interface.broadcast))
            mreq = group + struct.pack("@I", interface.index)
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_JOIN_GROUP, mreq)
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_MULTICAST_IF, interface.index)
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_MULTICAST_LOOP, 1)
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_MULTICAST_HOPS, 1)
            await sock.bind((str(interface.broadcast), port, 0, interface.index))
        else:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
            await sock.bind((str(interface.broadcast), port))
    except OSError as exc:
        beacon_socket._close()
        if exc.errno == errno.EADDRINUSE:
            raise OSError(
                exc.errno,
                f"UDP beacon port {port} on {interface.broadcast} ({interface.name}) is held "
                "by a socket that does not share it (no SO_REUSEPORT): another program, "
                "or a process of another user; stop it or choose another beacon_port",
            ) from exc
        raise
    except BaseException:
        beacon_socket._close()
        raise
    return beacon_socket


# ------------------------------------------------------------ the interface

# (beacon, sender address, key, now): the key is the same bytes object for
# every beacon with the same content and sender, so a node can remember
# "nothing to do for this one" with one dict lookup whose hash is already
# computed; ``now`` (trio.current_time()) is read once for all listeners.
Deliver = Callable[[Beacon, str, bytes, float], None]

# A listener's keys of beacons it needs nothing for, kept by the listener:
# a key it maps to None is not handed to it.  In the steady state nearly
# every beacon is such a one (its own, a known peer's), and n nodes in one
# process hear n beacons an interval each: a dict lookup here instead of
# two Python calls in the node (100 nodes: 10,000 a second).
Ignored = Mapping[bytes, object]

_ASK: Final = object()  # a key the listener does not know: hand it the beacon


def _deliver_all(
    listeners: Iterable[tuple[Deliver, Ignored | None]],
    beacon: Beacon,
    sender: str,
    key: bytes,
    now: float,
    *,
    logs: LogLimiter,
) -> None:
    """Hand a beacon to each listener that has not said it needs nothing for ``key``."""
    for deliver, ignored in listeners:
        if ignored is not None and ignored.get(key, _ASK) is None:
            continue
        try:
            deliver(beacon, sender, key, now)
        except Exception:
            log_rarely(
                logger,
                logs,
                "failed",
                logging.ERROR,
                "a node failed to handle a beacon from %s",
                sender,
                now=now,
                exc_info=True,
            )


class Discovery(Protocol):
    """How a node announces itself and hears of its peers."""

    async def send(self, beacon: Beacon) -> None:
        """Announce ``beacon`` to every node listening (ourselves included).

        Raises ``trio.ClosedResourceError`` once closed, ``OSError`` when
        the network refused it.
        """
        ...

    async def listen(self, deliver: Deliver, ignored: Ignored | None = None) -> None:
        """Call ``deliver`` for every beacon heard, synchronously, until cancelled.

        Each call gets the beacon, its sender, its key (see ``Deliver``) and
        when it was heard (``trio.current_time()``, read once a beacon).
        ``ignored``, a mapping the listener keeps: a beacon whose key it
        maps to ``None`` is not delivered (read at each beacon, so the
        listener may add and remove keys at any time).

        ``deliver`` must not block; an exception from it is logged and the
        other listeners still get the beacon.
        """
        ...


# ------------------------------------------------------------------ the hub
_MAX_KEYS: Final = 4096

_HUBS: Final[RunLocal[dict[tuple[str, str, int], BeaconHub]]] = RunLocal("trizre_beacon_hubs", dict)


@final
class BeaconHub:
    """One beacon socket per (interface, port) per Trio run, shared by its nodes.

    With a socket per node, n nodes in one process receive and decode n
    copies of every beacon: n² datagrams a beacon interval.  The hub
    receives each once and hands it to every node's ``deliver`` callback,
    synchronously.  Its socket is read by one of its listeners' tasks at a
    time (the "host"); when the host's node stops, another listener takes
    over, so no task outlives the nodes.  Nodes also send through
    :attr:`socket`.
    """

    def __init__(self) -> None:
        self.socket: BeaconSocket | None = None
        self._opened = trio.Event()
        self._error: BaseException | None = None
        self._users = 0
        self._listeners: dict[object, tuple[Deliver, Ignored | None]] = {}
        self._host: object | None = None
        self._host_gone = RepeatedEvent()
        self._keys: dict[bytes, bytes] = {}
        self._logs = LogLimiter()

    async def send(self, beacon: Beacon) -> None:
        """Broadcast ``beacon`` (see :meth:`BeaconSocket.send`)."""
        if self.socket is None:
            raise trio.ClosedResourceError("the beacon hub is not open")
        await self.socket.send(beacon)

    async def listen(self, deliver: Deliver, ignored: Ignored | None = None) -> None:
        """Deliver every valid beacon to ``deliver`` until cancelled.

        ``deliver`` must not block; an exception from it is logged and the
        other listeners still get the beacon.  n nodes in one process hear
        n beacons an interval each, n² in all: the key (see ``Deliver``)
        and ``ignored`` (see :meth:`Discovery.listen`) make each of the
        steady state one dict lookup, with no call.
        """
        token = object()
        self._listeners[token] = (deliver, ignored)
        try:
            while True:
                if self._host is not None:
                    await self._host_gone.wait()
                    continue
                self._host = token
                try:
                    await self._pump()
                finally:
                    self._host = None
                    self._host_gone.set()
        finally:
            del self._listeners[token]

    async def _pump(self) -> None:
        assert self.socket is not None
        keys = self._keys
        while True:
            beacon, sender, data = await self.socket._receive()
            key = data + sender.encode()
            if len(keys) >= _MAX_KEYS and key not in keys:
                keys.clear()  # churn of departed senders: start over
            key = keys.setdefault(key, key)
            now = trio.current_time()
            _deliver_all(list(self._listeners.values()), beacon, sender, key, now, logs=self._logs)


@asynccontextmanager
async def open_beacon_hub(interface: Interface | Interface6, port: int) -> AsyncIterator[BeaconHub]:
    """Join (or open) this Trio run's shared beacon hub for *interface* and *port*.

    The hub's socket is opened by the first user and closed by the last.
    Raises as :func:`open_beacon_socket` does.
    """
    hubs = _HUBS.get()
    key = (interface.name, str(interface.broadcast), port)
    hub = hubs.get(key)
    creator = hub is None
    if hub is None:
        hub = hubs[key] = BeaconHub()
    hub._users += 1
    try:
        if creator:
            try:
                hub.socket = await _bind(interface, port)
            except BaseException as exc:
                hub._error = exc
                raise
            finally:
                hub._opened.set()
        else:
            await hub._opened.wait()
            if hub._error is not None:
                raise OSError(f"the shared beacon socket could not open: {hub._error}")
        yield hub
    finally:
        hub._users -= 1
        if hub._users == 0:
            if hubs.get(key) is hub:
                del hubs[key]
            if hub.socket is not None:
                hub.socket._close()


# --------------------------------------------------------------- in memory

_NETWORKS: Final[RunLocal[dict[tuple[str, int], MemoryDiscovery]]] = RunLocal(
    "trizre_memory_discovery", dict
)


@final
class MemoryDiscovery:
    """Beacons between the nodes of one Trio run, delivered in memory.

    Nodes on the same interface name and beacon port hear each other, as
    on one broadcast domain; a beacon appears to come from the interface's
    address.  No socket is opened and nothing is sent on any network.
    Delivery is synchronous, so under ``trio.testing.MockClock`` a node
    hears a beacon at the virtual instant it was sent.
    """

    def __init__(self, address: str) -> None:
        self._address = address
        self._listeners: dict[object, tuple[Deliver, Ignored | None]] = {}
        self._users = 0
        self._closed = False
        self._logs = LogLimiter()

    async def send(self, beacon: Beacon) -> None:
        """Hand ``beacon`` to every listener now (see :class:`Discovery`)."""
        await checkpoint()
        if self._closed:
            raise trio.ClosedResourceError("the in-memory discovery is closed")
        self.deliver(beacon, self._address)

    def deliver(self, beacon: Beacon, sender: str) -> None:
        """Hand ``beacon`` to every listener now, as if ``sender`` had sent it.

        For tests that play other hosts (forged beacons, peers that are not
        nodes); never waits.  :meth:`send` is this from the interface's
        address, after a checkpoint.
        """
        key = encode_beacon(beacon) + sender.encode()
        now = trio.current_time()
        listeners = list(self._listeners.values())
        _deliver_all(listeners, beacon, sender, key, now, logs=self._logs)

    async def listen(self, deliver: Deliver, ignored: Ignored | None = None) -> None:
        """Register ``deliver`` until cancelled (see :class:`Discovery`)."""
        token = object()
        self._listeners[token] = (deliver, ignored)
        try:
            await trio.sleep_forever()
        finally:
            del self._listeners[token]


@asynccontextmanager
async def open_memory_discovery(interface: Interface, port: int) -> AsyncIterator[MemoryDiscovery]:
    """Join (or start) this Trio run's in-memory discovery for *interface* and *port*."""
    networks = _NETWORKS.get()
    key = (interface.name, port)
    network = networks.get(key)
    if network is None:
        network = networks[key] = MemoryDiscovery(str(interface.address))
    network._users += 1
    try:
        await checkpoint()
        yield network
    finally:
        network._users -= 1
        if network._users == 0:
            network._closed = True
            if networks.get(key) is network:
                del networks[key]


# ---------------------------------------------------------------- throttle


@final
class SourceThrottle:
    """How many new peers one beacon source may bring: a token bucket per address.

    Anyone can send beacons for thousands of made-up UUIDs from one host,
    and each new UUID costs a node a socket and a HELLO.  Each source
    address may bring ``burst`` new peers at once, then ``rate`` a second.
    Sans I/O: the caller passes the time.  At most ``max_sources``
    addresses are remembered; past that the table starts over (a forger
    spreading over more addresses than that is bounded by the node's
    pending-peer limit instead).  Bad input: a non-positive ``rate`` or a
    ``burst`` below 1 raises ``ValueError``.
    """

    __slots__ = ("_buckets", "_burst", "_max_sources", "_rate")

    def __init__(self, rate: float, burst: int, max_sources: int = 4096) -> None:
        if not rate > 0 or burst < 1:
            raise ValueError(f"a throttle needs rate > 0 and burst >= 1, got {rate!r}, {burst!r}")
        self._rate = rate
        self._burst = float(burst)
        self._max_sources = max_sources
        self._buckets: dict[str, tuple[float, float]] = {}  # source -> (tokens, at)

    def admit(self, source: str, now: float) -> bool:
        """Take one token for ``source`` at ``now``; False when it has none left."""
        tokens, at = self._buckets.get(source, (self._burst, now))
        tokens = min(self._burst, tokens + (now - at) * self._rate)
        admitted = tokens >= 1.0
        if admitted:
            tokens -= 1.0
        if source not in self._buckets and len(self._buckets) >= self._max_sources:
            self._buckets.clear()
        self._buckets[source] = (tokens, now)
        return admitted
