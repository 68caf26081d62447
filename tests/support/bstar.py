"""Binary Star pairs on loopback: servers in tasks one can kill, clients on a node of their own."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

import attrs
import trio

import trizre
from tests.support.nodes import FAST
from trizre import patterns
from trizre.patterns import IncomingRequest
from trizre.patterns import _protocol as patterns_protocol

__all__ = [
    "HEARTBEAT",
    "Running",
    "active_primary",
    "answer",
    "client_node",
    "run_server",
    "settled_pair",
    "start_pair",
    "state_frames",
]

HEARTBEAT = 0.1  # failover after 0.2 s

C = TypeVar("C")


async def answer(request: IncomingRequest) -> bytes:
    """The servers' handler: ``ok:`` and the request's body."""
    return b"ok:" + b"".join(request.body)


@attrs.define
class Running:
    """A server in a task of its own: its node, its Binary Star server, and a way to kill it."""

    node: trizre.Node
    star: patterns.BinaryStarServer
    scope: trio.CancelScope
    stopped: trio.Event

    async def kill(self) -> None:
        self.scope.cancel()
        await self.stopped.wait()


async def run_server(
    port: int,
    name: str,
    primary: bool,
    partner: str,
    task_status: Any,
    *,
    trace_dir: Path | None = None,
    beacons_refresh: bool = False,
) -> None:
    """Node ``name`` with a Binary Star server, until cancelled (``nursery.start`` it)."""
    stopped = trio.Event()
    try:
        with trio.CancelScope() as scope:
            async with (
                trizre.open_node(
                    name,
                    beacon_port=port,
                    trace_dir=trace_dir,
                    beacons_refresh=beacons_refresh,
                    **FAST,
                ) as node,
                patterns.open_binary_star_server(
                    node, answer, primary=primary, partner=partner, heartbeat=HEARTBEAT
                ) as star,
            ):
                task_status.started(Running(node, star, scope, stopped))
                await trio.sleep_forever()
    finally:
        stopped.set()


async def start_pair(nursery: trio.Nursery, port: int, **options: Any) -> tuple[Running, Running]:
    """Primary "p" and backup "b" of one pair, started in turn in ``nursery`` (not yet settled)."""
    primary: Running = await nursery.start(_run, port, "p", True, "b", options)
    backup: Running = await nursery.start(_run, port, "b", False, "p", options)
    return primary, backup


async def _run(
    port: int, name: str, primary: bool, partner: str, options: Any, task_status: Any
) -> None:
    await run_server(port, name, primary, partner, task_status, **options)


@asynccontextmanager
async def client_node(
    port: int, open_client: Callable[..., AbstractAsyncContextManager[C]], *args: Any
) -> AsyncIterator[C]:
    """Node "c" and the client ``open_client(node, *args)`` opens on it."""
    async with (
        trizre.open_node("c", beacon_port=port, **FAST) as cli,
        open_client(cli, *args) as client,
    ):
        yield client


def state_frames(
    state: patterns.State, seen: patterns.State | None = None, version: int = 2
) -> list[bytes]:
    return patterns_protocol.encode(
        patterns_protocol.State(state.value, 0 if seen is None else seen.value, version=version)
    )


@asynccontextmanager
async def active_primary(
    port: int, impostor: trizre.Node
) -> AsyncIterator[tuple[trizre.Node, patterns.BinaryStarServer]]:
    """Primary "p" whose partner is ``impostor``, which played a backup until "p" went ACTIVE."""
    async with (
        trizre.open_node("p", beacon_port=port, **FAST) as node,
        patterns.open_binary_star_server(
            node, answer, primary=True, partner=impostor.name, heartbeat=HEARTBEAT
        ) as star,
    ):
        await impostor.wait_for_peer("p")
        await impostor.whisper(node.uuid, *state_frames(patterns.State.BACKUP))
        await star.state.wait_value(patterns.State.ACTIVE)
        yield node, star


@asynccontextmanager
async def settled_pair(
    port: int, **options: Any
) -> AsyncIterator[tuple[trio.Nursery, Running, Running]]:
    """:func:`start_pair` in a nursery of its own, once the backup is PASSIVE.

    Yields the nursery (to start more servers in), the primary and the
    backup; when the block ends, everything in the nursery is cancelled.
    """
    async with trio.open_nursery() as nursery:
        primary, backup = await start_pair(nursery, port, **options)
        await backup.star.state.wait_value(patterns.State.PASSIVE)
        yield nursery, primary, backup
        nursery.cancel_scope.cancel()
