"""Binary Star over ZRE on loopback: start-up, failover, no fail-back, split brain."""

from __future__ import annotations

import functools
from typing import Any

import attrs
import pytest
import trio

import trizre
from tests.support.bstar import (
    HEARTBEAT,
    active_primary,
    answer,
    client_node,
    run_server,
    settled_pair,
    state_frames,
)
from tests.support.nodes import FAST, free_udp_port, outlive_node, wait_logged
from trizre import patterns
from trizre.patterns import RetryPolicy, State
from trizre.patterns import _protocol as patterns_protocol
from trizre.patterns._bstar import BinaryStarServer
from trizre.patterns._bstar_fsm import BinaryStarFSM


async def test_pair_settles_primary_active_backup_passive() -> None:
    port = free_udp_port()
    with trio.fail_after(10):
        async with settled_pair(port) as (_, primary, backup):
            await primary.star.state.wait_value(State.ACTIVE)
            async with client_node(
                port, patterns.open_binary_star_client, "p", "b", RetryPolicy(0.5, 4)
            ) as client:
                for i in range(5):
                    assert await client.request(str(i).encode()) == (b"ok:%d" % i,)
                assert client.current == "p"
                assert client.failovers == 0
            assert primary.star.server.executed == 5
            assert backup.star.server.executed == 0


async def test_passive_server_refuses_so_clients_move_on() -> None:
    port = free_udp_port()
    with trio.fail_after(10):
        async with settled_pair(port) as (_, primary, backup):
            # A client that believes the backup is the primary.
            # Attempts of 30 s within fail_after(10): only moving on at once passes.
            async with client_node(
                port, patterns.open_binary_star_client, "b", "p", RetryPolicy(30.0, 4)
            ) as client:
                assert await client.request(b"x") == (b"ok:x",)
                assert client.current == "p"  # refused by b, it moved on
                assert backup.star.server.refused >= 1
                assert backup.star.server.executed == 0
            assert primary.star.state.value is State.ACTIVE


async def test_failover_with_requests_in_flight_and_no_fail_back() -> None:
    port = free_udp_port()
    n = 40
    with trio.fail_after(20):
        async with (
            settled_pair(port) as (nursery, primary, backup),
            client_node(
                port, patterns.open_binary_star_client, "p", "b", RetryPolicy(0.5, 10)
            ) as client,
        ):
            replies: dict[int, tuple[bytes, ...]] = {}

            async def ask(i: int) -> None:
                replies[i] = await client.request(str(i).encode())

            async with trio.open_nursery() as requests:
                for i in range(n // 2):
                    requests.start_soon(ask, i)
                await primary.kill()  # the primary dies with requests in flight
                for i in range(n // 2, n):
                    requests.start_soon(ask, i)
            assert replies == {i: (b"ok:%d" % i,) for i in range(n)}
            assert backup.star.state.value is State.ACTIVE
            assert client.current == "b"
            taken_over = [t for _, t in backup.star.transitions if t.new_state is State.ACTIVE]
            assert len(taken_over) == 1 and taken_over[0].event.name == "CLIENT_REQUEST"

            # The old primary comes back: it does not take over again.
            restarted = await nursery.start(run_server, port, "p", True, "b")
            await restarted.star.state.wait_value(State.PASSIVE)
            assert await client.request(b"after") == (b"ok:after",)
            assert backup.star.state.value is State.ACTIVE
            assert restarted.star.server.executed == 0


async def test_dual_active_is_fatal() -> None:
    """A partner that has heard us ACTIVE and claims to be active too: split brain."""
    port = free_udp_port()
    with trio.fail_after(10):
        async with trizre.open_node("impostor", beacon_port=port, **FAST) as impostor:
            with pytest.raises(patterns.SplitBrain):
                async with active_primary(port, impostor) as (node, _):
                    await impostor.whisper(
                        node.uuid, *state_frames(State.ACTIVE, seen=State.ACTIVE)
                    )
                    await trio.sleep_forever()


async def test_dual_active_claims_from_a_partner_that_cannot_hear_us_are_fatal() -> None:
    """ACTIVE heartbeats that never saw us ACTIVE, for a failover timeout: split brain."""
    port = free_udp_port()
    with trio.fail_after(10):
        async with trizre.open_node("impostor", beacon_port=port, **FAST) as impostor:
            with pytest.raises(patterns.SplitBrain):
                async with active_primary(port, impostor) as (node, _):
                    while True:  # deaf: it last heard the primary as PRIMARY
                        await impostor.whisper(
                            node.uuid, *state_frames(State.ACTIVE, State.PRIMARY)
                        )
                        await trio.sleep(HEARTBEAT)


async def test_a_stale_active_heartbeat_is_not_split_brain(caplog: Any) -> None:
    """Sent before our takeover (it saw us PASSIVE) and delivered late: ignored, said."""
    port = free_udp_port()
    with trio.fail_after(10):
        async with (
            trizre.open_node("impostor", beacon_port=port, **FAST) as impostor,
            active_primary(port, impostor) as (node, star),
        ):
            await impostor.whisper(node.uuid, *state_frames(State.ACTIVE, seen=State.PASSIVE))
            await impostor.whisper(node.uuid, *state_frames(State.BACKUP, seen=State.ACTIVE))
            # Delivered in order after both heartbeats: answered, so still ACTIVE.
            request = patterns_protocol.Request(7, "", (b"x",))
            await impostor.whisper(node.uuid, *patterns_protocol.encode(request))
            async for event in impostor.events():
                if isinstance(event, trizre.Whisper):
                    reply = patterns_protocol.decode(event.frames)
                    if isinstance(reply, patterns_protocol.Reply):
                        break
            assert reply == patterns_protocol.Reply(7, 200, (b"ok:x",))
            assert star.state.value is State.ACTIVE
            await wait_logged(caplog, "says ACTIVE too, without having heard this server ACTIVE")


async def test_a_partner_on_envelope_version_1_gets_its_state_in_version_1() -> None:
    """A pair upgraded one server at a time: each must still hear the other's heartbeats.

    A version-1 server drops version-2 STATE; were it sent so, each would
    take the other for silent and both would go ACTIVE.
    """
    port = free_udp_port()
    with trio.fail_after(10):
        async with (
            trizre.open_node("impostor", beacon_port=port, **FAST) as impostor,
            active_primary(port, impostor) as (node, _),
        ):
            events = impostor.events()
            await impostor.whisper(
                node.uuid, *state_frames(State.PASSIVE, seen=State.ACTIVE, version=1)
            )
            versions: list[int] = []
            async for event in events:  # three heartbeats: the first may have been in flight
                if isinstance(event, trizre.Whisper) and event.peer == node.uuid:
                    message = patterns_protocol.decode(event.frames)
                    if isinstance(message, patterns_protocol.State):
                        versions.append(message.version)
                        if len(versions) == 3:
                            break
            assert versions[1:] == [1, 1], versions


async def test_server_configuration_errors() -> None:
    port = free_udp_port()
    async with trizre.open_node("p", beacon_port=port, **FAST) as node:
        with pytest.raises(ValueError, match="own partner"):
            async with patterns.open_binary_star_server(node, answer, primary=True, partner="p"):
                pass
        with pytest.raises(ValueError, match="heartbeat"):
            async with patterns.open_binary_star_server(
                node, answer, primary=True, partner="b", heartbeat=0
            ):
                pass
        with pytest.raises(ValueError, match="different names"):
            async with patterns.open_binary_star_client(node, "x", "x"):
                pass


def _drop_heartbeats(node: trizre.Node) -> None:
    """From now on the node's STATE whispers are lost, as on a stalled TCP link."""
    whisper = node.whisper

    async def lossy(peer: Any, *frames: bytes) -> None:
        if isinstance(patterns_protocol.decode(frames), patterns_protocol.State):
            return
        await whisper(peer, *frames)

    node.whisper = lossy  # type: ignore[method-assign]


async def test_a_partner_heard_without_heartbeats_is_not_voted_out() -> None:
    """Heartbeats lost but the active's node still heard (beacons): no second ACTIVE."""
    port = free_udp_port()
    with trio.fail_after(10):
        async with settled_pair(port, beacons_refresh=True) as (_, primary, backup):
            _drop_heartbeats(primary.node)
            # Past the expiry the heartbeats alone would give: a vote would win.
            await trio.sleep_until(backup.star._fsm.peer_expiry + HEARTBEAT)
            async with client_node(
                port, patterns.open_lazy_pirate_client, "b", RetryPolicy(0.3, 2)
            ) as client:
                with pytest.raises(patterns.RequestAbandoned):
                    await client.request(b"vote")  # refused (503) twice
            assert backup.star.state.value is State.PASSIVE
            assert backup.star.server.refused >= 2 and backup.star.server.executed == 0
            assert primary.star.state.value is State.ACTIVE


async def test_a_server_stopped_while_its_node_runs_lets_its_partner_take_over() -> None:
    """Stopping the server (not the node) leaves trizre/bstar: the vote then wins."""
    port = free_udp_port()
    with trio.fail_after(10):
        async with (
            trio.open_nursery() as nursery,
            trizre.open_node("p", beacon_port=port, beacons_refresh=True, **FAST) as p_node,
        ):
            backup = await nursery.start(
                functools.partial(run_server, beacons_refresh=True), port, "b", False, "p"
            )
            async with patterns.open_binary_star_server(
                p_node, answer, primary=True, partner="b", heartbeat=HEARTBEAT
            ) as star:
                await backup.star.state.wait_value(State.PASSIVE)
                assert star.state.value is State.ACTIVE
            # p's node goes on beaconing; its server has left the group.
            async with client_node(
                port, patterns.open_lazy_pirate_client, "b", RetryPolicy(0.3, 10)
            ) as client:
                assert await client.request(b"vote") == (b"ok:vote",)
            assert backup.star.state.value is State.ACTIVE
            nursery.cancel_scope.cancel()


async def test_a_server_whose_node_stopped_first_ends_cleanly() -> None:
    """Heartbeats that outlive the node: nothing to send them through, not an error."""
    port = free_udp_port()
    ended: list[patterns.BinaryStarServer] = []

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            async with trizre.open_node("p", beacon_port=port, **FAST) as node:
                block = patterns.open_binary_star_server(
                    node, answer, primary=True, partner="b", heartbeat=HEARTBEAT
                )
                await nursery.start(outlive_node, block, ended)
            await trio.sleep(3 * HEARTBEAT)  # heartbeats fall due after the node stopped
            nursery.cancel_scope.cancel()
    assert len(ended) == 1


async def test_a_server_started_twice_stops_and_the_running_pair_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A second primary by mistake: it stops with an error naming the cause, not the network."""
    port = free_udp_port()
    with trio.fail_after(15):
        async with settled_pair(port) as (_, primary, backup):
            await primary.star.state.wait_value(State.ACTIVE)
            with pytest.raises(patterns.DuplicateServer, match="started twice"):
                async with (
                    trizre.open_node("p", beacon_port=port, **FAST) as again,
                    patterns.open_binary_star_server(
                        again, answer, primary=True, partner="b", heartbeat=HEARTBEAT
                    ),
                ):
                    await trio.sleep_forever()
            # The running one, having taken a side, only says so (here a plain
            # node of its name stays long enough for it to hear of it).
            async with trizre.open_node("p", beacon_port=port, **FAST):
                await wait_logged(caplog, "a server started twice?")
            async with client_node(
                port, patterns.open_binary_star_client, "p", "b", RetryPolicy(1.0, 4)
            ) as client:
                assert await client.request(b"x") == (b"ok:x",)
            assert primary.star.state.value is State.ACTIVE
            assert backup.star.state.value is State.PASSIVE


# ------------------------------------------- a starting primary and handshakes


@attrs.define
class _HandshakingNode:
    """What a Binary Star server's client vote asks of its node, scripted."""

    pending: list[object]
    name: str = "primary"
    tracer: None = None
    config: trizre.NodeConfig = attrs.field(
        factory=lambda: trizre.NodeConfig(name="primary", handshake_timeout=5.0)
    )

    def pending_peers(self) -> list[object]:
        return self.pending

    def peers_by_group(self, group: str) -> list[object]:
        return []  # its partner has not entered yet


async def test_a_starting_primary_waits_for_a_peer_in_its_handshake(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """It may be the partner, ACTIVE since a failover: a vote now would make two ACTIVEs.

    make chaos: under 20 % loss a restarted primary's handshake with its
    backup took 3 s, and a client voted it ACTIVE at 2.2 s.
    """
    node = _HandshakingNode(pending=["someone"])
    start = trio.current_time()
    fsm = BinaryStarFSM(primary=True, heartbeat=1.0, now=start)
    star = BinaryStarServer(node, fsm, "backup")  # type: ignore[arg-type]
    await trio.sleep(2.5)  # past the failover timeout (2 s)
    assert star._gate(None) == patterns_protocol.Status.UNAVAILABLE  # type: ignore[arg-type]
    assert star.state.value is State.PRIMARY
    node.pending = []  # the peer entered, and it was not the partner
    await trio.sleep(2.0)  # the expiry the wait set runs out
    assert star._gate(None) is None  # type: ignore[arg-type]
    assert star.state.value is State.ACTIVE


async def test_a_starting_primary_waits_for_handshakes_only_so_long(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Forged beacons keep a peer pending for ever: the wait ends after failover + handshake."""
    node = _HandshakingNode(pending=["forged"])
    start = trio.current_time()
    star = BinaryStarServer(node, BinaryStarFSM(primary=True, now=start), "backup")  # type: ignore[arg-type]
    await trio.sleep(6.9)
    assert star._gate(None) == patterns_protocol.Status.UNAVAILABLE  # type: ignore[arg-type]
    await trio.sleep(2.0)  # 8.9 s: past 2 + 5, and past the expiry the last wait set
    assert star._gate(None) is None  # type: ignore[arg-type]
    assert star.state.value is State.ACTIVE
