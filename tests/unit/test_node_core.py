"""The node's rules (trizre.sansio.node_core), sans I/O: who is a peer, at exact times.

Every hostile input the node meets is played here against the core alone:
forged leaving beacons, spoofed sources, oversize frames, the pending
bound, the new-peer budgets.  A small interpreter stands in for the shell:
it makes a "link" (a list of sent frames) for each Connect and keeps what
the core asked for.  Times are plain floats: nothing sleeps or reads a clock.
"""

from __future__ import annotations

import math
import uuid

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.node_core import (
    EVASIVE,
    EXPIRED,
    HANDSHAKE,
    HOST,
    KEY_A,
    KEY_B,
    ME,
    NET,
    OTHER,
    OUR_KEY,
    PEER,
    Session,
    entered,
    hello,
    make,
    sent,
    text,
)
from trizre import Enter, Exit, Join, Leader, Leave, Whisper, wire
from trizre.sansio._gossip import Deliver, Forget
from trizre.sansio._peer import PeerLimits, route
from trizre.sansio.node_core import (
    MISSES_KEPT,
    SOURCE_BURST,
    Connect,
    CoreRules,
    NodeCore,
    WakeAt,
)
from trizre.trace._contract import ExitReason
from trizre.wire import OVERSIZE


def test_a_new_peers_beacon_links_to_it_and_says_hello_first() -> None:
    shell = make()
    beacon = wire.Beacon(PEER, 5000)
    assert wire.encode_beacon(beacon) == b"ZRE\x01" + PEER.bytes + b"\x13\x88"
    (session,) = shell.beacon(beacon, HOST, 0.0)
    assert shell.core.peers == {PEER: session}
    assert shell.core.by_route == {b"\x01" + PEER.bytes: session}
    assert session.protocol.endpoint == f"tcp://{HOST}:5000"
    # Our HELLO went first: AA A1, HELLO (1), version 2, sequence 1.
    assert session.sent[0][0][:6] == b"\xaa\xa1\x01\x02\x00\x01"
    assert shell.wakes == [HANDSHAKE]  # its handshake deadline
    assert shell.core.unready == {PEER: session}


def test_a_known_beacon_costs_nothing_after_the_first() -> None:
    shell = make()
    shell.beacon(wire.Beacon(PEER, 5000), HOST, 0.0)
    key = wire.encode_beacon(wire.Beacon(PEER, 5000)) + HOST.encode()
    assert key in shell.core.quiet
    assert shell.core.on_beacon(wire.Beacon(PEER, 5000), HOST, key, 1.0) == ()


def test_our_own_beacon_other_versions_and_curve_beacons_are_ignored() -> None:
    shell = make()
    assert shell.beacon(wire.Beacon(ME, 5000), HOST, 0.0) == []
    assert shell.beacon(wire.Beacon(PEER, 5000, version=3), HOST, 0.0) == []  # 43/ZRE
    assert shell.beacon(wire.Beacon(PEER, 5000, 3, KEY_A), HOST, 0.0) == []  # CURVE
    assert shell.core.peers == {}


def test_a_curve_node_ignores_beacons_without_a_key_and_keys_not_allowed() -> None:
    shell = make(curve=OUR_KEY, curve_allow=frozenset({KEY_A}))
    assert shell.beacon(wire.Beacon(PEER, 5000, version=3), HOST, 0.0) == []  # a downgrade
    assert shell.beacon(wire.Beacon(OTHER, 5000, 3, KEY_B), HOST, 0.0) == []  # not allowed
    (session,) = shell.beacon(wire.Beacon(PEER, 5000, 3, KEY_A), HOST, 0.0)
    assert session.protocol.key == text(KEY_A)
    assert session.protocol.route == route(PEER, text(KEY_A))


def test_a_beacon_outside_our_network_links_to_nothing() -> None:
    shell = make()
    assert shell.beacon(wire.Beacon(PEER, 5000), "10.0.0.7", 0.0) == []
    assert shell.refused == 1 and shell.core.peers == {}


# ------------------------------------------------------- leaving beacons


def test_a_leaving_beacon_pings_and_ends_a_silent_peer_one_second_later() -> None:
    shell = make()
    session = entered(shell)
    session.sent.clear()
    shell.beacon(wire.Beacon(PEER, 0), HOST, 10.0)
    assert sent(session) == [wire.Ping(2)]  # numbered after our HELLO (1)
    assert shell.wakes[-1] == 11.0
    shell.poll(10.999)
    assert shell.drops == []
    shell.poll(11.0)
    assert shell.drops == [(PEER, ExitReason.BEACON)]
    assert Exit(PEER, "bob") in shell.published
    assert shell.core.peers == {} and shell.core.by_route == {}


def test_a_peer_that_answers_the_ping_of_a_leaving_beacon_stays() -> None:
    shell = make()
    session = entered(shell)
    shell.beacon(wire.Beacon(PEER, 0), HOST, 10.0)
    shell.frames(session, wire.PingOk(2), 10.2)
    shell.poll(11.0)
    assert shell.drops == [] and PEER in shell.core.peers


def test_a_leaving_beacon_from_another_host_is_ignored() -> None:
    shell = make()
    session = entered(shell)
    session.sent.clear()
    shell.beacon(wire.Beacon(PEER, 0), f"{NET}66", 10.0)  # a forger on our network
    assert session.sent == [] and PEER not in shell.core.leave_hints
    shell.poll(20.0)
    assert shell.drops == []


def test_a_leaving_beacon_with_another_key_is_ignored() -> None:
    shell = make(curve=OUR_KEY)
    (session,) = shell.beacon(wire.Beacon(PEER, 5000, 3, KEY_A), HOST, 0.0)
    shell.frames(session, hello(key=KEY_A), 0.0)
    assert session.protocol.ready
    session.sent.clear()
    shell.beacon(wire.Beacon(PEER, 0, 3, KEY_B), HOST, 10.0)  # its host, not its key
    assert session.sent == [] and PEER not in shell.core.leave_hints
    shell.beacon(wire.Beacon(PEER, 0, 3, KEY_A), HOST, 10.0)  # its own
    assert sent(session) == [wire.Ping(2)]


# ------------------------------------------------------------- budgets


def test_one_source_brings_a_burst_then_its_rate_of_new_peers() -> None:
    shell = make(new_peers_per_source=20.0)
    forged = [uuid.UUID(int=1000 + i) for i in range(SOURCE_BURST + 30)]
    for peer in forged:
        shell.beacon(wire.Beacon(peer, 5000), HOST, 0.0)
    assert len(shell.core.peers) == SOURCE_BURST and shell.refused == 30
    for peer in forged[SOURCE_BURST:]:
        shell.beacon(wire.Beacon(peer, 5000), HOST, 1.0)  # one second: 20 more
    assert len(shell.core.peers) == SOURCE_BURST + 20


def test_spoofed_sources_share_one_budget() -> None:
    shell = make(max_pending_peers=100, handshake_timeout=5.0, new_peers_per_source=20.0)
    # total: a burst of max(64, 100) = 100, then max(20, 100 / 5) = 20 a second
    for i in range(150):
        shell.beacon(wire.Beacon(uuid.UUID(int=5000 + i), 5000), f"{NET}{i % 250}", 0.0)
    assert len(shell.core.peers) == 100 and shell.refused == 50
    for i in range(150, 200):
        shell.beacon(wire.Beacon(uuid.UUID(int=5000 + i), 5000), f"{NET}{i % 250}", 0.5)
    assert len(shell.core.peers) == 100  # the pending bound holds...
    assert shell.refused == 50 + 40  # ... and half a second bought 10 new ones


def test_at_most_max_pending_peers_wait_for_hello_the_oldest_goes() -> None:
    shell = make(max_pending_peers=4)
    peers = [uuid.UUID(int=1 + i) for i in range(6)]
    for i, peer in enumerate(peers):
        shell.beacon(wire.Beacon(peer, 5000), HOST, float(i))
    assert list(shell.core.unready) == peers[2:]
    assert shell.drops == [(peers[0], ExitReason.HANDSHAKE), (peers[1], ExitReason.HANDSHAKE)]
    assert shell.core.handshake_for(peers[0]) == 2 * HANDSHAKE  # it missed one


def test_handshake_misses_double_the_window_up_to_expired_and_are_bounded() -> None:
    shell = make()
    core = shell.core
    for misses in range(8):
        (session,) = shell.beacon(wire.Beacon(PEER, 5000 + misses), HOST, 100.0 * misses)
        assert core.handshake_for(PEER) == min(HANDSHAKE * 2**misses, EXPIRED)
        shell.apply(core.remove(session, ExitReason.HANDSHAKE, 100.0 * misses + 1), 0.0)
    entered(shell, now=1000.0)  # a HELLO at last: its count starts again
    assert PEER not in core.missed_handshakes
    for i in range(MISSES_KEPT + 10):
        core._missed_handshake(uuid.UUID(int=i + 1))
    assert len(core.missed_handshakes) == MISSES_KEPT


# ------------------------------------------------------------- strangers


def test_oversize_from_a_stranger_is_dropped_and_from_a_peer_ends_it() -> None:
    shell = make(limits=PeerLimits(message_size=100))
    assert shell.core.on_stranger([b"\x01" + PEER.bytes, OVERSIZE], 0.0) is None
    session = entered(shell)
    # What the inbox hands on for a message over the limit (libzmq or LocalInbox).
    events = session.protocol.receive([session.protocol.route, OVERSIZE], 1.0)
    shell.apply(shell.core.received(session, events, 1.0), 1.0)
    assert shell.drops == [(PEER, ExitReason.LIMITS)]
    assert Exit(PEER, "bob") in shell.published


def test_a_hello_from_a_stranger_makes_a_peer_that_answers() -> None:
    shell = make()
    frames = [b"\x01" + PEER.bytes, *wire.encode(hello())]
    connect = shell.core.on_stranger(frames, 0.0)
    assert connect == Connect(PEER, f"tcp://{HOST}:5000", answering=True)
    assert shell.core.on_stranger([b"\x01" + PEER.bytes, *wire.encode(wire.Ping(1))], 0.0) is None


def test_a_curve_hello_for_a_uuid_known_under_another_key_is_refused() -> None:
    shell = make(curve=OUR_KEY)
    shell.beacon(wire.Beacon(PEER, 5000, 3, KEY_A), HOST, 0.0)
    spoof = [route(PEER, text(KEY_B)), *wire.encode(hello(key=KEY_B))]
    assert shell.core.on_stranger(spoof, 0.0) is None
    own = [route(PEER, text(KEY_A)), *wire.encode(hello(key=KEY_A))]
    assert shell.core.on_stranger(own, 0.0) == Connect(
        PEER, f"tcp://{HOST}:5000", KEY_A, None, True
    )


# ---------------------------------------------------------------- gossip


def test_gossip_links_to_tuples_and_forgets_peers_that_never_greeted() -> None:
    shell = make(gossiping=True)
    core = shell.core
    assert core.on_gossip(Deliver("not a uuid", "tcp://x:1"), 0.0) == ()
    assert core.on_gossip(Deliver(ME.hex, "tcp://x:1"), 0.0) == ()
    assert core.on_gossip(Deliver(PEER.hex, "udp://x:1"), 0.0) == ()  # not tcp:// or ipc://
    assert core.on_gossip(Deliver(PEER.hex, "tcp://h:1|" + text(KEY_A)), 0.0) == ()  # CURVE
    (session,) = shell.apply(core.on_gossip(Deliver(PEER.hex, "tcp://10.9.9.9:1"), 0.0), 0.0)
    assert session.protocol.endpoint == "tcp://10.9.9.9:1"  # gossip crosses subnets
    shell.apply(core.on_gossip(Forget(PEER.hex), 1.0), 1.0)
    assert shell.drops == [(PEER, ExitReason.HANDSHAKE)]


# ---------------------------------------------------------------- groups


def test_groups_are_records_kept_by_joins_leaves_and_exits() -> None:
    shell = make()
    core = shell.core
    session = entered(shell, groups=("a", "b"))
    assert shell.published[:3] == [
        Enter(PEER, "bob", (), f"tcp://{HOST}:5000"),
        Join(PEER, "bob", "a"),
        Join(PEER, "bob", "b"),
    ]
    assert list(core.members("a")) == [PEER]
    shell.frames(session, wire.Leave(2, "a", 2), 1.0)
    assert shell.published[-1] == Leave(PEER, "bob", "a")
    assert list(core.members("a")) == [] and "a" not in core.groups
    shell.apply(core.remove(session, ExitReason.EXPIRED, 2.0), 2.0)
    assert core.groups == {}


def test_a_groups_members_are_the_peer_tables_sessions() -> None:
    """What a SHOUT sends to: each member's entry in the peer table, no UUID looked up.

    Kept through JOIN, LEAVE, a peer that left and one that came back under
    its UUID with a new session.
    """
    shell = make()
    core = shell.core

    def members(group: str) -> list[Session]:
        return list(core.groups[group].members.values()) if group in core.groups else []

    session = entered(shell, groups=("a",))
    other = entered(shell, OTHER, groups=("a", "b"), port=5001)
    assert members("a") == [session, other]
    assert members("b") == [other] and members("c") == []
    shell.frames(session, wire.Join(2, "b", 2), 1.0)
    assert members("b") == [other, session]
    shell.frames(other, wire.Leave(2, "b", 2), 1.0)
    assert members("b") == [session]
    shell.apply(core.remove(session, ExitReason.EXPIRED, 2.0), 2.0)
    assert members("a") == [other] and members("b") == []
    again = entered(shell, groups=("a",), now=3.0)
    assert again is not session
    assert members("a") == [other, again]
    for group in core.groups.values():
        assert all(core.peers[uuid] is peer for uuid, peer in group.members.items())


def test_joining_tells_every_peer_and_a_contested_group_elects() -> None:
    shell = make()
    core = shell.core
    session = entered(shell, groups=("g",))
    session.sent.clear()
    core.elections.contest("g")
    shell.apply(core.join("g", 1.0), 1.0)
    assert core.own_groups() == ["g"] and core.status == 1
    join, elect = sent(session)
    assert join == wire.Join(2, "g", 1)
    assert isinstance(elect, wire.Elect)
    shell.frames(session, wire.Elect(2, elect.body), 1.1)  # it passes our wave back
    assert Leader(ME, "me", "g") in shell.published
    assert core.leader("g") == ME
    group = core.groups["g"]
    assert group.joined and group.contested and group.leader == ME
    assert list(group.members) == [PEER]
    shell.apply(core.leave("g", 2.0), 2.0)
    assert [type(m) for m in sent(session)[2:]] == [wire.Leader, wire.Leave]  # we won, we left
    assert sent(session)[-1] == wire.Leave(5, "g", 2)


def test_a_whisper_is_published_from_its_peer() -> None:
    shell = make()
    session = entered(shell)
    shell.frames(session, wire.Whisper(2, (b"hi",)), 1.0)
    assert shell.published[-1] == Whisper(PEER, "bob", (b"hi",))


# ------------------------------------------------------------ properties

beacons = st.tuples(
    st.integers(1, 40),  # which peer
    st.sampled_from([5000, 5001, 0]),  # port; 0: leaving
    st.sampled_from([f"{NET}20", f"{NET}21", f"{NET}99", "10.0.0.1"]),
    st.floats(0, 2.0),  # time since the last step
    st.booleans(),  # it says HELLO (to a link we made)
)


@settings(max_examples=200, deadline=None)
@given(st.lists(beacons, max_size=120), st.integers(1, 8))
def test_no_sequence_of_beacons_and_frames_outgrows_the_bounds(
    steps: list[tuple[int, int, str, float, bool]], bound: int
) -> None:
    shell = make(max_pending_peers=bound)
    core = shell.core
    now = 0.0
    for peer, port, source, elapsed, greets in steps:
        now += elapsed
        made = shell.beacon(wire.Beacon(uuid.UUID(int=peer), port), source, now)
        if greets and made:
            shell.frames(made[0], hello(("g",)), now)  # in a group: its record is checked too
        if now >= core.deadline():
            shell.poll(now)
        assert len(core.unready) <= bound
        assert len(core.peers) == len(core.by_route)
        assert set(core.unready) <= set(core.peers)
        assert len(core.peers) <= bound + sum(p.protocol.ready for p in core.peers.values())
        assert len(core.leave_hints) <= len(core.peers)
        assert all(m in core.peers for g in core.groups.values() for m in g.members)
        # What a SHOUT sends to: the table's own session for each member.
        assert all(core.peers[m] is p for g in core.groups.values() for m, p in g.members.items())


@settings(max_examples=200, deadline=None)
@given(st.lists(beacons, max_size=120))
def test_a_peer_that_answers_is_dropped_by_nothing_but_its_own_link(
    steps: list[tuple[int, int, str, float, bool]],
) -> None:
    shell = make(max_pending_peers=2)
    core = shell.core
    answering = entered(shell, peer=uuid.UUID(int=1000), groups=("g",))
    now = 0.0
    for peer, port, source, elapsed, _ in steps:
        now += elapsed
        # Forged beacons of any kind, its own UUID's leaving ones among them.
        target = answering.uuid if peer % 4 == 0 else uuid.UUID(int=peer)
        shell.beacon(wire.Beacon(target, port), source, now)
        # It answers every PING and talks within its presence window.
        if any(isinstance(wire.decode(frames), wire.Ping) for frames in answering.sent):
            shell.frames(answering, wire.PingOk(answering.protocol.in_seq + 1), now)
        answering.sent.clear()
        shell.frames(answering, wire.Whisper(answering.protocol.in_seq + 1, ()), now)
        if now >= core.deadline():
            shell.poll(now)
        assert core.peers.get(answering.uuid) is answering
    assert answering.uuid not in [dropped for dropped, _ in shell.drops]
    assert math.isfinite(now)


def test_a_beacon_of_a_new_uuid_at_an_entered_peers_endpoint_or_ours_links_nothing() -> None:
    """A forged beacon (one datagram) must not make us link to a known peer under our identity.

    Over a plain inbox our second DEALER would take our route from the
    first and its HELLO would read as our restart: each node ends the
    other, beacon after beacon.  Once the peer is gone, a new UUID there
    links as before; HELLOs and in-process links are not held to it.
    """
    shell = make()
    core = shell.core
    bob = entered(shell)  # at tcp://HOST:5000
    assert core.entered_at == {f"tcp://{HOST}:5000": bob}
    assert shell.beacon(wire.Beacon(OTHER, 5000), HOST, 1.0) == []
    assert shell.beacon(wire.Beacon(uuid.UUID(int=7), 40000), f"{NET}1", 1.0) == []  # ours
    assert core.beacons_ignored["claimed"] == 2 and shell.refused == 2
    assert core.peers == {PEER: bob} and not bob.closed and shell.drops == []
    # The same beacon for an in-process node, or a HELLO's Connect, is admitted.
    (connect,) = core.on_beacon(wire.Beacon(OTHER, 5000), HOST, b"k", 2.0)
    assert isinstance(connect, Connect) and core.admit(connect, in_process=True, now=2.0)
    answering = attrs.evolve(connect, source=None, answering=True)
    assert core.admit(answering, in_process=False, now=2.0)
    # Bob gone, its endpoint is free for a new UUID.
    shell.apply(core.remove(bob, ExitReason.LINK, 3.0), 3.0)
    assert core.entered_at == {}
    (newcomer,) = shell.beacon(wire.Beacon(OTHER, 5000), HOST, 4.0)
    assert newcomer.uuid == OTHER and core.beacons_ignored["claimed"] == 2


# ------------------------------------------------------- in-process peers


def test_an_in_process_peer_spends_no_budget_and_ignores_leaving_beacons() -> None:
    shell = make()
    core = shell.core
    for i in range(SOURCE_BURST):
        shell.beacon(wire.Beacon(uuid.UUID(int=100 + i), 5000), HOST, 0.0)
    (connect,) = core.on_beacon(wire.Beacon(PEER, 5000), HOST, b"k", 0.0)
    assert isinstance(connect, Connect)
    assert not core.admit(connect, in_process=False, now=0.0)  # the source's burst is spent
    assert core.admit(connect, in_process=True, now=0.0)  # no socket: no budget
    local = Session(core.protocol_for(connect, 0.0), in_process=True)
    shell.apply(core.add(local, 0.0), 0.0)
    assert PEER not in core.unready  # nor a place among the pending
    shell.frames(local, hello(), 0.0)
    local.sent.clear()
    shell.beacon(wire.Beacon(PEER, 0), HOST, 1.0)  # it says GOODBYE over its link instead
    assert local.sent == [] and PEER not in core.leave_hints


@pytest.mark.parametrize("look_by", [2.0, 1e9])
def test_a_new_peer_is_first_looked_at_by_look_by_or_its_deadline(look_by: float) -> None:
    """The shell's sweep sets an in-process peer's first look; never after its deadline."""
    shell = make()
    core = shell.core
    (connect,) = core.on_beacon(wire.Beacon(PEER, 5000), HOST, b"k", 0.0)
    assert isinstance(connect, Connect) and core.admit(connect, in_process=True, now=0.0)
    local = Session(core.protocol_for(connect, 0.0), in_process=True)
    first = min(local.protocol.deadline(), look_by)
    actions = core.add(local, 0.0, look_by)
    assert actions[-1] == WakeAt(first)
    assert core.due.pop(first - 1e-9) == [] and core.due.pop(first) == [local]
    assert len(core.due) == 0  # one entry, not two


@pytest.mark.parametrize("refresh", [True, False])
def test_with_beacons_refresh_a_known_beacon_refreshes_its_peer(refresh: bool) -> None:
    shell = make(beacons_refresh=refresh)
    session = entered(shell)  # heard at 0.0
    key = wire.encode_beacon(wire.Beacon(PEER, 5000)) + HOST.encode()
    assert shell.core.quiet[key] is (session if refresh else None)
    assert shell.core.on_beacon(wire.Beacon(PEER, 5000), HOST, key, 20.0) == ()
    assert session.protocol.presence.deadline() == (20.0 if refresh else 0.0) + EVASIVE


def test_an_ipv6_link_local_endpoint_gets_our_scope() -> None:
    core: NodeCore[Session] = NodeCore(
        ME, CoreRules(name="me"), contains=lambda host: host.startswith("fe80::"), scope="eth0"
    )
    (connect,) = core.on_beacon(wire.Beacon(PEER, 5000), "fe80::7", b"k", 0.0)
    assert isinstance(connect, Connect)
    assert connect.endpoint == "tcp://fe80::7%eth0:5000"
    assert core.admit(connect, in_process=False, now=0.0)


# ---------------------------------------------------------------- memory


def test_a_crowd_that_greets_hands_its_memory_back_a_second_later() -> None:
    shell = make()
    crowd = [uuid.UUID(int=300 + i) for i in range(64)]
    sessions = [shell.beacon(wire.Beacon(peer, 5000), HOST, 0.0)[0] for peer in crowd]
    for session in sessions:
        shell.frames(session, hello(), 2.0)
    assert shell.core.unready == {} and shell.wakes[-1] == 3.0
    shell.poll(2.999)
    assert shell.trims == 0
    shell.poll(3.0)
    assert shell.trims == 1
