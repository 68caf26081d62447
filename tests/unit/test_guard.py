"""The rules that bound what strangers can make a node do, at exact times (trizre.sansio._guard)."""

from __future__ import annotations

import logging
import math
import uuid

import pytest

from trizre.sansio._guard import (
    LEAVE_GRACE,
    LeaveHints,
    LogLimiter,
    NewPeerBudget,
    credible_leave,
    log_rarely,
)

KEY_B = bytes(range(32))
KEY_X = bytes(range(1, 33))

# ----------------------------------------------------- forged leaving beacons


@pytest.mark.parametrize(
    ("address", "beacon_key", "endpoint", "peer_key", "credible"),
    [
        ("127.0.0.1", None, "tcp://127.0.0.1:49152", None, True),
        ("127.0.0.2", None, "tcp://127.0.0.1:49152", None, False),  # another host
        ("127.0.0.1", KEY_B, "tcp://127.0.0.1:49152", KEY_B, True),
        ("127.0.0.1", KEY_X, "tcp://127.0.0.1:49152", KEY_B, False),  # another key
        ("127.0.0.1", None, "tcp://127.0.0.1:49152", KEY_B, False),  # no key (downgrade)
        ("fe80::1%eth0", None, "tcp://fe80::1%eth0:49152", None, True),
        ("fe80::1%eth0", None, "tcp://[fe80::1]:49152", None, True),  # scopes spelt apart
        ("fe80::2%eth0", None, "tcp://fe80::1%eth0:49152", None, False),
        ("127.0.0.1", None, "ipc:///tmp/x", None, False),
        ("127.0.0.1", None, "tcp://name.example:1", None, False),  # ok-net: never resolved
        ("garbage", None, "tcp://127.0.0.1:49152", None, False),
    ],
)
def test_a_leaving_beacon_is_credible_only_from_the_peers_host_with_its_key(
    address: str, beacon_key: bytes | None, endpoint: str, peer_key: bytes | None, credible: bool
) -> None:
    assert credible_leave(address, beacon_key, endpoint, peer_key) is credible


def test_a_hint_opens_one_check_that_ends_only_a_peer_that_did_not_answer() -> None:
    hints = LeaveHints(grace=1.0)
    alive, gone = uuid.uuid4(), uuid.uuid4()
    answered = {alive: 3, gone: 0}  # PING-OKs each has sent us
    assert hints.deadline() == math.inf
    assert hints.hint(alive, 10.0, pongs=3)  # PING it
    assert hints.hint(gone, 10.5, pongs=0)
    assert len(hints) == 2
    assert hints.deadline() == 11.0
    assert hints.due(10.999, answered.get) == ([], [])
    answered[alive] = 4  # its PING-OK
    assert hints.due(11.0, answered.get) == ([], [])  # alive: it stays, the check closes
    assert alive not in hints
    assert hints.deadline() == 11.5
    assert hints.due(11.5, answered.get) == ([gone], [])  # no PING-OK within the grace: it left
    assert hints.deadline() == math.inf and len(hints) == 0


def test_a_check_during_which_our_reader_was_deaf_blames_nobody_and_asks_again() -> None:
    """A PING-OK may wait unread while our reader waits for a slow application."""
    hints = LeaveHints(grace=1.0)
    peer = uuid.uuid4()
    answered = {peer: 5}
    assert hints.hint(peer, 10.0, pongs=5, mark=2.0)  # deaf 2 s in all, so far
    # Deaf for 0.5 s of the grace: its PING-OK may be unread, so PING again.
    assert hints.due(11.0, answered.get, mark=2.5) == ([], [peer])
    assert hints.deadline() == 12.0
    answered[peer] = 6  # the backlog read: it answered
    assert hints.due(12.0, answered.get, mark=2.5) == ([], [])
    assert peer not in hints
    # Had it left, the next check, with the reader awake, ends it.
    assert hints.hint(peer, 20.0, pongs=6, mark=2.5)
    assert hints.due(21.0, answered.get, mark=3.0) == ([], [peer])
    assert hints.due(22.0, answered.get, mark=3.0) == ([peer], [])


def test_a_flood_of_hints_costs_a_ping_a_second_and_cannot_hide_a_real_leave() -> None:
    hints = LeaveHints(grace=1.0)
    peer = uuid.uuid4()
    answered = {peer: 0}
    # Forged leaves at 10 a second: one check, one PING, whatever the count.
    assert [hints.hint(peer, 10.0 + i / 10, pongs=0) for i in range(10)] == [True] + [False] * 9
    answered[peer] = 1  # it answered
    assert hints.due(11.0, answered.get) == ([], [peer])  # hinted again meanwhile: PING again
    assert hints.deadline() == 12.0
    # Its real leave comes at 11.05 while that check is open: no answer, it goes at 12.0.
    assert not hints.hint(peer, 11.05, pongs=1)
    assert hints.due(12.0, answered.get) == ([peer], [])


def test_a_peer_gone_by_other_means_closes_its_check() -> None:
    hints = LeaveHints()
    peer, other = uuid.uuid4(), uuid.uuid4()
    hints.hint(peer, 0.0, pongs=0)
    hints.hint(other, 0.0, pongs=0)
    hints.forget(other)
    assert other not in hints
    assert hints.due(5.0, lambda _: None) == ([], [])  # removed meanwhile: nothing to do
    assert len(hints) == 0


def test_the_default_grace_is_a_second() -> None:
    hints = LeaveHints()
    peer = uuid.uuid4()
    hints.hint(peer, 100.0, pongs=0)
    assert LEAVE_GRACE == 1.0
    assert hints.deadline() == 101.0


@pytest.mark.parametrize("grace", [0.0, -1.0, math.inf, math.nan])
def test_leave_hints_bad_grace(grace: float) -> None:
    with pytest.raises(ValueError, match="grace"):
        LeaveHints(grace)


# ------------------------------------------------------------ spoofed sources


def test_many_sources_share_one_budget_for_new_peers() -> None:
    budget = NewPeerBudget(rate=20.0, burst=64, total_rate=50.0, total_burst=256)
    sources = [f"127.1.{i // 250}.{i % 250 + 1}" for i in range(1000)]
    # 10,000 forged beacons in a second, ten from each of 1,000 sources:
    # the per-source throttle alone admitted every one.
    admitted = sum(
        budget.admit(sources[i % 1000], 100.0 + i / 10_000) is None for i in range(10_000)
    )
    assert admitted == 256 + 49  # the total burst, then 50 a second for 0.9999 s
    assert budget.admit("127.0.0.1", 101.0) is None  # the second's 50th
    assert budget.admit("127.0.0.1", 101.0) == "total"
    # Two seconds later the total has 100 tokens again; one source still its own 64 first.
    refusals = [budget.admit("127.0.0.9", 103.0) for _ in range(101)]
    assert refusals.count(None) == 64 and refusals[64:] == ["source"] * 37


def test_one_source_is_bounded_by_its_own_bucket_before_the_total() -> None:
    budget = NewPeerBudget(rate=20.0, burst=64, total_rate=50.0, total_burst=256)
    assert [budget.admit("a", 0.0) for _ in range(65)][-2:] == [None, "source"]
    assert budget.admit("a", 1.0) is None  # 20 more a second
    assert budget.admit("b", 1.0) is None  # the total was not spent by the refusal


@pytest.mark.parametrize(
    ("rate", "burst", "total_rate", "total_burst"),
    [(0.0, 1, 1.0, 1), (1.0, 0, 1.0, 1), (1.0, 1, 0.0, 1), (1.0, 1, 1.0, 0)],
)
def test_new_peer_budget_bad_input(
    rate: float, burst: int, total_rate: float, total_burst: int
) -> None:
    with pytest.raises(ValueError, match="budget"):
        NewPeerBudget(rate, burst, total_rate, total_burst)


# ---------------------------------------------------------------- log floods


def test_a_flood_of_one_kind_writes_one_line_every_ten_seconds() -> None:
    limiter = LogLimiter()
    written = [(t, limiter.admit("crowded", t / 100)) for t in range(10_000)]  # 100 s, 100/s
    lines = [(t / 100, skipped) for t, skipped in written if skipped is not None]
    assert lines == [(0.0, 0)] + [(10.0 * n, 999) for n in range(1, 10)]
    assert limiter.admit("other", 99.0) == 0  # topics are counted apart


def test_a_burst_limiter_writes_that_many_a_window() -> None:
    limiter = LogLimiter(every=10.0, burst=3)
    assert [limiter.admit("t", 0.0) for _ in range(5)] == [0, 0, 0, None, None]
    assert limiter.admit("t", 9.999) is None
    assert limiter.admit("t", 10.0) == 3  # a new window; it says what was left out
    assert "at most 3 times every 10 s" in limiter.note


def test_the_limiter_remembers_a_bounded_number_of_topics() -> None:
    limiter = LogLimiter(max_topics=4)
    for n in range(100):
        assert limiter.admit(f"topic-{n}", 0.0) == 0
    assert len(limiter._windows) <= 4


@pytest.mark.parametrize(("every", "burst"), [(0.0, 1), (math.inf, 1), (1.0, 0)])
def test_log_limiter_bad_input(every: float, burst: int) -> None:
    with pytest.raises(ValueError, match="log limiter"):
        LogLimiter(every, burst)


def test_log_rarely_writes_a_bounded_number_of_lines(caplog: pytest.LogCaptureFixture) -> None:
    logger = logging.getLogger("trizre.test_guard")
    limiter = LogLimiter()
    with caplog.at_level(logging.INFO, logger="trizre.test_guard"):
        for n in range(5000):  # 5,000 events over 25 s
            log_rarely(logger, limiter, "t", logging.WARNING, "event %d", n, now=n / 200)
        log_rarely(logger, limiter, "t", logging.DEBUG, "off", now=100.0)  # level off: nothing
    assert [r.getMessage() for r in caplog.records] == [
        "event 0; this is logged at most every 10 s",
        "event 2000; this is logged at most every 10 s (1999 more since the last)",
        "event 4000; this is logged at most every 10 s (1999 more since the last)",
    ]
