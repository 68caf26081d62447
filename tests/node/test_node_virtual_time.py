"""The node on exact virtual times: in-memory discovery and links under ``autojump_clock``.

Nothing here opens a beacon socket or a TCP link (each node still binds its
ROUTER inbox on loopback, which no one uses), so presence and timers are
checked to the exact virtual instant.
"""

from __future__ import annotations

import itertools
import socket
import uuid
from collections import Counter
from contextlib import AsyncExitStack
from typing import Any

import pytest
import trio
import trio.testing

import trizre
from tests.support.nodes import (
    MEMORY,
    MemoryRawPeer,
    free_udp_port,
    memory_raw_peer,
    next_event,
    node_with_events,
    node_with_memory_peer,
)
from trizre import wire
from trizre.node import _node
from trizre.sansio._peer import PeerProtocol
from trizre.sansio.node_core._core import NodeCore
from trizre.sansio.node_core._due import Due
from trizre.transport._discovery import MemoryDiscovery
from trizre.transport._links import LocalLink


async def test_nodes_meet_at_their_first_beacon(autojump_clock: trio.testing.MockClock) -> None:
    port = free_udp_port()
    with trio.fail_after(600):
        await trio.sleep(100)
        async with trizre.open_node("a", beacon_port=port, **MEMORY) as a:
            events = a.events()
            await trio.sleep(0.25)
            async with trizre.open_node("b", beacon_port=port, **MEMORY) as b:
                enter = await next_event(events, trizre.Enter)
                assert enter.peer == b.uuid
                assert trio.current_time() == 100.25  # b's first beacon, at once
                await a.whisper(b.uuid, b"hi")
            # b's GOODBYE over the link, at the instant it stopped
            assert (await next_event(events, trizre.Exit)).peer == b.uuid
            assert trio.current_time() == 100.25


async def test_a_deaf_peer_goes_evasive_silent_and_expires_on_time(
    autojump_clock: trio.testing.MockClock,
) -> None:
    timers = {"evasive_timeout": 5.0, "expired_timeout": 30.0}
    with trio.fail_after(120):
        async with node_with_memory_peer(**timers) as (node, events, raw):
            start = trio.current_time()
            assert isinstance(await raw.receive(), wire.Hello)
            raw.deaf()  # it stops reading: its last sign of life is now
            assert isinstance(await raw.receive(), wire.Ping)
            assert trio.current_time() - start == 5.0
            assert node.peer_is_responsive(raw.uuid)  # it may yet answer
            await next_event(events, trizre.Evasive)
            assert trio.current_time() - start == 6.0  # no answer for 1 s
            assert not node.peer_is_responsive(raw.uuid)
            await next_event(events, trizre.Silent)
            assert trio.current_time() - start == 10.0
            assert isinstance(await raw.receive(), wire.Ping)
            assert isinstance(await raw.receive(), wire.Ping)  # every 5 s while silent
            assert trio.current_time() - start == 15.0
            exit_event = await next_event(events, trizre.Exit)
            assert exit_event.peer == raw.uuid
            assert trio.current_time() - start == 30.0
            assert node.peers() == []


async def test_answering_pings_keeps_a_quiet_peer_alive(
    autojump_clock: trio.testing.MockClock,
) -> None:
    with trio.fail_after(600):
        async with node_with_memory_peer(evasive_timeout=5.0, expired_timeout=30.0) as (
            node,
            events,
            raw,
        ):
            raw.deaf()  # only its answers prove it alive
            pings: list[float] = []
            with trio.move_on_after(122.5):
                while True:
                    message = await raw.receive()
                    if isinstance(message, wire.Ping):
                        pings.append(trio.current_time())
                        await raw.send(wire.PingOk(raw.next_seq()))
                        raw.deaf()
            # One PING per evasive period, answered: never silent, never gone.
            assert len(pings) == 24
            assert all(b - a == 5.0 for a, b in itertools.pairwise(pings))
            assert node.peers() == [raw.uuid]
        # It answers every PING: never Evasive nor Silent (and present to
        # the end, above).  A healthy quiet zyre peer looks just like this.
        seen = [type(event) async for event in events]
        assert trizre.Evasive not in seen
        assert trizre.Silent not in seen


async def test_a_peer_added_while_presence_sleeps_is_timed_from_its_arrival(
    autojump_clock: trio.testing.MockClock,
) -> None:
    timers = {"evasive_timeout": 5.0, "expired_timeout": 7.0}
    with trio.fail_after(120):
        async with node_with_memory_peer(**timers) as (node, events, first):
            await trio.sleep(3.0)  # presence now sleeps until first's deadline
            async with memory_raw_peer(node) as second:
                await second.hello()
                await next_event(events, trizre.Enter)
                arrived = trio.current_time()
                second.deaf()
                first.deaf()
                exit_event = await next_event(events, trizre.Exit, lambda e: e.peer == second.uuid)
                assert exit_event.peer == second.uuid
                assert trio.current_time() == arrived + 7.0


async def test_peer_by_name_prefers_the_newest_responsive(
    autojump_clock: trio.testing.MockClock,
) -> None:
    with trio.fail_after(60):
        async with node_with_events("watcher", **MEMORY) as (watcher, events):
            assert watcher.peer_by_name("nobody") is None
            async with memory_raw_peer(watcher) as old, memory_raw_peer(watcher) as new:
                await old.hello("twin")
                await next_event(events, trizre.Enter)
                await new.hello("twin")
                await next_event(events, trizre.Enter)
                assert watcher.find_peers("twin") == [old.uuid, new.uuid]
                assert watcher.peer_by_name("twin") == new.uuid
                assert await watcher.wait_for_peer("twin") == new.uuid
                # The newest twin stops answering: once it is evasive, the
                # responsive older one wins.
                new.deaf()
                evasive = await next_event(events, trizre.Evasive)
                assert evasive.peer == new.uuid
                assert watcher.peer_by_name("twin") == old.uuid


# ------------------------------------------------------------ closed nodes


async def test_every_method_of_a_stopped_node_raises_closed_resource_error() -> None:
    port = free_udp_port()
    with trio.fail_after(10):
        async with trizre.open_node("gone", beacon_port=port, **MEMORY) as node:
            pass
        someone = uuid.uuid4()
        for call in (
            node.join("g"),
            node.leave("g"),
            node.shout("g", b"x"),
            node.whisper(someone, b"x"),
            node.wait_for_peer("bob"),
            node.wait_for_peer(someone),
        ):
            with pytest.raises(trio.ClosedResourceError):
                await call
        for query in (
            node.peers,
            node.pending_peers,
            node.own_groups,
            node.peer_groups,
            lambda: node.whisper_nowait(someone, b"x"),
            lambda: node.peers_by_group("g"),
            lambda: node.peer_name(someone),
            lambda: node.find_peers("bob"),
            lambda: node.peer_by_name("bob"),
        ):
            with pytest.raises(trio.ClosedResourceError):
                query()
        # Subscribing still works: the subscription says Stop.
        assert isinstance(await node.events().receive(), trizre.Stop)


async def test_wait_for_peer_raises_when_the_node_stops_meanwhile() -> None:
    port = free_udp_port()
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            errors: list[BaseException] = []

            async def run() -> None:
                with trio.CancelScope() as scope:
                    cancel_node.append(scope)
                    async with trizre.open_node("n", beacon_port=port, **MEMORY) as node:
                        nodes.append(node)
                        await trio.sleep_forever()

            async def wait(node: trizre.Node) -> None:
                try:
                    await node.wait_for_peer("nobody")
                except trio.ClosedResourceError as exc:
                    errors.append(exc)

            cancel_node: list[trio.CancelScope] = []
            nodes: list[trizre.Node] = []
            nursery.start_soon(run)
            await trio.testing.wait_all_tasks_blocked()
            nursery.start_soon(wait, nodes[0])
            await trio.testing.wait_all_tasks_blocked()
            cancel_node[0].cancel()
        assert len(errors) == 1


# --------------------------------------------------------------- bad input


async def test_a_name_where_a_uuid_belongs_is_a_type_error_that_says_what_to_do() -> None:
    port = free_udp_port()
    with trio.fail_after(10):
        async with trizre.open_node("a", beacon_port=port, **MEMORY) as node:
            with pytest.raises(TypeError, match=r"uuid.UUID.*peer_by_name\('bob'\)"):
                await node.whisper("bob", b"hi")  # type: ignore[arg-type]
            with pytest.raises(TypeError, match="peer_by_name"):
                node.peer_name("bob")  # type: ignore[arg-type]
            with pytest.raises(TypeError, match=r"uuid\.UUID, got int"):
                node.whisper_nowait(42, b"hi")  # type: ignore[arg-type]


async def test_empty_group_names_are_rejected() -> None:
    port = free_udp_port()
    with trio.fail_after(10):
        async with trizre.open_node("a", beacon_port=port, **MEMORY) as node:
            for call in (node.join(""), node.leave(""), node.shout("", b"x")):
                with pytest.raises(ValueError, match="empty"):
                    await call
            assert node.own_groups() == []


@pytest.mark.parametrize(
    ("options", "error", "match"),
    [
        ({"evasive_timeout": 5.0, "expired_timeout": 5.0}, ValueError, "greater than"),
        ({"evasive_timeout": 10.0, "expired_timeout": 2.0}, ValueError, "greater than"),
        ({"beacon_interval": float("nan")}, ValueError, "beacon_interval"),
        ({"beacon_interval": "1"}, TypeError, "beacon_interval"),
        ({"send_hwm": 0}, ValueError, "send_hwm"),
        ({"send_hwm": 1.5}, TypeError, "send_hwm"),
        ({"beacon_port": 70000}, ValueError, "beacon_port"),
        ({"beacon_port": True}, TypeError, "beacon_port"),
        ({"protocol_version": 1}, ValueError, "protocol_version"),
        ({"discovery": "carrier-pigeon"}, ValueError, "discovery"),
        ({"trace_max_bytes": 100}, ValueError, "trace_max_bytes"),
        ({"handshake_timeout": 0}, ValueError, "handshake_timeout"),
        ({"max_pending_peers": 0}, ValueError, "max_pending_peers"),
        ({"max_message_size": 0}, ValueError, "max_message_size"),
        ({"max_peer_groups": 0}, ValueError, "max_peer_groups"),
        ({"max_peer_groups": 1.5}, TypeError, "max_peer_groups"),
        ({"max_headers": -1}, ValueError, "max_headers"),
        ({"max_header_bytes": "1"}, TypeError, "max_header_bytes"),
        ({"new_peers_per_source": 0}, ValueError, "new_peers_per_source"),
        ({"local_links": "yes"}, TypeError, "local_links"),
        ({"headers": [("a", "b")]}, TypeError, "headers"),
        ({"interface": 7}, TypeError, "interface"),
    ],
)
async def test_bad_options_are_refused_before_anything_starts(
    options: dict[str, object], error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        async with trizre.open_node("x", **options):  # type: ignore[arg-type]
            raise AssertionError("the node started")


def test_node_config_holds_every_option_and_is_validated_once() -> None:
    config = trizre.NodeConfig(name="n", headers={"K": "V"}, evasive_timeout=1, expired_timeout=2)
    assert config.headers == (("K", "V"),)
    assert config.beacon_port == wire.DISCOVERY_PORT
    with pytest.raises(ValueError, match="255"):
        trizre.NodeConfig(name="é" * 128)


async def test_a_busy_beacon_port_says_which_port_and_why() -> None:
    port = free_udp_port()
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as holder:
        holder.bind(("127.255.255.255", port))  # no SO_REUSEPORT: it will not share
        with pytest.raises(OSError, match=rf"beacon port {port} .*does not share it"):
            async with trizre.open_node("x", beacon_port=port, interface="lo"):
                raise AssertionError("the node started")


# ------------------------------------------------------------ forged beacons


def _forge(node: trizre.Node, count: int) -> list[uuid.UUID]:
    """Beacons for peers that do not exist: closed loopback ports, random UUIDs."""
    forged = [uuid.uuid4() for _ in range(count)]
    network = node._discovery
    assert isinstance(network, MemoryDiscovery)
    for fake in forged:
        network.deliver(wire.Beacon(fake, 1 + fake.int % 1000), "127.0.0.1")  # closed ports
    return forged


async def test_a_peer_that_never_says_hello_is_dropped_at_the_handshake_timeout(
    autojump_clock: trio.testing.MockClock,
) -> None:
    port = free_udp_port()
    with trio.fail_after(60):
        async with trizre.open_node("n", beacon_port=port, handshake_timeout=2.0, **MEMORY) as node:
            await trio.sleep(0.5)
            start = trio.current_time()
            (fake,) = _forge(node, 1)
            assert fake in node._peers  # a DEALER and our HELLO, waiting for its HELLO
            assert node.pending_peers() == [fake]
            assert node.peers() == []
            link = node._peers[fake].link
            await trio.sleep(1.999)
            assert fake in node._peers
            await trio.sleep(0.001)
            await trio.testing.wait_all_tasks_blocked()
            assert trio.current_time() - start == 2.0
            assert fake not in node._peers and link.closed
            assert node.peers() == []  # it had never entered: no Enter, no Exit
            assert node.pending_peers() == []


def _announce(node: trizre.Node, peer: uuid.UUID) -> None:
    """A beacon for ``peer`` at a loopback port nobody listens on."""
    network = node._discovery
    assert isinstance(network, MemoryDiscovery)
    network.deliver(wire.Beacon(peer, 1 + peer.int % 1000), "127.0.0.1")


async def test_each_handshake_a_peer_misses_in_a_row_gives_the_next_twice_as_long(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A real peer too loaded to greet in time must not be dropped and relinked for ever.

    Each relink makes the far end start over (a second HELLO is a restart):
    with a fixed window an overloaded mesh of 250 nodes kept redoing
    handshakes (make scale).  The window doubles, up to expired_timeout.
    """
    port = free_udp_port()
    options = {"handshake_timeout": 2.0, "expired_timeout": 20.0, **MEMORY}
    with trio.fail_after(600):
        async with trizre.open_node("n", beacon_port=port, **options) as node:
            await trio.sleep(0.5)
            slow = uuid.uuid4()
            for window in (2.0, 4.0, 8.0, 16.0, 20.0, 20.0):
                start = trio.current_time()
                _announce(node, slow)  # its next beacon: linked again
                link = node._peers[slow].link
                await trio.sleep(window - 0.001)
                assert slow in node._peers, window
                await trio.sleep(0.001)
                await trio.testing.wait_all_tasks_blocked()
                assert slow not in node._peers and link.closed
                assert trio.current_time() - start == pytest.approx(window)
            other = uuid.uuid4()  # its own count: starts at the configured window
            _announce(node, other)
            await trio.sleep(2.0)
            await trio.testing.wait_all_tasks_blocked()
            assert other not in node._peers


def _count_polls(monkeypatch: pytest.MonkeyPatch) -> itertools.count[int]:
    """Count ``PeerProtocol.poll`` calls: ``next()`` of the counter reads it (and adds one)."""
    polled = itertools.count()
    poll = PeerProtocol.poll

    def counting(self: PeerProtocol, now: float) -> Any:
        next(polled)
        return poll(self, now)

    monkeypatch.setattr(PeerProtocol, "poll", counting)
    return polled


def _count_passes(monkeypatch: pytest.MonkeyPatch) -> itertools.count[int]:
    """Count the presence clock's passes (one ``Due.pop`` each): ``next()`` reads it."""
    passes = itertools.count()
    pop = Due.pop

    def counting(self: Due[Any, Any], now: float) -> Any:
        next(passes)
        return pop(self, now)

    monkeypatch.setattr(Due, "pop", counting)
    return passes


async def test_new_peers_one_by_one_do_not_each_cost_a_pass_over_every_peer(
    autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Linking N peers, each in its own turn, must not poll N²/2 peers (make scale)."""
    polled = _count_polls(monkeypatch)
    port = free_udp_port()
    with trio.fail_after(60):
        async with trizre.open_node("n", beacon_port=port, handshake_timeout=3.0, **MEMORY) as node:
            await trio.sleep(0.5)
            before = next(polled)
            newcomers = [uuid.uuid4() for _ in range(50)]  # within one source's burst
            for newcomer in newcomers:  # each in its own turn, as HELLOs and beacons come
                _announce(node, newcomer)
                await trio.testing.wait_all_tasks_blocked()
            assert all(u in node._peers for u in newcomers)
            assert next(polled) - before < 50  # a pass per newcomer: 1,275
            await trio.sleep(3.0)  # their handshake deadline still holds
            await trio.testing.wait_all_tasks_blocked()
            assert not any(u in node._peers for u in newcomers)


async def test_a_clock_pass_looks_only_at_the_peers_whose_time_came(
    autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 28 (500 nodes): N peers going quiet one after another must not cost N² looks.

    Each pass comes at one peer's deadline; looking at every peer on each
    made a big idle mesh spend most of its CPU on peers with nothing due.
    Their times must still hold: each is PINGed, reported and expired on time.
    """
    n = 200
    polled = _count_polls(monkeypatch)
    port = free_udp_port()
    with trio.fail_after(120):
        async with (
            trizre.open_node("n", beacon_port=port, **MEMORY) as node,  # evasive 5 s, expired 30 s
            AsyncExitStack() as stack,
        ):
            events = node.events(max_buffer=4 * n)
            raws = [await stack.enter_async_context(memory_raw_peer(node)) for _ in range(n)]
            for raw in raws:
                await raw.hello()
            for _ in range(n):
                assert type(await events.receive()) is trizre.Enter
            before = next(polled)
            quiet: dict[uuid.UUID, float] = {}
            for raw in raws:  # one after another: n different deadlines
                raw.deaf()
                quiet[raw.uuid] = trio.current_time()
                await trio.sleep(0.01)
            exits: dict[uuid.UUID, float] = {}
            async for event in events:
                if type(event) is trizre.Exit:
                    exits[event.peer] = trio.current_time()
                    if len(exits) == n:
                        break
            assert exits == {peer: quiet[peer] + 30.0 for peer in quiet}
            # A handful of looks a peer (PING, Evasive, Silent, PINGs, expiry),
            # not one a pass: a pass for every peer looking at all was ~n².
            looks = next(polled) - before
            assert looks < 12 * n, looks


async def test_in_process_peers_that_read_are_looked_at_together_on_a_sweep(
    autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 28 (make bench): the in-process peers of a node share its sweep.

    Looked at each at its own time, five seconds after its last look, the
    peers of a mesh linked at different moments woke a node's clock once a
    peer: 100 nodes in a process idled at 5 % of a core, not 1.6 %.  Their
    first looks too: the footprint's idle CPU is measured 2 s after the
    mesh.  A peer whose node stops reading keeps its exact times (the test
    above).
    """
    passes = _count_passes(monkeypatch)
    n = 12
    port = free_udp_port()
    with trio.fail_after(300):
        async with AsyncExitStack() as stack:
            nodes = []
            for i in range(n):  # linked at different moments
                nodes.append(
                    await stack.enter_async_context(
                        trizre.open_node(f"n{i}", beacon_port=port, **MEMORY)  # evasive 5 s
                    )
                )
                await trio.sleep(0.37)
            for node in nodes:
                for other in nodes:
                    if other is not node:
                        await node.wait_for_peer(other.uuid)
            before = next(passes)
            await trio.sleep(10)  # every peer's first look
            first = (next(passes) - before - 1) / n
            before = next(passes)
            await trio.sleep(60)
            per_node = (next(passes) - before - 1) / n
    # A pass a sweep (every 5 s) and a few for the rest; one a peer was ~11 a sweep.
    assert first <= 4, first
    assert per_node <= 2 * 60 / 5, per_node


async def test_idle_in_process_peers_beacons_reach_no_node(
    autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 28: n nodes in one process hear n beacons an interval each.

    Once each knows the others, the discovery skips the beacons a node's
    core keeps as quiet (its own, known peers'): no call into the node
    (100 nodes in a process: 10,000 a second before).  A new node's
    beacons still reach them all.
    """
    calls = Counter[str]()
    real = NodeCore.on_beacon

    def counting(self: NodeCore[Any], *args: Any) -> Any:
        calls[self.me.hex] += 1
        return real(self, *args)

    monkeypatch.setattr(NodeCore, "on_beacon", counting)
    port = free_udp_port()
    with trio.fail_after(300):
        async with AsyncExitStack() as stack:
            nodes = [
                await stack.enter_async_context(
                    trizre.open_node(f"n{i}", beacon_port=port, **MEMORY)
                )
                for i in range(5)
            ]
            for node in nodes:
                for other in nodes:
                    if other is not node:
                        await node.wait_for_peer(other.uuid)
            await trio.sleep(2)  # every beacon seen once since the mesh
            calls.clear()
            await trio.sleep(10)  # ten beacons of each node
            assert calls == Counter(), sorted(calls.values())
            late = await stack.enter_async_context(
                trizre.open_node("late", beacon_port=port, **MEMORY)
            )
            for node in nodes:
                await node.wait_for_peer(late.uuid)
            assert all(calls[node.uuid.hex] >= 1 for node in nodes)


async def test_a_peer_that_greets_starts_its_count_of_missed_handshakes_again(
    autojump_clock: trio.testing.MockClock,
) -> None:
    port = free_udp_port()
    with trio.fail_after(600):
        async with trizre.open_node("n", beacon_port=port, handshake_timeout=2.0, **MEMORY) as node:
            async with trizre.open_node("real", beacon_port=port, **MEMORY) as real:
                node._missed_handshakes[real.uuid] = 3  # it had missed three
                await node.wait_for_peer("real")
                assert real.uuid not in node._missed_handshakes
            assert node._handshake_for(real.uuid) == 2.0


async def test_peers_without_hello_are_bounded_oldest_first_and_real_peers_still_enter(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    port = free_udp_port()
    with trio.fail_after(60):
        async with trizre.open_node("n", beacon_port=port, max_pending_peers=10, **MEMORY) as node:
            events = node.events()
            await trio.testing.wait_all_tasks_blocked()  # its discovery listens
            forged = _forge(node, 50)
            holding = [u for u in forged if u in node._peers]
            assert holding == forged[-10:]  # the newest ten; the oldest were dropped
            assert len(caplog.records) == 1 and "forged beacons?" in caplog.text
            _forge(node, 50)  # the warning is rate-limited
            assert len([r for r in caplog.records if "forged" in r.getMessage()]) == 1
            async with trizre.open_node("real", beacon_port=port, **MEMORY) as real:
                enter = await next_event(events, trizre.Enter)
                assert enter.peer == real.uuid  # in-process peers are not counted
                _forge(node, 20)
                assert real.uuid in node.peers()
            assert len([u for u in node._peers if u != real.uuid]) <= 10


async def test_one_source_announcing_many_new_peers_is_throttled(
    autojump_clock: trio.testing.MockClock,
) -> None:
    port = free_udp_port()
    with trio.fail_after(60):
        async with trizre.open_node(
            "n", beacon_port=port, new_peers_per_source=20.0, handshake_timeout=60.0, **MEMORY
        ) as node:
            await trio.testing.wait_all_tasks_blocked()  # its discovery listens
            _forge(node, 100)
            assert len(node._peers) == 64  # the burst; the other 36 beacons were ignored
            await trio.sleep(1.0)
            _forge(node, 100)
            assert len(node._peers) == 64 + 20  # one second at 20 new peers a second


async def test_ping_measures_the_round_trip_to_the_ping_ok(
    autojump_clock: trio.testing.MockClock,
) -> None:
    with trio.fail_after(120):
        async with node_with_memory_peer() as (node, _, raw), trio.open_nursery() as nursery:
            assert isinstance(await raw.receive(), wire.Hello)
            rtts: list[float] = []

            async def ping() -> None:
                rtts.append(await node.ping(raw.uuid))

            nursery.start_soon(ping)
            assert isinstance(await raw.receive(), wire.Ping)
            await trio.sleep(0.25)  # the peer takes its time to answer
            await raw.send(wire.Whisper(raw.next_seq(), (b"not an answer",)))
            await trio.sleep(0.5)
            assert rtts == []
            await raw.send(wire.PingOk(raw.next_seq()))
        assert rtts == [0.75]


async def test_ping_fails_when_the_peer_leaves_or_is_unknown(
    autojump_clock: trio.testing.MockClock,
) -> None:
    with trio.fail_after(120):
        async with node_with_events("n", **MEMORY) as (node, events):
            with pytest.raises(trizre.UnknownPeer):
                await node.ping(uuid.uuid4())
            with pytest.raises(TypeError):
                await node.ping("n")  # type: ignore[arg-type]
            async with memory_raw_peer(node) as raw:
                await raw.hello()
                await next_event(events, trizre.Enter)
                async with trio.open_nursery() as nursery:

                    async def leave_later() -> None:
                        await trio.sleep(1)
                        await raw.send(wire.Goodbye(raw.next_seq()))

                    nursery.start_soon(leave_later)
                    with pytest.raises(trizre.PeerDisconnected, match="before answering"):
                        await node.ping(raw.uuid)
        with pytest.raises(trio.ClosedResourceError):
            await node.ping(raw.uuid)


async def test_an_idle_subscription_raises_events_idle_on_time(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """``node.events(idle_timeout=)`` reaches the subscription; other subscribers wait on."""
    port = free_udp_port()
    with trio.fail_after(120):
        async with trizre.open_node("a", beacon_port=port, **MEMORY) as a:
            events = a.events(idle_timeout=7.5)
            plain = a.events()
            async with trizre.open_node("b", beacon_port=port, **MEMORY) as b:
                await next_event(events, trizre.Enter)
                start = trio.current_time()
                with pytest.raises(trizre.EventsIdle):
                    async for _ in events:
                        pass
                assert trio.current_time() - start == 7.5
                await b.whisper(a.uuid, b"late")
                assert (await next_event(events, trizre.Whisper)).frames == (b"late",)
                assert (await next_event(plain, trizre.Whisper)).frames == (b"late",)


async def test_thousands_of_peers_that_die_together_expire_on_time_for_a_slow_application(
    autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 25, 2: 3,000 peers go quiet at once; the application takes 1 ms an event.

    Reporting 3,000 Evasive events fills its buffer and the presence pass
    waits for it: that wait used to restart every peer's clock ("we are
    deaf"), so none ever expired.  Only the readers' waits count now.
    """
    n = 3_000
    per_event = 0.001
    trims: list[float] = []
    monkeypatch.setattr(_node, "release_freed_memory", lambda: trims.append(trio.current_time()))
    port = free_udp_port()
    with trio.fail_after(600):
        async with (
            trizre.open_node("n", beacon_port=port, **MEMORY) as node,  # default timeouts
            AsyncExitStack() as stack,
            trio.open_nursery() as nursery,
        ):
            events = node.events()  # default buffer and policy: "block"
            raws = [await stack.enter_async_context(memory_raw_peer(node)) for _ in range(n)]
            counts: Counter[type[trizre.Event]] = Counter()
            exits: list[float] = []
            all_entered, all_gone = trio.Event(), trio.Event()

            async def application() -> None:
                async for event in events:
                    counts[type(event)] += 1
                    if type(event) is trizre.Exit:
                        exits.append(trio.current_time())
                    if counts[trizre.Enter] == n:
                        all_entered.set()
                    if counts[trizre.Exit] == n:
                        all_gone.set()
                    await trio.sleep(per_event)  # its work

            nursery.start_soon(application)
            for raw in raws:
                await raw.hello()
            await all_entered.wait()
            died = trio.current_time()
            for raw in raws:
                raw.deaf()  # all stop at once: their last sign of life is now
            await all_gone.wait()
            # Removed at expired_timeout exactly; the application then reads
            # the 3,000 Exits at its own pace (1,000 of them buffered).
            assert min(exits) == died + 30.0
            assert max(exits) <= died + 30.0 + n * per_event + 0.1
            assert node.peers() == []
            assert counts[trizre.Evasive] == counts[trizre.Silent] == n
            # Their sockets' memory goes back to the OS a second after.
            await trio.sleep(1.0)
            assert len(trims) == 1
            assert died + 30.0 + 1.0 < trims[0] <= max(exits) + 1.0
            nursery.cancel_scope.cancel()


async def test_a_node_that_cannot_read_for_a_while_keeps_a_peer_whose_messages_wait(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The deaf-reader rule still holds: 25 s unable to read costs no peer.

    The application reads nothing for 25 s; a peer that speaks only when
    spoken to keeps sending, unheard (its messages wait in our inbox).
    """
    port = free_udp_port()
    with trio.fail_after(120):
        async with trizre.open_node("n", beacon_port=port, **MEMORY) as node:
            stuck = node.events(max_buffer=1)
            async with memory_raw_peer(node) as raw:
                await raw.hello()  # its Enter fills stuck's one place
                assert isinstance(await raw.receive(), wire.Hello)
                raw.deaf()  # only its messages prove it alive
                start = trio.current_time()
                await raw.send(wire.Whisper(raw.next_seq(), (b"blocks the reader",)))
                for _ in range(24):
                    await trio.sleep(1.0)
                    await raw.send(wire.Whisper(raw.next_seq(), (b"unheard",)))
                await trio.sleep(1.0)
                # 25 s later the application reads again: nothing was held
                # against the peer, which we hear at once.
                seen = [type(await stuck.receive()) for _ in range(26)]
                assert seen == [trizre.Enter] + [trizre.Whisper] * 25
                assert node.peers() == [raw.uuid]
                assert node.peer_is_responsive(raw.uuid)
                assert trio.current_time() == 25.0 + start


async def test_a_peer_is_pinged_on_time_once_the_node_reads_again(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Deaf 4.5 s while a peer was quiet: its PING comes 4.5 s late, exactly, not later.

    The presence pass due at 5 s finds the node deaf and plans for the
    whole credit; the reader reading again must bring it back sooner.
    """
    port = free_udp_port()
    with trio.fail_after(120):
        async with trizre.open_node("n", beacon_port=port, **MEMORY) as node:
            stuck = node.events(max_buffer=1)
            async with memory_raw_peer(node) as quiet, memory_raw_peer(node) as loud:
                await quiet.hello()
                assert type(await stuck.receive()) is trizre.Enter
                await loud.hello()  # its Enter fills stuck's one place
                assert isinstance(await quiet.receive(), wire.Hello)
                quiet.deaf()  # from now on only its messages would prove it alive
                start = trio.current_time()
                await trio.sleep(1.0)
                await loud.send(wire.Whisper(loud.next_seq(), (b"blocks the reader",)))
                await trio.sleep(4.5)
                assert [type(await stuck.receive()) for _ in range(2)] == [
                    trizre.Enter,
                    trizre.Whisper,
                ]
                assert isinstance(await quiet.receive(), wire.Ping)
                assert trio.current_time() == start + 5.0 + 4.5


# ------------------------------------------------------- sending (issue 28)


@pytest.mark.parametrize(("members", "yields_at"), [(2, [32]), (16, [16, 32])])
async def test_a_shout_that_does_not_wait_yields_once_every_32_sends(
    autojump_clock: trio.testing.MockClock, members: int, yields_at: list[int]
) -> None:
    """As a WHISPER does: not a schedule point per call, cancellation checked on each.

    A SHOUT counts one send per 8 members it reached.  A SHOUT loop that
    yielded on every call woke each receiver per message (a batch of one
    each time) and handed each TCP link one message a turn, which libzmq
    cannot batch.
    """
    port = free_udp_port()
    with trio.fail_after(120):
        async with AsyncExitStack() as stack:
            a = await stack.enter_async_context(trizre.open_node("a", beacon_port=port, **MEMORY))
            events = a.events()
            receivers = []
            for i in range(members):
                node = await stack.enter_async_context(
                    trizre.open_node(f"r{i}", beacon_port=port, **MEMORY)
                )
                receivers.append(node.events())
                await node.join("g")
            while len(a.peers_by_group("g")) < members:
                await next_event(events, trizre.Join)
            steps = _Steps(trio.lowlevel.current_task())
            trio.lowlevel.add_instrument(steps)
            yielded: list[int] = []
            for i in range(1, 33):
                before = steps.count
                await a.shout("g", b"%d" % i)
                if steps.count != before:
                    yielded.append(i)
            trio.lowlevel.remove_instrument(steps)
            with trio.CancelScope() as scope:
                scope.cancel()
                await a.shout("g", b"cancelled")  # not sent: it raises at once
            assert scope.cancelled_caught
            await a.shout("g", b"33")
            assert yielded == yields_at
            for received in (receivers[0], receivers[-1]):
                got = [(await next_event(received, trizre.Shout)).frames[0] for _ in range(33)]
                assert got == [b"%d" % i for i in range(1, 34)]


class _Steps(trio.abc.Instrument):
    """Counts one task's steps: each schedule point it passed ends one."""

    def __init__(self, task: trio.lowlevel.Task) -> None:
        self.task = task
        self.count = 0

    def after_task_step(self, task: trio.lowlevel.Task) -> None:
        if task is self.task:
            self.count += 1


async def test_peers_kept_alive_by_beacons_do_not_each_wake_the_clock(
    autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 28 (500 nodes): with ``beacons_refresh``, each beacon moves its TCP peer's
    deadline later, after the clock scheduled its look at the earlier one.

    Each such look found nothing due and was a wake-up of the clock of its
    own: a pass a peer every ``evasive_timeout``, about 40 a second in every
    node of a 500-node mesh.  Early entries now move together, in a pass the
    clock makes anyway.  The link's own clock still holds to the instant:
    each peer is PINGed ``expired_timeout`` after its last TCP traffic.
    """
    # The peers look like TCP ones: liveness only from their traffic and beacons.
    monkeypatch.setattr(LocalLink, "in_process", False)
    monkeypatch.setattr(LocalLink, "liveness", lambda self, now: None)
    passes = _count_passes(monkeypatch)
    n = 40
    port = free_udp_port()
    options = {**MEMORY, "beacons_refresh": True}  # evasive 5 s, expired 30 s
    with trio.fail_after(120):
        async with (
            trizre.open_node("n", beacon_port=port, **options) as node,
            AsyncExitStack() as stack,
            trio.open_nursery() as nursery,
        ):
            events = node.events(max_buffer=4 * n)
            raws = [await stack.enter_async_context(memory_raw_peer(node)) for _ in range(n)]
            greeted: dict[uuid.UUID, float] = {}
            pinged: dict[uuid.UUID, float] = {}

            async def read(raw: MemoryRawPeer) -> None:
                while True:
                    if type(await raw.receive()) is wire.Ping:
                        pinged.setdefault(raw.uuid, trio.current_time())

            async def beacons(raw: MemoryRawPeer, phase: float) -> None:
                await trio.sleep(phase)  # each peer's beacons at a time of its own
                beacon = wire.Beacon(raw.uuid, int(raw.endpoint.rsplit(":", 1)[1]))
                network = node._discovery
                assert isinstance(network, MemoryDiscovery)
                while True:
                    network.deliver(beacon, "127.0.0.1")
                    await trio.sleep(1.0)

            for i, raw in enumerate(raws):
                nursery.start_soon(read, raw)
                await raw.hello()
                greeted[raw.uuid] = trio.current_time()  # its last TCP traffic, from here on
                nursery.start_soon(beacons, raw, i / n)
                await trio.sleep(0.05)
            for _ in range(n):
                assert type(await events.receive()) is trizre.Enter
            first = next(passes)
            await trio.sleep(25.0 - (trio.current_time() - min(greeted.values())))
            # Early looks each on a wake-up of their own were 162 passes; now 6.
            assert next(passes) - first < 30
            await trio.sleep(10.0)
            assert pinged == {peer: at + 30.0 for peer, at in greeted.items()}
            assert all(peer in node._peers for peer in greeted)  # its beacons keep it
            nursery.cancel_scope.cancel()
