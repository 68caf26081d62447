"""A node's own counters (``Node.statistics``) and their Prometheus export (``NodeCollector``).

Counts are checked exactly: the messages and octets two nodes exchange
over loopback, a sequence gap from a hand-driven DEALER, a forged leaving
beacon and a throttled stranger; the export is scraped over HTTP and
parsed with prometheus_client's own parser.
"""

from __future__ import annotations

import socket
import uuid
from typing import Any

import pytest
import trio
import trio.testing
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

import trizre
from tests.support.cli import http
from tests.support.nodes import FAST, MEMORY, free_udp_port, next_event, node_with_raw_peer
from tests.support.scrape import documented, parse, value
from trizre import wire
from trizre.cli._metrics import MetricsApp
from trizre.cli._web import serve_page
from trizre.metrics import NodeCollector
from trizre.trace._contract import ExitReason
from trizre.transport._zsock import inbox_read

N = 40
QUIET: dict[str, Any] = {"evasive_timeout": 60.0, "expired_timeout": 120.0}
"""No PING while a test counts: only the messages it sends are on the links."""


def octets(message: wire.Message) -> int:
    return sum(map(len, wire.encode(message)))


def delta(after: trizre.NodeStatistics, before: trizre.NodeStatistics) -> tuple[int, ...]:
    return (
        after.messages_in - before.messages_in,
        after.bytes_in - before.bytes_in,
        after.messages_out - before.messages_out,
        after.bytes_out - before.bytes_out,
    )


async def test_two_nodes_over_tcp_count_exactly_the_whispers_and_shouts_they_exchange() -> None:
    opts = {**FAST, **QUIET, "beacon_port": free_udp_port(), "local_links": False}
    with trio.fail_after(30):
        async with (
            trizre.open_node("a", **opts) as a,
            trizre.open_node("b", **opts) as b,
        ):
            a_events, b_events = a.events(), b.events()
            await a.join("g")
            await b.join("g")
            # Each has read everything the other sent so far (HELLO, JOIN).
            assert (await next_event(a_events, trizre.Join)).peer == b.uuid
            assert (await next_event(b_events, trizre.Join)).peer == a.uuid
            a0, b0 = a.statistics(), b.statistics()
            assert a0.messages_out >= 1 and b0.messages_in >= 1  # the handshakes
            assert a0.peers == {"alive": 1, "evasive": 0, "silent": 0}
            expected = 0
            for i in range(N):
                payload = b"w" * i
                await a.whisper(b.uuid, payload)
                expected += octets(wire.Whisper(i + 1, (payload,)))
            for i in range(N):
                payload, extra = b"s" * (3 * i), b"more"
                await a.shout("g", payload, extra)
                expected += octets(wire.Shout(i + 1, "g", (payload, extra)))
            got = 0
            async for event in b_events:
                if isinstance(event, trizre.Whisper | trizre.Shout):
                    got += 1
                    if got == 2 * N:
                        break
            a1, b1 = a.statistics(), b.statistics()
    assert delta(a1, a0) == (0, 0, 2 * N, expected)
    assert delta(b1, b0) == (2 * N, expected, 0, 0)
    assert not any(a1.peers_dropped.values()) and not any(b1.peers_dropped.values())


async def test_sends_that_wait_for_room_are_counted_as_those_that_do_not(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """send_hwm=1: every message after the first waits for the reader (the other path)."""
    port = free_udp_port()
    with trio.fail_after(60):
        async with (
            trizre.open_node("a", beacon_port=port, send_hwm=1, **MEMORY) as a,
            trizre.open_node("b", beacon_port=port, **MEMORY) as b,
        ):
            events, a_events = b.events(), a.events()
            await a.wait_for_peer(b.uuid)
            await b.wait_for_peer(a.uuid)
            await b.join("g")
            await next_event(a_events, trizre.Join)
            a0, b0 = a.statistics(), b.statistics()
            for i in range(N):
                await a.whisper(b.uuid, b"%d" % i)
                await a.shout("g", b"%d" % i)
            expected = sum(
                octets(wire.Whisper(1, (b"%d" % i,))) + octets(wire.Shout(1, "g", (b"%d" % i,)))
                for i in range(N)
            )
            got = 0
            async for event in events:
                got += isinstance(event, trizre.Whisper | trizre.Shout)
                if got == 2 * N:
                    break
            assert delta(a.statistics(), a0) == (0, 0, 2 * N, expected)
            assert delta(b.statistics(), b0) == (2 * N, expected, 0, 0)


async def test_a_sequence_gap_from_a_raw_dealer_is_a_drop_for_sequence() -> None:
    with trio.fail_after(30):
        async with node_with_raw_peer(**QUIET) as (node, events, raw):
            hello_octets = octets(wire.Hello(1, raw.endpoint, (), 0, "raw", ()))
            stats = node.statistics()
            assert (stats.messages_in, stats.bytes_in) == (1, hello_octets)
            assert stats.peers["alive"] == 1
            await raw.send(wire.Whisper(7, (b"after a gap",)))  # 2 was due
            exit_ = await next_event(events, trizre.Exit)
            assert exit_.peer == raw.uuid
            stats = node.statistics()
    gap = octets(wire.Whisper(7, (b"after a gap",)))
    assert (stats.messages_in, stats.bytes_in) == (2, hello_octets + gap)
    assert {r: n for r, n in stats.peers_dropped.items() if n} == {"sequence": 1}
    assert stats.peers == {"alive": 0, "evasive": 0, "silent": 0}


async def test_forged_leaves_and_a_throttled_stranger_show_in_a_real_scrape() -> None:
    """Beacons as the discovery hands them over (from chosen sources), then GET /metrics."""
    port = free_udp_port()
    a_opts = {"new_peers_per_source": 0.001, "handshake_timeout": 60.0}
    opts = {**MEMORY, **QUIET, "beacon_port": port, "local_links": False}  # TCP links
    with trio.fail_after(60):
        async with (
            trizre.open_node("a", **opts, **a_opts) as a,
            trizre.open_node("b", **opts) as b,
            trio.open_nursery() as nursery,
        ):
            await a.wait_for_peer(b.uuid)

            def beacon(peer: uuid.UUID, source: str, port: int) -> None:
                sent = wire.Beacon(peer, port)
                a._on_beacon(
                    sent, source, wire.encode_beacon(sent) + source.encode(), trio.current_time()
                )

            beacon(b.uuid, "127.0.0.2", 0)  # b leaving, said by another host: forged
            beacon(b.uuid, "127.0.0.2", 0)
            # A stranger announcing many peers: its burst, then nothing.
            for i in range(70):
                beacon(uuid.UUID(int=i + 1), "127.0.0.3", 1 + i)
            stats = a.statistics()
            assert {r: n for r, n in stats.beacons_ignored.items() if n} == {
                "forged_leave": 2,
                "throttled": 70 - 64,
            }
            assert stats.pending_peers == 64 and a.peers() == [b.uuid]

            registry = CollectorRegistry()
            registry.register(NodeCollector(a))
            registry.register(NodeCollector(b, name="bee"))
            url = await nursery.start(serve_page, MetricsApp(registry), "127.0.0.1", 0)
            web = int(url.rsplit(":", 1)[1].rstrip("/"))
            status, _, body = await http(web, "/metrics")
            assert status.startswith("HTTP/1.1 200")
            samples = parse(body.decode())
            nursery.cancel_scope.cancel()
    ignored = "trizre_node_beacons_ignored_total"
    assert value(samples, ignored, node="a", reason="forged_leave") == 2.0
    assert value(samples, ignored, node="a", reason="throttled") == 6.0
    assert value(samples, ignored, node="a", reason="version") == 0.0  # every reason: bounded
    assert value(samples, ignored, node="bee", reason="forged_leave") == 0.0
    assert value(samples, "trizre_node_peers", node="a", presence="alive") == 1.0
    assert value(samples, "trizre_node_peers", node="a", presence="pending") == 64.0
    dropped = "trizre_node_peers_dropped_total"
    assert value(samples, dropped, node="a", reason="sequence") == 0.0
    assert len([k for k in samples if k[0] == dropped]) == 2 * len(ExitReason)
    for field in ("messages_in", "bytes_in", "messages_out", "bytes_out"):
        got = value(samples, f"trizre_node_{field}_total", node="a")
        assert got == getattr(stats, field) > 0, field
    read = inbox_read()[0]
    for node in ("a", "bee"):
        info = value(samples, "trizre_node_info", node=node)
        assert info == 1.0
        assert value(samples, "trizre_node_info", node=node, inbox_read=read) == 1.0
        assert value(samples, "trizre_node_info", node=node, version=trizre.__version__) == 1.0
    families = {f.name for f in text_string_to_metric_families(generate_latest(registry).decode())}
    assert families == documented("### Node metrics")


async def test_datagrams_on_the_beacon_port_that_are_not_beacons_are_undecodable() -> None:
    port = free_udp_port()
    junk = trio.socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    junk.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
    with junk, trio.fail_after(30):
        async with trizre.open_node("a", beacon_port=port, **FAST) as a:
            assert a.statistics().beacons_ignored["undecodable"] == 0
            for datagram in (b"junk", b"ZRE\x09" + bytes(18)):  # not ZRE, a version none speaks
                await junk.sendto(datagram, ("127.255.255.255", port))
            # A datagram cannot wake a task: polled, bounded by fail_after.
            while a.statistics().beacons_ignored["undecodable"] < 2:  # noqa: ASYNC110
                await trio.sleep(0.01)
            assert a.statistics().beacons_ignored["undecodable"] == 2


async def test_statistics_after_the_node_stopped_are_its_last_counts(
    autojump_clock: trio.testing.MockClock,
) -> None:
    port = free_udp_port()
    with trio.fail_after(60):
        async with trizre.open_node("a", beacon_port=port, **MEMORY) as a:
            events = a.events()
            async with trizre.open_node("b", beacon_port=port, **MEMORY) as b:
                await a.wait_for_peer(b.uuid)
                await a.whisper(b.uuid, b"x")
            await next_event(events, trizre.Exit)  # b said GOODBYE
        stats = a.statistics()
    assert stats.messages_out >= 2 and stats.peers_dropped["goodbye"] == 1
    assert stats.peers == {"alive": 0, "evasive": 0, "silent": 0} and stats.pending_peers == 0


def test_a_node_collector_refuses_what_is_not_a_node_or_a_name() -> None:
    with pytest.raises(TypeError, match="Node"):
        NodeCollector(object())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="non-empty"):
        NodeCollector(object(), name="")  # type: ignore[arg-type]
