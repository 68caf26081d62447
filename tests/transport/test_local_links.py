"""Nodes of one Trio run linked in memory: same protocol, no sockets, no PINGs.

The sans-I/O half (``LocalLink`` and ``LocalInbox`` alone) runs without any
network; the rest opens real nodes on loopback, which the rest of the suite
also runs over TCP (``--links tcp``).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import trio
import trio.testing

import trizre
from tests.support.nodes import (
    FAST,
    a_over_b,
    free_udp_port,
    next_event,
    open_nodes,
    wait_for_peers,
)
from trizre.trace._contract import ExitReason
from trizre.transport._links import LocalInbox, LocalLink, lookup, register, unregister
from trizre.transport._zsock import ZSocket
from trizre.wire import OVERSIZE


@pytest.fixture(autouse=True)
def local_links_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests are about local links: run them so even under ``--links tcp``."""
    monkeypatch.setenv("TRIZRE_LOCAL_LINKS", "1")


# ------------------------------------------------------------- sans-I/O


async def test_link_delivers_in_order_with_the_sender_identity() -> None:
    inbox = LocalInbox("tcp://127.0.0.1:1", 2)
    link = LocalLink(inbox, b"\x01me", hwm=10)
    assert link.send_nowait([b"a"])
    await link.send([b"b", b"c"])
    assert await inbox.receive_batch(10) == [[b"\x01me", b"a"], [b"\x01me", b"b", b"c"]]
    assert link.inflight == 0


async def test_link_backpressure_at_hwm_and_wakeup_when_read() -> None:
    inbox = LocalInbox("tcp://127.0.0.1:1", 2)
    link = LocalLink(inbox, b"\x01me", hwm=2)
    assert link.send_nowait([b"1"]) and link.send_nowait([b"2"])
    assert not link.send_nowait([b"3"])  # refused, nothing queued
    sent = False

    async def sender() -> None:
        nonlocal sent
        await link.send([b"3"])
        sent = True

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(sender)
            await trio.testing.wait_all_tasks_blocked()
            assert not sent
            assert await inbox.receive_batch(1) == [[b"\x01me", b"1"]]
        assert sent
        assert [m[1] for m in await inbox.receive_batch(10)] == [b"2", b"3"]


async def test_cancelled_send_sends_nothing() -> None:
    inbox = LocalInbox("tcp://127.0.0.1:1", 2)
    link = LocalLink(inbox, b"\x01me", hwm=1)
    assert link.send_nowait([b"1"])
    with trio.move_on_after(0.05):
        await link.send([b"2"])
    assert link.inflight == 1
    assert await inbox.receive_batch(10) == [[b"\x01me", b"1"]]


async def test_closing_the_inbox_wakes_senders_and_reader() -> None:
    inbox = LocalInbox("tcp://127.0.0.1:1", 2)
    link = LocalLink(inbox, b"\x01me", hwm=1)
    assert link.send_nowait([b"1"])
    errors: list[type[BaseException]] = []

    async def expect_closed(operation: object) -> None:
        try:
            await operation  # type: ignore[misc]
        except trio.ClosedResourceError as exc:
            errors.append(type(exc))

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(expect_closed, link.send([b"2"]))
            await trio.testing.wait_all_tasks_blocked()
            inbox.close()
        assert errors == [trio.ClosedResourceError]
        assert link.closed
        with pytest.raises(trio.ClosedResourceError):
            link.send_nowait([b"3"])
        with pytest.raises(trio.ClosedResourceError):
            await inbox.receive_batch(1)
        empty = LocalInbox("tcp://127.0.0.1:2", 2)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(expect_closed, empty.receive_batch(1))
            await trio.testing.wait_all_tasks_blocked()
            empty.close()
        assert len(errors) == 2


async def test_last_words_go_over_the_limit_then_the_link_closes() -> None:
    inbox = LocalInbox("tcp://127.0.0.1:1", 2)
    link = LocalLink(inbox, b"\x01me", hwm=1)
    assert link.send_nowait([b"1"])
    link.close([[b"queued"], [b"bye"]])
    assert link.closed
    assert [m[1] for m in await inbox.receive_batch(10)] == [b"1", b"queued", b"bye"]
    link.close([[b"ignored"]])  # a closed link takes nothing
    assert inbox._queue.statistics().current_buffer_used == 0
    with pytest.raises(trio.ClosedResourceError):
        link.send_nowait([b"late"])


async def test_registry_matches_uuid_endpoint_and_version() -> None:
    node = uuid.uuid4()
    inbox = LocalInbox("tcp://127.0.0.1:5", 2)
    register(node, inbox)
    try:
        assert lookup(node, "tcp://127.0.0.1:5", 2) is inbox
        assert lookup(node, "tcp://127.0.0.1:6", 2) is None  # another endpoint: not it
        assert lookup(node, "tcp://127.0.0.1:5", 3) is None  # versions ignore each other
        assert lookup(uuid.uuid4(), "tcp://127.0.0.1:5", 2) is None
        inbox.close()
        assert lookup(node, "tcp://127.0.0.1:5", 2) is None
    finally:
        unregister(node)
    assert lookup(node, "tcp://127.0.0.1:5", 2) is None


# ---------------------------------------------------------- real nodes


@contextmanager
def _count_dealers() -> Iterator[list[int]]:
    """Count the ZSockets built while the block runs (DEALERs to peers)."""
    built = [0]
    original = ZSocket.__init__

    def counting(self: ZSocket, *args: object, **kwargs: object) -> None:
        built[0] += 1
        original(self, *args, **kwargs)  # type: ignore[arg-type]

    ZSocket.__init__ = counting  # type: ignore[method-assign]
    try:
        yield built
    finally:
        ZSocket.__init__ = original  # type: ignore[method-assign]


async def test_local_mesh_opens_no_socket_per_peer() -> None:
    port = free_udp_port()
    n = 8
    with trio.fail_after(20), _count_dealers() as built:
        async with open_nodes(n, port) as opened:
            for node, stream in opened:
                await wait_for_peers(node, stream, n - 1)
            # One ROUTER per node and no DEALER: n sockets, not n + n(n - 1).
            assert built[0] == n


async def test_mixed_nodes_fall_back_to_tcp() -> None:
    port = free_udp_port()
    with trio.fail_after(10), _count_dealers() as built:
        async with (
            trizre.open_node("local", beacon_port=port, **FAST) as a,
            trizre.open_node("tcp", beacon_port=port, local_links=False, **FAST) as b,
        ):
            b_events = b.events()
            await a.wait_for_peer(b.uuid)
            await b.wait_for_peer(a.uuid)
            await a.whisper(b.uuid, b"over tcp")
            assert (await next_event(b_events, trizre.Whisper)).frames == (b"over tcp",)
            # Two ROUTERs, a DEALER each way, and each node's inbox watch's
            # reader (a closed connection ends its peer: docs/node.md, Send
            # guarantee; libzmq's monitor socket is not a ZSocket).
            assert built[0] == 6


async def test_messages_before_stop_are_delivered_then_exit() -> None:
    """A stopping local node's queued messages arrive, then its GOODBYE: none lost."""
    port = free_udp_port()
    with trio.fail_after(10):
        async with trizre.open_node("a", beacon_port=port, **FAST) as a:
            events = a.events(max_buffer=10_000)
            async with trizre.open_node("b", beacon_port=port, **FAST) as b:
                await b.wait_for_peer(a.uuid)
                await a.wait_for_peer(b.uuid)
                for i in range(500):
                    await b.whisper(a.uuid, i.to_bytes(2, "big"))
            got: list[int] = []
            async for event in events:
                if isinstance(event, trizre.Whisper):
                    got.append(int.from_bytes(event.frames[0], "big"))
                elif isinstance(event, trizre.Exit):
                    break
            assert got == list(range(500))
            assert a.peers() == []


async def test_backpressure_holds_a_sender_and_loses_nothing() -> None:
    port = free_udp_port()
    with trio.fail_after(20):
        async with (
            trizre.open_node("fast", beacon_port=port, send_hwm=20, **FAST) as fast,
            trizre.open_node("slow", beacon_port=port, **FAST) as slow,
        ):
            events = slow.events(max_buffer=5)
            await fast.wait_for_peer(slow.uuid)
            while not isinstance(await events.receive(), trizre.Enter):
                pass
            queued = 0
            while fast.whisper_nowait(slow.uuid, queued.to_bytes(4, "big")):
                queued += 1
                if queued % 16 == 0:
                    await trio.testing.wait_all_tasks_blocked()
            # hwm in the link, one inbox batch held by the reader, the buffer:
            # bounded, and far below an unbounded queue.
            assert 20 <= queued <= 20 + 256 + 5 + 1
            total = queued + 2_000
            seen: list[int] = []

            async def send_rest() -> None:
                for i in range(queued, total):
                    await fast.whisper(slow.uuid, i.to_bytes(4, "big"))

            async with trio.open_nursery() as nursery:
                nursery.start_soon(send_rest)
                async for event in events:
                    if isinstance(event, trizre.Whisper):
                        seen.append(int.from_bytes(event.frames[0], "big"))
                        if len(seen) == total:
                            break
            assert seen == list(range(total))


async def test_a_deaf_local_peer_goes_evasive_silent_then_expires() -> None:
    """A node whose subscriber never reads stops hearing; its local peers see it fade."""
    port = free_udp_port()
    timers = {"evasive_timeout": 0.2, "expired_timeout": 1.0, "beacon_interval": 0.05}
    with trio.fail_after(10):
        async with (
            trizre.open_node("watcher", beacon_port=port, interface="lo", **timers) as watcher,
            trizre.open_node("deaf", beacon_port=port, interface="lo", **timers) as deaf,
        ):
            seen = watcher.events()
            stuck = deaf.events(max_buffer=1)  # never read below: the node goes deaf
            await watcher.wait_for_peer(deaf.uuid)
            await deaf.wait_for_peer(watcher.uuid)
            await watcher.whisper(deaf.uuid, b"fills the one slot")
            await watcher.whisper(deaf.uuid, b"blocks the deaf node")
            kinds: list[type[trizre.Event]] = []
            async for event in seen:
                if event.peer == deaf.uuid and type(event) is not trizre.Enter:
                    kinds.append(type(event))
                    if isinstance(event, trizre.Exit):
                        break
            assert kinds == [trizre.Evasive, trizre.Silent, trizre.Exit]
            del stuck


async def test_idle_local_peers_stay_responsive_without_pings() -> None:
    port = free_udp_port()
    timers = {"evasive_timeout": 0.1, "expired_timeout": 0.5, "beacon_interval": 0.05}
    with trio.fail_after(10):
        async with (
            trizre.open_node("a", beacon_port=port, interface="lo", **timers) as a,
            trizre.open_node("b", beacon_port=port, interface="lo", **timers) as b,
        ):
            await a.wait_for_peer(b.uuid)
            events = a.events()
            b_link = a._peers[b.uuid].link
            assert isinstance(b_link, LocalLink)
            sent_before = a._peers[b.uuid].protocol.sent_seq
            with trio.move_on_after(1.0):  # twice the expiry, ten evasive periods
                event = await next_event(events, trizre.Event)
                raise AssertionError(f"an idle local peer produced {event}")
            assert a.peer_is_responsive(b.uuid)
            assert a._peers[b.uuid].protocol.sent_seq == sent_before  # no PING went out


async def test_stopped_peer_that_had_dropped_us_is_removed() -> None:
    """b forgot a (as if a had expired) and stops: a learns from the closed link."""
    port = free_udp_port()
    timers = {"evasive_timeout": 0.1, "expired_timeout": 5.0, "interface": "lo"}
    with trio.fail_after(10):
        # a beacons once, before b runs: b learns of a only from a's HELLO,
        # so b does not find a again once it dropped it.
        async with trizre.open_node("a", beacon_port=port, beacon_interval=60, **timers) as a:
            events = a.events()
            async with trizre.open_node("b", beacon_port=port, beacon_interval=0.05, **timers) as b:
                await a.wait_for_peer(b.uuid)
                await b.wait_for_peer(a.uuid)
                await b._remove_peer(b._peers[a.uuid], ExitReason.EXPIRED)
            exit_event = await next_event(events, trizre.Exit)
            assert exit_event.peer == b.uuid


async def test_sender_waiting_on_a_stopping_local_peer_gets_peer_disconnected() -> None:
    port = free_udp_port()
    errors: list[BaseException] = []
    with trio.fail_after(10):
        async with trizre.open_node("a", beacon_port=port, send_hwm=1, **FAST) as a:
            async with (
                trio.open_nursery() as nursery,
                trizre.open_node("b", beacon_port=port, **FAST) as b,
            ):
                stuck = b.events(max_buffer=1)  # never read: b goes deaf, a's sends wait
                peer = await a.wait_for_peer(b.uuid)
                await b.wait_for_peer(a.uuid)

                async def flood() -> None:
                    try:
                        while True:
                            await a.whisper(peer, b"x")
                    except trizre.PeerDisconnected as exc:
                        errors.append(exc)

                nursery.start_soon(flood)
                await trio.testing.wait_all_tasks_blocked()
                assert not errors
                del stuck
            # b stopped while flood waited for room in its link
            assert len(errors) == 1
            assert a.peers() in ([], [peer])  # its GOODBYE may still be on the way


async def test_in_memory_links_apply_the_receivers_max_message_size() -> None:
    """As over TCP (issue 25): b drops a for a message over b's limit, and a learns at once.

    a's own limit is larger, so its call succeeds; b's inbox refuses the
    message, b ends a and closes a's link into it, as libzmq drops the
    connection; a reports Exit for b and its next whisper raises.
    """
    with trio.fail_after(10):
        async with a_over_b(local_links=True, beacon_interval=60.0) as (a, b, a_events, b_events):
            assert isinstance(a._peers[b.uuid].link, LocalLink)
            await a.whisper(b.uuid, b"x" * 100_000)
            event = await next_event(b_events, trizre.Whisper | trizre.Exit)  # type: ignore[arg-type]
            assert isinstance(event, trizre.Exit) and event.peer == a.uuid
            assert (await next_event(a_events, trizre.Exit)).peer == b.uuid
            with pytest.raises(trizre.UnknownPeer):
                await a.whisper(b.uuid, b"after")


async def test_a_local_inbox_refuses_a_message_over_its_limit_in_total() -> None:
    inbox = LocalInbox("tcp://127.0.0.1:1", 2, max_message_size=10)
    link = LocalLink(inbox, b"me", 10)
    assert link.send_nowait([b"12345", b"67890"])  # 10 octets: at the limit
    assert link.send_nowait([b"12345", b"678901"])
    with trio.fail_after(5):
        queued = await inbox.receive_batch(10)
    assert queued[0] == [b"me", b"12345", b"67890"]
    assert queued[1] == [b"me", OVERSIZE] and queued[1][1] is OVERSIZE
