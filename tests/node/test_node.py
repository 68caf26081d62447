"""The ZRE node on loopback with real sockets: discovery, groups, messages, stop."""

from __future__ import annotations

import gc
import socket
import threading
import uuid
from pathlib import Path

import pytest
import trio
import trio.testing

import trizre
from tests.support.nodes import (
    FAST,
    a_over_b,
    exit_reasons,
    free_udp_port,
    next_event,
    node_with_raw_peer,
    open_nodes,
    open_pair,
    raw_peer,
    wait_for_peers,
)
from trizre import wire
from trizre.node import _node
from trizre.node._node import _next_multiple
from trizre.transport import _discovery
from trizre.transport._links import TcpLink


async def test_two_nodes_meet_talk_and_part() -> None:
    port = free_udp_port()
    with trio.fail_after(10):
        async with trizre.open_node(
            "alice", beacon_port=port, headers={"X-ROLE": "db"}, **FAST
        ) as alice:
            a_events = alice.events()
            async with trizre.open_node("Zoë", beacon_port=port, **FAST) as zoe:
                z_events = zoe.events()
                enter = await next_event(z_events, trizre.Enter)
                assert enter.peer == alice.uuid
                assert enter.name == "alice"
                assert enter.headers == (("X-ROLE", "db"),)
                assert enter.endpoint == alice.endpoint
                assert (await next_event(a_events, trizre.Enter)).name == "Zoë"
                assert zoe.pending_peers() == []  # alice said HELLO: present, not pending

                await alice.join("chat")
                join = await next_event(z_events, trizre.Join)
                assert (join.peer, join.group) == (alice.uuid, "chat")
                assert zoe.peers_by_group("chat") == [alice.uuid]
                assert zoe.peer_groups() == ["chat"]
                assert alice.own_groups() == ["chat"]

                await alice.whisper(zoe.uuid, b"one", b"two")
                await alice.whisper(zoe.uuid)  # zero frames is a valid WHISPER
                assert (await next_event(z_events, trizre.Whisper)).frames == (b"one", b"two")
                assert (await next_event(z_events, trizre.Whisper)).frames == ()

                await zoe.shout("chat", "grüß".encode())  # not joined: still allowed
                shout = await next_event(a_events, trizre.Shout)
                assert (shout.name, shout.group) == ("Zoë", "chat")
                assert shout.frames == ("grüß".encode(),)

                await alice.leave("chat")
                leave = await next_event(z_events, trizre.Leave)
                assert leave.group == "chat"
                assert zoe.peers_by_group("chat") == []

                assert zoe.peer_name(alice.uuid) == "alice"
                assert zoe.peer_headers(alice.uuid) == {"X-ROLE": "db"}
                assert zoe.peer_address(alice.uuid) == alice.endpoint
                assert alice.peers() == [zoe.uuid]
                assert alice.endpoint.startswith("tcp://127.0.0.1:")
                assert 0xC000 <= int(alice.endpoint.rsplit(":", 1)[1]) <= 0xFFFF
            # Zoë left: her port-0 beacon tells alice at once (no 30 s expiry).
            with trio.fail_after(2):
                assert (await next_event(a_events, trizre.Exit)).name == "Zoë"
            assert alice.peers() == []
        assert isinstance(await a_events.receive(), trizre.Stop)
        with pytest.raises(trio.EndOfChannel):
            await a_events.receive()


async def test_a_shout_hashes_no_member_uuid(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 28: a SHOUT reaches its members' sessions straight from the group.

    ``uuid.UUID.__hash__`` is a Python call; looking each member up in the
    peer table by UUID cost one a member on every SHOUT.  Over TCP links
    (``--links tcp``) and in memory alike.
    """
    with trio.fail_after(20):
        port = free_udp_port()
        async with (
            trizre.open_node("s", beacon_port=port, **FAST) as sender,
            trio.open_nursery() as nursery,
        ):
            events = sender.events()
            stop, all_in = trio.Event(), trio.Event()
            received: list[trizre.Shout] = []

            async def member(i: int) -> None:
                async with trizre.open_node(f"m{i}", beacon_port=port, **FAST) as node:
                    mine = node.events()
                    await node.join("g")
                    received.append(await next_event(mine, trizre.Shout))
                    if len(received) == 3:
                        all_in.set()
                    await stop.wait()

            for i in range(3):
                nursery.start_soon(member, i)
            while len(sender.peers_by_group("g")) < 3:
                await next_event(events, trizre.Join)
            hashed = 0
            plain = uuid.UUID.__hash__

            def counting(self: uuid.UUID) -> int:
                nonlocal hashed
                hashed += 1
                return plain(self)

            monkeypatch.setattr(uuid.UUID, "__hash__", counting)
            await sender.shout("g", b"to all")  # the first: not a schedule point
            monkeypatch.setattr(uuid.UUID, "__hash__", plain)
            assert hashed == 0
            await all_in.wait()
            assert [e.frames for e in received] == [(b"to all",)] * 3
            stop.set()


async def test_a_shout_loop_checks_its_group_name_once_and_keeps_few(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 28: a SHOUT's group is checked and encoded once per node, not on every SHOUT.

    What is kept is bounded (a sender of SHOUTs to ever new groups), and a
    group whose encoding was dropped is encoded again: every SHOUT still
    names its group.
    """
    checked: list[str] = []
    check = _node._check_group

    def counting(group: str) -> None:
        checked.append(group)
        check(group)

    monkeypatch.setattr(_node, "_check_group", counting)
    with trio.fail_after(20):
        async with open_pair() as (a, b):
            a_events, b_events = a.events(), b.events()
            await b.join("g0")
            await wait_for_peers(a, a_events, 1)
            while a.peers_by_group("g0") != [b.uuid]:
                await next_event(a_events, trizre.Join)
            checked.clear()
            for _ in range(10):
                await a.shout("g0", b"same")
            assert checked == ["g0"]
            for i in range(300):  # more groups than a node keeps
                await a.shout(f"g{i}", b"elsewhere")
            assert len(a._group_tails) <= _node._GROUP_TAILS
            await a.shout("g0", b"last")
            frames = []
            while len(frames) < 12:
                shout = await next_event(b_events, trizre.Shout)
                assert shout.group == "g0"
                frames.append(shout.frames)
            assert frames == [(b"same",)] * 10 + [(b"elsewhere",), (b"last",)]
            with pytest.raises(ValueError, match="empty"):
                await a.shout("", b"x")
            with pytest.raises(TypeError, match="str"):
                await a.shout(b"g0", b"x")  # type: ignore[arg-type]


async def test_ping_round_trips_between_nodes() -> None:
    with trio.fail_after(10):
        async with open_pair() as (a, b):
            peer = await a.wait_for_peer("b")
            await b.wait_for_peer("a")
            rtts = [await a.ping(peer) for _ in range(20)]
            assert all(0 < rtt < 10 for rtt in rtts)
            assert a.peer_is_responsive(peer)


async def test_peer_groups_from_hello_and_case_sensitivity() -> None:
    port = free_udp_port()
    with trio.fail_after(10):
        async with trizre.open_node("a", beacon_port=port, **FAST) as a:
            await a.join("Chat")
            await a.join("chat")
            await a.join("chat")  # no-op
            async with trizre.open_node("b", beacon_port=port, **FAST) as b:
                events = b.events()
                groups = set()
                while len(groups) < 2:
                    groups.add((await next_event(events, trizre.Join)).group)
                assert groups == {"Chat", "chat"}
                assert b.peer_groups() == ["Chat", "chat"]


async def test_every_subscriber_sees_every_event() -> None:
    with trio.fail_after(10):
        async with open_pair() as (a, b):
            first, second = b.events(), b.events()
            await wait_for_peers(a, a.events(), 1)
            for i in range(20):
                await a.whisper(b.uuid, bytes([i]))
            for stream in (first, second):
                got = [(await next_event(stream, trizre.Whisper)).frames for _ in range(20)]
                assert got == [(bytes([i]),) for i in range(20)]


async def test_a_lagging_raise_subscriber_is_cut_off_loudly() -> None:
    with trio.fail_after(10):
        async with open_pair() as (a, b):
            lagging = b.events(max_buffer=5, overflow="raise")
            steady = b.events()
            await wait_for_peers(a, a.events(), 1)
            for i in range(50):
                await a.whisper(b.uuid, bytes([i]))
            got = [(await next_event(steady, trizre.Whisper)).frames[0][0] for _ in range(50)]
            assert got == list(range(50))
            with pytest.raises(trizre.EventsOverflowed):
                async for _ in lagging:
                    pass


async def test_burst_to_a_slow_reader_loses_nothing() -> None:
    """5,000 x 4 kB to a reader slower than the sender: all arrive, in order."""
    port = free_udp_port()
    n = 5_000
    payload = b"x" * 4096
    with trio.fail_after(60):
        async with (
            trizre.open_node("fast", beacon_port=port, send_hwm=10, **FAST) as fast,
            trizre.open_node("slow", beacon_port=port, **FAST) as slow,
        ):
            events = slow.events(max_buffer=10)
            await wait_for_peers(fast, fast.events(), 1)
            await wait_for_peers(slow, slow.events(), 1)

            async def burst() -> None:
                for i in range(n):
                    await fast.whisper(slow.uuid, i.to_bytes(4, "big"), payload)

            got: list[int] = []
            async with trio.open_nursery() as nursery:
                nursery.start_soon(burst)
                while len(got) < n:
                    whisper = await next_event(events, trizre.Whisper)
                    got.append(int.from_bytes(whisper.frames[0], "big"))
                    if len(got) % 100 == 0:
                        await trio.sleep(0.01)  # a slow consumer, not synchronisation
            assert got == list(range(n))
            # Backpressure did not cost us the peer.
            assert fast.peers() == [slow.uuid]
            assert slow.peers() == [fast.uuid]


async def test_errors_on_bad_input() -> None:
    port = free_udp_port()
    with pytest.raises(ValueError, match="255"):
        async with trizre.open_node("é" * 128, beacon_port=port, **FAST):
            pass
    with pytest.raises(ValueError, match="protocol_version"):
        async with trizre.open_node("x", beacon_port=port, protocol_version=4, **FAST):
            pass
    with pytest.raises(ValueError, match="beacon_port"):
        async with trizre.open_node("x", beacon_port=0, interface="lo"):
            pass
    with pytest.raises(ValueError, match="evasive_timeout"):
        async with trizre.open_node("x", beacon_port=port, evasive_timeout=0, interface="lo"):
            pass
    # A header value that is not str is named, not a codec's AttributeError.
    with pytest.raises(TypeError, match=r"header 'X-PORT': names and values are str, got str: int"):
        async with trizre.open_node("x", beacon_port=port, headers={"X-PORT": 80}, **FAST):  # type: ignore[dict-item]
            pass
    with pytest.raises(trizre.InterfaceError):
        async with trizre.open_node("x", beacon_port=port, interface="no-such-if0"):
            pass
    with trio.fail_after(5):
        async with trizre.open_node("x", beacon_port=port, **FAST) as node:
            stranger = uuid.uuid4()
            with pytest.raises(trizre.UnknownPeer):
                await node.whisper(stranger, b"hi")
            with pytest.raises(trizre.UnknownPeer):
                node.peer_name(stranger)
            with pytest.raises(TypeError):
                await node.shout("g", "text is not bytes")  # type: ignore[arg-type]
            with pytest.raises(ValueError, match="255"):
                await node.join("g" * 256)
            with pytest.raises(ValueError):
                node.events(max_buffer=0)


async def test_body_errors_come_out_bare_and_the_node_stops() -> None:
    port = free_udp_port()
    with trio.fail_after(5):
        with pytest.raises(KeyError):
            async with trizre.open_node("x", beacon_port=port, **FAST) as node:
                events = node.events()
                raise KeyError("boom")
        assert isinstance(await events.receive(), trizre.Stop)


async def test_cancelling_the_block_stops_promptly_and_tells_peers() -> None:
    port = free_udp_port()
    with trio.fail_after(5):
        async with trizre.open_node("stay", beacon_port=port, **FAST) as stay:
            events = stay.events()
            with trio.CancelScope() as scope:
                async with trizre.open_node("go", beacon_port=port, **FAST) as go:
                    await next_event(events, trizre.Enter)
                    go_events = go.events()
                    scope.cancel()
                    await trio.sleep_forever()
            assert isinstance(await go_events.receive(), trizre.Stop)
            assert (await next_event(events, trizre.Exit)).name == "go"


async def test_raw_peer_hello_creates_the_peer_and_pings_are_answered() -> None:
    port = free_udp_port()
    with trio.fail_after(5):
        async with trizre.open_node("n", beacon_port=port, **FAST) as node:
            events = node.events()
            async with raw_peer(node) as raw:
                # Commands before HELLO are ignored.
                await raw.send(wire.Whisper(1, (b"too early",)))
                await raw.hello("raw", groups=("g",))
                enter = await next_event(events, trizre.Enter)
                assert (enter.peer, enter.name) == (raw.uuid, "raw")
                assert (await next_event(events, trizre.Join)).group == "g"
                # The node connected back and greeted us.
                hello = await raw.receive()
                assert isinstance(hello, wire.Hello)
                assert (hello.sequence, hello.name, hello.endpoint) == (1, "n", node.endpoint)
                await raw.send(wire.Ping(raw.next_seq()))
                assert await raw.receive() == wire.PingOk(2)
                await raw.send(wire.Whisper(raw.next_seq(), ()))
                assert (await next_event(events, trizre.Whisper)).frames == ()


async def test_never_crash_on_what_a_peer_sends() -> None:
    with trio.fail_after(5):
        async with node_with_raw_peer() as (node, events, raw):
            # Garbage without the signature is discarded silently.
            await raw.send_frames([b"\x00\x01garbage"])
            await raw.send_frames([b"\xaa"])
            # A command id from the future: skipped, its sequence counted.
            await raw.send_frames([b"\xaa\xa1\x2a\x02" + raw.next_seq().to_bytes(2, "big")])
            # zyre's ELECT and LEADER: accepted and ignored.
            await raw.send(wire.Elect(raw.next_seq(), b"\x03abc"))
            await raw.send(wire.Leader(raw.next_seq(), b"\x03abc"))
            # Another protocol version: ignored.
            await raw.send(wire.Whisper(raw.next_seq(), (b"v3",), version=3))
            raw.seq -= 1  # it was not counted
            await raw.send(wire.Whisper(raw.next_seq(), (b"still here",)))
            whisper = await next_event(events, trizre.Whisper)
            assert whisper.frames == (b"still here",)
            # Invalid UTF-8 in a group name: a protocol violation, the peer goes.
            head = b"\xaa\xa1\x03\x02" + raw.next_seq().to_bytes(2, "big")
            await raw.send_frames([head + b"\x02\xff\xfe", b"x"])
            assert (await next_event(events, trizre.Exit)).peer == raw.uuid
            assert node.peers() == []


async def test_sequence_gap_disconnects_the_peer() -> None:
    with trio.fail_after(5):
        async with node_with_raw_peer() as (_, events, raw):
            await raw.send(wire.Whisper(3, (b"gap",)))
            assert (await next_event(events, trizre.Exit)).peer == raw.uuid


async def test_goodbye_means_leaving() -> None:
    with trio.fail_after(5):
        async with node_with_raw_peer() as (_, events, raw):
            await raw.send(wire.Goodbye(raw.next_seq()))
            assert (await next_event(events, trizre.Exit)).peer == raw.uuid


async def test_hello_pointing_outside_our_network_is_ignored() -> None:
    port = free_udp_port()
    with trio.fail_after(5):
        async with trizre.open_node("n", beacon_port=port, **FAST) as node:
            events = node.events(overflow="raise")
            async with raw_peer(node) as raw:
                # ok-net: the endpoint is only claimed; the node must not connect to it
                outside = "tcp://198.51.100.7:50000"
                await raw.send(wire.Hello(1, outside, (), 0, "liar", ()))
                await raw.send(wire.Ping(2))
                with trio.move_on_after(0.3):
                    await next_event(events, trizre.Enter)
                    raise AssertionError("a peer outside our subnet was accepted")
            assert node.peers() == []


async def test_version_3_nodes_meet_and_ignore_version_2() -> None:
    port = free_udp_port()
    with trio.fail_after(10):
        async with (
            trizre.open_node("v3a", beacon_port=port, protocol_version=3, **FAST) as a,
            trizre.open_node("v3b", beacon_port=port, protocol_version=3, **FAST) as b,
            trizre.open_node("v2", beacon_port=port, protocol_version=2, **FAST) as old,
        ):
            old_events, b_events = old.events(overflow="raise"), b.events()
            # b may have entered before any subscription: ask, don't wait for Enter.
            assert await a.wait_for_peer("v3b") == b.uuid
            await a.whisper(b.uuid, b"v3 hello")
            assert (await next_event(b_events, trizre.Whisper)).frames == (b"v3 hello",)
            # Ten beacon intervals later the v2 node still knows nobody.
            with trio.move_on_after(0.5):
                event = await next_event(old_events, trizre.Enter)
                raise AssertionError(f"a v2 node entered a v3 peer: {event}")
            assert old.peers() == []
            assert a.peers() == [b.uuid]


async def test_fifty_nodes_in_one_process_reach_a_full_mesh() -> None:
    port = free_udp_port()
    n = 50
    with trio.fail_after(60):
        async with open_nodes(n, port) as opened:
            for node, stream in opened:
                await wait_for_peers(node, stream, n - 1)
            # Everyone whispers to everyone.
            for sender, _ in opened:
                for peer in sender.peers():
                    await sender.whisper(peer, sender.name.encode())
            for node, stream in opened:
                names = set()
                while len(names) < n - 1:
                    names.add((await next_event(stream, trizre.Whisper)).frames[0])
                assert node.name.encode() not in names
    gc.collect()


async def test_beacons_from_strangers_long_short_and_broken() -> None:
    """A v1 beacon brings a peer in; junk and CURVE (54-octet v3) beacons do not.

    A node without CURVE could not talk to a CURVE inbox: it must not
    half-connect to one (issue 11).
    """
    port = free_udp_port()
    with trio.fail_after(5):
        async with (
            trizre.open_node("n", beacon_port=port, **FAST) as node,
            raw_peer(node) as raw,
            raw_peer(node) as curve_raw,
        ):
            raw_port = int(raw.endpoint.rsplit(":", 1)[1])
            curve_port = int(curve_raw.endpoint.rsplit(":", 1)[1])
            sock = trio.socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            with sock:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
                for junk in (b"", b"ZRE", b"ZRE\x02" + bytes(18), b"x" * 300):
                    await sock.sendto(junk, ("127.255.255.255", port))
                keyed = wire.Beacon(curve_raw.uuid, curve_port, version=3, public_key=bytes(32))
                encoded = wire.encode_beacon(keyed)
                assert len(encoded) == 54
                await sock.sendto(encoded, ("127.255.255.255", port))
                beacon = wire.Beacon(raw.uuid, raw_port)
                await sock.sendto(wire.encode_beacon(beacon), ("127.255.255.255", port))
                # The node connects to the v1 beacon's sender and says HELLO;
                # the CURVE beacon, read before it, was ignored.
                hello = await raw.receive()
                assert isinstance(hello, wire.Hello)
                assert hello.name == "n"
                assert curve_raw.uuid not in node._peers
                assert curve_raw.inbox.receive_nowait() is None
                # A port-0 beacon from a known peer removes it.
                events = node.events()
                await raw.hello()
                await next_event(events, trizre.Enter)
                await sock.sendto(
                    wire.encode_beacon(wire.Beacon(raw.uuid, 0)), ("127.255.255.255", port)
                )
                await next_event(events, trizre.Exit)
                assert node.peers() == []


async def test_forged_beacons_naming_a_peers_endpoint_or_ours_link_nothing() -> None:
    """New UUIDs at b's endpoint, or at a's own, from one UDP socket on loopback.

    Before, each made a link to b under a's identity: b's inbox handed a's
    route to it, b took its HELLO for a's restart, and the two ended each
    other (9 exits of b in 20 beacons, 2026-11-30); a also linked to itself.
    """
    port = free_udp_port()
    options = {"beacon_port": port, "interface": "lo", "local_links": False}
    options |= {"evasive_timeout": 60.0, "expired_timeout": 120.0}
    with trio.fail_after(20):
        async with (
            trizre.open_node("a", **options) as a,
            trizre.open_node("b", **options) as b,
            raw_peer(a) as marker,
        ):
            a_events, b_events = a.events(), b.events()
            await a.wait_for_peer(b.uuid)
            await b.wait_for_peer(a.uuid)
            sock = trio.socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            with sock:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
                for _ in range(10):
                    for node in (b, a):
                        forged = wire.Beacon(uuid.uuid4(), int(node.endpoint.rsplit(":", 1)[1]))
                        await sock.sendto(wire.encode_beacon(forged), ("127.255.255.255", port))
                # A real newcomer last: its HELLO says a read every beacon before it.
                real = wire.Beacon(marker.uuid, int(marker.endpoint.rsplit(":", 1)[1]))
                await sock.sendto(wire.encode_beacon(real), ("127.255.255.255", port))
                assert isinstance(await marker.receive(), wire.Hello)
            assert a.statistics().beacons_ignored["claimed"] == 20
            assert set(a._core.peers) == {b.uuid, marker.uuid}
            await a.whisper(b.uuid, b"still")
            await b.whisper(a.uuid, b"here")
            for events in (b_events, a_events):
                got = await next_event(events, trizre.Whisper | trizre.Exit)  # type: ignore[arg-type]
                assert isinstance(got, trizre.Whisper)


async def test_stopping_leaves_no_socket_task_or_thread_behind() -> None:
    threads = threading.active_count()
    with trio.fail_after(5):
        tasks_before = len(trio.lowlevel.current_root_task().child_nurseries[0].child_tasks)
        async with open_pair() as (a, b):
            await wait_for_peers(a, a.events(), 1)
            await wait_for_peers(b, b.events(), 1)
            sockets = [
                a._inbox,
                b._inbox,
                *(p.link for p in (*a._peers.values(), *b._peers.values())),
            ]
            assert len(sockets) == 4
        assert all(s is not None and s.closed for s in sockets)
        tasks_after = len(trio.lowlevel.current_root_task().child_nurseries[0].child_tasks)
        assert tasks_after == tasks_before
    assert threading.active_count() == threads


async def test_wait_for_peer_by_name_or_uuid() -> None:
    port = free_udp_port()
    with trio.fail_after(5):
        async with trizre.open_node("a", beacon_port=port, **FAST) as a:
            with pytest.raises(TypeError):
                await a.wait_for_peer(42)  # type: ignore[arg-type]
            with trio.move_on_after(0.2) as scope:
                await a.wait_for_peer("nobody")
            assert scope.cancelled_caught
            async with trizre.open_node("b", beacon_port=port, **FAST) as b:
                found = await a.wait_for_peer("b")
                assert found == b.uuid
                assert await a.wait_for_peer(b.uuid) == b.uuid
                assert a.find_peers("b") == [b.uuid]
                assert a.find_peers("nobody") == []


@pytest.mark.parametrize("beacons_refresh", [False, True])
async def test_beacons_refresh_presence_only_when_asked(beacons_refresh: bool) -> None:
    """Two idle nodes over TCP: with zyre's rule they ping each other, with pyre's they need not.

    Either way a healthy peer answers, and a quiet link is no news: no
    Evasive (issue 25, 7: it used to go out with every PING).
    """
    port = free_udp_port()
    timers = {"evasive_timeout": 0.2, "expired_timeout": 2.0, "beacon_interval": 0.05}
    with trio.fail_after(5):
        async with (
            trizre.open_node(
                "a",
                beacon_port=port,
                beacons_refresh=beacons_refresh,
                interface="lo",
                local_links=False,  # PINGs are a TCP link's; local peers need none
                **timers,
            ) as a,
            trizre.open_node(
                "b", beacon_port=port, interface="lo", local_links=False, **timers
            ) as b,
        ):
            events = a.events()
            await a.wait_for_peer(b.uuid)
            with trio.move_on_after(0.6):  # three evasive periods
                event = await next_event(events, trizre.Evasive)
                raise AssertionError(f"a healthy quiet peer was reported: {event}")
            pinged = a._peers[b.uuid].protocol.pongs > 0  # b answered a's PINGs
            assert pinged is not beacons_refresh
            assert a.peers() == [b.uuid]
            assert a.peer_is_responsive(b.uuid)


async def test_whisper_nowait_keeps_order_with_whisper() -> None:
    with trio.fail_after(10):
        async with open_pair() as (a, b):
            events = b.events()
            await a.wait_for_peer(b.uuid)
            sent = []
            for i in range(200):
                if i % 3 == 0:
                    await a.whisper(b.uuid, bytes([i]))
                elif a.whisper_nowait(b.uuid, bytes([i])):
                    pass
                else:  # full: the caller falls back to waiting
                    await a.whisper(b.uuid, bytes([i]))
                sent.append(i)
            got = [(await next_event(events, trizre.Whisper)).frames[0][0] for _ in range(200)]
            assert got == sent
            with pytest.raises(trizre.UnknownPeer):
                a.whisper_nowait(uuid.uuid4(), b"x")


async def _node_in_task(
    port: int, name: str, task_status: trio.TaskStatus[tuple[trizre.Node, trio.CancelScope]]
) -> None:
    with trio.CancelScope() as scope:
        async with trizre.open_node(name, beacon_port=port, **FAST) as node:
            task_status.started((node, scope))
            await trio.sleep_forever()


async def test_nodes_in_one_run_share_one_beacon_socket_and_hand_it_over() -> None:
    """Each beacon is received once per process; the reading task moves on when its node stops."""
    port = free_udp_port()
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            first, first_scope = await nursery.start(_node_in_task, port, "first")
            second, _ = await nursery.start(_node_in_task, port, "second")
            await trio.testing.wait_all_tasks_blocked()
            (hub,) = _discovery._HUBS.get().values()
            assert first._discovery is second._discovery is hub
            assert len(hub._listeners) == 2
            host = hub._host
            # Stop the node whose task reads the shared socket...
            first_scope.cancel()
            await trio.testing.wait_all_tasks_blocked()
            assert hub._host is not None and hub._host is not host
            assert len(hub._listeners) == 1
            # ...and discovery goes on through the other one's task.
            third, third_scope = await nursery.start(_node_in_task, port, "third")
            await second.wait_for_peer(third.uuid)
            await third.wait_for_peer(second.uuid)
            events = second.events()
            third_scope.cancel()  # its port-0 beacon also arrives through the hub
            await next_event(events, trizre.Exit)
            nursery.cancel_scope.cancel()
        assert _discovery._HUBS.get() == {}  # the last user closed the socket
        assert hub.socket is not None and hub.socket._closed


@pytest.mark.parametrize("interval", [0.05, 0.1, 1.0, 0.3, 7.0])
def test_beacon_deadlines_always_move_forward(interval: float) -> None:
    """Float rounding must never give a deadline at or before now (a spin)."""
    now = 0.0
    for _ in range(2_000):
        deadline = _next_multiple(now, interval)
        assert now < deadline <= now + interval + 1e-9
        now = deadline  # a clock that jumps exactly to each deadline


async def test_a_frame_over_max_message_size_is_never_delivered_and_ends_the_peer() -> None:
    with trio.fail_after(10):
        async with node_with_raw_peer(max_message_size=64 * 1024) as (_, events, raw):
            await raw.send(wire.Whisper(raw.next_seq(), (b"small",)))
            assert (await next_event(events, trizre.Whisper)).frames == (b"small",)
            await raw.send(wire.Whisper(raw.next_seq(), (b"x" * (1024 * 1024),)))
            # libzmq dropped the connection with the big frame; the DEALER
            # reconnects and the next message shows the gap.
            await raw.send(wire.Whisper(raw.next_seq(), (b"after",)))
            exit_or_whisper = await next_event(events, trizre.Exit | trizre.Whisper)  # type: ignore[arg-type]
            assert isinstance(exit_or_whisper, trizre.Exit)
            assert exit_or_whisper.peer == raw.uuid


# ---------------------------------------------- message sizes (issue 25, section 4)


async def test_a_message_over_max_message_size_raises_at_the_call_and_the_next_ones_arrive() -> (
    None
):
    """Default options: 16 MiB refused at the call, nothing sent, no number used, no Exit.

    Runs over TCP (``--links tcp``) and in memory alike: the sender refuses
    what the receiver's libzmq would drop the link for.
    """
    limit = 16 * 1024 * 1024
    big = b"x" * (limit - 5)  # the 6-octet header makes it one over
    with trio.fail_after(30):
        async with open_pair() as (a, b):
            events, a_events = b.events(), a.events()
            await b.join("g")
            peer = await a.wait_for_peer(b.uuid)
            await b.wait_for_peer(a.uuid)
            await next_event(a_events, trizre.Join, lambda e: e.peer == b.uuid)
            sent_seq = a._peers[b.uuid].protocol.sent_seq
            with pytest.raises(trizre.MessageTooLarge) as raised:
                await a.whisper(peer, big)
            assert (raised.value.size, raised.value.limit) == (limit + 1, limit)
            assert f"{limit + 1} octets" in str(raised.value)
            assert isinstance(raised.value, ValueError)
            with pytest.raises(trizre.MessageTooLarge):
                a.whisper_nowait(peer, big[:-3], b"123")  # frames count together
            with pytest.raises(trizre.MessageTooLarge) as shouted:
                await a.shout("g", big[:-2])  # SHOUT's header: 6 octets + "g" as a string
            assert shouted.value.size == limit + 1
            assert a._peers[b.uuid].protocol.sent_seq == sent_seq  # no number used
            await a.whisper(peer, b"x" * (limit - 6))  # exactly the limit goes
            await a.whisper(peer, b"after")
            if not a.whisper_nowait(peer, b"and after"):
                await a.whisper(peer, b"and after")
            await a.shout("g", b"shouted")
            got = await next_event(events, trizre.Whisper)
            assert len(got.frames[0]) == limit - 6
            kinds: list[bytes] = []
            while len(kinds) < 3:
                event = await next_event(events, trizre.Whisper | trizre.Shout | trizre.Exit)  # type: ignore[arg-type]
                assert not isinstance(event, trizre.Exit)
                kinds.append(event.frames[0])
            assert kinds[0] == b"after" and kinds[-1] == b"shouted"


async def test_a_whisper_of_frames_that_are_not_bytes_raises_and_sends_nothing() -> None:
    """Checked before anything is sent, no number used (issue 28 made the check inline)."""
    with trio.fail_after(30):
        async with open_pair() as (a, b):
            events = b.events()
            peer = await a.wait_for_peer(b.uuid)
            await b.wait_for_peer(a.uuid)
            sent_seq = a._peers[b.uuid].protocol.sent_seq
            for bad in ("text", bytearray(b"x"), None):
                with pytest.raises(TypeError, match="frames must be bytes"):
                    await a.whisper(peer, b"ok", bad)  # type: ignore[arg-type]
            assert a._peers[b.uuid].protocol.sent_seq == sent_seq
            await a.whisper(peer, b"after")
            got = await next_event(events, trizre.Whisper)
            assert got.frames == (b"after",)


async def test_a_link_the_receiver_dropped_is_reported_at_once_and_later_whispers_raise() -> None:
    """b's libzmq drops a's connection (a frame over b's limit, not a's): a must learn.

    Beacons are rare and presence slow here, so nothing but the broken
    connection can tell a.  Before issue 25, a's DEALER reconnected
    silently and every later whisper returned normally while b, having
    seen the gap, dropped them all.
    """
    with trio.fail_after(20):
        async with a_over_b(beacon_interval=0.2) as (a, b, a_events, b_events):
            peer = b.uuid
            await a.whisper(peer, b"before")
            await next_event(b_events, trizre.Whisper, lambda e: e.frames == (b"before",))
            await a.whisper(peer, b"x" * 100_000)  # under a's limit, over b's: b drops the link
            exit_event = await next_event(a_events, trizre.Exit | trizre.Whisper)  # type: ignore[arg-type]
            assert isinstance(exit_event, trizre.Exit) and exit_event.peer == b.uuid
            expected = []
            try:
                await a.whisper(peer, b"after")
                expected.append(b"after")  # b entered again already: it must arrive
            except trizre.UnknownPeer:
                pass  # the usual case: a forgot b at once
            # At b's next beacon they link again, and what a sends arrives.
            await a.wait_for_peer(b.uuid)
            await a.whisper(peer, b"again")
            expected.append(b"again")
            got = []
            while len(got) < len(expected):
                event = await next_event(b_events, trizre.Whisper)
                got.append(event.frames[0])
            assert got == expected


async def test_a_peer_the_receiver_drops_for_frames_over_its_limit_together_learns_at_once(
    tmp_path: Path,
) -> None:
    """Frames each under b's limit, over it together: b drops a, and a must learn.

    libzmq keeps the connection (its limit is per frame); b drops the peer
    and closes its link to a, which a's inbox watch sees (trace reason
    ``link``).  Before issue 28 moved the watch to the inbox, a was not
    told until they linked again (b's HELLO at a's next beacon: reason
    ``hello``).
    """
    with trio.fail_after(20):
        async with a_over_b(beacon_interval=1.0, trace_dir=tmp_path) as (a, b, a_events, b_events):
            await a.whisper(b.uuid, b"x" * 40_000, b"y" * 40_000)  # each under 64 KiB, not both
            dropped = await next_event(b_events, trizre.Exit | trizre.Whisper)  # type: ignore[arg-type]
            assert isinstance(dropped, trizre.Exit) and dropped.peer == a.uuid
            told = await next_event(a_events, trizre.Exit | trizre.Whisper)  # type: ignore[arg-type]
            assert isinstance(told, trizre.Exit) and told.peer == b.uuid
    assert exit_reasons(tmp_path, a.uuid) == ["link"]


@pytest.mark.parametrize("watch", [True, False])
async def test_watch_links_false_gives_a_node_no_inbox_monitor(watch: bool) -> None:
    """Issue 28: ``watch_links=False`` watches no peer's connection, and opens no monitor."""
    port = free_udp_port()
    options = {"beacon_port": port, "interface": "lo", "local_links": False}
    with trio.fail_after(20):
        async with (
            trizre.open_node("a", watch_links=watch, **options) as a,
            trizre.open_node("b", **options) as b,
        ):
            b_events = b.events()
            peer = await a.wait_for_peer(b.uuid)
            await b.wait_for_peer(a.uuid)
            await a.whisper(peer, b"hello")  # a's watcher, if any, has run by its delivery
            await next_event(b_events, trizre.Whisper, lambda e: e.frames == (b"hello",))
            session = a._core.peers[b.uuid]
            assert isinstance(session.link, TcpLink)
            assert (a._inbox_watch is not None and session in a._inbox_watch) is watch
            assert (a._inbox_watch is None) is not watch  # no watch socket either
            assert (a._sources is None) is not watch  # nor the inbox noting HELLOs
    with pytest.raises(TypeError):
        async with trizre.open_node("c", watch_links="no", **options):  # type: ignore[arg-type]
            pass
