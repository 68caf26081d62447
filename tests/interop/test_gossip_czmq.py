"""Our ZGP codec against czmq's own zgossip service, on loopback.

czmq (libczmq, which scripts/build-zyre.sh installs for zyre) runs a
zgossip server in this process through ctypes; a pyzmq DEALER speaks to
it with frames from ``trizre.wire``.  It proves both directions of the
codec against the implementation zyre's gossip mode uses.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import zmq

from tests.support.czmq import CZMQ, CZMQ_MISSING, ZGossip, free_tcp_port
from trizre import wire

pytestmark = pytest.mark.skipif(CZMQ is None, reason=CZMQ_MISSING)


@pytest.fixture
def server() -> Iterator[tuple[ZGossip, str]]:
    assert CZMQ is not None
    gossip = ZGossip(CZMQ)
    endpoint = f"tcp://127.0.0.1:{free_tcp_port()}"
    try:
        gossip.send(b"BIND", endpoint.encode())
        yield gossip, endpoint
    finally:
        gossip.close()


@pytest.fixture
def dealer(server: tuple[ZGossip, str]) -> Iterator[zmq.Socket[bytes]]:
    ctx = zmq.Context.instance()
    sock: zmq.Socket[bytes] = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.RCVTIMEO, 5000)
    sock.connect(server[1])
    try:
        yield sock
    finally:
        sock.close()


def test_czmq_sends_its_tuples_after_our_hello_and_answers_ping(
    server: tuple[ZGossip, str], dealer: zmq.Socket[bytes]
) -> None:
    gossip, _ = server
    gossip.send(b"PUBLISH", b"0123456789ABCDEF0123456789ABCDEF", b"tcp://127.0.0.1:49152")
    dealer.send(wire.encode_gossip(wire.GossipHello()))
    published = wire.decode_gossip(dealer.recv())
    assert published == wire.GossipPublish(
        "0123456789ABCDEF0123456789ABCDEF", "tcp://127.0.0.1:49152", 0
    )
    dealer.send(wire.encode_gossip(wire.GossipPing()))
    assert wire.decode_gossip(dealer.recv()) == wire.GossipPong()


def test_czmq_delivers_what_we_publish(
    server: tuple[ZGossip, str], dealer: zmq.Socket[bytes]
) -> None:
    gossip, _ = server
    dealer.send(wire.encode_gossip(wire.GossipHello()))
    tuple_ = wire.GossipPublish("key-é", "ipc:///tmp/trizre-node|" + "x" * 40, 30_000)
    dealer.send(wire.encode_gossip(tuple_))
    assert gossip.recv() == "DELIVER"
    assert (gossip.recv(), gossip.recv()) == ("key-é", tuple_.value)


def test_czmq_rejects_a_publish_before_hello_with_invalid(
    server: tuple[ZGossip, str], dealer: zmq.Socket[bytes]
) -> None:
    dealer.send(wire.encode_gossip(wire.GossipPublish("k", "v")))
    assert wire.decode_gossip(dealer.recv()) == wire.GossipInvalid()
