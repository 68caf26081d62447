"""The monitor behind ``trizre watch``: status announcements and the snapshot, on virtual time."""

from __future__ import annotations

import pytest
import trio
import trio.testing

import trizre
from tests.support.nodes import MEMORY, free_udp_port
from tests.support.watch import (
    echo,
    say_active,
    start_primary,
    until,
    wall,
    watched_raw_pair,
    watching,
)
from trizre import patterns, wire
from trizre.cli._monitor import Monitor, open_monitor
from trizre.patterns._status import (
    BSTAR_GROUP,
    MAGIC,
    MAX_STATUS_BYTES,
    STATUS_GROUP,
    decode_status,
    encode_status,
)


def test_status_codec_round_trip_and_junk() -> None:
    frames = encode_status({"key": "service:echo", "kind": "service", "service": "echo"})
    assert frames[0] == MAGIC
    assert decode_status(frames) == {"key": "service:echo", "kind": "service", "service": "echo"}
    assert decode_status([MAGIC]) is None
    assert decode_status([b"other", frames[1]]) is None
    assert decode_status([MAGIC, b"\xff\xfe"]) is None
    assert decode_status([MAGIC, b"[1, 2]"]) is None
    assert decode_status([MAGIC, b'{"key": 1, "kind": "x"}']) is None
    assert decode_status([MAGIC, b" " * (MAX_STATUS_BYTES + 1)]) is None
    with pytest.raises(ValueError, match="key"):
        encode_status({"kind": "service"})
    with pytest.raises(ValueError, match="exceeds"):
        encode_status({"key": "k", "kind": "k", "pad": "x" * MAX_STATUS_BYTES})


async def test_a_late_watcher_sees_peers_services_and_a_pair(
    autojump_clock: trio.testing.MockClock,
) -> None:
    port = free_udp_port()
    with trio.fail_after(60):
        async with (
            trizre.open_node("worker", beacon_port=port, headers={"X-ROLE": "w"}, **MEMORY) as w,
            patterns.open_server(w, echo, service="echo"),
            trizre.open_node("p", beacon_port=port, **MEMORY) as p,
            trizre.open_node("b", beacon_port=port, **MEMORY) as b,
            patterns.open_binary_star_server(p, echo, primary=True, partner="b") as star_p,
            patterns.open_binary_star_server(b, echo, primary=False, partner="p"),
        ):
            await star_p.state.wait_value(patterns.State.ACTIVE)
            await trio.sleep(5)  # every server has announced itself, to nobody
            async with watching(port) as (_, monitor):
                snap = await until(monitor, lambda s: bool(s["services"]) and len(s["pairs"]) == 1)
                assert {peer["name"] for peer in snap["peers"]} == {"worker", "p", "b"}
                worker = next(peer for peer in snap["peers"] if peer["name"] == "worker")
                assert worker["headers"] == {"X-ROLE": "w"}
                assert worker["groups"] == ["echo"]
                assert worker["presence"] == "alive"
                assert snap["groups"] == {"echo": ["worker"]}
                assert snap["services"] == [
                    {"service": "echo", "workers": [{"uuid": str(w.uuid), "name": "worker"}]}
                ]
                pair = snap["pairs"][0]
                assert (pair["primary"], pair["backup"]) == ("p", "b")
                assert [(s["name"], s["state"]) for s in pair["servers"]] == [
                    ("p", "ACTIVE"),
                    ("b", "PASSIVE"),
                ]
                assert pair["last_failover"] is None
                assert STATUS_GROUP not in snap["groups"]
                # The pair's own group is trizre's, not the application's: the
                # pair is shown as a pair.
                assert BSTAR_GROUP not in snap["groups"]
                p_view = next(peer for peer in snap["peers"] if peer["name"] == "p")
                assert p_view["groups"] == []


async def test_failover_and_a_worker_leaving_are_seen_and_logged(
    autojump_clock: trio.testing.MockClock,
) -> None:
    port = free_udp_port()
    with trio.fail_after(120):
        async with (
            watching(port) as (watcher, monitor),
            trizre.open_node("b", beacon_port=port, **MEMORY) as b,
            patterns.open_binary_star_server(b, echo, primary=False, partner="p"),
            trizre.open_node("worker", beacon_port=port, **MEMORY) as w,
        ):
            async with trio.open_nursery() as nursery:
                primary_scope = start_primary(nursery, port)
                async with patterns.open_server(w, echo, service="echo"):
                    await until(monitor, lambda s: bool(s["services"]))
                    await until(
                        monitor,
                        lambda s: (
                            bool(s["pairs"])
                            and [x["state"] for x in s["pairs"][0]["servers"]]
                            == ["ACTIVE", "PASSIVE"]
                        ),
                    )
                    primary_scope.cancel()  # the primary dies
                    # the backup takes over when a client asks (Binary Star's vote)
                    async with patterns.open_binary_star_client(watcher, "p", "b") as client:
                        assert await client.request(b"hi") == (b"hi",)
                    snap = await until(
                        monitor,
                        lambda s: bool(s["pairs"]) and s["pairs"][0]["last_failover"] is not None,
                    )
                    pair = snap["pairs"][0]
                    assert pair["last_failover"]["server"] == "b"
                    assert pair["last_failover"]["event"] == "CLIENT_REQUEST"
                    assert "silent" in pair["last_failover"]["why"]
                    # The primary that left stays in the row, down, with when it was heard.
                    assert [(x["name"], x["state"]) for x in pair["servers"]] == [
                        ("p", "down"),
                        ("b", "ACTIVE"),
                    ]
                    assert pair["servers"][0]["last_heard"] is not None
                    assert pair["health"]["status"] == "degraded"
                    assert pair["health"]["serving"] == "b"
                    assert pair["health"]["since"] <= pair["last_failover"]["time"]
                # the worker's block ended: it left the group, so it serves nothing
                snap = await until(monitor, lambda s: not s["services"])
                # (the view reads the node's tables; the log, its events: a moment later)
                await until(monitor, lambda s: "worker left echo" in str(s["log"]))
            texts = [entry["text"] for entry in monitor.log()]
            assert "worker serves echo" in texts
            assert "b (backup) is ACTIVE" in texts
            assert "worker left echo" in texts
            seqs = [entry["seq"] for entry in monitor.log()]
            assert seqs == sorted(seqs) and monitor.log(seqs[-1]) == []


async def test_monitor_bounds_its_log_and_rejects_bad_input(
    autojump_clock: trio.testing.MockClock,
) -> None:
    port = free_udp_port()
    with trio.fail_after(60):
        async with trizre.open_node("watcher", beacon_port=port, **MEMORY) as watcher:
            with pytest.raises(ValueError, match="log_size"):
                Monitor(watcher, log_size=0)
            with pytest.raises(ValueError, match="refresh"):
                async with open_monitor(watcher, refresh=0):
                    pass
            async with open_monitor(watcher, log_size=3) as monitor:
                for i in range(5):
                    async with trizre.open_node(f"n{i}", beacon_port=port, **MEMORY):
                        await until(monitor, lambda s, i=i: f"n{i}" in str(s["peers"]))
                assert len(monitor.log()) == 3


async def test_an_active_server_that_died_silently_is_shown_down(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """kill -9 of the active: it stays present until it expires, its last word ACTIVE.

    Its partner's takeover came after the watcher last heard it, so the row
    shows it down, one ACTIVE, and the pair degraded since the takeover.
    """
    port = free_udp_port()
    with trio.fail_after(60):
        async with watched_raw_pair(port) as (monitor, primary, backup):
            await say_active(primary, "primary", "b", wall())
            await trio.sleep(1.5)  # the primary is killed: it says nothing more
            took_over = wall()
            await say_active(backup, "backup", "p", took_over)
            snap = await until(
                monitor, lambda s: bool(s["pairs"]) and len(s["pairs"][0]["servers"]) == 2
            )
            pair = snap["pairs"][0]
            servers = {s["name"]: s for s in pair["servers"]}
            assert (servers["p"]["state"], servers["b"]["state"]) == ("down", "ACTIVE")
            assert servers["p"]["claims"] == "ACTIVE"
            # An in-process peer counts as heard while present (Node.peer_last_heard):
            # here, up to the takeover, and not after it.
            assert servers["p"]["last_heard"] == took_over
            assert servers["b"]["since"] == took_over
            assert pair["health"]["status"] == "degraded"
            assert pair["health"]["since"] == took_over


async def test_two_servers_heard_claiming_active_are_a_split_brain(
    autojump_clock: trio.testing.MockClock,
) -> None:
    port = free_udp_port()
    with trio.fail_after(60):
        async with watched_raw_pair(port) as (monitor, primary, backup):
            await say_active(primary, "primary", "b", wall())
            await trio.sleep(1.5)
            await say_active(backup, "backup", "p", wall())
            await trio.sleep(3)  # beyond the margin, the primary still talks
            await primary.send(wire.Ping(primary.next_seq()))
            snap = await until(
                monitor,
                lambda s: bool(s["pairs"]) and s["pairs"][0]["health"]["status"] == "split brain",
            )
            assert [s["state"] for s in snap["pairs"][0]["servers"]] == ["ACTIVE", "ACTIVE"]
