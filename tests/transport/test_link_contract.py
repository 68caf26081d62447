"""One contract, every transport: each ``Link`` and each ``Discovery`` passes the same checks.

The checks are in :mod:`tests.support.contracts` (order, sizes up to the
limit, oversize refused, backpressure, cancellation, close); here is one
factory per implementation, and the suite is their product.  Loopback only.

``GossipService`` is not here: it carries gossip tuples, not beacons, and
does not implement :class:`~trizre.transport._discovery.Discovery`.
"""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import pytest
import trio

import trizre
from tests.support.contracts import (
    DISCOVERY_CHECKS,
    LINK_CHECKS,
    DiscoveryFactory,
    LinkPair,
    PairFactory,
)
from tests.support.nodes import free_udp_port
from trizre.transport._curve import CurvePolicy, open_zap, z85
from trizre.transport._discovery import Discovery, open_beacon_hub, open_memory_discovery
from trizre.transport._interfaces import select_interface
from trizre.transport._links import (
    CurveClient,
    CurveServer,
    LocalInbox,
    LocalLink,
    TcpLink,
    bind_inbox,
)
from trizre.transport._zsock import ZSocket

LO = select_interface("lo")
IDENTITY = b"\x01" + bytes(range(16))  # a ZRE DEALER's: 1 and its UUID


def _free_tcp_endpoint() -> str:
    """A loopback TCP endpoint free a moment ago (for an inbox bound after its link connects)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return f"tcp://127.0.0.1:{port}"


@asynccontextmanager
async def _tcp_pair(
    hwm: int,
    limit: int,
    listening: bool,
    curve: tuple[CurveServer, CurveClient] | None = None,
) -> AsyncIterator[LinkPair]:
    """A ``TcpLink`` into a ROUTER inbox from ``bind_inbox``, bound now or at ``listen()``."""
    endpoint = _free_tcp_endpoint()
    inboxes: list[ZSocket] = []
    server, client = curve if curve is not None else (None, None)

    def listen() -> None:
        inboxes.append(bind_inbox("127.0.0.1", limit, curve=server, endpoint=endpoint)[0])

    if listening:
        listen()
    link = TcpLink.connect(endpoint, IDENTITY, hwm, curve=client)
    # A CURVE inbox tags each message's identity with the client's key.
    sender = IDENTITY if client is None else z85(client.public).encode() + IDENTITY
    late = _Late(inboxes)
    try:
        yield LinkPair(link, late, sender, hwm, limit, late.close, listen)
    finally:
        link.close()
        late.close()


def tcp_pair(*, hwm: int, limit: int, listening: bool) -> AbstractAsyncContextManager[LinkPair]:
    """A plain ``TcpLink`` into a ROUTER inbox."""
    return _tcp_pair(hwm, limit, listening)


@asynccontextmanager
async def curve_pair(*, hwm: int, limit: int, listening: bool) -> AsyncIterator[LinkPair]:
    """A CURVE ``TcpLink`` into a CURVE inbox, its client allowed by the run's ZAP handler."""
    server, client = trizre.Certificate.generate(), trizre.Certificate.generate()
    assert server.secret is not None and client.secret is not None
    routing_id = b"trizre-zap-contract"
    keys = (
        CurveServer(server.public, server.secret, "global", routing_id),
        CurveClient(client.public, client.secret, server.public),
    )
    async with (
        open_zap(routing_id, CurvePolicy("global", frozenset({client.public}))),
        _tcp_pair(hwm, limit, listening, keys) as pair,
    ):
        yield pair


@asynccontextmanager
async def local_pair(*, hwm: int, limit: int, listening: bool) -> AsyncIterator[LinkPair]:
    """A ``LocalLink`` into a ``LocalInbox``: not listening is simply not read yet."""
    inbox = LocalInbox("tcp://127.0.0.1:49152", 2, limit)
    link = LocalLink(inbox, IDENTITY, hwm)
    try:
        yield LinkPair(link, inbox, IDENTITY, hwm, limit, inbox.close)
    finally:
        link.close()
        inbox.close()


class _Late:
    """The inbox of a TCP pair, bound now or at ``listen()``: reads wait for it."""

    def __init__(self, inboxes: list[ZSocket]) -> None:
        self._inboxes = inboxes

    async def receive_batch(self, max_messages: int) -> list[list[bytes]]:
        assert self._inboxes, "read before the pair listens"
        return await self._inboxes[0].receive_batch(max_messages)

    def close(self) -> None:
        for inbox in self._inboxes:
            inbox.close()


LINKS: dict[str, PairFactory] = {"tcp": tcp_pair, "tcp-curve": curve_pair, "local": local_pair}


def _hub(port: int) -> DiscoveryFactory:
    return lambda: open_beacon_hub(LO, port)


def _memory(port: int) -> DiscoveryFactory:
    return lambda: open_memory_discovery(LO, port)


DISCOVERIES: dict[str, Callable[[int], Callable[[], AbstractAsyncContextManager[Discovery]]]] = {
    "beacon-hub": _hub,
    "memory": _memory,
}


# Where an implementation breaks the contract today: strict, so a fix shows.
KNOWN_BREACHES: dict[tuple[str, str], str] = {}


def _cases(kinds: Iterable[str], checks: Iterable[Callable[..., object]]) -> list[Any]:
    cases = []
    for kind in kinds:
        for check in checks:
            breach = KNOWN_BREACHES.get((kind, check.__name__))
            marks = [pytest.mark.xfail(reason=breach, strict=True)] if breach else []
            cases.append(pytest.param(kind, check, id=f"{kind}-{check.__name__}", marks=marks))
    return cases


@pytest.mark.parametrize(("kind", "check"), _cases(LINKS, LINK_CHECKS))
async def test_every_link_keeps_the_contract(
    kind: str, check: Callable[[PairFactory], Awaitable[None]]
) -> None:
    with trio.fail_after(20):
        await check(LINKS[kind])


@pytest.mark.parametrize(("kind", "check"), _cases(DISCOVERIES, DISCOVERY_CHECKS))
async def test_every_discovery_keeps_the_contract(
    kind: str, check: Callable[[DiscoveryFactory], Awaitable[None]]
) -> None:
    with trio.fail_after(20):
        await check(DISCOVERIES[kind](free_udp_port()))
