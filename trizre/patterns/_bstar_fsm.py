"""The Binary Star finite state machine, pure: no sockets, no clock, no I/O.

Binary Star (ZeroMQ Guide, chapter 4) pairs a *primary* and a *backup*
server. Each publishes its :class:`State` to the other once per heartbeat;
a state received from the partner is a ``PEER_*`` :class:`Event`, and a
request from a client is :attr:`Event.CLIENT_REQUEST`. The machine decides
from those events alone which server is *active* (answers clients) and which
is *passive* (refuses them).

Time is an argument: every call takes ``now`` in seconds, from whatever
monotonic clock the caller uses (``trio.current_time()``, say). The machine
never reads a clock itself, so it can be driven through any scenario in a
plain synchronous test.

The whole behaviour is the explicit table :data:`TRANSITIONS`, one entry for
every ``(State, Event)`` pair; ``patterns/binary-star.md`` is its written
contract.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping
from types import MappingProxyType
from typing import TypeAlias

import attrs

from ._errors import PatternError

__all__ = [
    "PEER_EVENTS",
    "TRANSITIONS",
    "BinaryStarError",
    "BinaryStarFSM",
    "DualPassive",
    "Event",
    "RoleConflict",
    "Rule",
    "SplitBrain",
    "State",
    "Transition",
    "Verdict",
]


class State(enum.Enum):
    """Where one server of the pair stands.

    The values are the octets carried by the STATE heartbeat on the wire;
    ``State(octet)`` decodes one and raises :class:`ValueError` for any
    octet other than 1 to 4.
    """

    PRIMARY = 1
    """Started as primary, has not yet heard from its partner."""
    BACKUP = 2
    """Started as backup, has not yet heard from its partner."""
    ACTIVE = 3
    """Answers client requests."""
    PASSIVE = 4
    """Refuses client requests while the partner is alive."""


class Event(enum.Enum):
    """What can happen to a server.

    ``PEER_X`` means a STATE heartbeat arrived saying the partner is in
    state ``X`` (same numbering as :class:`State`); :data:`PEER_EVENTS`
    maps one to the other. ``CLIENT_REQUEST`` means a client asked this
    server for service: the Guide's *client vote*.
    """

    PEER_PRIMARY = 1
    PEER_BACKUP = 2
    PEER_ACTIVE = 3
    PEER_PASSIVE = 4
    CLIENT_REQUEST = 5


PEER_EVENTS: Mapping[State, Event] = MappingProxyType(
    {
        State.PRIMARY: Event.PEER_PRIMARY,
        State.BACKUP: Event.PEER_BACKUP,
        State.ACTIVE: Event.PEER_ACTIVE,
        State.PASSIVE: Event.PEER_PASSIVE,
    }
)
"""The event raised by a heartbeat announcing the partner's state."""


class Verdict(enum.Enum):
    """A table outcome that is not simply "go to this state"."""

    IGNORE = "ignore"
    """State unchanged; the event is expected and needs no action."""
    REJECT = "reject"
    """State unchanged; the client request must not be answered."""
    VOTE = "vote"
    """Client vote: if ``now >= peer_expiry`` become ACTIVE and accept the
    request, otherwise reject it and stay put."""
    SPLIT_BRAIN = "split-brain"
    """Fatal: both servers are ACTIVE."""
    DUAL_PASSIVE = "dual-passive"
    """Fatal: both servers are PASSIVE, nobody will answer clients."""
    ROLE_CONFLICT = "role-conflict"
    """Fatal: both servers were configured with the same role."""


Rule: TypeAlias = State | Verdict
"""A table entry: a :class:`State` to move to (a client request that leads
to a state is accepted), or a :class:`Verdict`."""

_P, _B, _A, _S = State.PRIMARY, State.BACKUP, State.ACTIVE, State.PASSIVE
_E = Event

TRANSITIONS: Mapping[tuple[State, Event], Rule] = MappingProxyType(
    {
        # PRIMARY: waiting to hear from the backup.
        (_P, _E.PEER_PRIMARY): Verdict.ROLE_CONFLICT,
        (_P, _E.PEER_BACKUP): _A,
        (_P, _E.PEER_ACTIVE): _S,
        (_P, _E.PEER_PASSIVE): Verdict.IGNORE,
        (_P, _E.CLIENT_REQUEST): Verdict.VOTE,
        # BACKUP: waiting for the primary to become active.
        (_B, _E.PEER_PRIMARY): Verdict.IGNORE,
        (_B, _E.PEER_BACKUP): Verdict.ROLE_CONFLICT,
        (_B, _E.PEER_ACTIVE): _S,
        (_B, _E.PEER_PASSIVE): Verdict.IGNORE,
        (_B, _E.CLIENT_REQUEST): Verdict.REJECT,
        # ACTIVE: the only way out is death.
        (_A, _E.PEER_PRIMARY): Verdict.IGNORE,
        (_A, _E.PEER_BACKUP): Verdict.IGNORE,
        (_A, _E.PEER_ACTIVE): Verdict.SPLIT_BRAIN,
        (_A, _E.PEER_PASSIVE): Verdict.IGNORE,
        (_A, _E.CLIENT_REQUEST): _A,
        # PASSIVE: take over if the partner restarts or the clients vote.
        (_S, _E.PEER_PRIMARY): _A,
        (_S, _E.PEER_BACKUP): _A,
        (_S, _E.PEER_ACTIVE): Verdict.IGNORE,
        (_S, _E.PEER_PASSIVE): Verdict.DUAL_PASSIVE,
        (_S, _E.CLIENT_REQUEST): Verdict.VOTE,
    }
)
"""Every ``(State, Event)`` pair and its outcome; there are no defaults."""

del _P, _B, _A, _S, _E

if set(TRANSITIONS) != {(s, e) for s in State for e in Event}:  # pragma: no cover
    raise RuntimeError("Binary Star transition table is incomplete")


class BinaryStarError(PatternError):
    """A fatal Binary Star condition; the server must stop serving.

    Once raised, the :class:`BinaryStarFSM` that raised it refuses every
    further event by raising the same error again.
    """


class SplitBrain(BinaryStarError):
    """Both servers of the pair are ACTIVE (dual-active)."""


class DualPassive(BinaryStarError):
    """Both servers of the pair are PASSIVE: no server will answer clients."""


class RoleConflict(BinaryStarError):
    """Both servers were configured as primary, or both as backup.

    Two PRIMARY (or two BACKUP) servers that hear each other would wait for
    each other forever and never serve anyone, so this is fatal.
    """


_FATAL: Mapping[Verdict, type[BinaryStarError]] = MappingProxyType(
    {
        Verdict.SPLIT_BRAIN: SplitBrain,
        Verdict.DUAL_PASSIVE: DualPassive,
        Verdict.ROLE_CONFLICT: RoleConflict,
    }
)


# The pairings a stale heartbeat can fake (peer_state's ``informed``).
_CONFLICTS = frozenset({Verdict.SPLIT_BRAIN, Verdict.DUAL_PASSIVE})


def _fatal_message(verdict: Verdict, state: State) -> str:
    if verdict is Verdict.SPLIT_BRAIN:
        return (
            "Binary Star split brain: the peer reports ACTIVE while this server is ACTIVE; "
            "clients may have been served by both. Stop both servers, make sure the pair "
            "shares a dedicated link that cannot be cut apart from the clients, then "
            "restart the primary and, once it is active, the backup."
        )
    if verdict is Verdict.DUAL_PASSIVE:
        return (
            "Binary Star dual passive: the peer reports PASSIVE while this server is "
            "PASSIVE, so no server will answer clients. Stop both servers, then restart "
            "the primary and, once it is active, the backup."
        )
    role = "primary" if state is State.PRIMARY else "backup"
    return (
        f"Binary Star role conflict: the peer reports {state.name} while this server is "
        f"{state.name}; both servers are configured as {role}, so neither would ever "
        "serve. Configure exactly one primary and one backup, then restart."
    )


def _check_now(now: float) -> float:
    if isinstance(now, bool) or not isinstance(now, int | float):
        raise TypeError(f"now must be a float (seconds), not {type(now).__name__}")
    if not math.isfinite(now):
        raise ValueError(f"now must be finite, not {now!r}")
    return float(now)


@attrs.frozen
class Transition:
    """What one event did to a :class:`BinaryStarFSM`.

    ``accepted`` is meaningful for :attr:`Event.CLIENT_REQUEST` only: True
    when this server may answer the request. For peer events it is always
    False. ``changed`` is derived: ``old_state is not new_state``.
    """

    old_state: State
    event: Event
    new_state: State
    accepted: bool = False
    changed: bool = attrs.field(
        init=False,
        default=attrs.Factory(lambda self: self.old_state is not self.new_state, takes_self=True),
    )


class BinaryStarFSM:
    """One server's side of a Binary Star pair.

    The caller feeds it the partner's heartbeats (:meth:`peer_state`) and
    its clients' requests (:meth:`client_request`), each with the current
    time, and acts on the returned :class:`Transition`: answer the client
    only if ``accepted``, publish :attr:`state` every ``heartbeat`` seconds.

    A fatal condition (:class:`SplitBrain`, :class:`DualPassive`,
    :class:`RoleConflict`) is raised from the call that detected it; from
    then on every call raises that same error again and the state no longer
    changes. The server is expected to stop serving and exit: recovery is
    for the operator.

    Times should come from one monotonic clock. The machine compares them
    but does not require them to increase.
    """

    __slots__ = ("_conflict_since", "_fatal", "_heartbeat", "_peer_expiry", "_state")

    def __init__(self, primary: bool, heartbeat: float = 1.0, now: float = 0.0) -> None:
        """Start in PRIMARY if ``primary`` else BACKUP.

        The partner is presumed alive until ``now + 2 * heartbeat``; a
        PRIMARY server therefore refuses clients for that long, in case the
        backup is already serving them after a failover.

        Raises :class:`TypeError` if ``primary`` is not a bool or
        ``heartbeat``/``now`` are not numbers (bools are refused), and
        :class:`ValueError` if ``heartbeat`` is not a finite positive number
        or ``now`` is not finite.
        """
        if not isinstance(primary, bool):
            raise TypeError(f"primary must be a bool, not {type(primary).__name__}")
        if isinstance(heartbeat, bool) or not isinstance(heartbeat, int | float):
            raise TypeError(f"heartbeat must be a float (seconds), not {type(heartbeat).__name__}")
        if not (math.isfinite(heartbeat) and heartbeat > 0):
            raise ValueError(f"heartbeat must be a finite positive number, not {heartbeat!r}")
        start = _check_now(now)
        self._heartbeat = float(heartbeat)
        self._state = State.PRIMARY if primary else State.BACKUP
        self._peer_expiry = start + 2 * self._heartbeat
        self._fatal: BinaryStarError | None = None
        # When uninformed heartbeats started to claim a fatal pairing (None: they do not).
        self._conflict_since: float | None = None

    @property
    def state(self) -> State:
        """The current state; it is what this server publishes to its partner."""
        return self._state

    @property
    def heartbeat(self) -> float:
        """Seconds between two STATE heartbeats."""
        return self._heartbeat

    @property
    def failover_timeout(self) -> float:
        """Seconds without a partner heartbeat after which it counts as dead (2 heartbeats)."""
        return 2 * self._heartbeat

    @property
    def peer_expiry(self) -> float:
        """The time from which the partner counts as dead, unless it is heard from again."""
        return self._peer_expiry

    @property
    def fatal(self) -> BinaryStarError | None:
        """The fatal error this machine raised, or None while it is healthy."""
        return self._fatal

    def peer_state(self, state: State, now: float, *, informed: bool = True) -> Transition:
        """Apply a STATE heartbeat from the partner, received at ``now``.

        Moves the peer expiry to ``now + failover_timeout`` and applies the
        matching ``PEER_*`` event. ``accepted`` is always False.

        ``informed`` says whether the partner had heard this server's
        current state when it sent the heartbeat (the STATE message says
        what it last heard).  A fatal pairing (two ACTIVE, two PASSIVE)
        claimed by an *uninformed* heartbeat may be stale: sent before this
        server changed state, by a partner that may have died since (TCP
        can deliver it seconds later).  Such a heartbeat is ignored, and
        leaves the peer expiry alone, unless uninformed claims of a fatal
        pairing keep arriving for ``failover_timeout``: then the partner is
        alive, serving or refusing, and cannot hear this server, which is
        fatal too.  Any other heartbeat ends such a run.  The default,
        True, is the Guide's rule: every claim counts at once.

        Raises :class:`TypeError` if ``state`` is not a :class:`State` (decode
        wire octets with ``State(octet)`` first) or ``now`` is not a number,
        :class:`ValueError` if ``now`` is not finite, and a
        :class:`BinaryStarError` subclass on a fatal condition or if one was
        raised before (the peer expiry is then left alone).
        """
        if not isinstance(state, State):
            raise TypeError(f"state must be a State, not {type(state).__name__}")
        if not isinstance(informed, bool):
            raise TypeError(f"informed must be a bool, not {type(informed).__name__}")
        at = _check_now(now)
        event = PEER_EVENTS[state]
        conflict = self._fatal is None and TRANSITIONS[(self._state, event)] in _CONFLICTS
        if not conflict:
            self._conflict_since = None
        elif not informed:
            if self._conflict_since is None:
                self._conflict_since = at
            if at - self._conflict_since < self.failover_timeout:
                return Transition(old_state=self._state, event=event, new_state=self._state)
        transition = self._apply(event, at)
        self._peer_expiry = at + self.failover_timeout
        return transition

    def partner_seen(self, at: float) -> None:
        """The partner's server was alive at ``at`` (heard from, without a heartbeat).

        Moves the peer expiry to ``at + failover_timeout`` if that is later;
        no state changes.  For liveness the transport knows better than the
        heartbeats (a ZRE node still beaconing while TCP stalls): the
        partner does not count as dead while it is seen.  Raises as
        :meth:`peer_state` does (and leaves the expiry alone once fatal).
        """
        seen = _check_now(at)
        if self._fatal is not None:
            raise self._fatal.with_traceback(None)
        self._peer_expiry = max(self._peer_expiry, seen + self.failover_timeout)

    def client_request(self, now: float) -> Transition:
        """Apply a client request received at ``now``; ``accepted`` says whether to answer it.

        In PRIMARY or PASSIVE this is the client vote: the request is
        accepted, and the server becomes ACTIVE, only if ``now >=
        peer_expiry``. ACTIVE accepts; BACKUP rejects.

        Raises :class:`TypeError` if ``now`` is not a number,
        :class:`ValueError` if it is not finite, and the earlier
        :class:`BinaryStarError` if one was raised before.
        """
        return self._apply(Event.CLIENT_REQUEST, _check_now(now))

    def _apply(self, event: Event, now: float) -> Transition:
        if self._fatal is not None:
            raise self._fatal.with_traceback(None)
        old = self._state
        rule = TRANSITIONS[(old, event)]
        if rule is Verdict.VOTE:
            rule = State.ACTIVE if now >= self._peer_expiry else Verdict.REJECT
        if isinstance(rule, State):
            self._state = rule
            accepted = event is Event.CLIENT_REQUEST
            return Transition(old_state=old, event=event, new_state=rule, accepted=accepted)
        if rule is Verdict.IGNORE or rule is Verdict.REJECT:
            return Transition(old_state=old, event=event, new_state=old, accepted=False)
        error = _FATAL[rule](_fatal_message(rule, old))
        self._fatal = error
        raise error

    def __repr__(self) -> str:
        fatal = f", fatal={type(self._fatal).__name__}" if self._fatal is not None else ""
        return (
            f"<BinaryStarFSM state={self._state.name} peer_expiry={self._peer_expiry}"
            f" heartbeat={self._heartbeat}{fatal}>"
        )
