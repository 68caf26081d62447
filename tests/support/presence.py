"""Driving a sans-I/O :class:`Presence` clock by hand, at exact times (no event loop).

Every time used is a small dyadic float (a multiple of 1/4), so the
additions and subtractions inside :class:`Presence` are exact and
timelines compare with ``==``.  Pure: usable from tests/unit.
"""

from __future__ import annotations

import math
from typing import Any

from hypothesis import strategies as st

from trizre.sansio._presence import Presence, PresenceAction, answer_time

__all__ = [
    "TIMERS",
    "expected_actions",
    "just_before",
    "next_due",
    "sleep_until_deadline",
    "timeline_to_expiry",
]

A = PresenceAction

TIMERS: dict[str, Any] = {
    "start": st.integers(0, 10_000).map(lambda n: n / 4),
    "evasive": st.integers(1, 40).map(lambda n: n / 4),
    "expired": st.integers(1, 160).map(lambda n: n / 4),
}
"""Hypothesis strategies for ``Presence(start, evasive, expired)``, all in quarters."""


def just_before(t: float) -> float:
    """The largest float below ``t``: nothing may be due there."""
    return math.nextafter(t, -math.inf)


def expected_actions(heard_at: float, evasive: float, expired: float) -> list[tuple[float, A]]:
    """The exact (time, action) timeline after traffic at ``heard_at``.

    A PING at ``evasive``; EVASIVE if it is still unanswered
    ``answer_time`` later; SILENT (with a PING) at twice ``evasive``, then a
    PING every ``evasive``; EXPIRED at ``expired`` cuts it short.
    """
    steps = [(evasive, A.PING), (evasive + answer_time(evasive), A.EVASIVE)]
    k = 2
    while k * evasive < expired:
        steps.append((k * evasive, A.SILENT if k == 2 else A.PING))
        k += 1
    out = [(heard_at + at, action) for at, action in steps if at < expired]
    out.append((heard_at + expired, A.EXPIRED))
    return out


def timeline_to_expiry(p: Presence) -> list[tuple[float, A]]:
    """Poll ``p`` at each ``deadline()`` until EXPIRED; the (time, action) of each.

    Checks on the way that nothing is due just before a deadline and
    something is at it.
    """
    got = []
    while True:
        t = p.deadline()
        assert p.poll(just_before(t)) is None
        action = p.poll(t)
        assert action is not None
        got.append((t, action))
        if action is A.EXPIRED:
            return got


def sleep_until_deadline(p: Presence, now: float) -> float:
    """The node's sleep: nothing is due from ``now`` until ``deadline()``, which is returned."""
    d = p.deadline()
    assert d >= now
    if d > now:
        assert p.poll(just_before(d)) is None
        assert p.poll(now) is None
    return d


def next_due(p: Presence, now: float) -> tuple[float, A]:
    """Sleep as the node does until the deadline, and poll there: something must be due."""
    now = sleep_until_deadline(p, now)
    action = p.poll(now)
    assert action is not None, "deadline() promised an action"
    return now, action
