"""The Binary Star state machine: exhaustive table, the Guide's scenarios, properties."""

from __future__ import annotations

import math
from collections.abc import Callable

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trizre.patterns._bstar_fsm import (
    PEER_EVENTS,
    TRANSITIONS,
    BinaryStarError,
    BinaryStarFSM,
    DualPassive,
    Event,
    RoleConflict,
    SplitBrain,
    State,
    Transition,
)

P, B, A, S = State.PRIMARY, State.BACKUP, State.ACTIVE, State.PASSIVE
HB = 1.0

# --------------------------------------------------------------------------
# The expected table, written out by hand from the Guide (bstar.c
# s_execute_fsm) plus the pairs it leaves open. Each entry is
# (outcome before peer expiry, outcome at/after peer expiry); an outcome is
# (new state, accepted) or the error class raised.
# --------------------------------------------------------------------------

Outcome = tuple[State, bool] | type[BinaryStarError]

EXPECTED: dict[tuple[State, Event], tuple[Outcome, Outcome]] = {
    (P, Event.PEER_PRIMARY): (RoleConflict, RoleConflict),
    (P, Event.PEER_BACKUP): ((A, False), (A, False)),
    (P, Event.PEER_ACTIVE): ((S, False), (S, False)),
    (P, Event.PEER_PASSIVE): ((P, False), (P, False)),
    (P, Event.CLIENT_REQUEST): ((P, False), (A, True)),
    (B, Event.PEER_PRIMARY): ((B, False), (B, False)),
    (B, Event.PEER_BACKUP): (RoleConflict, RoleConflict),
    (B, Event.PEER_ACTIVE): ((S, False), (S, False)),
    (B, Event.PEER_PASSIVE): ((B, False), (B, False)),
    (B, Event.CLIENT_REQUEST): ((B, False), (B, False)),
    (A, Event.PEER_PRIMARY): ((A, False), (A, False)),
    (A, Event.PEER_BACKUP): ((A, False), (A, False)),
    (A, Event.PEER_ACTIVE): (SplitBrain, SplitBrain),
    (A, Event.PEER_PASSIVE): ((A, False), (A, False)),
    (A, Event.CLIENT_REQUEST): ((A, True), (A, True)),
    (S, Event.PEER_PRIMARY): ((A, False), (A, False)),
    (S, Event.PEER_BACKUP): ((A, False), (A, False)),
    (S, Event.PEER_ACTIVE): ((S, False), (S, False)),
    (S, Event.PEER_PASSIVE): (DualPassive, DualPassive),
    (S, Event.CLIENT_REQUEST): ((S, False), (A, True)),
}

PEER_OF_EVENT = {
    Event.PEER_PRIMARY: P,
    Event.PEER_BACKUP: B,
    Event.PEER_ACTIVE: A,
    Event.PEER_PASSIVE: S,
}


def fsm_in(state: State, t: float = 10.0) -> BinaryStarFSM:
    """A machine in ``state`` whose peer expiry is ``t + 2``."""
    if state is P:
        fsm = BinaryStarFSM(primary=True, heartbeat=HB, now=t)
    elif state is B:
        fsm = BinaryStarFSM(primary=False, heartbeat=HB, now=t)
    elif state is A:
        fsm = BinaryStarFSM(primary=True, heartbeat=HB, now=t - 1)
        fsm.peer_state(B, t)
    else:
        fsm = BinaryStarFSM(primary=True, heartbeat=HB, now=t - 1)
        fsm.peer_state(A, t)
    assert fsm.state is state
    assert fsm.peer_expiry == t + 2 * HB
    return fsm


def fire(fsm: BinaryStarFSM, event: Event, now: float) -> Transition:
    if event is Event.CLIENT_REQUEST:
        return fsm.client_request(now)
    return fsm.peer_state(PEER_OF_EVENT[event], now)


def test_expected_table_covers_every_pair() -> None:
    every = {(s, e) for s in State for e in Event}
    assert set(EXPECTED) == every
    assert set(TRANSITIONS) == every
    assert len(every) == 20


def test_table_is_read_only() -> None:
    with pytest.raises(TypeError):
        TRANSITIONS[(A, Event.PEER_ACTIVE)] = A  # type: ignore[index]


def test_wire_values() -> None:
    assert [s.value for s in (P, B, A, S)] == [1, 2, 3, 4]
    assert [e.value for e in Event] == [1, 2, 3, 4, 5]
    assert {s: e.value for s, e in PEER_EVENTS.items()} == {P: 1, B: 2, A: 3, S: 4}
    assert State(3) is A
    with pytest.raises(ValueError):
        State(5)


# Times relative to the peer expiry (t + 2 = 12): just before, exactly at, well after.
BEFORE = [10.0, 11.999]
AT_OR_AFTER = [12.0, 12.001, 500.0]


@pytest.mark.parametrize(("state", "event"), list(EXPECTED))
@pytest.mark.parametrize("now", BEFORE + AT_OR_AFTER)
def test_exhaustive(state: State, event: Event, now: float) -> None:
    fsm = fsm_in(state)
    before, after = EXPECTED[(state, event)]
    expected = before if now < fsm.peer_expiry else after
    expiry = fsm.peer_expiry
    if isinstance(expected, type):
        with pytest.raises(expected) as info:
            fire(fsm, event, now)
        assert fsm.fatal is info.value
        assert fsm.state is state
        assert fsm.peer_expiry == expiry
        return
    new_state, accepted = expected
    tr = fire(fsm, event, now)
    assert tr == Transition(old_state=state, event=event, new_state=new_state, accepted=accepted)
    assert tr.changed is (state is not new_state)
    assert fsm.state is new_state
    assert fsm.fatal is None
    if event is Event.CLIENT_REQUEST:
        assert fsm.peer_expiry == expiry
    else:
        assert fsm.peer_expiry == now + 2 * HB


# ----------------------------------------------------------------------------
# Scenarios from the Guide's narrative
# ----------------------------------------------------------------------------


def exchange(a: BinaryStarFSM, b: BinaryStarFSM, now: float) -> None:
    """Both servers publish their state at ``now`` and both receive it."""
    sa, sb = a.state, b.state
    a.peer_state(sb, now)
    b.peer_state(sa, now)


def running_pair() -> tuple[BinaryStarFSM, BinaryStarFSM]:
    """Primary and backup started together at t=0; by t=2 ACTIVE/PASSIVE."""
    primary = BinaryStarFSM(primary=True, now=0.0)
    backup = BinaryStarFSM(primary=False, now=0.0)
    exchange(primary, backup, 1.0)
    assert (primary.state, backup.state) == (A, B)
    exchange(primary, backup, 2.0)
    assert (primary.state, backup.state) == (A, S)
    exchange(primary, backup, 3.0)
    return primary, backup


def test_normal_start() -> None:
    primary, backup = running_pair()
    assert (primary.state, backup.state) == (A, S)
    assert primary.client_request(3.5).accepted
    assert not backup.client_request(3.5).accepted
    assert backup.state is S


def test_a_partner_seen_alive_is_not_voted_out() -> None:
    """Heartbeats late (a stalled TCP link), the partner's node still heard: no takeover."""
    _primary, backup = running_pair()  # last heartbeats at 3.0: expiry 5.0
    backup.partner_seen(4.5)  # e.g. its beacon
    assert backup.peer_expiry == 6.5
    tr = backup.client_request(6.0)
    assert (tr.accepted, backup.state) == (False, S)
    backup.partner_seen(4.0)  # older news never moves the expiry back
    assert backup.peer_expiry == 6.5
    tr = backup.client_request(6.5)  # silent for a failover timeout: the vote wins
    assert tr.accepted and backup.state is A


def test_a_stale_active_from_a_dead_partner_is_not_split_brain() -> None:
    """make chaos's case: the dead backup's last ACTIVE heartbeat arrives late over TCP."""
    primary = BinaryStarFSM(primary=True, heartbeat=HB, now=0.0)
    primary.peer_state(A, 0.5)  # restarted primary: the backup took over meanwhile
    assert primary.state is S
    primary.peer_state(A, 1.5)  # last heartbeat of the backup, which then dies
    assert primary.client_request(3.5).accepted and primary.state is A  # the vote
    # Sent while the backup had heard us PASSIVE: it predates our takeover.
    tr = primary.peer_state(A, 4.0, informed=False)
    assert tr == Transition(old_state=A, event=Event.PEER_ACTIVE, new_state=A)
    assert (primary.state, primary.fatal, primary.peer_expiry) == (A, None, 3.5)
    primary.peer_state(B, 4.5, informed=False)  # the backup's next life
    primary.peer_state(A, 6.0, informed=False)  # a new run of claims starts here
    primary.peer_state(A, 7.9, informed=False)
    assert (primary.state, primary.fatal) == (A, None)


@pytest.mark.parametrize(("state", "peer", "error"), [(A, A, SplitBrain), (S, S, DualPassive)])
def test_an_uninformed_conflict_that_lasts_a_failover_timeout_is_fatal(
    state: State, peer: State, error: type[BinaryStarError]
) -> None:
    """The partner is alive in the same state and cannot hear us: fatal after 2 heartbeats."""
    fsm = fsm_in(state)  # peer expiry 12.0
    for at in (10.5, 11.5, 12.499):
        assert fsm.peer_state(peer, at, informed=False).new_state is state
    assert (fsm.peer_expiry, fsm.fatal) == (12.0, None)  # stale claims prove no life
    with pytest.raises(error):
        fsm.peer_state(peer, 12.5, informed=False)
    assert fsm.fatal is not None


@pytest.mark.parametrize(("state", "peer", "error"), [(A, A, SplitBrain), (S, S, DualPassive)])
def test_an_informed_conflict_is_fatal_at_once(
    state: State, peer: State, error: type[BinaryStarError]
) -> None:
    fsm = fsm_in(state)
    fsm.peer_state(peer, 10.5, informed=False)
    with pytest.raises(error):
        fsm.peer_state(peer, 10.6, informed=True)


def test_informed_matters_only_for_a_conflict() -> None:
    fsm = fsm_in(S)
    assert fsm.peer_state(B, 11.0, informed=False).new_state is A  # the backup restarted
    fsm = fsm_in(P)
    with pytest.raises(RoleConflict):  # configuration, not staleness
        fsm.peer_state(P, 11.0, informed=False)
    fsm = fsm_in(A)
    with pytest.raises(TypeError, match="informed must be a bool"):
        fsm.peer_state(A, 11.0, informed=1)  # type: ignore[arg-type]
    assert fsm.fatal is None


def test_partner_seen_checks_its_input_and_respects_a_fatal_machine() -> None:
    _primary, backup = running_pair()
    with pytest.raises(TypeError):
        backup.partner_seen("soon")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        backup.partner_seen(math.inf)
    with pytest.raises(DualPassive):
        backup.peer_state(S, 3.5)
    with pytest.raises(DualPassive):
        backup.partner_seen(3.6)
    assert backup.peer_expiry == 5.0


def test_start_order_does_not_matter() -> None:
    # The backup alone refuses clients for ever, peer expiry or not.
    backup = BinaryStarFSM(primary=False, now=0.0)
    for t in (1.0, 2.0, 100.0):
        tr = backup.client_request(t)
        assert (tr.accepted, tr.new_state) == (False, B)
    # The primary starts late and still comes up ACTIVE, the backup PASSIVE.
    primary = BinaryStarFSM(primary=True, now=100.0)
    exchange(primary, backup, 101.0)
    exchange(primary, backup, 102.0)
    assert (primary.state, backup.state) == (A, S)


def test_primary_alone_then_backup_joins() -> None:
    primary = BinaryStarFSM(primary=True, now=0.0)
    assert not primary.client_request(1.0).accepted
    tr = primary.client_request(2.0)
    assert tr.accepted and tr.changed and tr.new_state is A
    backup = BinaryStarFSM(primary=False, now=50.0)
    exchange(primary, backup, 51.0)
    assert (primary.state, backup.state) == (A, S)


def test_failover() -> None:
    primary, backup = running_pair()
    del primary  # dies right after its t=3 heartbeat: the backup's expiry is 5
    assert backup.peer_expiry == 5.0
    tr = backup.client_request(4.0)
    assert (tr.accepted, tr.new_state) == (False, S)
    tr = backup.client_request(4.999)
    assert not tr.accepted
    tr = backup.client_request(5.0)  # two heartbeats without the peer's state
    assert tr == Transition(old_state=S, event=Event.CLIENT_REQUEST, new_state=A, accepted=True)
    assert tr.changed
    assert backup.client_request(5.5).accepted


def test_no_failback_then_manual_recovery() -> None:
    primary, backup = running_pair()
    backup.client_request(5.0)  # failover: primary died after t=3
    assert backup.state is A
    # The operator restarts the old primary: it learns the backup is active.
    primary = BinaryStarFSM(primary=True, now=20.0)
    assert not primary.client_request(20.5).accepted  # still inside its startup wait
    exchange(primary, backup, 21.0)
    assert (primary.state, backup.state) == (S, A)
    for t in (22.0, 23.0, 24.0):
        exchange(primary, backup, t)
        assert (primary.state, backup.state) == (S, A)
        assert not primary.client_request(t + 0.5).accepted
        assert backup.client_request(t + 0.5).accepted
    # Recovery: the operator stops the backup; the clients vote the primary in.
    assert primary.peer_expiry == 26.0
    assert not primary.client_request(25.0).accepted
    assert primary.client_request(26.0).accepted
    assert primary.state is A
    # ... and restarts the backup, which goes passive.
    backup = BinaryStarFSM(primary=False, now=40.0)
    exchange(primary, backup, 41.0)
    exchange(primary, backup, 42.0)
    assert (primary.state, backup.state) == (A, S)


def test_passive_takes_over_when_partner_restarts() -> None:
    # The active primary crashes and restarts faster than the failover
    # timeout: the passive backup sees PRIMARY and becomes active.
    primary, backup = running_pair()
    primary = BinaryStarFSM(primary=True, now=3.2)
    backup_tr = backup.peer_state(primary.state, 3.5)
    assert (backup_tr.old_state, backup_tr.new_state, backup_tr.changed) == (S, A, True)
    primary.peer_state(backup.state, 3.6)
    assert (primary.state, backup.state) == (S, A)


def test_primary_waits_for_peer_expiry_before_serving() -> None:
    primary = BinaryStarFSM(primary=True, heartbeat=0.5, now=100.0)
    assert primary.failover_timeout == 1.0
    assert primary.peer_expiry == 101.0
    for t in (100.0, 100.5, 100.999):
        tr = primary.client_request(t)
        assert (tr.accepted, tr.new_state, tr.changed) == (False, P, False)
    # A heartbeat from the peer (here a passive one, which is ignored)
    # still postpones the vote: the peer is alive.
    tr = primary.peer_state(S, 100.9)
    assert (tr.new_state, tr.changed, tr.accepted) == (P, False, False)
    assert primary.peer_expiry == 101.9
    assert not primary.client_request(101.5).accepted
    assert primary.client_request(101.9).accepted
    assert primary.state is A


def test_dual_active_is_split_brain() -> None:
    # The link between the pair is cut after t=3 while clients still reach
    # both halves: the backup's clients vote it in, and the primary stays active.
    primary, backup = running_pair()
    assert backup.client_request(5.0).accepted
    assert (primary.state, backup.state) == (A, A)
    # The link comes back: each side sees the other ACTIVE.
    with pytest.raises(SplitBrain, match="split brain") as info:
        primary.peer_state(backup.state, 11.0)
    assert "Stop both servers" in str(info.value)
    with pytest.raises(SplitBrain):
        backup.peer_state(A, 11.0)


def test_dual_passive() -> None:
    fsm = fsm_in(S)
    with pytest.raises(DualPassive, match="no server will answer") as info:
        fsm.peer_state(S, 11.0)
    assert isinstance(info.value, BinaryStarError)


@pytest.mark.parametrize(("primary", "state"), [(True, P), (False, B)])
def test_role_conflict(primary: bool, state: State) -> None:
    fsm = BinaryStarFSM(primary=primary, now=0.0)
    with pytest.raises(RoleConflict, match="one primary and one backup"):
        fsm.peer_state(state, 1.0)


@pytest.mark.parametrize(
    ("state", "peer", "error"),
    [(A, A, SplitBrain), (S, S, DualPassive), (P, P, RoleConflict), (B, B, RoleConflict)],
)
def test_fatal_is_sticky(state: State, peer: State, error: type[BinaryStarError]) -> None:
    fsm = fsm_in(state)
    with pytest.raises(error) as first:
        fsm.peer_state(peer, 11.0)
    expiry = fsm.peer_expiry
    calls: list[Callable[[], Transition]] = [
        lambda: fsm.client_request(11.5),
        lambda: fsm.client_request(1000.0),
        lambda: fsm.peer_state(B, 12.0),
        lambda: fsm.peer_state(S, 12.0),
        lambda: fsm.peer_state(peer, 12.0),
    ]
    for call in calls:
        with pytest.raises(error) as again:
            call()
        assert again.value is first.value
    assert fsm.state is state
    assert fsm.peer_expiry == expiry
    assert fsm.fatal is first.value
    assert "fatal" in repr(fsm)


# ----------------------------------------------------------------------------
# Construction, inputs, Transition
# ----------------------------------------------------------------------------


def test_construction() -> None:
    fsm = BinaryStarFSM(primary=True)
    assert (fsm.state, fsm.heartbeat, fsm.failover_timeout, fsm.peer_expiry) == (P, 1.0, 2.0, 2.0)
    assert fsm.fatal is None
    fsm = BinaryStarFSM(False, 0.25, 7)
    assert (fsm.state, fsm.failover_timeout, fsm.peer_expiry) == (B, 0.5, 7.5)
    assert isinstance(fsm.peer_expiry, float)


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"primary": 1}, TypeError),
        ({"primary": None}, TypeError),
        ({"primary": True, "heartbeat": "1"}, TypeError),
        ({"primary": True, "heartbeat": True}, TypeError),
        ({"primary": True, "heartbeat": 0.0}, ValueError),
        ({"primary": True, "heartbeat": -1.0}, ValueError),
        ({"primary": True, "heartbeat": math.inf}, ValueError),
        ({"primary": True, "heartbeat": math.nan}, ValueError),
        ({"primary": True, "now": None}, TypeError),
        ({"primary": True, "now": math.nan}, ValueError),
        ({"primary": True, "now": -math.inf}, ValueError),
    ],
)
def test_bad_construction(kwargs: dict[str, object], error: type[Exception]) -> None:
    with pytest.raises(error):
        BinaryStarFSM(**kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [3, "ACTIVE", Event.PEER_ACTIVE, None])
def test_peer_state_wants_a_state(bad: object) -> None:
    fsm = fsm_in(S)
    with pytest.raises(TypeError, match="State"):
        fsm.peer_state(bad, 11.0)  # type: ignore[arg-type]
    assert fsm.state is S and fsm.fatal is None


@pytest.mark.parametrize(
    ("bad", "error"),
    [("1", TypeError), (True, TypeError), (math.nan, ValueError), (math.inf, ValueError)],
)
def test_bad_now(bad: object, error: type[Exception]) -> None:
    fsm = fsm_in(S)
    with pytest.raises(error):
        fsm.client_request(bad)  # type: ignore[arg-type]
    with pytest.raises(error):
        fsm.peer_state(A, bad)  # type: ignore[arg-type]
    assert fsm.state is S and fsm.peer_expiry == 12.0 and fsm.fatal is None


def test_integer_times_are_accepted() -> None:
    fsm = BinaryStarFSM(primary=True, now=0)
    assert fsm.client_request(2).accepted


def test_time_going_backwards_is_tolerated() -> None:
    fsm = fsm_in(S)  # expiry 12
    fsm.peer_state(A, 5.0)  # expiry now 7: earlier than before
    assert fsm.peer_expiry == 7.0
    assert fsm.client_request(7.0).accepted


def test_transition_is_frozen_and_changed_is_derived() -> None:
    tr = Transition(old_state=S, event=Event.CLIENT_REQUEST, new_state=A, accepted=True)
    assert tr.changed
    assert not Transition(old_state=A, event=Event.PEER_PASSIVE, new_state=A).changed
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        tr.accepted = False  # type: ignore[misc]
    with pytest.raises(TypeError):
        Transition(old_state=A, event=Event.PEER_PASSIVE, new_state=A, changed=True)  # type: ignore[call-arg]


# ----------------------------------------------------------------------------
# Properties
# ----------------------------------------------------------------------------

steps = st.lists(
    st.tuples(
        st.sampled_from([*State, None]),  # None: a client request
        st.floats(min_value=-1.0, max_value=5.0, allow_nan=False),
    ),
    max_size=60,
)


@settings(max_examples=400, deadline=None)
@given(
    primary=st.booleans(),
    heartbeat=st.floats(min_value=0.01, max_value=10.0),
    start=st.floats(min_value=-1e6, max_value=1e6),
    script=steps,
)
def test_random_sequences(
    primary: bool, heartbeat: float, start: float, script: list[tuple[State | None, float]]
) -> None:
    fsm = BinaryStarFSM(primary=primary, heartbeat=heartbeat, now=start)
    now = start
    for peer, dt in script:
        now += dt
        old, expiry = fsm.state, fsm.peer_expiry
        try:
            tr = fsm.client_request(now) if peer is None else fsm.peer_state(peer, now)
        except BinaryStarError as exc:
            assert fsm.fatal is exc
            assert fsm.state is old
            with pytest.raises(type(exc)):
                fsm.client_request(now)
            return
        assert fsm.state in (P, B, A, S)
        assert tr.old_state is old and tr.new_state is fsm.state
        assert tr.changed is (old is not fsm.state)
        # Manual recovery: nothing ever leaves ACTIVE, in particular for PASSIVE.
        if old is A:
            assert fsm.state is A
        assert not (old is A and fsm.state is S)
        if peer is None:
            assert tr.event is Event.CLIENT_REQUEST
            assert fsm.peer_expiry == expiry
            if old is B:
                assert not tr.accepted and fsm.state is B
            # Accepted exactly when the server ends up ACTIVE; from PRIMARY or
            # PASSIVE only once the peer has expired.
            assert tr.accepted is (fsm.state is A)
            if old in (P, S) and tr.accepted:
                assert now >= expiry
        else:
            assert tr.event is PEER_EVENTS[peer]
            assert not tr.accepted
            assert fsm.peer_expiry == now + fsm.failover_timeout
