"""A small ZRE node that speaks the conformance agent contract, with bugs on request.

    python -m tests.support.conformance_fake [--break FLAG ...]

Without flags it is a plain, correct 36/ZRE node (beacons, presence, groups)
that passes the whole suite; each ``--break`` flag makes it wrong in one
way, so that tests/interop/test_conformance.py can show every case failing against
a target that breaks the rule the case checks (no case passes vacuously).
Bound to the interface the suite names (loopback in the tests).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import uuid
from typing import Any

import attrs
import trio
import zmq
from zmq.utils import z85

from trizre import wire
from trizre.conformance._agent import b64, unb64
from trizre.transport._interfaces import select_interface
from trizre.transport._zsock import ZSocket, context

FLAGS = {
    "beacon-23": "its own beacons are 23 octets",
    "ignore-beacons": "never connects to a peer it hears by beacon",
    "accept-any-beacon": "reads UUID and port from any datagram of 22+ octets",
    "crash-on-54": "exits on a 54-octet datagram (as pyre does)",
    "accept-keyed-except-zero": "meets keyed v3 beacons, unless the key starts with %x00",
    "self-by-port": "knows its own beacons by their port, not their UUID",
    "ignore-port-zero": "ignores port-0 beacons",
    "hello-seq-0": "numbers its HELLO 0",
    "hello-no-headers": "sends no headers in HELLO",
    "no-ping-ok": "never answers PING",
    "no-wrap": "expects 65536 after 65535",
    "no-seq-check": "accepts any sequence number",
    "ping-before-hello": "answers PINGs from a peer that has not said HELLO",
    "ignore-unknown-hello": "meets only peers heard by beacon",
    "lenient-signature": "reads messages whatever their second signature octet",
    "any-version": "reads messages whatever their version octet",
    "crash-on-big": "exits on a frame of more than 1 MiB",
    "ascii-names": "reports names and headers with non-ASCII replaced",
    "no-join-events": "reports no JOIN or LEAVE",
    "no-whisper-events": "reports no WHISPER",
    "no-shout-events": "reports no SHOUT",
    "no-evasive-ping": "never pings a silent peer",
    "early-ping": "pings a peer after a third of the evasive timeout",
    "never-expire": "never drops a silent peer",
    "no-whisper-out": "ignores the whisper command",
    "status-stuck": "never increments its group status",
    "no-shout-out": "ignores the shout command",
    "shout-to-all": "shouts to every peer, in the group or not",
    # elections (zyre's; the groups in "contest")
    "no-elect": "never starts an election",
    "elect-lowercase-id": "names itself in lower-case hex in ELECT",
    "no-leader": "never sends LEADER",
    # CURVE mode ("curve": true in start)
    "curve-beacon-unkeyed": "beacons 22-octet version 1 even with CURVE on",
    "curve-plain-dealer": "connects to peers without CURVE",
    "curve-drop-zero-key": "drops keyed beacons whose key starts with %x00 (as zyre does)",
    "curve-accept-unkeyed": "takes key-less beacons with CURVE on",
    "curve-plain-mailbox": "its mailbox is not a CURVE server",
    "curve-keyless-hello": "takes HELLOs without X-PUBLICKEY",
    "curve-crash-empty-key": "exits on an empty X-PUBLICKEY (as zyre's assert does)",
    # gossip mode ("gossip": HUB in start): czmq's zgossip, client and server
    "gossip-publish-first": "says PUBLISH before HELLO to its remote hub",
    "gossip-no-publish": "never publishes its own tuple",
    "gossip-ignore-deliver": "never connects to the peers its gossip tuples name",
    "gossip-no-rehello": "ignores INVALID from its remote hub",
    "gossip-hello-no-tuples": "its hub sends nothing on a client's HELLO",
    "gossip-no-pong": "its hub never answers PING",
    "gossip-publish-without-hello": "its hub takes a PUBLISH from a client that said no HELLO",
    "gossip-no-forward": "its hub passes no new tuple on to its clients",
    "gossip-crash-on-malformed": "its hub stops on a malformed frame (as zgossip's zloop does)",
    "gossip-self-by-endpoint": "knows its own tuple by endpoint, not key (as zyre does)",
}


def emit(**event: Any) -> None:
    print(json.dumps(event), flush=True)


@attrs.define
class Peer:
    uuid: uuid.UUID
    outbox: ZSocket
    endpoint: str
    last_seen: float
    ready: bool = False
    seq_in: int = 0
    seq_out: int = 0
    groups: set[str] = attrs.Factory(set)
    pinged: bool = False


class Fake:
    def __init__(self, start: dict[str, Any], flags: set[str]) -> None:
        self.flags = flags
        self.uuid = uuid.uuid4()
        self.name = str(start.get("name", "fake"))
        self.interface = select_interface(start["interface"])
        self.port = int(start["port"])
        self.interval = float(start.get("beacon_interval", 0.25))
        self.evasive = float(start.get("evasive", 5.0))
        self.expired = float(start.get("expired", 30.0))
        self.headers: dict[str, str] = dict(start.get("headers", {}))
        self.groups: set[str] = set(start.get("groups", []))
        self.status = len(self.groups)
        self.contest: list[str] = list(start.get("contest", []))
        self.id = self.uuid.hex.upper()
        self.peers: dict[uuid.UUID, Peer] = {}
        self.keys = zmq.curve_keypair() if start.get("curve") else None
        sock: zmq.Socket[Any] = context().socket(zmq.ROUTER)
        sock.setsockopt(zmq.ROUTER_HANDOVER, 1)
        if self.keys is not None and not self.has("curve-plain-mailbox"):
            sock.setsockopt(zmq.CURVE_SERVER, 1)
            sock.setsockopt(zmq.CURVE_SECRETKEY, self.keys[1])
        if self.keys is not None:
            self.headers["X-PUBLICKEY"] = self.keys[0].decode()
        self.mailbox = sock.bind_to_random_port(f"tcp://{self.interface.address}", 49152, 65000)
        self.endpoint = f"tcp://{self.interface.address}:{self.mailbox}"
        self.inbox = ZSocket(sock)
        self.udp = trio.socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.gossip = Gossip(self, str(start["gossip"])) if start.get("gossip") else None

    def has(self, flag: str) -> bool:
        return flag in self.flags

    # -- beacons ----------------------------------------------------------

    async def beacon_loop(self) -> None:
        if self.keys is not None and not self.has("curve-beacon-unkeyed"):
            key = z85.decode(self.keys[0])
            data = wire.encode_beacon(wire.Beacon(self.uuid, self.mailbox, 3, key))
        else:
            data = wire.encode_beacon(wire.Beacon(self.uuid, self.mailbox))
        if self.has("beacon-23"):
            data += b"\x00"
        while True:
            await self.udp.sendto(data, (str(self.interface.broadcast), self.port))
            await trio.sleep(self.interval)

    async def hear_loop(self) -> None:
        while True:
            data, (host, _port) = await self.udp.recvfrom(255)
            if len(data) == 54 and self.has("crash-on-54"):
                os._exit(3)
            beacon = self._read_beacon(data)
            if beacon is None:
                continue
            own = (
                beacon.port == self.mailbox
                if self.has("self-by-port")
                else beacon.uuid == self.uuid
            )
            if own:
                continue
            peer = self.peers.get(beacon.uuid)
            if beacon.port == 0:
                if peer is not None and not self.has("ignore-port-zero"):
                    self.remove(peer)
                continue
            if peer is not None:
                peer.last_seen = trio.current_time()
                peer.pinged = False
            elif not self.has("ignore-beacons"):
                await self.meet(beacon.uuid, f"tcp://{host}:{beacon.port}", beacon.public_key)

    def _read_beacon(self, data: bytes) -> wire.Beacon | None:
        if self.has("accept-any-beacon") and len(data) >= 20:
            data = data.ljust(22, b"\x00")  # a truncated port read as if zero-padded
            return wire.Beacon(uuid.UUID(bytes=data[4:20]), int.from_bytes(data[20:22], "big"))
        try:
            beacon = wire.decode_beacon(data)
        except wire.DecodeError:
            return None
        if self.keys is not None:
            if beacon.public_key is None:
                return beacon if self.has("curve-accept-unkeyed") else None
            if beacon.public_key[0] == 0 and self.has("curve-drop-zero-key"):
                return None
            return beacon
        if beacon.public_key is not None:
            keyed_ok = self.has("accept-keyed-except-zero") and beacon.public_key[0] != 0
            return beacon if keyed_ok else None
        return beacon if beacon.version == 1 else None

    # -- peers --------------------------------------------------------------

    async def meet(self, key: uuid.UUID, endpoint: str, public: bytes | None = None) -> Peer:
        sock: zmq.Socket[Any] = context().socket(zmq.DEALER)
        sock.setsockopt(zmq.IDENTITY, b"\x01" + self.uuid.bytes)
        if self.keys is not None and public is not None and not self.has("curve-plain-dealer"):
            sock.setsockopt(zmq.CURVE_SERVERKEY, public)
            sock.setsockopt(zmq.CURVE_PUBLICKEY, self.keys[0])
            sock.setsockopt(zmq.CURVE_SECRETKEY, self.keys[1])
        sock.connect(endpoint)
        peer = Peer(key, ZSocket(sock), endpoint, trio.current_time())
        self.peers[key] = peer
        peer.seq_out = -1 if self.has("hello-seq-0") else 0
        headers = {} if self.has("hello-no-headers") else self.headers
        await self.send(
            peer,
            lambda s: wire.Hello(
                s, self.endpoint, sorted(self.groups), self.status, self.name, headers
            ),
        )
        return peer

    def remove(self, peer: Peer) -> None:
        self.peers.pop(peer.uuid, None)
        peer.outbox.close()
        if peer.ready:
            emit(event="EXIT", peer=peer.uuid.hex)

    async def send(self, peer: Peer, make: Any) -> None:
        peer.seq_out = (peer.seq_out + 1) & 0xFFFF
        await peer.outbox.send(wire.encode(make(peer.seq_out)))

    # -- the mailbox ----------------------------------------------------------

    async def inbox_loop(self) -> None:
        while True:
            frames = await self.inbox.receive()
            identity, body = frames[0], list(frames[1:])
            if self.has("crash-on-big") and any(len(f) > 1 << 20 for f in body):
                os._exit(3)
            if len(identity) != 17 or not body or len(body[0]) < 6:
                continue
            head = bytearray(body[0])
            if self.has("lenient-signature"):
                head[1] = 0xA1
            if self.has("any-version"):
                head[3] = 2
            body[0] = bytes(head)
            try:
                message = wire.decode(body)
            except wire.DecodeError:
                continue
            await self.handle(uuid.UUID(bytes=identity[1:]), message)

    async def handle(self, key: uuid.UUID, message: wire.Message) -> None:
        peer = self.peers.get(key)
        if isinstance(message, wire.Hello):
            if self.keys is not None:
                key_text = message.headers_dict().get("X-PUBLICKEY")
                if key_text == "" and self.has("curve-crash-empty-key"):
                    os._exit(3)
                if not key_text and not self.has("curve-keyless-hello"):
                    return
            if peer is None:
                if self.has("ignore-unknown-hello"):
                    return
                peer = await self.meet(key, message.endpoint)
            peer.ready = True
            peer.seq_in = message.sequence
            peer.groups = set(message.groups)
            name, headers = message.name, message.headers_dict()
            if self.has("ascii-names"):
                name = name.encode("ascii", "replace").decode()
                headers = {k.encode("ascii", "replace").decode(): v for k, v in headers.items()}
            emit(event="ENTER", peer=key.hex, name=name, headers=headers)
            for group in message.groups:
                self.report("JOIN", key, group)
                if group in self.contest and group in self.groups and not self.has("no-elect"):
                    me = self.id.lower() if self.has("elect-lowercase-id") else self.id
                    body = wire.election_body(group, me)
                    await self.send(peer, lambda s, b=body: wire.Elect(s, b))
            return
        if peer is None:
            return
        if not peer.ready:
            if isinstance(message, wire.Ping) and self.has("ping-before-hello"):
                await self.send(peer, wire.PingOk)
            return
        expected = peer.seq_in + 1 if self.has("no-wrap") else (peer.seq_in + 1) & 0xFFFF
        if message.sequence != expected and not self.has("no-seq-check"):
            self.remove(peer)
            return
        peer.seq_in = message.sequence
        peer.last_seen = trio.current_time()
        peer.pinged = False
        if isinstance(message, wire.Ping) and not self.has("no-ping-ok"):
            await self.send(peer, wire.PingOk)
        elif isinstance(message, wire.Join):
            peer.groups.add(message.group)
            self.report("JOIN", key, message.group)
        elif isinstance(message, wire.Leave):
            peer.groups.discard(message.group)
            self.report("LEAVE", key, message.group)
        elif isinstance(message, wire.Elect):
            group, candidate = wire.parse_election_body(message.body)
            if group in self.contest and candidate == self.id and not self.has("no-leader"):
                # The echo of our own wave: we lead (this fake's groups have
                # one other member at most).
                body = wire.election_body(group, self.id)
                for member in self.ready_peers():
                    if group in member.groups:
                        await self.send(member, lambda s, b=body: wire.Leader(s, b))
                emit(event="LEADER", peer=self.uuid.hex, group=group)
        elif isinstance(message, wire.Whisper) and not self.has("no-whisper-events"):
            emit(event="WHISPER", peer=key.hex, frames=[b64(f) for f in message.content])
        elif isinstance(message, wire.Shout) and not self.has("no-shout-events"):
            frames = [b64(f) for f in message.content]
            emit(event="SHOUT", peer=key.hex, group=message.group, frames=frames)

    def report(self, kind: str, key: uuid.UUID, group: str) -> None:
        if not self.has("no-join-events"):
            emit(event=kind, peer=key.hex, group=group)

    # -- presence ----------------------------------------------------------

    async def reap_loop(self) -> None:
        evasive = self.evasive / 3 if self.has("early-ping") else self.evasive
        while True:
            await trio.sleep(0.05)
            now = trio.current_time()
            for peer in list(self.peers.values()):
                silent = now - peer.last_seen
                if silent >= self.expired and not self.has("never-expire"):
                    self.remove(peer)
                elif silent >= evasive and peer.ready and not peer.pinged:
                    peer.pinged = True
                    if not self.has("no-evasive-ping"):
                        await self.send(peer, wire.Ping)
                        emit(event="EVASIVE", peer=peer.uuid.hex)

    # -- commands ----------------------------------------------------------

    async def obey(self) -> None:
        while line := await trio.to_thread.run_sync(sys.stdin.readline, abandon_on_cancel=True):
            cmd = json.loads(line)
            what = cmd["cmd"]
            if what == "stop":
                return
            if what in ("join", "leave"):
                group = cmd["group"]
                (self.groups.add if what == "join" else self.groups.discard)(group)
                if not self.has("status-stuck"):
                    self.status = (self.status + 1) & 0xFF
                kind = wire.Join if what == "join" else wire.Leave
                for peer in self.ready_peers():
                    await self.send(peer, lambda s, g=group, k=kind: k(s, g, self.status))
            elif what == "whisper" and not self.has("no-whisper-out"):
                peer = self.peers.get(uuid.UUID(hex=cmd["peer"]))
                frames = tuple(unb64(f) for f in cmd["frames"])
                if peer is not None:
                    await self.send(peer, lambda s, f=frames: wire.Whisper(s, f))
            elif what == "shout" and not self.has("no-shout-out"):
                group, frames = cmd["group"], tuple(unb64(f) for f in cmd["frames"])
                for peer in self.ready_peers():
                    if group in peer.groups or self.has("shout-to-all"):
                        await self.send(peer, lambda s, g=group, f=frames: wire.Shout(s, g, f))

    def ready_peers(self) -> list[Peer]:
        return [p for p in self.peers.values() if p.ready]

    async def run(self) -> None:
        if self.gossip is not None:
            await self.run_gossiping(self.gossip)
            return
        self.udp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.udp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        self.udp.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
        await self.udp.bind((str(self.interface.broadcast), self.port))
        emit(
            event="started",
            uuid=self.uuid.hex,
            name=self.name,
            endpoint=self.endpoint,
            evasive=self.evasive,
            expired=self.expired,
            public_key=self.keys[0].decode() if self.keys is not None else None,
            contest=self.contest,
        )
        async with trio.open_nursery() as nursery:
            for loop in (self.beacon_loop, self.hear_loop, self.inbox_loop, self.reap_loop):
                nursery.start_soon(loop)
            await self.obey()
            nursery.cancel_scope.cancel()

    async def run_gossiping(self, gossip: Gossip) -> None:
        emit(
            event="started",
            uuid=self.uuid.hex,
            name=self.name,
            endpoint=self.endpoint,
            evasive=self.evasive,
            expired=self.expired,
            public_key=None,
            contest=self.contest,
            gossip_endpoint=gossip.endpoint,
        )
        async with trio.open_nursery() as nursery:
            for loop in (gossip.remote_loop, gossip.server_loop, self.inbox_loop, self.reap_loop):
                nursery.start_soon(loop)
            await gossip.greet()
            await self.obey()
            nursery.cancel_scope.cancel()


class Gossip:
    """czmq's zgossip, small: a client of the suite's hub and a hub of our own."""

    def __init__(self, fake: Fake, remote: str) -> None:
        self.fake = fake
        self.tuples: dict[str, str] = {}
        self.clients: set[bytes] = set()  # said HELLO
        server: zmq.Socket[Any] = context().socket(zmq.ROUTER)
        port = server.bind_to_random_port(f"tcp://{fake.interface.address}", 49152, 65000)
        self.endpoint = f"tcp://{fake.interface.address}:{port}"
        self.server = ZSocket(server)
        dealer: zmq.Socket[Any] = context().socket(zmq.DEALER)
        dealer.connect(remote)
        self.remote = ZSocket(dealer)

    async def greet(self) -> None:
        """HELLO to the remote and our tuples, then our own tuple (as zyre_start does)."""
        own = wire.GossipPublish(self.fake.id, self.fake.endpoint, 0)
        if self.fake.has("gossip-publish-first"):
            await self.remote.send([wire.encode_gossip(own)])
        await self.hello_remote()
        if not self.fake.has("gossip-no-publish"):
            await self.accept(own.key, own.value)

    async def hello_remote(self) -> None:
        await self.remote.send([wire.encode_gossip(wire.GossipHello())])
        for key, value in self.tuples.items():
            await self.remote.send([wire.encode_gossip(wire.GossipPublish(key, value, 0))])

    async def accept(self, key: str, value: str) -> None:
        """A tuple from anywhere: new ones are stored, passed on, and met."""
        if self.tuples.get(key) == value:
            return
        self.tuples[key] = value
        frame = wire.encode_gossip(wire.GossipPublish(key, value, 0))
        if not self.fake.has("gossip-no-forward"):
            for client in self.clients:
                await self.server.send([client, frame])
        await self.remote.send([frame])
        endpoint = value.partition("|")[0]
        try:
            peer = uuid.UUID(hex=key)
        except ValueError:
            return
        if self.fake.has("gossip-self-by-endpoint"):
            if endpoint == self.fake.endpoint:
                return
        elif peer == self.fake.uuid:
            return
        if peer not in self.fake.peers and not self.fake.has("gossip-ignore-deliver"):
            await self.fake.meet(peer, endpoint)

    async def remote_loop(self) -> None:
        while True:
            frames = await self.remote.receive()
            try:
                message = wire.decode_gossip(frames[0])
            except wire.DecodeError:
                continue
            if isinstance(message, wire.GossipPublish):
                await self.accept(message.key, message.value)
            elif isinstance(message, wire.GossipInvalid) and not self.fake.has("gossip-no-rehello"):
                await self.hello_remote()

    async def server_loop(self) -> None:
        while True:
            client, *body = await self.server.receive()
            try:
                if len(body) != 1:
                    raise wire.DecodeError("not one frame")
                message = wire.decode_gossip(body[0])
            except wire.DecodeError:
                if self.fake.has("gossip-crash-on-malformed"):
                    return  # the hub is dead from here on; the node lives
                continue
            if isinstance(message, wire.GossipPing):
                if not self.fake.has("gossip-no-pong"):
                    await self.reply(client, wire.GossipPong())
            elif isinstance(message, wire.GossipHello):
                self.clients.add(client)
                if not self.fake.has("gossip-hello-no-tuples"):
                    for key, value in self.tuples.items():
                        await self.reply(client, wire.GossipPublish(key, value, 0))
            elif isinstance(message, wire.GossipPublish) and (
                client in self.clients or self.fake.has("gossip-publish-without-hello")
            ):
                await self.accept(message.key, message.value)
            else:
                self.clients.discard(client)
                await self.reply(client, wire.GossipInvalid())

    async def reply(self, client: bytes, message: wire.GossipMessage) -> None:
        await self.server.send([client, wire.encode_gossip(message)])


async def main(flags: set[str]) -> None:
    start = json.loads(await trio.to_thread.run_sync(sys.stdin.readline))
    await Fake(start, flags).run()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--break", dest="flags", action="append", default=[], choices=FLAGS)
    trio.run(main, set(parser.parse_args().flags))
