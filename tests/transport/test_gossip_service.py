"""The gossip service on real sockets (loopback TCP and ipc), among ours and with czmq's zgossip."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio
import zmq

from tests.support.czmq import CZMQ, CZMQ_MISSING, ZGossip, free_tcp_port
from tests.support.gossip import Ear, delivered
from trizre.transport._gossip_service import GossipService, open_gossip


@asynccontextmanager
async def service(
    bind: list[str] | None = None, connect: list[str] | None = None
) -> AsyncIterator[tuple[GossipService, Ear]]:
    ear = Ear()
    async with open_gossip(bind or [], connect or [], heard=ear) as gossip:
        yield gossip, ear


@pytest.mark.parametrize("transport", ["tcp", "ipc"])
async def test_clients_of_one_hub_hear_each_other(transport: str, tmp_path: Path) -> None:
    where = "tcp://127.0.0.1:*" if transport == "tcp" else f"ipc://{tmp_path}/hub"
    with trio.fail_after(10):
        async with service(bind=[where]) as (hub, hub_ear):
            (endpoint,) = hub.endpoints
            assert not endpoint.endswith("*")
            async with (
                service(connect=[endpoint]) as (a, a_ear),
                service(connect=[endpoint]) as (b, b_ear),
            ):
                a.publish("node-a", "tcp://127.0.0.1:50001")
                b.publish("node-b", "tcp://127.0.0.1:50002")
                await b_ear.until("node-a", "tcp://127.0.0.1:50001")
                await a_ear.until("node-b", "tcp://127.0.0.1:50002")
                await hub_ear.until("node-b", "tcp://127.0.0.1:50002")
                assert "node-a" not in a_ear.tuples  # our own are not delivered to us


async def test_a_leaver_is_forgotten_everywhere_within_its_ttl() -> None:
    with trio.fail_after(10):
        async with service(bind=["tcp://127.0.0.1:*"]) as (hub, hub_ear):  # noqa: SIM117
            async with service(connect=hub.endpoints) as (_, stayer_ear):
                async with service(connect=hub.endpoints) as (leaver, _):
                    leaver.publish("leaver", "tcp://127.0.0.1:50003", ttl=600)
                    await stayer_ear.until("leaver", "tcp://127.0.0.1:50003")
                # Gone without a word: its tuple dies out at the hub and at the
                # stayer.  When, exactly, is tests/unit/test_gossip_state.py's (virtual time).
                await stayer_ear.until("leaver", None)
                await hub_ear.until("leaver", None)


async def test_a_stranger_cannot_publish_without_hello() -> None:
    with trio.fail_after(10):
        async with service(bind=["tcp://127.0.0.1:*"]) as (hub, hub_ear):
            from trizre import wire  # noqa: PLC0415

            ctx = zmq.Context.instance()
            dealer = ctx.socket(zmq.DEALER)
            dealer.setsockopt(zmq.LINGER, 0)
            dealer.connect(hub.endpoints[0])
            try:
                dealer.send(wire.encode_gossip(wire.GossipPublish("x", "y")))
                await trio.to_thread.run_sync(dealer.poll, 5000)
                assert wire.decode_gossip(dealer.recv()) == wire.GossipInvalid()
                assert hub_ear.tuples == {}
            finally:
                dealer.close()


needs_czmq = pytest.mark.skipif(CZMQ is None, reason=CZMQ_MISSING)


@needs_czmq
async def test_we_join_a_czmq_hub() -> None:
    assert CZMQ is not None
    czmq = ZGossip(CZMQ)
    endpoint = f"tcp://127.0.0.1:{free_tcp_port()}"
    czmq.send(b"BIND", endpoint.encode())
    czmq.send(b"PUBLISH", b"ZYRE-NODE", b"tcp://127.0.0.1:49999")
    try:
        with trio.fail_after(10):
            async with service(connect=[endpoint]) as (ours, ear):
                ours.publish("TRIZRE-NODE", "tcp://127.0.0.1:50004", ttl=30_000)
                await ear.until("ZYRE-NODE", "tcp://127.0.0.1:49999")
                value = await trio.to_thread.run_sync(delivered, czmq, "TRIZRE-NODE")
                assert value == "tcp://127.0.0.1:50004"
    finally:
        czmq.close()


@needs_czmq
async def test_a_czmq_service_joins_our_hub() -> None:
    assert CZMQ is not None
    with trio.fail_after(10):
        async with service(bind=["tcp://127.0.0.1:*"]) as (hub, ear):
            hub.publish("TRIZRE-HUB", "ipc:///tmp/trizre-hub-node")
            czmq = ZGossip(CZMQ)
            try:
                czmq.send(b"CONNECT", hub.endpoints[0].encode())
                czmq.send(b"PUBLISH", b"ZYRE-NODE", b"tcp://127.0.0.1:49998")
                await ear.until("ZYRE-NODE", "tcp://127.0.0.1:49998")
                value = await trio.to_thread.run_sync(delivered, czmq, "TRIZRE-HUB")
                assert value == "ipc:///tmp/trizre-hub-node"
            finally:
                czmq.close()


async def test_bad_endpoints_are_named() -> None:
    with pytest.raises(zmq.ZMQError, match="cannot bind gossip to 'nonsense'"):
        async with open_gossip(["nonsense"]):
            pass
    with pytest.raises(zmq.ZMQError, match=r"cannot connect gossip to 'tcp://127\.0\.0\.1:x'"):
        async with open_gossip([], ["tcp://127.0.0.1:x"]):
            pass


async def test_publishing_after_the_block_raises_closed() -> None:
    async with open_gossip(["tcp://127.0.0.1:*"]) as gossip:
        pass
    with pytest.raises(trio.ClosedResourceError):
        gossip.publish("k", uuid.uuid4().hex)
