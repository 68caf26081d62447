"""Gossip for tests: what a service heard, the handshakes it reported, nodes that gossip.

Loopback (or ipc) only; a hub node binds where it is told, its clients
connect there.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import trio

import trizre
from tests.support.czmq import ZGossip
from trizre.sansio._gossip import Deliver, Forget
from trizre.transport._gossip_service import GossipService, Handshake, open_gossip

__all__ = [
    "Ear",
    "Shakes",
    "delivered",
    "gossip",
    "gossip_node",
    "refused",
    "succeeded",
]


class Ear:
    """The tuples a service heard (and those it forgot), and a way to wait for one."""

    def __init__(self) -> None:
        self.tuples: dict[str, str] = {}
        self.forgotten: list[str] = []
        self.changed = trio.Event()

    def __call__(self, action: Deliver | Forget) -> None:
        if isinstance(action, Deliver):
            self.tuples[action.key] = action.value
        else:
            self.tuples.pop(action.key, None)
            self.forgotten.append(action.key)
        self.changed.set()
        self.changed = trio.Event()

    async def until(self, key: str, value: str | None) -> None:
        """Wait until ``key`` holds ``value`` (``None``: until it is gone)."""
        while self.tuples.get(key) != value:
            await self.changed.wait()


class Shakes:
    """The handshakes a service reported, and a way to wait for one."""

    def __init__(self) -> None:
        self.seen: list[Handshake] = []
        self.changed = trio.Event()

    def __call__(self, shake: Handshake) -> None:
        self.seen.append(shake)
        self.changed.set()
        self.changed = trio.Event()

    async def until(self, wanted: Callable[[Handshake], bool]) -> Handshake:
        while True:
            for shake in self.seen:
                if wanted(shake):
                    return shake
            await self.changed.wait()


def refused(side: str, words: str) -> Callable[[Handshake], bool]:
    return lambda shake: shake.side == side and not shake.ok and words in shake.reason


def succeeded(side: str) -> Callable[[Handshake], bool]:
    return lambda shake: shake.side == side and shake.ok


@asynccontextmanager
async def gossip(
    bind: list[str] | None = None, connect: list[str] | None = None, **curve: Any
) -> AsyncIterator[tuple[GossipService, Ear, Shakes]]:
    """A gossip service bound and connected as told, with its :class:`Ear` and :class:`Shakes`."""
    ear, shakes = Ear(), Shakes()
    async with open_gossip(bind or [], connect or [], heard=ear, handshake=shakes, **curve) as g:
        yield g, ear, shakes


def delivered(czmq: ZGossip, key: str) -> str:
    """The value czmq's service delivers to its application for ``key``.

    czmq delivers its own application's tuples too: those are skipped.
    Each read gives up after 5 s (the actor's receive timeout).
    """
    for _ in range(10):
        assert czmq.recv() == "DELIVER"
        found, value = czmq.recv(), czmq.recv()
        if found == key:
            return value
    raise AssertionError(f"czmq never delivered {key!r}")


def gossip_node(
    name: str,
    *,
    bind: str | None = None,
    connect: str | list[str] | None = None,
    endpoint: str = "tcp://127.0.0.1:*",
    **options: Any,
) -> AbstractAsyncContextManager[trizre.Node]:
    """``open_node`` with gossip discovery: a hub if ``bind``, a client of ``connect``."""
    if bind is not None:
        options["gossip_bind"] = bind
    if connect is not None:
        options["gossip_connect"] = connect
    return trizre.open_node(name, discovery="gossip", endpoint=endpoint, **options)
