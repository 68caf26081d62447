"""Forged beacons against one node on exact virtual times (issue 25, sections 5 and 6).

In-memory discovery under ``autojump_clock``; beacons are handed to the
node as its discovery would, from any number of (spoofed) source
addresses.  The TCP links it opens go to closed loopback ports, or are not
opened at all where a test counts or refuses them.
"""

from __future__ import annotations

import errno
import logging
import socket
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import trio
import trio.testing
import zmq

import trizre
from tests.support.nodes import MEMORY, free_udp_port
from trizre import wire
from trizre.transport._discovery import MemoryDiscovery, open_beacon_socket
from trizre.transport._interfaces import select_interface
from trizre.transport._links import TcpLink


def source(index: int) -> str:
    """The ``index``-th spoofed source: 127.1.x.y (every 127/8 address is this host's)."""
    return f"127.1.{index // 250}.{index % 250 + 1}"


def forge(node: trizre.Node, count: int, sources: int) -> None:
    """``count`` beacons for made-up peers at closed ports, from ``sources`` addresses in turn."""
    network = node._discovery
    assert isinstance(network, MemoryDiscovery)
    for n in range(count):
        fake = uuid.uuid4()
        beacon = wire.Beacon(fake, 1 + fake.int % 1000)
        network.deliver(beacon, source(n % sources))


@pytest.fixture
def connects(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Every TCP link the node opens, by endpoint (the links are opened as usual)."""
    opened: list[str] = []
    real = TcpLink.connect

    def counting(endpoint: str, *args: Any, **kwargs: Any) -> TcpLink:
        opened.append(endpoint)
        return real(endpoint, *args, **kwargs)

    monkeypatch.setattr(TcpLink, "connect", counting)
    yield opened


async def test_spoofed_sources_share_one_budget_for_new_peers(
    autojump_clock: trio.testing.MockClock, connects: list[str]
) -> None:
    """1,000 sources, ten beacons each: the per-source throttle alone let all 10,000 link.

    All sources together bring ``max_pending_peers`` new peers at once,
    then ``max_pending_peers / handshake_timeout`` a second: the pending
    table turns over no faster than handshakes time out.
    """
    port = free_udp_port()
    with trio.fail_after(60):
        async with trizre.open_node("n", beacon_port=port, **MEMORY) as node:
            await trio.testing.wait_all_tasks_blocked()  # its discovery listens
            forge(node, 10_000, sources=1000)
            assert len(connects) == 256  # max_pending_peers, the total's burst
            assert len(set(connects)) == 256
            await trio.sleep(1.0)
            forge(node, 10_000, sources=1000)
            assert len(connects) == 256 + 51  # 256 / 5 s a second, whole tokens
            assert len(node.pending_peers()) == 256  # never more than max_pending_peers


async def test_a_real_peer_gets_in_by_its_hello_during_a_flood(
    autojump_clock: trio.testing.MockClock, connects: list[str]
) -> None:
    """The budget spent by forgers does not keep out a peer that links to us itself."""
    port = free_udp_port()
    with trio.fail_after(60):
        async with trizre.open_node("n", beacon_port=port, **MEMORY) as node:
            events = node.events()
            await trio.testing.wait_all_tasks_blocked()
            forge(node, 10_000, sources=1000)
            async with trizre.open_node("real", beacon_port=port, **MEMORY) as real:
                with trio.fail_after(5):
                    async for event in events:
                        if isinstance(event, trizre.Enter):
                            assert event.peer == real.uuid
                            break


async def test_out_of_descriptors_warns_a_bounded_number_of_times(
    autojump_clock: trio.testing.MockClock,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Issue 25, 6: no socket for 5,000 new peers over 25 s: three lines, not 5,000."""

    def no_descriptors(*args: Any, **kwargs: Any) -> TcpLink:
        raise zmq.ZMQError(errno.EMFILE)

    monkeypatch.setattr(TcpLink, "connect", no_descriptors)
    port = free_udp_port()
    with trio.fail_after(60), caplog.at_level(logging.INFO, logger="trizre"):
        async with trizre.open_node(
            "n", beacon_port=port, max_pending_peers=100_000, **MEMORY
        ) as node:
            await trio.testing.wait_all_tasks_blocked()
            for _ in range(25):
                forge(node, 200, sources=200)  # within every budget: each one tries
                await trio.sleep(1.0)
    lines = [r.getMessage() for r in caplog.records if "cannot open a socket" in r.getMessage()]
    assert len(lines) == 3, lines  # at 0, 10 and 20 s
    assert "Too many open files; this is logged at most every 10 s" in lines[0]
    assert lines[1].endswith("(1999 more since the last)")


async def test_invalid_datagrams_log_a_bounded_number_of_lines(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Anyone can send the beacon port junk: at most ten DEBUG lines for 500 datagrams."""
    port = free_udp_port()
    lo = select_interface("lo")
    good = wire.Beacon(uuid.uuid4(), 5670)
    with trio.fail_after(10), caplog.at_level(logging.DEBUG, logger="trizre.discovery"):
        async with open_beacon_socket(lo, port) as beacons, trio.open_nursery() as nursery:

            async def receive() -> None:
                assert (await beacons.receive())[0] == good  # the junk was read and dropped

            nursery.start_soon(receive)
            sender = trio.socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            sender.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
            with sender:
                for n in range(500):
                    await sender.sendto(b"junk %d" % n, (str(lo.broadcast), port))
                    if n % 20 == 0:
                        await trio.testing.wait_all_tasks_blocked()  # the reader keeps up
                await sender.sendto(wire.encode_beacon(good), (str(lo.broadcast), port))
    lines = [r for r in caplog.records if r.name == "trizre.discovery"]
    assert len(lines) == 10
