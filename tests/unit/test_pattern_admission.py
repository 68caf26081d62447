"""A server's admission rules (trizre.patterns._admission), at exact times, no sockets.

Gate, dedupe, shed, reply cache and accept-after, in the order
``patterns/README.md`` §5 and §7 give them, and the decisions the
server's trace is written from.
"""

from __future__ import annotations

from uuid import UUID

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.uuids import counting_uuids
from trizre.patterns._admission import (
    AcceptDue,
    Admission,
    Admitted,
    CachedReply,
    Decision,
    Executed,
    HeldAgain,
    IncomingRequest,
    Received,
    Refused,
    Replied,
    ReplyCache,
    RunningElsewhere,
    _admitted,
)
from trizre.patterns._protocol import Accepted, Reply

A, B = UUID(int=0xA), UUID(int=0xB)


def request(request_id: int, peer: UUID = A, service: str = "svc") -> IncomingRequest:
    return IncomingRequest(peer, "client", request_id, service, (b"x",))


def admission(**kwargs: object) -> tuple[Admission, list[Decision]]:
    seen: list[Decision] = []
    options: dict[str, object] = {"capacity": 4, "accept_after": 0.1, **kwargs}
    return Admission(observer=seen.append, **options), seen  # type: ignore[arg-type]


def test_a_request_is_admitted_held_and_its_accepted_due_after_accept_after() -> None:
    core, seen = admission()
    first = request(1)
    verdict = core.admit(first, now=10.0)
    assert verdict == Admitted(first, 10.1)
    assert seen == [Received(first), verdict]
    assert core.held == 1 and core.received == 1
    assert core.next_accept() == 10.1
    assert core.accepts_due(10.099) == []
    assert core.accepts_due(10.1) == [AcceptDue(first)]
    assert core.accepts_due(20.0) == []  # once only
    assert core.next_accept() is None
    assert core.held == 1  # still held: ACCEPTED is a promise, not an answer


def test_accepted_is_due_oldest_first_and_never_for_an_answered_request() -> None:
    core, _ = admission(accept_after=1.0)
    one, two, three = request(1), request(2), request(3)
    core.admit(one, now=0.0)
    core.admit(two, now=0.5)
    core.admit(three, now=0.75)
    core.started(two)
    core.finished(two, Reply(2, 200), now=0.9)  # answered in time: costs no ACCEPTED
    assert core.next_accept() == 1.0
    assert core.accepts_due(1.75) == [AcceptDue(one), AcceptDue(three)]
    assert core.held == 2


def test_accept_after_zero_makes_accepted_due_at_once() -> None:
    core, _ = admission(accept_after=0)
    core.admit(request(1), now=5.0)
    assert core.accepts_due(5.0) == [AcceptDue(request(1))]


def test_the_gate_refuses_first_even_a_retry_of_a_held_request() -> None:
    closed = False

    def gate(_request: IncomingRequest) -> int | None:
        return 503 if closed else None

    core, seen = admission(gate=gate)
    held = request(1)
    core.admit(held, now=0.0)
    closed = True
    verdict = core.admit(held, now=1.0)
    assert verdict == Refused(held, 503, "gate")
    assert seen[-2:] == [Received(held), verdict]
    assert (core.refused, core.shed, core.retried, core.received) == (1, 0, 0, 2)
    assert core.held == 1


def test_a_gate_that_raises_counts_only_the_arrival() -> None:
    def gate(_request: IncomingRequest) -> int | None:
        raise RuntimeError("broken gate")

    core, seen = admission(gate=gate)
    with pytest.raises(RuntimeError, match="broken gate"):
        core.admit(request(1), now=0.0)
    assert core.received == 1 and core.held == 0 and seen == [Received(request(1))]


def test_a_retry_of_a_held_request_is_answered_accepted_again_and_not_run() -> None:
    core, seen = admission()
    core.admit(request(7), now=0.0)
    verdict = core.admit(request(7), now=1.0)
    assert verdict == HeldAgain(request(7))
    assert seen[-1] == verdict
    assert core.retried == 1 and core.held == 1
    # The same id from another client is another request.
    assert isinstance(core.admit(request(7, peer=B), now=1.0), Admitted)


def test_a_full_server_sheds_with_503_and_admits_again_once_one_is_answered() -> None:
    core, _ = admission(capacity=2)
    core.admit(request(1), now=0.0)
    core.admit(request(2), now=0.0)
    verdict = core.admit(request(3), now=0.05)
    assert verdict == Refused(request(3), 503, "shed")
    assert core.shed == 1 and core.refused == 0 and core.held == 2
    # A retry of one held is still answered ACCEPTED, not shed: it runs already.
    assert core.admit(request(2), now=0.06) == HeldAgain(request(2))
    core.started(request(1))
    core.finished(request(1), Reply(1, 200), now=0.07)
    assert isinstance(core.admit(request(3), now=0.08), Admitted)


def test_the_reply_cache_answers_a_finished_request_and_runs_it_once() -> None:
    cache = ReplyCache()
    core, seen = admission(cache=cache)
    core.admit(request(1), now=0.0)
    core.started(request(1))
    assert seen[-1] == Executed(request(1), idempotent=True)
    answer = Reply(1, 200, (b"done",))
    core.finished(request(1), answer, now=0.5)
    verdict = core.admit(request(1), now=1.0)
    assert verdict == CachedReply(request(1), answer)
    assert core.retried == 1 and core.executed == 1 and cache.hits == 1


def test_a_request_the_cache_runs_for_another_client_gets_no_answer() -> None:
    cache = ReplyCache(per_client=False)
    core, _ = admission(cache=cache)
    core.admit(request(9, peer=A), now=0.0)
    assert core.admit(request(9, peer=B), now=0.2) == RunningElsewhere(request(9, peer=B))
    core.started(request(9, peer=A))
    core.finished(request(9, peer=A), Reply(9, 200), now=0.3)
    assert core.admit(request(9, peer=B), now=0.4) == CachedReply(request(9, peer=B), Reply(9, 200))


def test_an_abandoned_request_is_forgotten_so_a_retry_runs_it() -> None:
    cache = ReplyCache()
    core, _ = admission(cache=cache)
    core.admit(request(1), now=0.0)
    core.abandoned(request(1))  # cancelled, or the server stopped before it ran
    assert core.held == 0 and len(cache) == 0 and core.next_accept() is None
    assert isinstance(core.admit(request(1), now=1.0), Admitted)


def test_a_cache_entry_older_than_max_age_runs_again() -> None:
    cache = ReplyCache(max_age=10.0)
    core, _ = admission(cache=cache)
    core.admit(request(1), now=0.0)
    core.finished(request(1), Reply(1, 200), now=1.0)
    assert isinstance(core.admit(request(1), now=1.0 + 10.0), CachedReply)
    assert isinstance(core.admit(request(2), now=20.0), Admitted)
    core.finished(request(2), Reply(2, 200), now=20.0)
    assert isinstance(core.admit(request(1), now=21.1), Admitted)  # forgotten


def test_sent_counts_replies_and_accepteds_apart_and_says_which_is_a_reply() -> None:
    core, seen = admission()
    core.sent(request(1), Reply(1, 500))
    core.sent(request(2), Accepted(2))
    assert (core.replied, core.accepted) == (1, 1)
    assert seen == [Replied(request(1), 500), Replied(request(2), None)]


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"capacity": 0, "accept_after": 0.1}, "capacity"),
        ({"capacity": 1, "accept_after": -1}, "accept_after"),
        ({"capacity": 1, "accept_after": float("inf")}, "accept_after"),
    ],
)
def test_bad_options_raise_value_error(options: dict[str, float], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        Admission(**options)  # type: ignore[arg-type]


_VERDICTS = (Refused, HeldAgain, CachedReply, RunningElsewhere, Admitted)
_steps = st.lists(
    st.tuples(st.sampled_from(["admit", "finish", "abandon", "tick"]), st.integers(0, 7)),
    max_size=60,
)


@settings(max_examples=200, deadline=None)
@given(capacity=st.integers(1, 4), steps=_steps)
def test_no_sequence_holds_more_than_capacity_or_answers_a_request_twice(
    capacity: int, steps: list[tuple[str, int]]
) -> None:
    core, seen = admission(capacity=capacity, accept_after=0.5)
    now = 0.0
    for action, request_id in steps:
        now += 0.25
        if action == "admit":
            core.admit(request(request_id), now)
        elif action == "finish":
            core.finished(request(request_id), Reply(request_id, 200), now)
        elif action == "abandon":
            core.abandoned(request(request_id))
        else:
            core.accepts_due(now)
        assert core.held <= capacity
        verdicts = [d for d in seen if isinstance(d, _VERDICTS)]
        assert len(verdicts) == core.received  # one verdict per arrival
        assert core.refused + core.shed == sum(isinstance(d, Refused) for d in verdicts)
    accepted = [d.request for d in seen if isinstance(d, AcceptDue)]
    admitted = [d.request for d in seen if isinstance(d, Admitted)]
    for held in set(accepted):
        # ACCEPTED at most once per admission.
        assert accepted.count(held) <= admitted.count(held)


def test_holding_a_request_hashes_no_uuid() -> None:
    """Issue 28: the held requests are keyed by the client's UUID as an int, so
    admitting, holding and releasing a request makes no Python-level
    ``UUID.__hash__`` call (there were five a request); a retry is still found."""
    make, hashed = counting_uuids()
    peer = make(0xC)
    core = Admission(capacity=4, accept_after=0.1)
    first = request(1, peer)
    assert isinstance(core.admit(first, now=1.0), Admitted)
    assert core.admit(request(1, make(0xC)), now=1.01) == HeldAgain(request(1, make(0xC)))
    assert core.admit(request(1, B), now=1.02) == Admitted(request(1, B), 1.12)  # another client
    core.finished(first, Reply(1, 200), now=1.05)
    assert core.held == 1
    assert hashed() == 0


def test_the_admitted_verdict_made_fast_is_the_class_s() -> None:
    """Issue 28: admit() makes its Admitted through the slots' descriptors."""
    held = IncomingRequest(UUID(int=3), "c", 4, "svc", (b"x",), 2)
    made = _admitted(held, 1.5)
    assert made == Admitted(held, 1.5) and type(made) is Admitted
    assert hash(made) == hash(Admitted(held, 1.5)) and made.accept_at == 1.5
    with pytest.raises(AttributeError):
        made.accept_at = 2.0  # type: ignore[misc]  # still frozen
