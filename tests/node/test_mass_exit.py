"""Peers that die together expire over TCP, however slow the application (issue 25, 2).

The same scenario as ``test_node_virtual_time``'s 3,000 in-memory peers,
over real TCP links on loopback: a few hundred raw peers (each a ROUTER
and a DEALER here, and a DEALER in the node: ~10 descriptors a peer in
this one process) say HELLO and never another word.  The application
reads each event with a millisecond of work, through a buffer smaller
than the crowd, so reporting them fills it and the presence pass waits:
that wait used to restart every peer's clock, and none ever expired.
"""

from __future__ import annotations

from contextlib import AsyncExitStack

import pytest
import trio

import trizre
from tests.support.nodes import free_udp_port, raw_peer
from trizre.node import _node

PEERS = 300
TIMERS = {"evasive_timeout": 0.25, "expired_timeout": 1.0, "beacon_interval": 0.05}


async def test_hundreds_of_tcp_peers_that_die_together_expire_for_a_slow_application() -> None:
    port = free_udp_port()
    with trio.fail_after(60):
        async with (
            trizre.open_node(
                "n", beacon_port=port, interface="lo", local_links=False, **TIMERS
            ) as node,
            AsyncExitStack() as stack,
            trio.open_nursery() as nursery,
        ):
            events = node.events(max_buffer=50)  # the crowd is 6x the buffer
            raws = [await stack.enter_async_context(raw_peer(node)) for _ in range(PEERS)]
            mine = {raw.uuid for raw in raws}
            entered: set[object] = set()
            gone: set[object] = set()
            all_entered, all_gone = trio.Event(), trio.Event()

            async def application() -> None:
                async for event in events:
                    if isinstance(event, trizre.Enter) and event.peer in mine:
                        entered.add(event.peer)
                        if entered == mine:
                            all_entered.set()
                    elif isinstance(event, trizre.Exit) and event.peer in mine:
                        gone.add(event.peer)
                        if gone == mine:
                            all_gone.set()
                    await trio.sleep(0.001)  # its work

            nursery.start_soon(application)
            for raw in raws:
                await raw.hello()  # and never another word: they all died
            await all_entered.wait()
            await all_gone.wait()
            assert node.peers() == []
            assert node.pending_peers() == []
            nursery.cancel_scope.cancel()


async def test_a_crowd_whose_links_break_together_hands_its_memory_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Peers that go by their closed links (not by expiry) also trigger the trim.

    A process holding many peers exits: every link breaks at once and the
    node ends each peer at once (reason ``link``).  Their sockets' memory
    goes back to the OS a moment later, as after a crowd that expired.
    """
    trimmed = trio.Event()
    monkeypatch.setattr(_node, "release_freed_memory", trimmed.set)
    port = free_udp_port()
    with trio.fail_after(60):
        async with trizre.open_node(
            "n", beacon_port=port, interface="lo", local_links=False, **TIMERS
        ) as node:
            events = node.events(max_buffer=1000)
            async with AsyncExitStack() as stack:
                raws = [await stack.enter_async_context(raw_peer(node)) for _ in range(100)]
                for raw in raws:
                    await raw.hello()
                while len(node.peers()) < len(raws):
                    await events.receive()
            # The raw peers' sockets are closed: every link to them breaks.
            gone = 0
            while gone < len(raws):
                if isinstance(await events.receive(), trizre.Exit):
                    gone += 1
            await trimmed.wait()
            assert node.peers() == []
