"""Our ZGP codec against czmq's own zgossip service, on loopback.

czmq (libczmq, which scripts/build-zyre.sh installs for zyre) runs a
zgossip server in this process through ctypes; a pyzmq DEALER speaks to
it with frames from ``trizre.wire``.  It proves both directions of the
codec against the implementation zyre's gossip mode uses.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import socket
from collections.abc import Iterator

import pytest
import zmq

from trizre import wire


def _czmq() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("czmq")
    if name is None:
        return None
    try:
        return ctypes.CDLL(name)
    except OSError:
        return None


CZMQ = _czmq()
pytestmark = pytest.mark.skipif(
    CZMQ is None, reason="libczmq is not installed (scripts/build-zyre.sh installs it)"
)


def _free_tcp_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class ZGossip:
    """czmq's zgossip actor, driven through its string commands."""

    def __init__(self, lib: ctypes.CDLL) -> None:
        self.lib = lib
        lib.zactor_new.restype = ctypes.c_void_p
        lib.zactor_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
        lib.zstr_recv.restype = ctypes.c_void_p
        lib.zstr_recv.argtypes = [ctypes.c_void_p]
        lib.zstr_free.argtypes = [ctypes.POINTER(ctypes.c_void_p)]
        lib.zactor_destroy.argtypes = [ctypes.POINTER(ctypes.c_void_p)]
        lib.zsock_set_rcvtimeo.argtypes = [ctypes.c_void_p, ctypes.c_int]
        lib.zsock_set_rcvtimeo.restype = None
        actor_fn = ctypes.cast(lib.zgossip, ctypes.c_void_p)
        self.actor = ctypes.c_void_p(lib.zactor_new(actor_fn.value, b"czmq"))
        assert self.actor.value, "zactor_new(zgossip) failed"
        lib.zsock_set_rcvtimeo(self.actor, 5000)  # a test must not hang on a missing reply

    def send(self, *words: bytes) -> None:
        args = [ctypes.c_char_p(w) for w in words]
        rc = self.lib.zstr_sendx(self.actor, *args, ctypes.c_char_p(None))
        assert rc == 0

    def recv(self) -> str:
        raw = self.lib.zstr_recv(self.actor)
        assert raw, "no reply from zgossip within 5 s"
        text = ctypes.string_at(raw).decode()
        self.lib.zstr_free(ctypes.byref(ctypes.c_void_p(raw)))
        return text

    def close(self) -> None:
        self.lib.zactor_destroy(ctypes.byref(self.actor))


@pytest.fixture
def server() -> Iterator[tuple[ZGossip, str]]:
    assert CZMQ is not None
    gossip = ZGossip(CZMQ)
    endpoint = f"tcp://127.0.0.1:{_free_tcp_port()}"
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
