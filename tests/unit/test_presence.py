"""The sans-I/O presence clock, driven with exact virtual times (no real clock).

Every time used here is a small dyadic float (a multiple of 1/4), so all
the additions and subtractions inside :class:`Presence` are exact and the
expected timelines can be compared with ``==``.  ``just_before(t)`` is the
largest float below ``t``: nothing may be due there.
"""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.presence import (
    TIMERS,
    expected_actions,
    just_before,
    next_due,
    timeline_to_expiry,
)
from trizre.sansio._presence import Deafness, Liveness, Presence, PresenceAction, answer_time

A = PresenceAction
DETERMINISTIC = settings(derandomize=True, database=None, deadline=None, max_examples=500)


# ------------------------------------------------------------- the timeline


def test_full_timeline_evasive_5_expired_30() -> None:
    p = Presence(0.0, evasive=5.0, expired=30.0)
    assert p.liveness is Liveness.ALIVE
    timeline = [
        (5.0, A.PING, Liveness.PINGED),
        (6.0, A.EVASIVE, Liveness.EVASIVE),  # its PING unanswered for 1 s
        (10.0, A.SILENT, Liveness.SILENT),
        (15.0, A.PING, Liveness.SILENT),
        (20.0, A.PING, Liveness.SILENT),
        (25.0, A.PING, Liveness.SILENT),
        (30.0, A.EXPIRED, Liveness.SILENT),
    ]
    for t, action, liveness_after in timeline:
        assert p.deadline() == t
        assert p.poll(just_before(t)) is None
        assert p.poll(just_before(t)) is None  # a None poll changes nothing
        assert p.deadline() == t
        assert p.poll(t) is action
        assert p.liveness is liveness_after
        if action is not A.EXPIRED:
            assert p.poll(t) is None  # one action per step
    # Expiry is a fixed point: it stays due until the owner removes the peer.
    assert p.poll(30.0) is A.EXPIRED
    assert p.poll(31.0) is A.EXPIRED


def test_timeline_matches_model_for_default_timeouts() -> None:
    p = Presence(100.0, 5.0, 30.0)
    got = []
    while True:
        t = p.deadline()
        action = p.poll(t)
        assert action is not None
        got.append((t, action))
        if action is A.EXPIRED:
            break
        assert p.poll(t) is None
    assert got == expected_actions(100.0, 5.0, 30.0)


def test_deadline_is_next_action_time_at_every_step() -> None:
    p = Presence(0.0, 5.0, 30.0)
    assert p.deadline() == 5.0
    # Between actions, polling earlier never moves the deadline.
    for t in (0.0, 1.0, 4.75):
        assert p.poll(t) is None
        assert p.deadline() == 5.0
    assert p.poll(5.0) is A.PING
    assert p.deadline() == 6.0
    assert p.poll(5.5) is None
    assert p.deadline() == 6.0
    assert p.poll(6.0) is A.EVASIVE
    assert p.deadline() == 10.0
    assert p.poll(7.5) is None
    assert p.deadline() == 10.0
    assert p.poll(10.0) is A.SILENT
    assert p.deadline() == 15.0
    assert p.poll(15.0) is A.PING
    assert p.deadline() == 20.0
    assert p.poll(20.0) is A.PING
    assert p.deadline() == 25.0
    assert p.poll(25.0) is A.PING
    assert p.deadline() == 30.0


def test_poll_none_when_nothing_due_is_idempotent() -> None:
    p = Presence(10.0, 5.0, 30.0)
    for _ in range(3):
        assert p.poll(10.0) is None
        assert p.poll(14.0) is None
        assert p.liveness is Liveness.ALIVE
        assert p.deadline() == 15.0
        assert p.last_heard == 10.0


def test_late_poll_catches_up_one_action_per_call() -> None:
    """A poll well past several deadlines returns them one by one, then None."""
    p = Presence(0.0, 5.0, 30.0)
    assert p.poll(12.0) is A.PING
    assert p.poll(12.0) is A.EVASIVE
    assert p.poll(12.0) is A.SILENT
    assert p.poll(12.0) is None
    assert p.liveness is Liveness.SILENT
    # The ping period restarts from when the late poll happened.
    assert p.deadline() == 17.0
    assert p.poll(just_before(17.0)) is None
    assert p.poll(17.0) is A.PING


def test_big_time_jump_is_expired_directly() -> None:
    p = Presence(0.0, 5.0, 30.0)
    assert p.poll(1000.0) is A.EXPIRED
    assert p.liveness is Liveness.ALIVE  # no evasive/silent step reported first
    assert p.poll(1000.0) is A.EXPIRED


def test_jump_exactly_to_expiry_is_expired() -> None:
    p = Presence(0.0, 5.0, 30.0)
    assert p.poll(just_before(30.0)) is A.PING
    p = Presence(0.0, 5.0, 30.0)
    assert p.poll(30.0) is A.EXPIRED


# --------------------------------------------------------------- heard()


def _drive_to(p: Presence, t: float) -> list[A]:
    actions = []
    while (action := p.poll(t)) is not None:
        actions.append(action)
        if action is A.EXPIRED:
            break
    return actions


@pytest.mark.parametrize(
    ("heard_at", "state_before"),
    [
        (3.0, Liveness.ALIVE),
        (5.5, Liveness.PINGED),
        (7.0, Liveness.EVASIVE),
        (12.0, Liveness.SILENT),
        (22.0, Liveness.SILENT),  # after some PINGs
        (30.0, Liveness.SILENT),  # expiry was due: traffic still revives it
    ],
)
def test_heard_resets_to_alive_from_any_state(heard_at: float, state_before: Liveness) -> None:
    p = Presence(0.0, 5.0, 30.0)
    # Follow the deadlines up to heard_at.
    while p.deadline() < heard_at:
        assert p.poll(p.deadline()) is not None
    _drive_to(p, heard_at)
    assert p.liveness is state_before
    p.heard(heard_at)
    assert p.liveness is Liveness.ALIVE
    assert p.last_heard == heard_at
    assert p.poll(heard_at) is None
    # A fresh timeline starts from heard_at (no stale ping time is reused).
    assert timeline_to_expiry(p) == expected_actions(heard_at, 5.0, 30.0)


def test_heard_postpones_every_step() -> None:
    p = Presence(0.0, 5.0, 30.0)
    for t in (4.0, 8.0, 12.0, 16.0, 20.0, 24.0, 28.0, 32.0):
        assert p.poll(t) is None
        p.heard(t)
        assert p.deadline() == t + 5.0
    assert p.poll(36.0) is None
    assert p.poll(37.0) is A.PING
    assert p.poll(38.0) is A.EVASIVE


# --------------------------------------------- expired <= evasive and friends


@pytest.mark.parametrize(("evasive", "expired"), [(5.0, 5.0), (5.0, 3.0), (5.0, 0.25)])
def test_expired_not_after_evasive_skips_straight_to_expired(
    evasive: float, expired: float
) -> None:
    p = Presence(1.0, evasive, expired)
    assert p.deadline() == 1.0 + expired
    assert p.poll(just_before(1.0 + expired)) is None
    assert p.poll(1.0 + expired) is A.EXPIRED
    assert p.liveness is Liveness.ALIVE
    # Even polled later, no EVASIVE/SILENT ever shows up.
    p = Presence(1.0, evasive, expired)
    assert p.poll(1.0 + evasive) is A.EXPIRED
    assert p.poll(1.0 + 2 * evasive) is A.EXPIRED


@pytest.mark.parametrize(
    ("evasive", "expired", "timeline"),
    [
        (5.0, 6.0, [(5.0, A.PING), (6.0, A.EXPIRED)]),  # expired before evasive
        (5.0, 7.0, [(5.0, A.PING), (6.0, A.EVASIVE), (7.0, A.EXPIRED)]),
        (5.0, 10.0, [(5.0, A.PING), (6.0, A.EVASIVE), (10.0, A.EXPIRED)]),
        (5.0, 12.0, [(5.0, A.PING), (6.0, A.EVASIVE), (10.0, A.SILENT), (12.0, A.EXPIRED)]),
        (5.0, 15.0, [(5.0, A.PING), (6.0, A.EVASIVE), (10.0, A.SILENT), (15.0, A.EXPIRED)]),
        (
            0.25,
            1.0,
            [(0.25, A.PING), (0.375, A.EVASIVE), (0.5, A.SILENT), (0.75, A.PING), (1.0, A.EXPIRED)],
        ),
    ],
)
def test_expiry_cuts_the_timeline_short(
    evasive: float, expired: float, timeline: list[tuple[float, A]]
) -> None:
    p = Presence(0.0, evasive, expired)
    got = timeline_to_expiry(p)
    assert got == timeline == expected_actions(0.0, evasive, expired)


@pytest.mark.parametrize(
    ("evasive", "expired"),
    [(0.0, 30.0), (-1.0, 30.0), (5.0, 0.0), (5.0, -0.5), (0.0, 0.0)],
)
def test_non_positive_timeouts_raise(evasive: float, expired: float) -> None:
    with pytest.raises(ValueError, match="positive"):
        Presence(0.0, evasive, expired)


# ------------------------------------------------------------ the property

quarters = st.integers(0, 200).map(lambda n: n / 4)
operations = st.lists(st.tuples(quarters, st.booleans()), max_size=40)


@DETERMINISTIC
@given(
    **TIMERS,
    ops=operations,
)
def test_following_deadline_never_misses_an_action(
    start: float, evasive: float, expired: float, ops: list[tuple[float, bool]]
) -> None:
    """Drive the clock as the node does: sleep until ``deadline()``, poll, repeat.

    At each (advance, heard) operation time moves forward to a target; every
    deadline on the way is honoured.  Nothing is due strictly before
    ``deadline()``; something is due at it; the actions seen after each
    traffic match the model; EXPIRED happens exactly when the silence
    reaches ``expired`` and never before.
    """
    p = Presence(start, evasive, expired)
    now = start
    last_heard = start
    seen: list[tuple[float, A]] = []
    for advance, heard in ops:
        target = now + advance
        while p.deadline() <= target:
            now, action = next_due(p, now)
            seen.append((now, action))
            if action is A.EXPIRED:
                assert now - last_heard >= expired
                assert seen == expected_actions(last_heard, evasive, expired)
                return
            assert now - last_heard < expired
            assert p.poll(now) is None
        now = target
        assert now - last_heard < expired  # else EXPIRED was missed
        assert p.poll(now) is None
        if heard:
            assert seen == expected_actions(last_heard, evasive, expired)[: len(seen)]
            p.heard(now)
            last_heard = now
            seen = []
            assert p.liveness is Liveness.ALIVE
    assert seen == expected_actions(last_heard, evasive, expired)[: len(seen)]


# ------------------------------------------------------- known float bug


def _follow_like_the_node(p: Presence) -> None:
    """Sleep until deadline(), poll until None; the deadline must then move on."""
    for _ in range(100):
        now = p.deadline()
        while (action := p.poll(now)) is not None:
            if action is A.EXPIRED:
                return
        assert p.deadline() > now, f"deadline() stuck at {now!r}: the node would spin"
    raise AssertionError("never expired")


def test_deadline_progresses_with_inexact_floats() -> None:
    _follow_like_the_node(Presence(0.7, evasive=0.1, expired=1.0))


def test_deadline_progresses_with_default_timeouts_near_power_of_two() -> None:
    _follow_like_the_node(Presence(1012.0964605192518, evasive=5.0, expired=30.0))


def test_deadline_progresses_with_exact_floats() -> None:
    """The same loop as the two tests above, with exactly representable times."""
    _follow_like_the_node(Presence(1012.0, evasive=5.0, expired=30.0))
    _follow_like_the_node(Presence(0.75, evasive=0.125, expired=1.0))


# ------------------------------------------- beacons and the link's own clock


def _follow(p: Presence, until: float, beacon_every: float | None) -> list[tuple[float, A]]:
    """Honour every deadline up to ``until``, a beacon arriving every ``beacon_every`` s."""
    seen: list[tuple[float, A]] = []
    now = p.last_heard
    next_beacon = math.inf if beacon_every is None else now + beacon_every
    while now < until:
        step = min(p.deadline(), next_beacon, until)
        if step > now:
            assert p.poll(just_before(step)) is None  # nothing due before it
        now = step
        while (action := p.poll(now)) is not None:
            seen.append((now, action))
            if action is A.EXPIRED:
                return seen
        if beacon_every is not None and now == next_beacon:
            p.beacon(now)
            next_beacon = now + beacon_every
    return seen


def test_beacons_keep_it_alive_but_its_silent_link_is_pinged_then_expires() -> None:
    """beacons_refresh: a deaf link is PINGed after ``expired`` and dropped after twice that."""
    p = Presence(0.0, 5.0, 30.0)
    seen = _follow(p, 100.0, beacon_every=1.0)
    assert seen == [
        (30.0, A.PING),
        (35.0, A.PING),
        (40.0, A.PING),
        (45.0, A.PING),
        (50.0, A.PING),
        (55.0, A.PING),
        (60.0, A.EXPIRED),
    ]
    assert p.liveness is Liveness.ALIVE  # never reported evasive: its beacons came
    assert p.link_only(60.0)


def test_traffic_over_the_link_restarts_the_link_clock() -> None:
    p = Presence(0.0, 5.0, 30.0)
    assert _follow(p, 32.0, beacon_every=1.0) == [(30.0, A.PING)]
    p.heard(32.0)  # its PING-OK
    assert p.deadline() == 37.0  # the usual evasive step, beacons or not
    seen = _follow(p, 200.0, beacon_every=1.0)
    assert seen[0] == (62.0, A.PING)
    assert seen[-1] == (92.0, A.EXPIRED)


def test_an_ordinary_expiry_is_not_the_links_alone() -> None:
    p = Presence(0.0, 5.0, 30.0)
    assert _follow(p, 100.0, beacon_every=None)[-1] == (30.0, A.EXPIRED)
    assert not p.link_only(30.0)
    # Beacons that stop: it expires when the first of the two clocks runs out.
    p = Presence(0.0, 5.0, 30.0)
    seen = _follow(p, 20.0, beacon_every=1.0)
    assert seen == []
    seen = _follow(p, 100.0, beacon_every=None)
    assert seen[-1] == (50.0, A.EXPIRED)  # 30 s after its last beacon, at 20
    assert not p.link_only(50.0)


kinds = st.sampled_from(["nothing", "heard", "beacon"])


@DETERMINISTIC
@given(
    **TIMERS,
    ops=st.lists(st.tuples(quarters, kinds), max_size=60),
)
def test_with_beacons_expiry_is_exactly_when_a_clock_runs_out(
    start: float, evasive: float, expired: float, ops: list[tuple[float, str]]
) -> None:
    """Nothing is due before ``deadline()``, something is at it, and EXPIRED comes
    exactly when ``expired`` passed without traffic or beacon, or twice that
    without traffic over the link."""
    p = Presence(start, evasive, expired)
    now = last_any = last_link = start
    for advance, kind in ops:
        target = now + advance
        while p.deadline() <= target:
            now, action = next_due(p, now)
            due = now >= last_any + expired or now >= last_link + 2 * expired
            assert (action is A.EXPIRED) is due
            if due:
                assert p.link_only(now) is (now < last_any + expired)
                return
            while (more := p.poll(now)) is not None:
                assert more is not A.EXPIRED
        now = target
        assert now < last_any + expired and now < last_link + 2 * expired
        if kind == "heard":
            p.heard(now)
            last_any = last_link = now
        elif kind == "beacon":
            p.beacon(now)
            last_any = now


# ------------------------------------------------ a quiet peer that answers


def test_a_quiet_peer_that_answers_its_pings_is_never_evasive() -> None:
    """zyre on a quiet link sends nothing but PING-OKs: PINGed, never reported."""
    p = Presence(0.0, 5.0, 30.0)
    pings = []
    while len(pings) < 60:
        now = p.deadline()
        assert p.poll(now) is A.PING  # never EVASIVE: nothing else at all
        assert p.poll(now) is None
        pings.append(now)
        assert p.responsive  # pinged, its answer not yet due
        p.heard(now + 0.125)  # its PING-OK, a round trip later
        assert p.liveness is Liveness.ALIVE
    # One PING per evasive period of quiet.
    assert all(b - a == 5.125 for a, b in itertools.pairwise(pings))


def test_a_ping_left_unanswered_makes_it_evasive_then_silent() -> None:
    p = Presence(0.0, 5.0, 30.0)
    assert p.poll(5.0) is A.PING
    assert p.responsive
    assert p.poll(just_before(6.0)) is None
    assert p.poll(6.0) is A.EVASIVE
    assert not p.responsive
    assert p.poll(10.0) is A.SILENT
    assert not p.responsive
    p.heard(11.0)  # a late answer: alive and responsive again
    assert p.responsive
    assert p.deadline() == 16.0


@pytest.mark.parametrize(
    ("evasive", "answer"), [(5.0, 1.0), (2.0, 1.0), (1.0, 0.5), (0.25, 0.125), (0.1, 0.05)]
)
def test_the_answer_time_is_a_second_at_most_half_the_evasive_timeout(
    evasive: float, answer: float
) -> None:
    assert answer_time(evasive) == answer


# ------------------------------------------------------------ our own deafness


def test_time_we_could_not_read_is_not_held_against_a_peer() -> None:
    deafness = Deafness()
    p = Presence(0.0, 5.0, 30.0, deafness)
    deafness.stopped(2.0)
    assert p.deadline() == 35.0  # while deaf: nothing before the whole credit
    assert p.poll(5.0) is None  # silent 2 s, deaf 3 s: not quiet enough
    deafness.resumed(4.0)
    assert p.deadline() == 7.0  # 5 s of silence we could hear
    assert p.poll(just_before(7.0)) is None
    seen = []
    while (t := p.deadline()) < 100.0:
        action = p.poll(t)
        assert action is not None
        seen.append((t, action))
        if action is A.EXPIRED:
            break
    assert seen == expected_actions(2.0, 5.0, 30.0)  # as if last heard at 2


def test_deafness_is_credited_only_since_the_peer_was_last_heard() -> None:
    deafness = Deafness()
    deafness.stopped(1.0)
    deafness.resumed(9.0)  # deaf for 8 s, before we heard it at 10
    p = Presence(0.0, 5.0, 30.0, deafness)
    p.heard(10.0)
    assert p.deadline() == 15.0
    deafness.stopped(12.0)
    p.heard(13.0)  # read during a deafness (a message taken before it)
    deafness.resumed(14.0)
    assert p.deadline() == 19.0  # credited the 1 s deaf after 13
    assert p.poll(just_before(19.0)) is None
    assert p.poll(19.0) is A.PING


def test_the_credit_is_capped_so_dead_peers_expire_however_long_we_are_deaf() -> None:
    """A node deaf for ever still drops a dead peer, ``expired`` seconds late at most."""
    deafness = Deafness()
    p = Presence(0.0, 5.0, 30.0, deafness)
    deafness.stopped(1.0)
    seen = timeline_to_expiry(p)
    assert seen == expected_actions(30.0, 5.0, 30.0)  # the whole cap, no more
    assert seen[-1] == (60.0, A.EXPIRED)


def test_deafness_nests_and_refuses_an_unmatched_resume() -> None:
    deafness = Deafness()
    with pytest.raises(RuntimeError):
        deafness.resumed(0.0)
    deafness.stopped(1.0)
    deafness.stopped(2.0)  # two readers wait
    deafness.resumed(3.0)
    assert deafness.deaf
    assert deafness.mark(4.0) == 3.0
    deafness.resumed(5.0)
    assert not deafness.deaf
    assert deafness.total == 4.0
    assert deafness.mark(100.0) == 4.0


deaf_kinds = st.sampled_from(["nothing", "heard", "deaf", "reads"])


def _deaf_overlap(intervals: list[list[float]], since: float, now: float) -> float:
    """Seconds of the (start, end) intervals inside [since, now]; an open one ends at inf."""
    return sum(max(0.0, min(end, now) - max(start, since)) for start, end in intervals)


@DETERMINISTIC
@given(
    **TIMERS,
    ops=st.lists(st.tuples(quarters, deaf_kinds), max_size=60),
)
def test_while_deaf_expiry_is_when_the_silence_we_could_hear_reaches_expired(
    start: float, evasive: float, expired: float, ops: list[tuple[float, str]]
) -> None:
    """Sleep until deadline() (asked again whenever the deafness changes), poll, repeat.

    Nothing is due before deadline(); something is at it; EXPIRED comes
    exactly when the silence less the deafness since (at most ``expired``
    of it) reaches ``expired``.
    """
    deafness = Deafness()
    p = Presence(start, evasive, expired, deafness)
    now = last = start
    intervals: list[list[float]] = []

    def silence(at: float) -> float:
        return at - last - min(expired, _deaf_overlap(intervals, last, at))

    for advance, kind in ops:
        target = now + advance
        while p.deadline() <= target:
            now, action = next_due(p, now)
            assert (action is A.EXPIRED) is (silence(now) >= expired)
            if action is A.EXPIRED:
                return
            while (more := p.poll(now)) is not None:
                assert more is not A.EXPIRED
        now = target
        assert silence(now) < expired
        if kind == "heard":
            p.heard(now)
            last = now
        elif kind == "deaf" and not deafness.deaf:
            deafness.stopped(now)
            intervals.append([now, math.inf])
        elif kind == "reads" and deafness.deaf:
            deafness.resumed(now)
            intervals[-1][1] = now
