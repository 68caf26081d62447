"""A client's retry rules (trizre.patterns._retry), at exact times, no sockets.

Attempt timeouts, the hold after ACCEPTED, a refusal moving on at once
unless refused twice running, and abandonment; the decisions the client's
statistics and trace are written from, in order.
"""

from __future__ import annotations

import math
from uuid import UUID

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trizre.patterns._retry import (
    Abandoned,
    Answered,
    RefusedReply,
    Retried,
    Retry,
    RetryDecision,
    RetryPolicy,
    Sent,
    Started,
    TimedOut,
)

W1, W2 = UUID(int=1), UUID(int=2)
RID = 0xBEEF


def retry(policy: RetryPolicy, now: float = 100.0) -> tuple[Retry, list[RetryDecision]]:
    seen: list[RetryDecision] = []
    core = Retry(policy, RID, now, service="svc", pattern="service", observers=[seen.append])
    return core, seen


def test_each_attempt_has_its_own_timeout_and_then_the_request_is_abandoned() -> None:
    core, seen = retry(RetryPolicy(attempt_timeout=2.5, attempts=3))
    assert core.next_attempt(100.0) == 102.5
    core.sent(W1)
    assert core.timed_out()
    assert core.next_attempt(102.5) == 105.0
    assert core.timed_out()  # nobody to send to: still a timeout
    assert core.next_attempt(105.0) == 107.5
    core.sent(W2)
    assert core.timed_out()
    assert core.next_attempt(107.5) is None
    assert core.reached == 2
    assert seen == [
        Started(RID, "svc", "service"),
        Sent(RID, "svc", "service", 1, W1),
        TimedOut(RID, "svc", 1),
        Retried(RID, "svc", "service", 2),
        TimedOut(RID, "svc", 2),
        Retried(RID, "svc", "service", 3),
        Sent(RID, "svc", "service", 3, W2),
        TimedOut(RID, "svc", 3),
        Abandoned(RID, "svc", "service", attempts=3, reached=2, waited=7.5),
    ]


def test_accepted_stops_the_clock_until_the_target_is_lost_then_it_runs_afresh() -> None:
    core, _ = retry(RetryPolicy(attempt_timeout=2.0, attempts=2))
    core.next_attempt(100.0)
    core.sending()
    core.sent(W1)
    assert core.accepted(101.0) == math.inf
    assert core.accepted(500.0) == math.inf  # said again: no change
    assert core.lost(900.0) == 902.0  # lost: a full attempt timeout from then
    core.sending()  # resent elsewhere in the same attempt
    core.sent(W2)
    assert core.lost(901.0) == 902.0  # lost before it held the request: the clock runs on


def test_a_hold_timeout_bounds_the_hold_once_per_target() -> None:
    core, _ = retry(RetryPolicy(attempt_timeout=2.0, attempts=2, hold_timeout=5.0))
    core.next_attempt(100.0)
    core.sending()
    assert core.accepted(101.0) == 106.0
    assert core.accepted(103.0) == 106.0  # the hold counts from the first ACCEPTED
    core.lost(104.0)
    core.sending()
    assert core.accepted(104.5) == 109.5  # a new target's ACCEPTED starts a new hold


def test_a_new_attempt_does_not_inherit_the_hold() -> None:
    core, _ = retry(RetryPolicy(attempt_timeout=2.0, attempts=2, hold_timeout=5.0))
    core.next_attempt(100.0)
    core.accepted(100.5)
    assert core.next_attempt(105.5) == 107.5
    assert core.lost(106.0) == 107.5  # not held in this attempt: no fresh timeout


def test_a_refusal_moves_on_at_once_but_two_running_are_waited_out() -> None:
    core, seen = retry(RetryPolicy(attempt_timeout=1.0, attempts=4))
    core.next_attempt(100.0)
    assert core.refused()  # the passive one: try the other now
    assert not core.timed_out()  # ended by a refusal: nobody is suspected
    core.next_attempt(100.1)
    assert not core.refused()  # refused again: the pair is between states, wait
    assert not core.timed_out()
    core.next_attempt(101.1)
    core.timed_out()
    core.next_attempt(102.1)
    assert not core.refused()  # the last attempt: wait it out
    refusals = [d for d in seen if isinstance(d, RefusedReply)]
    assert refusals == [
        RefusedReply(RID, "svc", 1, move_on=True),
        RefusedReply(RID, "svc", 2, move_on=False),
        RefusedReply(RID, "svc", 4, move_on=False),
    ]


def test_an_answer_says_its_attempt_peer_status_and_latency() -> None:
    core, seen = retry(RetryPolicy(attempt_timeout=1.0, attempts=3))
    core.next_attempt(100.0)
    core.timed_out()
    core.next_attempt(101.0)
    core.answered(200, W1, 101.25)  # an answer to attempt 1 counts too
    assert seen[-1] == Answered(RID, "svc", "service", 2, W1, 200, 1.25)


def test_a_policy_that_is_not_a_retry_policy_is_refused() -> None:
    with pytest.raises(TypeError, match="RetryPolicy"):
        Retry((2.5, 3), RID, 0.0)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "options",
    [
        {"attempt_timeout": 0},
        {"attempt_timeout": math.inf},
        {"attempts": 0},
        {"hold_timeout": 0},
    ],
)
def test_bad_policies_raise_value_error(options: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        RetryPolicy(**options)  # type: ignore[arg-type]


@settings(max_examples=200, deadline=None)
@given(
    attempts=st.integers(1, 6),
    events=st.lists(st.sampled_from(["refused", "timeout", "accepted", "lost"]), max_size=40),
)
def test_never_more_attempts_than_the_policy_and_a_hold_never_shortens_an_attempt(
    attempts: int, events: list[str]
) -> None:
    core, seen = retry(RetryPolicy(attempt_timeout=1.0, attempts=attempts, hold_timeout=3.0))
    now = 0.0
    deadline = core.next_attempt(now)
    for event in events:
        if deadline is None:
            break
        now += 0.25
        if event == "accepted":
            assert core.accepted(now) >= min(deadline, now + 3.0)
        elif event == "lost":
            assert core.lost(now) in (deadline, now + 1.0)
        elif event == "timeout" or core.refused():
            core.timed_out()
            deadline = core.next_attempt(now)
            continue
        deadline = core.deadline
    assert sum(isinstance(d, Retried) for d in seen) <= attempts - 1
    assert sum(isinstance(d, Abandoned) for d in seen) == (deadline is None)
    assert 0 <= core.attempt < attempts
