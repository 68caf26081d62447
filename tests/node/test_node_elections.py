"""Leader elections on running nodes: ``Node.contest``, ``Node.leader`` and ``Leader`` events.

The state machine itself is tested without sockets in ``test_election.py``;
here nodes on loopback (real beacons, in-memory or TCP links: this file is
in the ``--links tcp`` rerun) and a hand-driven peer on exact virtual times.
"""

from __future__ import annotations

import uuid

import pytest
import trio
import trio.testing

import trizre
from tests.support.nodes import (
    FAST,
    MEMORY,
    free_udp_port,
    memory_raw_peer,
    next_event,
    node_with_group_peer,
)
from trizre import wire
from trizre.sansio._peer import node_id

GROUP = "g"


async def leader_of(events: trizre.EventStream, group: str = GROUP) -> uuid.UUID:
    return (await next_event(events, trizre.Leader, lambda e: e.group == group)).peer


async def test_three_nodes_agree_on_the_lowest_contester_then_on_the_next_when_it_leaves() -> None:
    port = free_udp_port()
    with trio.fail_after(30):
        async with (
            trizre.open_node("a", beacon_port=port, **FAST) as a,
            trizre.open_node("b", beacon_port=port, **FAST) as b,
            trizre.open_node("c", beacon_port=port, **FAST) as c,
        ):
            streams = {n: n.events() for n in (a, b, c)}
            contesters = sorted((a, b), key=lambda n: node_id(n.uuid))
            for node in (a, b):
                await node.contest(GROUP)
            for node in (a, b, c):
                await node.join(GROUP)
            winner = contesters[0].uuid
            for node in (a, b, c):
                for other in (a, b, c):
                    if other is not node:
                        await node.wait_for_peer(other.uuid)
            for node, events in streams.items():
                # Each reports a leader whenever it changes; the last is the lowest contester.
                while node.leader(GROUP) != winner:
                    await leader_of(events)
            assert c.leader(GROUP) == winner  # c does not contest, and knows

            runner_up = contesters[1]
            await contesters[0].leave(GROUP)
            for node in (runner_up, c):
                while node.leader(GROUP) != runner_up.uuid:
                    await leader_of(streams[node])
            assert contesters[0].leader(GROUP) is None  # it left the group


async def test_a_lone_contester_leads_at_once() -> None:
    with trio.fail_after(10):
        async with trizre.open_node("alone", beacon_port=free_udp_port(), **FAST) as node:
            events = node.events()
            await node.contest(GROUP)
            await node.join(GROUP)
            leader = await next_event(events, trizre.Leader)
            assert (leader.peer, leader.name, leader.group) == (node.uuid, "alone", GROUP)
            assert node.leader(GROUP) == node.uuid
            assert node.leader("other") is None


async def test_contest_and_leader_refuse_bad_input_and_a_stopped_node() -> None:
    with trio.fail_after(10):
        async with trizre.open_node("n", beacon_port=free_udp_port(), **FAST) as node:
            with pytest.raises(ValueError, match="empty"):
                await node.contest("")
            with pytest.raises(ValueError, match="255"):
                await node.contest("g" * 256)
            with pytest.raises(TypeError):
                await node.contest(b"g")  # type: ignore[arg-type]
            with pytest.raises(TypeError):
                node.leader(7)  # type: ignore[arg-type]
        with pytest.raises(trio.ClosedResourceError):
            await node.contest(GROUP)
        with pytest.raises(trio.ClosedResourceError):
            node.leader(GROUP)


async def test_a_wave_no_one_finishes_is_declared_at_the_election_timeout(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A peer starts a wave and never sends LEADER (as a zyre peer that miscounted).

    Our node carries the wave; at ``election_timeout`` it declares it won:
    LEADER to the peer, and a Leader event naming it.
    """
    with trio.fail_after(60):
        async with node_with_group_peer(GROUP, election_timeout=3.0) as (node, events, raw):
            start = trio.current_time()
            body = wire.election_body(GROUP, node_id(raw.uuid))
            await raw.send(wire.Elect(raw.next_seq(), body))
            # The only other member is the peer: heard from all, echo to it.
            echo = await raw.receive()
            assert isinstance(echo, wire.Elect) and echo.body == body
            leader = await raw.receive()
            assert isinstance(leader, wire.Leader) and leader.body == body
            assert trio.current_time() - start == 3.0
            event = await next_event(events, trizre.Leader)
            assert (event.peer, event.name) == (raw.uuid, "raw")
            assert node.leader(GROUP) == raw.uuid


async def test_a_winner_decided_before_its_hello_is_announced_when_it_enters(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Ballots can outrun a HELLO: the Leader event waits for the winner's Enter.

    Found by bench_elections.py: a node heard LEADER for a peer whose HELLO
    was still on its way, decided, and never reported the leader.
    """
    with trio.fail_after(60):
        async with trizre.open_node("n", beacon_port=free_udp_port(), **MEMORY) as node:
            events = node.events()
            await node.join(GROUP)
            async with memory_raw_peer(node) as relay, memory_raw_peer(node) as winner:
                await relay.hello(groups=(GROUP,))
                await next_event(events, trizre.Join)
                assert isinstance(await relay.receive(), wire.Hello)
                # The relay carries the winner's wave to its end, before
                # the winner has said HELLO to us.
                body = wire.election_body(GROUP, node_id(winner.uuid))
                await relay.send(wire.Elect(relay.next_seq(), body))
                await relay.send(wire.Leader(relay.next_seq(), body))
                await trio.sleep(1)  # virtual: the node has read both
                assert node.leader(GROUP) == winner.uuid
                await winner.hello(groups=(GROUP,))
                enter = await next_event(events, trizre.Enter)
                assert enter.peer == winner.uuid
                event = await next_event(events, trizre.Leader)
                assert (event.peer, event.group) == (winner.uuid, GROUP)


async def test_ballots_that_name_no_node_change_nothing(
    autojump_clock: trio.testing.MockClock,
) -> None:
    with trio.fail_after(60):
        async with trizre.open_node("n", beacon_port=free_udp_port(), **MEMORY) as node:
            await node.join(GROUP)
            await node.contest(GROUP)
            events = node.events()
            async with memory_raw_peer(node) as raw:
                await raw.hello(groups=(GROUP,))
                await next_event(events, trizre.Join)
                assert isinstance(await raw.receive(), wire.Hello)
                ours = await raw.receive()  # our wave: the peer joined a group we contest
                assert isinstance(ours, wire.Elect)
                for bogus in ("", "not an id", "-" * 60):
                    body = wire.election_body(GROUP, bogus)
                    await raw.send(wire.Elect(raw.next_seq(), body))
                    await raw.send(wire.Leader(raw.next_seq(), body))
                # A ballot for a group we are not in keeps no state (a peer could name many).
                body = wire.election_body("not ours", node_id(raw.uuid))
                await raw.send(wire.Elect(raw.next_seq(), body))
                await trio.sleep(1)  # virtual: everything sent has been read
                assert node.peers() == [raw.uuid]  # the peer is still there
                assert node.leader(GROUP) is None  # and nothing was decided
                assert "not ours" not in node._elections._runs


async def test_a_doubtful_election_is_repaired_and_the_leader_rerun_on_time(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Issue 32 on a node: a LEADER naming another wave, after ours, means a repair.

    The peer wins, then passes on a LEADER for a higher id (as a zyre peer
    passes on the wave *it* carried): two timeouts after the decision the
    node resets the election with a wave below every id, and once that has
    gone round it reruns the leader's wave a tenth of a timeout later, though
    the last LEADER of the reset asked nothing to be sent (the node's timer
    must wake for it all the same).
    """
    with trio.fail_after(60):
        async with node_with_group_peer(GROUP, election_timeout=1.0) as (node, _, raw):
            ours = wire.election_body(GROUP, node_id(raw.uuid))
            await raw.send(wire.Elect(raw.next_seq(), ours))
            assert (await raw.receive()).body == ours  # the echo
            await raw.send(wire.Leader(raw.next_seq(), ours))
            assert (await raw.receive()).body == ours  # passed on: decided
            decided = trio.current_time()
            assert node.leader(GROUP) == raw.uuid
            higher = wire.election_body(GROUP, "F" * 32)
            await raw.send(wire.Leader(raw.next_seq(), higher))
            reset = await raw.receive()
            assert isinstance(reset, wire.Elect)
            assert trio.current_time() - decided == 2.0
            await raw.send(wire.Elect(raw.next_seq(), reset.body))  # its echo
            assert isinstance(await raw.receive(), wire.Leader)  # the reset's
            await raw.send(wire.Leader(raw.next_seq(), reset.body))
            went_round = trio.current_time()
            rerun = await raw.receive()
            assert isinstance(rerun, wire.Elect) and rerun.body == ours
            assert trio.current_time() - went_round == pytest.approx(0.1)
            assert node.leader(GROUP) == raw.uuid
