"""The UDP beacon socket, on loopback only.

Every datagram here goes to 127.255.255.255 (loopback's broadcast address)
or 127.0.0.1; each test uses its own free port. No sleeps: a socket is bound
before ``open_beacon_socket`` yields, and loopback delivers a datagram into
every receiver's queue before ``sendto`` returns, in sending order.
"""

from __future__ import annotations

import logging
import socket
import uuid
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from ipaddress import IPv4Address

import pytest
import trio
import trio.testing

from trizre.transport._discovery import (
    _RUN_SLICE,
    BeaconSocket,
    SourceThrottle,
    open_beacon_hub,
    open_beacon_socket,
)
from trizre.transport._interfaces import Interface, select_interface
from trizre.wire import Beacon, EncodeError, encode_beacon

LO = select_interface("lo")
BROADCAST = "127.255.255.255"


@pytest.fixture
def port() -> int:
    """A UDP port that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.bind(("127.0.0.1", 0))
        free: int = probe.getsockname()[1]
        return free


@pytest.fixture
def debug_log(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.DEBUG, logger="trizre.discovery")
    return caplog


@asynccontextmanager
async def raw_sender(source: str = "127.0.0.1") -> AsyncIterator[trio.socket.SocketType]:
    """A plain UDP socket that may broadcast, bound to a loopback *source*."""
    sock = trio.socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    with sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
        await sock.bind((source, 0))
        yield sock


def beacon(port: int = 49152, **kwargs: object) -> Beacon:
    return Beacon(uuid.uuid4(), port, **kwargs)  # type: ignore[arg-type]


async def test_every_socket_receives_including_the_sender(port: int) -> None:
    with trio.fail_after(5):
        async with AsyncExitStack() as stack:
            nodes = [
                await stack.enter_async_context(open_beacon_socket(LO, port)) for _ in range(3)
            ]
            sent = beacon()
            await nodes[1].send(sent)
            for node in nodes:
                assert await node.receive() == (sent, "127.0.0.1")


async def test_v3_beacon_with_curve_key_passes_through(port: int) -> None:
    with trio.fail_after(5):
        async with open_beacon_socket(LO, port) as a, open_beacon_socket(LO, port) as b:
            sent = beacon(version=3, public_key=bytes(range(32)))
            assert len(encode_beacon(sent)) == 54
            await a.send(sent)
            assert await b.receive() == (sent, "127.0.0.1")
            assert await a.receive() == (sent, "127.0.0.1")


async def test_leaving_beacon_passes_through(port: int) -> None:
    with trio.fail_after(5):
        async with open_beacon_socket(LO, port) as node:
            sent = beacon(port=0)
            await node.send(sent)
            received, _ = await node.receive()
            assert received.leaving


async def test_invalid_datagrams_are_discarded(
    port: int, debug_log: pytest.LogCaptureFixture
) -> None:
    valid = encode_beacon(beacon())
    v3 = encode_beacon(beacon(version=3, public_key=bytes(32)))
    junk = [
        b"garbage",
        valid[:21],
        valid + b"\0",
        (v3 + bytes(300))[:300],  # a valid beacon at the front, truncated read must not save it
        b"ZRE\x02" + valid[4:],  # unknown version
        b"",
    ]
    with trio.fail_after(5):
        async with open_beacon_socket(LO, port) as node, raw_sender() as raw:
            for datagram in junk:
                await raw.sendto(datagram, (BROADCAST, port))
            good = beacon()
            await raw.sendto(encode_beacon(good), (BROADCAST, port))
            assert await node.receive() == (good, "127.0.0.1")
    dropped = [r.getMessage() for r in debug_log.records if r.name == "trizre.discovery"]
    assert len(dropped) == len(junk)
    assert all("invalid beacon from 127.0.0.1" in message for message in dropped)
    assert "got 255" in dropped[3]  # seen as oversize, not as 54 octets


async def test_sender_outside_the_subnet_is_dropped(
    port: int, debug_log: pytest.LogCaptureFixture
) -> None:
    """A node whose subnet lacks the sender never hears of it.

    On lo every sender is inside 127.0.0.0/8, so the foreign sender is
    emulated the honest way round: the *interface* is shrunk instead. The
    fake is 127.0.0.2/32 with lo's real broadcast address, so its socket is
    bound exactly like a real lo node's and the kernel delivers every
    datagram to both; the real node proves the dropped datagram arrived.
    """
    only_2 = Interface(
        name="lo",
        address=IPv4Address("127.0.0.2"),
        netmask=IPv4Address("255.255.255.255"),  # ok-net: a netmask, nothing is sent
        broadcast=IPv4Address(BROADCAST),
        is_loopback=True,
    )
    from_1, from_2 = beacon(), beacon()
    with trio.fail_after(5):
        async with (
            open_beacon_socket(LO, port) as real,
            open_beacon_socket(only_2, port) as narrow,
            raw_sender("127.0.0.1") as sender_1,
            raw_sender("127.0.0.2") as sender_2,
        ):
            await sender_1.sendto(encode_beacon(from_1), (BROADCAST, port))
            await sender_2.sendto(encode_beacon(from_2), (BROADCAST, port))
            assert await real.receive() == (from_1, "127.0.0.1")
            assert await real.receive() == (from_2, "127.0.0.2")
            assert await narrow.receive() == (from_2, "127.0.0.2")
    dropped = [r.getMessage() for r in debug_log.records if r.name == "trizre.discovery"]
    assert dropped == [
        "dropped a datagram from 127.0.0.1: outside lo's subnet 127.0.0.2/32"
        "; this is logged at most 10 times every 10 s"
    ]


async def test_unicast_to_the_port_is_not_received(port: int) -> None:
    """Bound to the broadcast address, the socket sees only broadcasts."""
    with trio.fail_after(5):
        async with open_beacon_socket(LO, port) as node, raw_sender() as raw:
            await raw.sendto(encode_beacon(beacon()), ("127.0.0.1", port))
            broadcast = beacon()
            await raw.sendto(encode_beacon(broadcast), (BROADCAST, port))
            assert await node.receive() == (broadcast, "127.0.0.1")


async def test_cancelled_receive_loses_nothing(port: int) -> None:
    with trio.fail_after(5):
        async with open_beacon_socket(LO, port) as node:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(node.receive)
                await trio.testing.wait_all_tasks_blocked()
                nursery.cancel_scope.cancel()
            sent = beacon()
            await node.send(sent)
            assert await node.receive() == (sent, "127.0.0.1")


@pytest.mark.parametrize("bad", [0, -1, 65536])
async def test_port_out_of_range(bad: int) -> None:
    with trio.fail_after(5), pytest.raises(ValueError, match=r"1\.\.65535"):
        async with open_beacon_socket(LO, bad):
            pass


@pytest.mark.parametrize("bad", [True, "5670", 5670.0, None])
async def test_port_type(bad: object) -> None:
    with trio.fail_after(5), pytest.raises(TypeError):
        async with open_beacon_socket(LO, bad):  # type: ignore[arg-type]
            pass


async def test_unencodable_beacon_sends_nothing(port: int) -> None:
    with trio.fail_after(5):
        async with open_beacon_socket(LO, port) as node:
            with pytest.raises(EncodeError):
                await node.send(beacon(port=70000))
            sent = beacon()
            await node.send(sent)
            assert await node.receive() == (sent, "127.0.0.1")


async def test_use_after_close(port: int) -> None:
    with trio.fail_after(5):
        async with open_beacon_socket(LO, port) as node:
            assert node.interface == LO
            assert node.port == port
        assert "closed" in repr(node)
        with pytest.raises(trio.ClosedResourceError):
            await node.send(beacon())
        with pytest.raises(trio.ClosedResourceError):
            await node.receive()


async def test_close_wakes_a_waiting_receive(port: int) -> None:
    failures: list[BaseException] = []

    async def wait_for_beacon(node: BeaconSocket) -> None:
        try:
            await node.receive()
        except trio.ClosedResourceError as exc:
            failures.append(exc)

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery, open_beacon_socket(LO, port) as node:
            nursery.start_soon(wait_for_beacon, node)
            await trio.testing.wait_all_tasks_blocked()
    assert len(failures) == 1


# ------------------------------------------------------------------ throttle


def test_throttle_admits_a_burst_then_the_rate_per_source() -> None:
    throttle = SourceThrottle(rate=2.0, burst=3)
    assert [throttle.admit("a", 0.0) for _ in range(4)] == [True, True, True, False]
    assert throttle.admit("b", 0.0)  # another source has its own bucket
    assert not throttle.admit("a", 0.49)
    assert throttle.admit("a", 0.5)  # 2 a second: one token after 0.5 s
    assert not throttle.admit("a", 0.5)
    assert [throttle.admit("a", 100.0) for _ in range(4)] == [True, True, True, False]  # capped


def test_throttle_remembers_a_bounded_number_of_sources() -> None:
    throttle = SourceThrottle(rate=1.0, burst=1, max_sources=10)
    for i in range(25):
        assert throttle.admit(f"10.0.0.{i}", 0.0)  # ok-net: only a dict key
    assert len(throttle._buckets) <= 10


@pytest.mark.parametrize(("rate", "burst"), [(0.0, 1), (-1.0, 1), (1.0, 0)])
def test_throttle_bad_input(rate: float, burst: int) -> None:
    with pytest.raises(ValueError, match="throttle"):
        SourceThrottle(rate, burst)


# --------------------------------------------- a process's nodes, idle (issue 28)


async def test_a_burst_is_read_without_a_checkpoint_a_datagram_for_a_slice_of_time(
    port: int, mock_clock: trio.testing.MockClock
) -> None:
    """Queued datagrams come without a checkpoint each, for ``_RUN_SLICE`` after one.

    A process's nodes beacon together: a checkpoint a datagram was a turn
    of the run loop a beacon.  Time bounds the run, not a count: each
    datagram goes to every node of the process, and a forged one costs
    each a new peer, so that a flood cannot hold the run.
    """
    with trio.fail_after(5):
        async with open_beacon_socket(LO, port) as node, raw_sender() as raw:
            sent = [beacon() for _ in range(40)]
            for each in sent:
                await raw.sendto(encode_beacon(each), (BROADCAST, port))
            assert await node.receive() == (sent[0], "127.0.0.1")  # woken: a checkpoint
            for each in sent[1:30]:  # the clock stands still: all in the slice
                with trio.testing.assert_no_checkpoints():
                    assert await node.receive() == (each, "127.0.0.1")
            mock_clock.jump(_RUN_SLICE)
            with trio.testing.assert_checkpoints():
                assert await node.receive() == (sent[30], "127.0.0.1")
            with trio.testing.assert_no_checkpoints():
                assert await node.receive() == (sent[31], "127.0.0.1")


async def test_a_send_the_kernel_takes_at_once_takes_no_checkpoint(port: int) -> None:
    with trio.fail_after(5):
        async with open_beacon_socket(LO, port) as node:
            sent = beacon()
            with trio.testing.assert_no_checkpoints():
                await node.send(sent)
            assert await node.receive() == (sent, "127.0.0.1")


async def test_a_listener_is_not_given_the_beacons_it_ignores(port: int) -> None:
    """``ignored``: a key the listener maps to None is not delivered; any other is."""
    first, second, third = beacon(), beacon(), beacon()
    keys = {b.uuid: encode_beacon(b) + b"127.0.0.1" for b in (first, second, third)}
    ignored: dict[bytes, object] = {keys[first.uuid]: None, keys[second.uuid]: "refresh"}
    heard: list[Beacon] = []
    everyone: list[Beacon] = []
    with trio.fail_after(5):
        async with open_beacon_hub(LO, port) as hub, trio.open_nursery() as nursery:
            nursery.start_soon(hub.listen, lambda b, *_: heard.append(b), ignored)
            nursery.start_soon(hub.listen, lambda b, *_: everyone.append(b))
            await trio.testing.wait_all_tasks_blocked()
            for each in (first, second, third):
                await hub.send(each)
            await trio.testing.wait_all_tasks_blocked()  # loopback: queued when sent
            assert everyone == [first, second, third]
            assert heard == [second, third]
            del ignored[keys[first.uuid]]  # read at each beacon: the listener's to change
            await hub.send(first)
            await trio.testing.wait_all_tasks_blocked()
            assert everyone == [first, second, third, first]
            assert heard == [second, third, first]
            nursery.cancel_scope.cancel()
