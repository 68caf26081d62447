"""Nodes that find each other by gossip (zyre's gossip mode), on loopback TCP and ipc."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio

import trizre
from tests.support.czmq import CZMQ, CZMQ_MISSING, ZGossip, free_tcp_port
from tests.support.gossip import gossip_node
from tests.support.nodes import next_event


@asynccontextmanager
async def gossip_nodes(
    hub_endpoint: str, names: list[str], tmp_path: Path, **options: Any
) -> AsyncIterator[list[trizre.Node]]:
    """A hub node bound at ``hub_endpoint``, and one node per name joining it.

    Endpoints alternate between tcp and ipc, so both transports carry ZRE.
    """
    async with AsyncExitStack() as stack:
        hub = await stack.enter_async_context(gossip_node("hub", bind=hub_endpoint, **options))
        nodes = [hub]
        for i, name in enumerate(names):
            endpoint = "tcp://127.0.0.1:*" if i % 2 else f"ipc://{tmp_path}/{name}"
            node = await stack.enter_async_context(
                gossip_node(name, connect=hub_endpoint, endpoint=endpoint, **options)
            )
            nodes.append(node)
        yield nodes


@pytest.mark.parametrize("transport", ["tcp", "ipc"])
async def test_nodes_meet_through_a_hub_talk_and_part_with_goodbye(
    transport: str, tmp_path: Path
) -> None:
    hub_endpoint = (
        f"tcp://127.0.0.1:{free_tcp_port()}" if transport == "tcp" else f"ipc://{tmp_path}/gossip"
    )
    with trio.fail_after(10):
        async with gossip_nodes(hub_endpoint, ["a", "b"], tmp_path, local_links=False) as nodes:
            hub, a, b = nodes
            events, b_events = a.events(), b.events()
            for node in nodes:
                for other in nodes:
                    if other is not node:
                        await node.wait_for_peer(other.uuid)
            assert a.peer_address(b.uuid) == b.endpoint
            assert hub.peer_address(a.uuid).startswith("ipc://")  # a's endpoint
            await b.whisper(a.uuid, b"hello")
            assert (await next_event(events, trizre.Whisper)).frames == (b"hello",)
            await a.join("chat")
            await next_event(b_events, trizre.Join, lambda e: e.peer == a.uuid)
            await b.shout("chat", b"to the group")
            shout = await next_event(events, trizre.Shout)
            assert (shout.peer, shout.group, shout.frames) == (b.uuid, "chat", (b"to the group",))
        # Leaving the block stopped b, a and hub in turn: GOODBYE, not expiry.


async def test_a_stopped_node_is_reported_gone_at_once_by_goodbye(tmp_path: Path) -> None:
    hub_endpoint = f"ipc://{tmp_path}/gossip"
    with trio.fail_after(10):
        async with gossip_nodes(hub_endpoint, ["stays"], tmp_path, local_links=False) as nodes:
            _, stays = nodes
            events = stays.events()
            async with gossip_node(
                "goes",
                connect=hub_endpoint,
                local_links=False,
                expired_timeout=60.0,  # an Exit by expiry would take a minute
            ) as goes:
                await stays.wait_for_peer(goes.uuid)
            exit_ = await next_event(events, trizre.Exit)
            assert exit_.peer == goes.uuid


async def test_curve_nodes_gossip_their_keys_and_talk_encrypted(tmp_path: Path) -> None:
    certs = [trizre.Certificate.generate() for _ in range(3)]
    hub_endpoint = f"ipc://{tmp_path}/gossip"
    with trio.fail_after(10):
        async with AsyncExitStack() as stack:
            nodes = []
            for i, cert in enumerate(certs):
                # A CURVE node's hub is a CURVE server: its clients need its key.
                where: dict[str, Any] = (
                    {"bind": hub_endpoint}
                    if i == 0
                    else {"connect": hub_endpoint, "gossip_server_key": certs[0]}
                )
                node = await stack.enter_async_context(
                    gossip_node(f"n{i}", curve=cert, curve_allow=certs, **where)
                )
                nodes.append(node)
            events = nodes[1].events()
            await nodes[1].wait_for_peer(nodes[2].uuid)
            await nodes[2].wait_for_peer(nodes[1].uuid)
            assert nodes[1].peer_headers(nodes[2].uuid)["X-PUBLICKEY"] == certs[2].public_z85
            await nodes[2].whisper(nodes[1].uuid, b"secret")
            assert (await next_event(events, trizre.Whisper)).frames == (b"secret",)


@pytest.mark.skipif(CZMQ is None, reason=CZMQ_MISSING)
async def test_nodes_meet_through_czmqs_zgossip_as_hub() -> None:
    assert CZMQ is not None
    hub = ZGossip(CZMQ)
    endpoint = f"tcp://127.0.0.1:{free_tcp_port()}"
    hub.send(b"BIND", endpoint.encode())
    try:
        with trio.fail_after(10):
            async with (
                gossip_node("a", connect=endpoint, local_links=False) as a,
                gossip_node("b", connect=endpoint, local_links=False) as b,
            ):
                await a.wait_for_peer("b")
                await b.wait_for_peer("a")
    finally:
        hub.close()


@pytest.mark.parametrize(
    ("options", "error", "match"),
    [
        ({"discovery": "gossip"}, ValueError, "needs gossip_bind, gossip_connect"),
        ({"gossip_bind": "tcp://127.0.0.1:5999"}, ValueError, 'need discovery="gossip"'),
        ({"endpoint": "tcp://127.0.0.1:*"}, ValueError, "endpoint is for gossip"),
        (
            {"discovery": "gossip", "gossip_bind": "ipc:///x", "endpoint": "tcp://*:5000"},
            ValueError,
            "not a wildcard",
        ),
        ({"discovery": "gossip", "gossip_connect": "udp://1.2.3.4:5"}, ValueError, "tcp:// or"),
        ({"discovery": "gossip", "gossip_connect": 5}, TypeError, "gossip_connect"),
        (
            {"discovery": "gossip", "gossip_bind": "ipc:///x", "gossip_ttl": -1},
            ValueError,
            "gossip_ttl",
        ),
    ],
)
def test_gossip_options_are_checked(
    options: dict[str, Any], error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        trizre.NodeConfig(**options)
