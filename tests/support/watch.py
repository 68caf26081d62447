"""What ``trizre watch`` tests share: a watching node, its snapshots, servers to watch.

All in memory (``MEMORY``) for ``autojump_clock``, unless told otherwise.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import attrs
import trio

import trizre
from tests.support.nodes import MEMORY, MemoryRawPeer, memory_raw_peer
from trizre import patterns, wire
from trizre.cli._monitor import Monitor, open_monitor
from trizre.patterns import IncomingRequest
from trizre.patterns._status import encode_status

__all__ = [
    "WALL",
    "echo",
    "say_active",
    "start_primary",
    "star_status",
    "until",
    "wall",
    "watched_raw_pair",
    "watching",
]

WALL = 1_000_000.0  # the watcher's wall clock in these tests: virtual time plus this


def wall() -> float:
    return WALL + trio.current_time()


async def echo(request: IncomingRequest) -> bytes:
    """The servers' handler: the request's body."""
    return b"".join(request.body)


async def until(monitor: Monitor, check: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    """The first snapshot that passes ``check`` (waits for changes, not for time)."""
    while True:
        seen = monitor.version.value
        snapshot = monitor.snapshot()
        if check(snapshot):
            return snapshot
        await monitor.version.wait_value(lambda v, seen=seen: v > seen)


@asynccontextmanager
async def watching(
    port: int, options: dict[str, Any] | None = None, **monitor: Any
) -> AsyncIterator[tuple[trizre.Node, Monitor]]:
    """Node "watcher" on ``port`` (``MEMORY`` unless ``options``) and its monitor (``monitor``)."""
    node_options = MEMORY if options is None else options
    async with (
        trizre.open_node("watcher", beacon_port=port, **node_options) as watcher,
        open_monitor(watcher, **monitor) as opened,
    ):
        yield watcher, opened


def start_primary(nursery: trio.Nursery, port: int) -> trio.CancelScope:
    """Primary "p" (with "b", echo) in a task of ``nursery``; cancel the scope to kill it."""
    scope = trio.CancelScope()

    async def primary() -> None:
        with scope:
            async with (
                trizre.open_node("p", beacon_port=port, **MEMORY) as p,
                patterns.open_binary_star_server(p, echo, primary=True, partner="b"),
            ):
                await trio.sleep_forever()

    nursery.start_soon(primary)
    return scope


def star_status(role: str, partner: str, since: float) -> wire.Whisper:
    """A Binary Star server's status saying ACTIVE since ``since`` (its takeover)."""
    old = "PASSIVE" if role == "backup" else "PRIMARY"
    transition = [since, old, "ACTIVE", "CLIENT_REQUEST" if role == "backup" else "PEER_BACKUP"]
    fields: dict[str, Any] = {"key": "bstar", "kind": "bstar", "role": role, "partner": partner}
    fields.update(state="ACTIVE", transitions=[transition])
    return wire.Whisper(0, encode_status(fields))


async def say_active(peer: MemoryRawPeer, role: str, partner: str, since: float) -> None:
    """``peer`` whispers :func:`star_status` with its next sequence number."""
    await peer.send(attrs.evolve(star_status(role, partner, since), sequence=peer.next_seq()))


@asynccontextmanager
async def watched_raw_pair(
    port: int,
) -> AsyncIterator[tuple[Monitor, MemoryRawPeer, MemoryRawPeer]]:
    """A watcher's monitor (wall clock ``wall``) and raw peers "p" and "b" that said HELLO."""
    async with (
        watching(port, clock=wall) as (watcher, monitor),
        memory_raw_peer(watcher) as primary,
        memory_raw_peer(watcher) as backup,
    ):
        await primary.hello("p")
        await backup.hello("b")
        yield monitor, primary, backup
