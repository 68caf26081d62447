"""Helpers for node tests: free ports, event waiting, and a scriptable raw peer."""

from __future__ import annotations

import json
import socket
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

import trio
import zmq

import trizre
from trizre import wire
from trizre.transport._links import LocalInbox, LocalLink, lookup, register, unregister
from trizre.transport._zsock import ZSocket, context

E = TypeVar("E")


def free_udp_port() -> int:
    """A UDP port nobody on loopback uses right now (each test its own)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


FAST: dict[str, Any] = {"beacon_interval": 0.05, "interface": "lo"}
MEMORY: dict[str, Any] = {"interface": "lo", "discovery": "memory", "local_links": True}
"""In-memory discovery and links: no beacon socket, no TCP link (for ``autojump_clock``)."""


@asynccontextmanager
async def a_over_b(
    **options: Any,
) -> AsyncIterator[tuple[trizre.Node, trizre.Node, trizre.EventStream, trizre.EventStream]]:
    """a (1 MiB) and b (64 KiB max_message_size), linked; their event streams.

    Over TCP unless ``local_links=True``; ``options`` go to both nodes.
    Presence is slow: only a broken link (or a beacon, every
    ``beacon_interval``) can end a peer within a test.
    """
    slow = {"beacon_port": free_udp_port(), "interface": "lo", "local_links": False}
    slow |= {"evasive_timeout": 60.0, "expired_timeout": 120.0} | options
    async with (
        trizre.open_node("a", max_message_size=1024 * 1024, **slow) as a,
        trizre.open_node("b", max_message_size=64 * 1024, **slow) as b,
    ):
        a_events, b_events = a.events(), b.events()
        await a.wait_for_peer(b.uuid)
        await b.wait_for_peer(a.uuid)
        yield a, b, a_events, b_events


def exit_reasons(trace_dir: Path, node: uuid.UUID) -> list[str]:
    """The reasons of the Exits ``node`` traced (``trace_dir``), in order."""
    records = [json.loads(line) for f in trace_dir.glob("*.jsonl") for line in f.open()]
    return [r["reason"] for r in records if r["kind"] == "exit" and r["node"] == node.hex]


@asynccontextmanager
async def open_pair(**options: Any) -> AsyncIterator[tuple[trizre.Node, trizre.Node]]:
    """Nodes "a" and "b" on a beacon port of their own (``FAST`` unless ``options`` say).

    Yields once both are open, not once they met; they stop when the block ends.
    """
    port = free_udp_port()
    options = {**FAST, **options}
    async with (
        trizre.open_node("a", beacon_port=port, **options) as a,
        trizre.open_node("b", beacon_port=port, **options) as b,
    ):
        yield a, b


async def outlive_node(
    block: AbstractAsyncContextManager[E], ended: list[E], task_status: trio.TaskStatus[E]
) -> None:
    """Hold ``block`` (a server on a node) open until cancelled.

    Started in a nursery outside the node's block, so that it can outlive
    the node; reports what ``block`` yields, and appends that to ``ended``
    when the task is cancelled, before leaving the block.
    """
    async with block as value:
        task_status.started(value)
        try:
            await trio.sleep_forever()
        finally:
            ended.append(value)


async def next_event(
    events: trizre.EventStream,
    kind: type[E],
    where: Callable[[E], bool] = lambda _: True,
) -> E:
    """The next event of ``kind`` matching ``where``, skipping others."""
    async for event in events:
        if isinstance(event, kind) and where(event):
            return event
    raise AssertionError(f"the stream ended before a {kind.__name__} arrived")


@asynccontextmanager
async def open_nodes(
    n: int, port: int
) -> AsyncIterator[list[tuple[trizre.Node, trizre.EventStream]]]:
    """n nodes opened side by side (FAST, on ``port``), each with a subscription from its start.

    Yields once all are open, not once they met; they stop when the block ends.
    """
    opened: list[tuple[trizre.Node, trizre.EventStream]] = []
    all_open, done = trio.Event(), trio.Event()

    async def run(i: int) -> None:
        async with trizre.open_node(f"n{i}", beacon_port=port, **FAST) as node:
            opened.append((node, node.events()))
            if len(opened) == n:
                all_open.set()
            await done.wait()

    async with trio.open_nursery() as nursery:
        for i in range(n):
            nursery.start_soon(run, i)
        await all_open.wait()
        try:
            yield opened
        finally:
            done.set()


async def wait_for_peers(node: trizre.Node, events: trizre.EventStream, count: int) -> None:
    while len(node.peers()) < count:
        await next_event(events, trizre.Enter)


class _Scripted:
    """What both hand-driven peers share: their sequence numbers and their HELLO."""

    endpoint: str
    seq: int

    async def send(self, message: wire.Message) -> None:
        raise NotImplementedError

    def next_seq(self) -> int:
        self.seq = (self.seq + 1) & 0xFFFF
        return self.seq

    async def hello(
        self,
        name: str = "raw",
        groups: tuple[str, ...] = (),
        headers: tuple[tuple[str, str], ...] = (),
    ) -> None:
        self.seq = 0
        await self.send(wire.Hello(self.next_seq(), self.endpoint, groups, 0, name, headers))


class RawPeer(_Scripted):
    """A hand-driven ZRE peer: a ROUTER it never answers from, a DEALER to the node.

    It lets a test send exactly the bytes it wants, with the sequence
    numbers it wants, and see what the node sends back.
    """

    def __init__(self, inbox: ZSocket, outbox: ZSocket, endpoint: str) -> None:
        self.uuid = uuid.uuid4()
        self.inbox = inbox
        self.outbox = outbox
        self.endpoint = endpoint
        self.seq = 0

    async def send(self, message: wire.Message) -> None:
        await self.outbox.send(wire.encode(message))

    async def send_frames(self, frames: list[bytes]) -> None:
        await self.outbox.send(frames)

    async def receive(self) -> wire.Message:
        """The next message the node sent us (identity frame stripped)."""
        frames = await self.inbox.receive()
        return wire.decode(frames[1:])


@asynccontextmanager
async def raw_peer(
    node: trizre.Node,
    *,
    curve: trizre.Certificate | None = None,
    claim: uuid.UUID | None = None,
) -> AsyncIterator[RawPeer]:
    """A raw peer of ``node``; with ``curve``, its DEALER is a CURVE client with that key pair.

    ``claim``: the UUID its DEALER presents (default: its own).
    """
    ctx = context()
    inbox_sock: zmq.Socket[Any] = ctx.socket(zmq.ROUTER)
    port = inbox_sock.bind_to_random_port("tcp://127.0.0.1", 49152, 65000)
    outbox_sock: zmq.Socket[Any] = ctx.socket(zmq.DEALER)
    peer = RawPeer(ZSocket(inbox_sock), ZSocket(outbox_sock), f"tcp://127.0.0.1:{port}")
    if claim is not None:
        peer.uuid = claim
    outbox_sock.setsockopt(zmq.IDENTITY, b"\x01" + peer.uuid.bytes)
    if curve is not None:
        server = node.config.curve
        assert server is not None and curve.secret is not None
        outbox_sock.setsockopt(zmq.CURVE_SERVERKEY, server.public)
        outbox_sock.setsockopt(zmq.CURVE_PUBLICKEY, curve.public)
        outbox_sock.setsockopt(zmq.CURVE_SECRETKEY, curve.secret)
    outbox_sock.connect(node.endpoint)
    try:
        yield peer
    finally:
        peer.inbox.close()
        peer.outbox.close()


class MemoryRawPeer(_Scripted):
    """A hand-driven ZRE peer in the node's own Trio run, over an in-memory link.

    Nothing touches a socket, so a test can run it under ``autojump_clock``
    and check presence at exact virtual times.  It reads only when asked;
    ``deaf()`` makes it look like a node that stopped reading.
    """

    def __init__(self, node: trizre.Node) -> None:
        self.uuid = uuid.uuid4()
        self.endpoint = f"tcp://127.0.0.1:{49152 + self.uuid.int % 16000}"
        self.inbox = LocalInbox(self.endpoint, 2)
        target = lookup(node.uuid, node.endpoint, 2)
        assert target is not None, "the node must allow local links"
        self.link = LocalLink(target, b"\x01" + self.uuid.bytes, 1000)
        self.seq = 0

    async def send(self, message: wire.Message) -> None:
        await self.link.send(wire.encode(message))

    async def receive(self) -> wire.Message:
        """The next message the node sent us (identity frame stripped)."""
        (frames,) = await self.inbox.receive_batch(1)
        return wire.decode(frames[1:])

    def deaf(self) -> None:
        """From now on, look like a node that stopped reading."""
        self.inbox.deaf_since = trio.current_time()


@asynccontextmanager
async def memory_raw_peer(node: trizre.Node) -> AsyncIterator[MemoryRawPeer]:
    peer = MemoryRawPeer(node)
    register(peer.uuid, peer.inbox)
    try:
        yield peer
    finally:
        unregister(peer.uuid)
        peer.inbox.close()
        peer.link.close()


async def wait_logged(caplog: Any, *texts: str) -> None:
    """Wait until each of ``texts`` has been logged (caplog: pytest's fixture).

    Polled: a log record cannot wake a Trio task.  Bound it with fail_after.
    """
    while not all(text in caplog.text for text in texts):  # noqa: ASYNC110
        await trio.sleep(0.01)


P = TypeVar("P", RawPeer, MemoryRawPeer)


@asynccontextmanager
async def node_with_events(
    name: str = "n", **options: Any
) -> AsyncIterator[tuple[trizre.Node, trizre.EventStream]]:
    """Node ``name`` on a beacon port of its own (``FAST`` unless ``options`` say), and its
    events from its start.  The node stops when the block ends; the stream then ends too."""
    async with trizre.open_node(name, beacon_port=free_udp_port(), **{**FAST, **options}) as node:
        yield node, node.events()


@asynccontextmanager
async def _with_entered(
    peer: Callable[[trizre.Node], AbstractAsyncContextManager[P]], options: dict[str, Any]
) -> AsyncIterator[tuple[trizre.Node, trizre.EventStream, P]]:
    async with node_with_events("n", **options) as (node, events), peer(node) as raw:
        await raw.hello()
        await next_event(events, trizre.Enter)
        yield node, events, raw


def node_with_raw_peer(
    **options: Any,
) -> AbstractAsyncContextManager[tuple[trizre.Node, trizre.EventStream, RawPeer]]:
    """Node "n" (``FAST`` unless ``options`` say), its events, and a :class:`RawPeer` that entered.

    The raw peer has said HELLO (sequence 1) and the node has reported it
    (the Enter is consumed from the events); the HELLO the node sends back
    is still to be read.  All three end with the block.
    """
    return _with_entered(raw_peer, {**FAST, **options})


def node_with_memory_peer(
    **options: Any,
) -> AbstractAsyncContextManager[tuple[trizre.Node, trizre.EventStream, MemoryRawPeer]]:
    """As :func:`node_with_raw_peer`, all in memory (``MEMORY``): for exact virtual times."""
    return _with_entered(memory_raw_peer, {**MEMORY, **options})


@asynccontextmanager
async def node_with_group_peer(
    group: str, **options: Any
) -> AsyncIterator[tuple[trizre.Node, trizre.EventStream, MemoryRawPeer]]:
    """Node "n" (``MEMORY`` unless ``options`` say) in ``group``, and a raw peer in it too.

    The peer said HELLO with ``group``; its Join was reported (consumed
    from the events) and the node's HELLO to it read.
    """
    async with trizre.open_node("n", beacon_port=free_udp_port(), **{**MEMORY, **options}) as node:
        events = node.events()
        await node.join(group)
        async with memory_raw_peer(node) as raw:
            await raw.hello(groups=(group,))
            await next_event(events, trizre.Join)
            assert isinstance(await raw.receive(), wire.Hello)
            yield node, events, raw
