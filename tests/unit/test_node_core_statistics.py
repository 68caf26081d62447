"""The core's counters (Node.statistics' drops and ignored beacons), at exact times.

Every way a peer leaves the table is counted once, under its reason, and
every beacon a rule turns away under the rule's reason; beacons nobody
needs to judge (ours, known peers') are not counted at all.  The shell
stand-in is ``tests/unit/test_node_core.py``'s.
"""

from __future__ import annotations

import uuid

from tests.support.node_core import (
    HOST,
    KEY_A,
    KEY_B,
    ME,
    NET,
    OTHER,
    OUR_KEY,
    PEER,
    entered,
    hello,
    make,
)
from trizre import wire
from trizre.sansio.node_core import BEACONS_IGNORED, SOURCE_BURST
from trizre.trace._contract import ExitReason


def nonzero(counts: dict[str, int] | dict[ExitReason, int]) -> dict[str, int]:
    return {str(reason): n for reason, n in counts.items() if n}


def test_every_reason_is_a_key_from_the_start_and_nothing_is_counted() -> None:
    core = make().core
    assert set(core.dropped) == set(ExitReason)
    assert tuple(core.beacons_ignored) == BEACONS_IGNORED
    assert nonzero(core.dropped) == {} and nonzero(core.beacons_ignored) == {}


def test_each_way_out_of_the_table_is_counted_once_under_its_reason() -> None:
    shell = make(max_pending_peers=2)
    core = shell.core
    # A sequence gap: the protocol ends it, the core removes it.
    session = entered(shell)
    shell.frames(session, wire.Whisper(5, (b"gap",)), 1.0)
    assert shell.drops == [(PEER, ExitReason.SEQUENCE)]
    assert nonzero(core.dropped) == {"sequence": 1}
    # A credible leaving beacon, its PING unanswered: gone at 11.0 exactly.
    session = entered(shell, OTHER, now=10.0)
    shell.beacon(wire.Beacon(OTHER, 0), HOST, 10.0)
    shell.poll(10.999)
    assert nonzero(core.dropped) == {"sequence": 1}
    shell.poll(11.0)
    assert nonzero(core.dropped) == {"sequence": 1, "beacon": 1}
    # A GOODBYE, and a second HELLO (its restart).
    goodbye = entered(shell, uuid.UUID(int=200), now=20.0)
    shell.frames(goodbye, wire.Goodbye(2), 20.0)
    restart = entered(shell, uuid.UUID(int=201), now=20.0)
    shell.frames(restart, hello(), 20.0)
    assert nonzero(core.dropped) == {"sequence": 1, "beacon": 1, "goodbye": 1, "hello": 1}
    # The pending bound: the oldest of three peers without HELLO goes
    # (removed inside add, not through a message or the clock).
    for i in range(3):
        shell.beacon(wire.Beacon(uuid.UUID(int=100 + i), 5000), HOST, 30.0)
    assert nonzero(core.dropped) == {
        "sequence": 1,
        "beacon": 1,
        "goodbye": 1,
        "hello": 1,
        "handshake": 1,
    }
    # Removing one that is gone already counts nothing.
    assert core.remove(goodbye, ExitReason.EXPIRED, 31.0) == ()
    assert core.dropped[ExitReason.EXPIRED] == 0
    assert len(shell.drops) == sum(core.dropped.values())


def test_beacons_the_rules_turn_away_are_counted_by_reason() -> None:
    shell = make()
    core = shell.core
    shell.beacon(wire.Beacon(ME, 5000), HOST, 0.0)  # ours: quiet, not "ignored"
    shell.beacon(wire.Beacon(PEER, 5000, version=3), HOST, 0.0)  # 43/ZRE
    shell.beacon(wire.Beacon(PEER, 5000, version=3), HOST, 0.5)  # each one
    shell.beacon(wire.Beacon(PEER, 5000, 3, KEY_A), HOST, 0.0)  # CURVE, we have no key
    shell.beacon(wire.Beacon(PEER, 5000), "10.0.0.7", 0.0)  # outside our network
    assert nonzero(core.beacons_ignored) == {"version": 2, "curve": 1, "outside": 1}
    # A known peer's beacons are quiet: not counted, however many.
    entered(shell)
    for t in range(5):
        shell.beacon(wire.Beacon(PEER, 5000), HOST, float(t))
    shell.beacon(wire.Beacon(PEER, 0), f"{NET}66", 10.0)  # a forged leave
    shell.beacon(wire.Beacon(PEER, 0), HOST, 10.0)  # a credible one: judged by its PING
    assert nonzero(core.beacons_ignored) == {
        "version": 2,
        "curve": 1,
        "outside": 1,
        "forged_leave": 1,
    }


def test_a_curve_node_counts_downgrades_keys_not_allowed_and_forged_leaves() -> None:
    shell = make(curve=OUR_KEY, curve_allow=frozenset({KEY_A}))
    core = shell.core
    shell.beacon(wire.Beacon(PEER, 5000, version=3), HOST, 0.0)  # no key: a downgrade
    shell.beacon(wire.Beacon(OTHER, 5000, 3, KEY_B), HOST, 0.0)  # not allowed
    (session,) = shell.beacon(wire.Beacon(PEER, 5000, 3, KEY_A), HOST, 0.0)
    shell.frames(session, hello(key=KEY_A), 0.0)
    shell.beacon(wire.Beacon(PEER, 0, 3, KEY_B), HOST, 10.0)  # its host, not its key
    assert nonzero(core.beacons_ignored) == {
        "downgrade": 1,
        "not_allowed": 1,
        "forged_leave": 1,
    }


def test_throttled_beacons_are_those_over_the_budget_at_that_instant() -> None:
    shell = make(new_peers_per_source=20.0)
    core = shell.core
    forged = [uuid.UUID(int=1000 + i) for i in range(SOURCE_BURST + 30)]
    for peer in forged:
        shell.beacon(wire.Beacon(peer, 5000), HOST, 0.0)
    assert core.beacons_ignored["throttled"] == 30 == shell.refused
    for peer in forged[SOURCE_BURST:]:
        shell.beacon(wire.Beacon(peer, 5000), HOST, 1.0)  # one second: 20 more
    assert core.beacons_ignored["throttled"] == 30 + 10
    # A HELLO from a stranger spends no beacon budget: never "throttled".
    assert nonzero(core.beacons_ignored) == {"throttled": 40}
