"""Pattern clients without sockets: a reply router fed by the test, over a stand-in node.

:class:`StubNode` has just the node methods the clients call; every
request they whisper is decoded and queued on its ``outbox`` for the
test's scripted servers, whose replies the test hands the router as
events (:func:`deliver`, or ``events.send``).
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from uuid import UUID, uuid4

import trio
import trio.lowlevel
import trio.testing

import trizre
from trizre.patterns._common import ReplyRouter, _Pending
from trizre.patterns._protocol import Reply, Request, decode, encode

__all__ = [
    "StubNode",
    "as_events",
    "blocks",
    "deliver",
    "pending_to",
    "reply_event",
    "running_router",
    "stub_clients",
]


def reply_event(peer: UUID, request_id: int, status: int = 200, *body: bytes) -> trizre.Whisper:
    """A WHISPER event from ``peer`` carrying a REPLY."""
    return trizre.Whisper(peer, "peer", tuple(encode(Reply(request_id, status, body))))


async def as_events(receive: trio.MemoryReceiveChannel[object]) -> AsyncIterator[object]:
    async for event in receive:
        yield event


@asynccontextmanager
async def running_router(
    node: object | None = None,
) -> AsyncIterator[tuple[ReplyRouter, trio.MemorySendChannel[object]]]:
    """A router whose events come from the returned send channel."""
    send, receive = trio.open_memory_channel[object](math.inf)
    router = ReplyRouter(node if node is not None else object())  # type: ignore[arg-type]
    async with trio.open_nursery() as nursery:
        nursery.start_soon(router.run, as_events(receive))  # type: ignore[arg-type]
        yield router, send
        nursery.cancel_scope.cancel()


async def deliver(send: trio.MemorySendChannel[object], *events: object) -> None:
    """Hand events to the router and let it process them all."""
    for event in events:
        await send.send(event)
    await trio.testing.wait_all_tasks_blocked()


async def blocks(afn: Callable[[], Awaitable[object]], seconds: float = 1.0) -> bool:
    """True if ``await afn()`` is still waiting after ``seconds``."""
    with trio.move_on_after(seconds) as scope:
        await afn()
    return scope.cancelled_caught


def pending_to(router: ReplyRouter, request_id: int, *targets: UUID) -> _Pending:
    """Open request ``request_id`` and send it to each of ``targets`` in turn."""
    pending = router.open(request_id)
    for target in targets:
        router.send_to(pending, target)
    return pending


class StubNode:
    """Just the node methods the clients call: names, groups, presence, whisper.

    Peers are kept in entry order, as the real node keeps them.  Every
    successful whisper is decoded and queued on ``outbox`` for the test's
    scripted servers.
    """

    tracer = None  # tracing off, as by default

    def __init__(self) -> None:
        self.names: dict[UUID, str] = {}
        self.groups: dict[UUID, set[str]] = {}
        self.unresponsive: set[UUID] = set()
        self.sent: list[tuple[float, UUID, tuple[bytes, ...]]] = []
        self._outbox_send, self.outbox = trio.open_memory_channel[tuple[UUID, Request]](math.inf)

    def add(self, name: str, *groups: str) -> UUID:
        peer = uuid4()
        self.names[peer] = name
        self.groups[peer] = set(groups)
        return peer

    def remove(self, peer: UUID) -> None:
        del self.names[peer]
        del self.groups[peer]

    def peers(self) -> list[UUID]:
        return list(self.names)

    def find_peers(self, name: str) -> list[UUID]:
        return [peer for peer, n in self.names.items() if n == name]

    def peer_by_name(self, name: str) -> UUID | None:
        """As the node: the newest responsive peer of that name."""
        found = self.find_peers(name)
        responsive = [peer for peer in found if peer not in self.unresponsive]
        return (responsive or found)[-1] if found else None

    def peers_by_group(self, group: str) -> list[UUID]:
        return [peer for peer, groups in self.groups.items() if group in groups]

    def peer_is_responsive(self, peer: UUID) -> bool:
        if peer not in self.names:
            raise trizre.UnknownPeer(peer)
        return peer not in self.unresponsive

    def whisper_nowait(self, peer: UUID, *frames: bytes) -> bool:
        if peer not in self.names:
            raise trizre.UnknownPeer(peer)
        self.sent.append((trio.current_time(), peer, frames))
        message = decode(frames)
        assert isinstance(message, Request)
        self._outbox_send.send_nowait((peer, message))
        return True

    async def whisper(self, peer: UUID, *frames: bytes) -> None:
        await trio.lowlevel.checkpoint()
        self.whisper_nowait(peer, *frames)


@asynccontextmanager
async def stub_clients(
    *peers: str | tuple[str, ...],
    unresponsive: Sequence[int] = (),
) -> AsyncIterator[
    tuple[StubNode, list[UUID], ReplyRouter, trio.MemorySendChannel[object], trio.Nursery]
]:
    """A :class:`StubNode` with ``peers``, its running router, and a nursery for the scripts.

    Each peer is a name, or a name and its groups; ``unresponsive``: the
    indexes of those the node reports evasive or silent.  Yields the node, the
    peers' UUIDs in that order, the router, the channel its events come
    from, and a nursery inside the router's lifetime (cancel its scope to
    stop the scripts).
    """
    node = StubNode()
    added = [node.add(*((peer,) if isinstance(peer, str) else peer)) for peer in peers]
    node.unresponsive.update(added[i] for i in unresponsive)
    async with running_router(node) as (router, events), trio.open_nursery() as nursery:
        yield node, added, router, events, nursery
