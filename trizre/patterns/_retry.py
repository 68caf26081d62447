"""A client's retry rules for one request, sans I/O.

:class:`Retry` keeps the state of one request across its attempts and
answers the Trio shell (``_attempts._request``) with deadlines and verdicts
(``patterns/README.md`` §5.4, ``patterns/lazy-pirate.md``):

* each attempt has ``attempt_timeout`` seconds, counted from its start;
* **accepted-hold**: once the current target says ACCEPTED, the attempt's
  deadline goes (to infinity, or to ``hold_timeout`` from then); if that
  target is then lost, a fresh ``attempt_timeout`` runs from that moment;
* **refused**: a 503 moves on to the next attempt at once, unless the
  previous attempt was refused too (the pair is between states) or this is
  the last attempt: then the attempt is waited out, and an answer to it or
  to an earlier attempt still counts;
* a deadline passed is a timed-out attempt; after ``attempts`` of them the
  request is abandoned.

Every input carries ``now``.  Each decision is handed to the observers
(the client's statistics and its trace are two of them), in order.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TypeAlias, final
from uuid import UUID

import attrs

__all__ = [
    "Abandoned",
    "Answered",
    "Observer",
    "RefusedReply",
    "Retried",
    "Retry",
    "RetryDecision",
    "RetryPolicy",
    "Sent",
    "Started",
    "TimedOut",
]


@final
@attrs.frozen
class RetryPolicy:
    """How long to wait for each attempt, and how many attempts to make.

    Defaults follow the Guide's Lazy Pirate: 2.5 s per attempt, 3 attempts.
    An attempt is timed until its server says ACCEPTED (it holds the
    request); from then on it waits for the reply as long as that server
    is present and responsive, or for ``hold_timeout`` seconds if that is
    set (to retry a handler that may hang; the retry may run it twice).
    Bad input: a non-positive or non-finite ``attempt_timeout`` or fewer
    than one attempt raises ``ValueError`` at construction.
    """

    attempt_timeout: float = 2.5
    attempts: int = 3
    hold_timeout: float | None = None

    def __attrs_post_init__(self) -> None:
        timeout = self.attempt_timeout
        if not (isinstance(timeout, int | float) and timeout > 0 and math.isfinite(timeout)):
            raise ValueError(f"attempt_timeout must be a positive number of seconds: {timeout!r}")
        if not isinstance(self.attempts, int) or self.attempts < 1:
            raise ValueError(f"attempts must be a whole number >= 1: {self.attempts!r}")
        hold = self.hold_timeout
        if hold is not None and not (isinstance(hold, int | float) and hold > 0):
            raise ValueError(f"hold_timeout must be None or a positive number of seconds: {hold!r}")


@final
@attrs.frozen
class Started:
    """A request begins (``rid`` its id, ``service`` "" for a named server)."""

    rid: int
    service: str
    pattern: str


@final
@attrs.frozen
class Retried:
    """Attempt ``attempt`` (1-based, > 1) begins."""

    rid: int
    service: str
    pattern: str
    attempt: int


@final
@attrs.frozen
class Sent:
    """Attempt ``attempt`` (1-based) went to ``peer``."""

    rid: int
    service: str
    pattern: str
    attempt: int
    peer: UUID


@final
@attrs.frozen
class RefusedReply:
    """A 503 answered attempt ``attempt``; ``move_on``: the next attempt starts now."""

    rid: int
    service: str
    attempt: int
    move_on: bool


@final
@attrs.frozen
class TimedOut:
    """Attempt ``attempt`` passed its deadline unanswered (not after a refusal)."""

    rid: int
    service: str
    attempt: int


@final
@attrs.frozen
class Answered:
    """An answer with ``status`` from ``peer``, ``latency`` seconds after the start."""

    rid: int
    service: str
    pattern: str
    attempt: int
    peer: UUID | None
    status: int
    latency: float


@final
@attrs.frozen
class Abandoned:
    """Every attempt went unanswered; ``reached`` of them went to some peer."""

    rid: int
    service: str
    pattern: str
    attempts: int
    reached: int
    waited: float


RetryDecision: TypeAlias = Started | Retried | Sent | RefusedReply | TimedOut | Answered | Abandoned
Observer = Callable[[RetryDecision], None]


@final
class Retry:
    """The retry state of one request: feed it what happens, it says what to do.

    ``deadline`` is when the current attempt ends (``math.inf`` while a
    target holds it with no ``hold_timeout``).  Methods that change it
    return it.  Observers see every decision in order.  Bad input: a
    ``policy`` that is not a :class:`RetryPolicy` raises ``TypeError``.
    """

    __slots__ = (
        "_held",
        "_last_reached",
        "_observers",
        "_reached",
        "_refused",
        "_refused_before",
        "attempt",
        "deadline",
        "pattern",
        "policy",
        "request_id",
        "service",
        "started",
    )

    # Positional as well as by keyword: the client's shell makes one a
    # request, and keywords to a class cost as much as two of its fields.
    def __init__(  # noqa: PLR0917
        self,
        policy: RetryPolicy,
        request_id: int,
        now: float,
        service: str = "",
        pattern: str = "",
        observers: Sequence[Observer] = (),
    ) -> None:
        if not isinstance(policy, RetryPolicy):
            raise TypeError(f"policy must be a RetryPolicy, got {type(policy).__name__}")
        self.policy = policy
        self.request_id = request_id
        self.service = service
        self.pattern = pattern
        self.started = now
        self.attempt = -1  # 0-based; -1 before the first
        self.deadline = now
        self._observers = tuple(observers)
        self._held = False  # the current target said ACCEPTED
        self._refused = False  # this attempt was refused (503)
        self._refused_before = False  # ... and so was the previous one
        self._reached = 0  # attempts that went to some peer
        self._last_reached = -1  # the last of them
        if self._observers:  # no observer, no decision built: the common, untraced case
            self._emit(Started(request_id, service, pattern))

    def _emit(self, decision: RetryDecision) -> None:
        for observe in self._observers:
            observe(decision)

    def next_attempt(self, now: float) -> float | None:
        """Begin the next attempt: its deadline, or ``None`` when none is left (abandoned)."""
        self.attempt += 1
        if self.attempt >= self.policy.attempts:
            self.attempt = self.policy.attempts - 1
            if not self._observers:
                return None
            self._emit(
                Abandoned(
                    self.request_id,
                    self.service,
                    self.pattern,
                    self.policy.attempts,
                    self._reached,
                    now - self.started,
                )
            )
            return None
        if self.attempt and self._observers:
            self._emit(Retried(self.request_id, self.service, self.pattern, self.attempt + 1))
        self._refused_before, self._refused = self._refused, False
        self._held = False
        self.deadline = now + self.policy.attempt_timeout
        return self.deadline

    @property
    def reached(self) -> int:
        """How many attempts went to some peer."""
        return self._reached

    def sending(self) -> None:
        """The request goes to a (new) target: it holds nothing yet."""
        self._held = False

    def sent(self, peer: UUID) -> None:
        """The current attempt went to ``peer``."""
        if self._last_reached != self.attempt:
            self._last_reached = self.attempt
            self._reached += 1
        if self._observers:
            self._emit(Sent(self.request_id, self.service, self.pattern, self.attempt + 1, peer))

    def accepted(self, now: float) -> float:
        """The current target said ACCEPTED: it holds the request (once per target)."""
        if not self._held:
            self._held = True
            hold = self.policy.hold_timeout
            self.deadline = math.inf if hold is None else now + hold
        return self.deadline

    def lost(self, now: float) -> float:
        """The current target is gone (exited, silent, left, unreachable)."""
        if self._held:
            self._held = False
            self.deadline = now + self.policy.attempt_timeout  # time again from now
        return self.deadline

    def refused(self) -> bool:
        """A 503 answered the current attempt: True to start the next attempt now.

        False: wait the attempt out (refused twice running, or the last one).
        """
        self._refused = True
        move_on = not self._refused_before and self.attempt + 1 < self.policy.attempts
        if self._observers:
            self._emit(RefusedReply(self.request_id, self.service, self.attempt + 1, move_on))
        return move_on

    def timed_out(self) -> bool:
        """The current attempt's deadline passed: True if its target is to be suspected.

        A refused attempt's end is no timeout: its server answered.
        """
        if self._refused:
            return False
        if self._observers:
            self._emit(TimedOut(self.request_id, self.service, self.attempt + 1))
        return True

    def answered(self, status: int, peer: UUID | None, now: float) -> None:
        """An answer other than 503 came (from ``peer``): the request ends."""
        if not self._observers:
            return
        self._emit(
            Answered(
                self.request_id,
                self.service,
                self.pattern,
                self.attempt + 1,
                peer,
                status,
                now - self.started,
            )
        )
