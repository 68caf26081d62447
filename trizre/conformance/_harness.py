"""What the cases act with: the suite's fake peers, beacons, and the target.

A :class:`FakePeer` is a ZRE peer under the suite's full control: a ROUTER
mailbox the target connects to, a DEALER to the target's mailbox, and UDP
beacons with any bytes.  A :class:`GossipLink` is a ZGP socket of the
suite's (czmq's zgossip protocol): the hub the target connects to in gossip
mode, or a client of the target's own hub.  Every datagram and connection
goes to the interface the suite was given (loopback, or a veth inside a
namespace the suite created) and nowhere else.
"""

from __future__ import annotations

import socket
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import attrs
import trio
import zmq
from zmq.utils import z85

from .. import wire
from ..transport._interfaces import Interface, select_interface
from ..transport._zsock import ZSocket, context
from ._agent import AgentProcess
from ._errors import ConformanceError


class Fail(ConformanceError):
    """A case failed: what was sent, what was expected, what came back."""

    def __init__(self, sent: str, expected: str, got: str) -> None:
        super().__init__(f"sent {sent}; expected {expected}; got {got}")
        self.sent = sent
        self.expected = expected
        self.got = got


class NotApplicable(ConformanceError):
    """A case cannot run against this target (no agent, no settable timeout, ...)."""


@attrs.frozen
class Profile:
    """The suite's timings, in seconds.

    ``reply``: how long a reply may take; ``quiet``: how long the suite
    watches for something that must *not* happen; ``beacon``: how often a
    fake peer beacons; ``evasive``/``expired``: the presence timeouts the
    agent is asked to use; ``late``/``early``: the tolerance on those.
    """

    reply: float = 5.0
    quiet: float = 1.0
    beacon: float = 0.25
    evasive: float = 1.5
    expired: float = 4.0
    late: float = 1.5
    early: float = 0.3


@attrs.define
class TargetInfo:
    """What the suite knows of the target: from its beacons (and its agent)."""

    uuid: uuid.UUID
    address: str
    port: int
    beacon_version: int
    beacon_size: int
    beacon: bytes

    @property
    def endpoint(self) -> str:
        return f"tcp://{self.address}:{self.port}"


class BeaconRadio:
    """Send raw beacon datagrams to the interface's broadcast address, and hear the target's.

    Receiving: a socket bound like a ZRE node's (the broadcast address,
    ``SO_REUSEPORT``), so it hears every beacon on the port.
    """

    def __init__(self, interface: Interface, port: int) -> None:
        self.interface = interface
        self.port = port
        self._out = trio.socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self._out.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
        self._in = trio.socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self._in.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._in.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        self.heard: dict[uuid.UUID, tuple[bytes, str, float]] = {}
        self.ours: set[uuid.UUID] = set()  # our fake peers' UUIDs: never the target
        self._changed = trio.Event()

    async def bind(self) -> None:
        await self._out.bind((str(self.interface.address), 0))
        await self._in.bind((str(self.interface.broadcast), self.port))

    async def send(self, data: bytes) -> None:
        """One datagram to ``broadcast:port`` on our interface (never elsewhere)."""
        await self._out.sendto(data, (str(self.interface.broadcast), self.port))

    async def listen(self) -> None:
        """Record the latest beacon-like datagram of every UUID (runs until cancelled).

        Anything of at least 22 octets starting ``ZRE`` counts, valid or not,
        so that a target whose own beacons are malformed is still found (and
        then failed by ``beacon-target-format``).
        """
        while True:
            data, (host, _port) = await self._in.recvfrom(255)
            if len(data) < 22 or data[:3] != b"ZRE":
                continue
            key = uuid.UUID(bytes=bytes(data[4:20]))
            self.heard[key] = (bytes(data), host, trio.current_time())
            self._changed.set()
            self._changed = trio.Event()

    async def wait_for_stranger(
        self, seen: set[uuid.UUID], within: float, wanted: uuid.UUID | None = None
    ) -> TargetInfo | None:
        """The target's beacon: from ``wanted`` if given, else the first with a port whose
        UUID is neither ours nor in ``seen`` (targets that died)."""
        with trio.move_on_after(within):
            while True:
                for key, (data, host, _t) in self.heard.items():
                    port = int.from_bytes(data[20:22], "big")
                    if wanted is not None and key != wanted:
                        continue
                    if key not in seen and key not in self.ours and port:
                        return TargetInfo(key, host, port, data[3], len(data), data)
                await self._changed.wait()
        return None

    def close(self) -> None:
        self._out.close()
        self._in.close()


class FakePeer:
    """A ZRE peer the suite scripts: beacons, HELLO, any frames, any sequence numbers.

    Made by :meth:`Harness.peer`.  ``received`` keeps every message the
    target sent to our mailbox, decoded (or the exception, for bytes that
    did not decode), in order.
    """

    def __init__(
        self,
        harness: Harness,
        name: str,
        inbox: ZSocket,
        port: int,
        keys: tuple[bytes, bytes] | None = None,
    ) -> None:
        self.harness = harness
        self.keys = keys  # (public, secret), Z85: a CURVE peer
        self.public_raw = z85.decode(keys[0]) if keys else None
        self.name = name
        self.uuid = uuid.uuid4()
        self.inbox = inbox
        self.port = port
        self.endpoint = f"tcp://{harness.interface.address}:{port}"
        self.outbox: ZSocket | None = None
        self.seq = 0
        self.version = 2
        self.received: list[tuple[float, bytes, wire.Message | wire.DecodeError]] = []
        self._changed = trio.Event()
        self.beaconing = False

    # -- beacons ----------------------------------------------------------

    def beacon_bytes(self, port: int | None = None, version: int | None = None) -> bytes:
        """Our beacon: version 3 with our key for a CURVE peer, else version 1."""
        if version is None:
            version = 3 if self.public_raw else 1
        key = self.public_raw if version == 3 else None
        return wire.encode_beacon(
            wire.Beacon(self.uuid, self.port if port is None else port, version, key)
        )

    async def beacon(self, port: int | None = None, version: int | None = None) -> None:
        await self.harness.radio.send(self.beacon_bytes(port, version))

    async def _beacon_loop(self) -> None:
        while True:
            if self.beaconing:
                await self.beacon()
            await trio.sleep(self.harness.profile.beacon)

    # -- the mailbox --------------------------------------------------------

    async def _pump(self) -> None:
        while True:
            frames = await self.inbox.receive()
            identity, body = frames[0], frames[1:]
            try:
                message: wire.Message | wire.DecodeError = wire.decode(body, None)
            except wire.DecodeError as exc:
                message = exc
            self.received.append((trio.current_time(), identity, message))
            self._changed.set()
            self._changed = trio.Event()

    def mark(self) -> int:
        return len(self.received)

    async def expect(
        self, kind: type[Any] | None, within: float, start: int = 0
    ) -> tuple[float, bytes, Any] | None:
        """The first message of ``kind`` (any, for ``None``) received from index ``start`` on."""
        index = start
        with trio.move_on_after(within):
            while True:
                while index < len(self.received):
                    item = self.received[index]
                    index += 1
                    if kind is None or isinstance(item[2], kind):
                        return item
                await self._changed.wait()
        return None

    def seen(self, start: int = 0) -> str:
        """What the target sent us from ``start`` on, compactly, for a report."""
        items = [describe(m) for _t, _i, m in self.received[start:]]
        if not items:
            return "nothing"
        shown = ", ".join(items[:8])
        return shown + (f", ... ({len(items)} in all)" if len(items) > 8 else "")

    # -- talking to the target ---------------------------------------------

    async def connect(self) -> None:
        """Connect our DEALER (identity %x01 + UUID) to the target's mailbox."""
        if self.outbox is not None:
            return
        sock: zmq.Socket[Any] = context().socket(zmq.DEALER)
        sock.setsockopt(zmq.IDENTITY, b"\x01" + self.uuid.bytes)
        if self.keys is not None and self.harness.target_key is not None:
            sock.setsockopt(zmq.CURVE_SERVERKEY, self.harness.target_key)
            sock.setsockopt(zmq.CURVE_PUBLICKEY, self.keys[0])
            sock.setsockopt(zmq.CURVE_SECRETKEY, self.keys[1])
        sock.connect(self.harness.target.endpoint)
        self.outbox = ZSocket(sock)

    def next_seq(self) -> int:
        self.seq = (self.seq + 1) & 0xFFFF
        return self.seq

    async def send(self, message: wire.Message) -> None:
        await self.send_frames(wire.encode(message))

    async def send_frames(self, frames: list[bytes]) -> None:
        await self.connect()
        assert self.outbox is not None
        await self.outbox.send(frames)

    async def hello(
        self,
        name: str | None = None,
        groups: tuple[str, ...] = (),
        status: int = 0,
        headers: tuple[tuple[str, str], ...] = (),
        key_header: bool = True,
    ) -> wire.Hello:
        """Send HELLO#1.  A CURVE peer adds ``X-PUBLICKEY`` (its Z85 key), as zyre
        does, unless ``key_header`` is false or ``headers`` has one."""
        if self.keys and key_header and "X-PUBLICKEY" not in dict(headers):
            headers = (*headers, ("X-PUBLICKEY", self.keys[0].decode("ascii")))
        self.seq = 0
        hello = wire.Hello(
            self.next_seq(),
            self.endpoint,
            groups,
            status,
            self.name if name is None else name,
            headers,
            version=self.version,
        )
        await self.send(hello)
        return hello

    async def meet(self, **hello: Any) -> tuple[float, bytes, wire.Hello]:
        """Beacon until the target's HELLO comes, then send ours: a full handshake.

        Raises :class:`Fail` if the target's HELLO does not come.
        """
        self.beaconing = True
        await self.beacon()
        got = await self.expect(wire.Hello, self.harness.profile.reply)
        if got is None:
            raise Fail(
                f"v1 beacons for a new peer on port {self.port}",
                "the target connects and sends HELLO",
                self.seen(),
            )
        await self.hello(**hello)
        return got

    async def ping_ok_for(self, what: str, start: int | None = None) -> None:
        """Send a PING and fail unless a PING-OK comes back."""
        mark = self.mark() if start is None else start
        seq = self.next_seq()
        await self.send(wire.Ping(seq, version=self.version))
        if await self.expect(wire.PingOk, self.harness.profile.reply, mark) is None:
            raise Fail(f"{what}, then PING seq {seq}", "PING-OK", self.seen(mark))

    def close(self) -> None:
        self.inbox.close()
        if self.outbox is not None:
            self.outbox.close()


GossipItem = tuple[float, bytes, "wire.GossipMessage | wire.DecodeError"]


class GossipLink:
    """One ZGP socket of the suite's: the hub (a ROUTER) or a client of the target's hub (a DEALER).

    Made by :func:`open_hub` and :meth:`Harness.gossip_client`.
    ``received`` keeps every frame that came, decoded (or the
    ``DecodeError``), with its time and the sender's routing id (``b""``
    on a client).  The hub answers PING with PONG in any state, as a
    zgossip server does; otherwise the suite says only what a case scripts.
    """

    def __init__(self, sock: ZSocket, endpoint: str, *, hub: bool) -> None:
        self.sock = sock
        self.endpoint = endpoint
        self.hub = hub
        self.received: list[GossipItem] = []
        self.last_sender: bytes | None = None
        """The hub: the routing id that spoke last (the target's connection)."""
        self._changed = trio.Event()

    async def pump(self) -> None:
        """Receive and record until cancelled (run it in a nursery)."""
        while True:
            frames = await self.sock.receive()
            sender, body = (frames[0], frames[1:]) if self.hub else (b"", frames)
            try:
                if len(body) != 1:
                    raise wire.DecodeError(f"a ZGP message is one frame, got {len(body)}")
                message: wire.GossipMessage | wire.DecodeError = wire.decode_gossip(body[0])
            except wire.DecodeError as exc:
                message = exc
            self.received.append((trio.current_time(), sender, message))
            if self.hub:
                self.last_sender = sender
                if isinstance(message, wire.GossipPing):
                    await self.send(wire.GossipPong(), sender)
            self._changed.set()
            self._changed = trio.Event()

    def mark(self) -> int:
        return len(self.received)

    async def expect(
        self,
        kind: type[Any] | None,
        within: float,
        start: int = 0,
        where: Callable[[Any], bool] | None = None,
    ) -> tuple[float, bytes, Any] | None:
        """The first message of ``kind`` (any, for ``None``) from index ``start`` on
        for which ``where`` holds, or ``None`` after ``within`` s."""
        index = start
        with trio.move_on_after(within):
            while True:
                while index < len(self.received):
                    item = self.received[index]
                    index += 1
                    if (kind is None or isinstance(item[2], kind)) and (
                        where is None or where(item[2])
                    ):
                        return item
                await self._changed.wait()
        return None

    def seen(self, start: int = 0) -> str:
        """What came from ``start`` on, compactly, for a report."""
        items = [describe_gossip(m) for _t, _s, m in self.received[start:]]
        if not items:
            return "nothing"
        shown = ", ".join(items[:8])
        return shown + (f", ... ({len(items)} in all)" if len(items) > 8 else "")

    async def send(self, message: wire.GossipMessage | bytes, to: bytes | None = None) -> None:
        """One ZGP frame (a message, or raw bytes); on the hub, to the routing id ``to``."""
        frame = message if isinstance(message, bytes) else wire.encode_gossip(message)
        if self.hub:
            if to is None:
                raise ValueError("the hub sends to a routing id")
            await self.sock.send([to, frame])
        else:
            await self.sock.send([frame])

    async def keep_alive(self, interval: float = 0.3) -> None:
        """PING every ``interval`` s (a client: under zgossip's 1 s client timeout)."""
        while True:
            await trio.sleep(interval)
            await self.send(wire.GossipPing())


def describe_gossip(message: Any) -> str:
    """One ZGP message, briefly: ``HELLO``, ``PUBLISH(key=value, ttl 0)``, ``undecodable(...)``."""
    if isinstance(message, wire.DecodeError):
        return f"undecodable({message})"
    if isinstance(message, wire.GossipPublish):
        return f"PUBLISH({message.key}={message.value}, ttl {message.ttl})"
    return str(message.command.name)


@asynccontextmanager
async def open_hub(interface: Interface) -> AsyncIterator[GossipLink]:
    """The suite's ZGP hub: a ROUTER on ``interface`` that records what comes, for the block."""
    sock: zmq.Socket[Any] = context().socket(zmq.ROUTER)
    port = sock.bind_to_random_port(f"tcp://{interface.address}", 49152, 65000)
    hub = GossipLink(ZSocket(sock), f"tcp://{interface.address}:{port}", hub=True)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(hub.pump)
            try:
                yield hub
            finally:
                nursery.cancel_scope.cancel()
    finally:
        hub.sock.close()


def describe(message: Any) -> str:
    """One message, briefly: ``HELLO#1``, ``PING-OK#3``, ``undecodable(...)``."""
    if isinstance(message, wire.DecodeError):
        return f"undecodable({message})"
    name = message.command.name.replace("_", "-")
    extra = ""
    if isinstance(message, wire.Join | wire.Leave):
        extra = f"({message.group!r}, status {message.status})"
    elif isinstance(message, wire.Shout):
        extra = f"({message.group!r})"
    return f"{name}#{message.sequence}{extra}"


@attrs.define
class Harness:
    """Everything a case needs; one per suite run.

    ``agent`` is ``None`` when the target runs without one (active cases and
    those that read the target's events are then not applicable).
    """

    interface: Interface
    radio: BeaconRadio
    target: TargetInfo
    profile: Profile
    agent: AgentProcess | None
    nursery: trio.Nursery
    target_key: bytes | None = None
    """The target's CURVE public key, while the CURVE cases run."""
    hub: GossipLink | None = None
    """The suite's ZGP hub, which the target connects to while the gossip cases run."""
    target_hub: str | None = None
    """The target's own ZGP hub (its agent's ``gossip_endpoint``), likewise."""
    hub_mark: int = 0
    """Where in ``hub.received`` the running target's traffic begins."""

    def need_agent(self) -> AgentProcess:
        if self.agent is None:
            raise NotApplicable("needs an agent (the target runs without one)")
        return self.agent

    def need_hub(self) -> GossipLink:
        if self.hub is None:
            raise NotApplicable("needs the target started in gossip mode")
        return self.hub

    @asynccontextmanager
    async def gossip_client(self, keep_alive: bool = True) -> AsyncIterator[GossipLink]:
        """A ZGP client of the target's own hub (a DEALER), closed at the end of the block.

        ``keep_alive``: PING every 0.3 s, so a zgossip server (which forgets
        a client silent for 1 s) keeps it.
        """
        if self.target_hub is None:
            raise NotApplicable("needs the target started in gossip mode")
        if not reachable(self.interface, self.target_hub):
            raise Fail(
                "nothing (the agent reported its hub)",
                f"a tcp://ADDRESS:PORT endpoint on {self.interface.name}, the only place "
                "the suite connects to",
                self.target_hub,
            )
        sock: zmq.Socket[Any] = context().socket(zmq.DEALER)
        sock.connect(self.target_hub)
        client = GossipLink(ZSocket(sock), self.target_hub, hub=False)
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(client.pump)
                if keep_alive:
                    nursery.start_soon(client.keep_alive)
                try:
                    yield client
                finally:
                    nursery.cancel_scope.cancel()
        finally:
            client.sock.close()

    @asynccontextmanager
    async def peer(
        self,
        name: str = "conformance",
        *,
        round_port: bool = False,
        curve: bool = False,
        zero_key: bool = False,
    ) -> AsyncIterator[FakePeer]:
        """A fresh fake peer with its own UUID and mailbox, closed at the end of the block.

        ``round_port``: a mailbox port whose low octet is zero, so that a
        beacon cut short by its last octet still names it (when read as if
        zero-padded, as a lax parser would).  ``curve``: a CURVE peer (its
        mailbox a CURVE server, its beacons version 3 with its key, which
        starts with a zero octet for ``zero_key``).
        """
        sock: zmq.Socket[Any] = context().socket(zmq.ROUTER)
        # A target that forgets us and meets us again connects anew with
        # the same identity, maybe before its old connection is gone: the
        # new one must win, or its HELLO would be dropped.
        sock.setsockopt(zmq.ROUTER_HANDOVER, 1)
        keys = _key_pair(zero_key) if curve else None
        if keys is not None:
            sock.setsockopt(zmq.CURVE_SERVER, 1)
            sock.setsockopt(zmq.CURVE_SECRETKEY, keys[1])
        if round_port:
            port = _bind_round(sock, str(self.interface.address))
        else:
            port = sock.bind_to_random_port(f"tcp://{self.interface.address}", 49152, 65000)
        peer = FakePeer(self, name, ZSocket(sock), port, keys)
        self.radio.ours.add(peer.uuid)
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(peer._pump)
                nursery.start_soon(peer._beacon_loop)
                try:
                    yield peer
                finally:
                    nursery.cancel_scope.cancel()
                    if peer.beaconing:
                        # Say goodbye so the target forgets us before the next case.
                        with trio.CancelScope(shield=True), trio.move_on_after(1):
                            await peer.beacon(port=0)
        finally:
            # Only once the pump has ended: closing under a waiting task
            # would wake it with ClosedResourceError instead of Cancelled.
            peer.close()


def _key_pair(zero_first: bool) -> tuple[bytes, bytes]:
    """A CURVE key pair (Z85); with ``zero_first``, one whose public key starts with %x00."""
    for _ in range(100_000):
        public, secret = zmq.curve_keypair()
        if not zero_first or z85.decode(public)[0] == 0:
            return public, secret
    raise RuntimeError("no key pair with a leading zero octet in 100000 tries")


def _bind_round(sock: zmq.Socket[Any], address: str) -> int:
    for port in range(0xC100, 0xFF00, 0x100):
        try:
            sock.bind(f"tcp://{address}:{port}")
        except zmq.ZMQError:
            continue
        return port
    raise OSError("no free TCP port with a zero low octet in 49408..65280")


def reachable(interface: Interface, endpoint: str) -> bool:
    """Whether ``endpoint`` is ``tcp://A.B.C.D:PORT`` with the address on ``interface``'s network.

    What a target publishes is only connected to when this holds: the suite
    sends nowhere but its own interface.
    """
    if not endpoint.startswith("tcp://"):
        return False
    host, _, port = endpoint[6:].split("|", 1)[0].rpartition(":")
    try:
        return port.isdigit() and 0 < int(port) < 65536 and interface.contains(host)
    except ValueError:
        return False


def interface_named(name: str) -> Interface:
    """The IPv4 interface ``name`` (``lo`` by default); raises ``ValueError`` if unknown."""
    return select_interface(name)
