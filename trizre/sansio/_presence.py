"""Peer presence as a sans-I/O state machine: time goes in, actions come out.

A peer is *alive* while we hear TCP traffic from it.  Silent for
``evasive`` seconds, we PING it.  If nothing answers within
:func:`answer_time` (``min(1 s, evasive / 2)``), it is *evasive*: reported.
Silent for twice ``evasive``, it is *silent*: reported again, and pinged
every ``evasive`` seconds from then on.  Silent for ``expired`` seconds in
all, it has *expired*: the node removes it.  Any traffic makes it alive
again.  If ``expired <= evasive`` the evasive and silent steps never happen.

A quiet peer that answers its PING (zyre pings every quiet peer every
``evasive`` seconds, and so do we) is never reported evasive: Evasive means
a PING went unanswered, not that a healthy link was quiet.

By default only TCP traffic counts, never beacons (as zyre, unlike pyre):
a beacon proves the process runs, not that our link to it works, and a
peer whose link is dead must not stay "present" forever.

A node may count beacons too (``beacons_refresh``, pyre's rule), so that
a TCP link stalled by a lossy network does not make the peer evasive.
Then a second clock watches the link alone: silent over TCP for
``expired`` seconds, the peer is PINGed (every ``evasive`` seconds from
then on); silent over TCP for twice ``expired``, it has expired whatever
its beacons say.  libzmq can leave a link open but deaf (a ROUTER gives
the peer's identity to a stale connection, and drops what the live one
carries): without this clock its beacons kept such a peer present, and
unheard, for ever.

Our own deafness (:class:`Deafness`): while the node cannot read its inbox
(its reader waits for a full event subscriber), a peer's messages wait
unread, so that time is not held against the peer: its silence is the time
since we last heard it *less* the time we were deaf meanwhile, up to
``expired`` (the cap).  Only the time the reader really could not read
counts, never the time another task waited to publish (the presence pass
that reports thousands of Evasive events to a slow application hears
nothing less for it), and the cap bounds the rest: a dead peer is removed
``expired`` seconds after its last word, or at most ``expired`` later
however slow the application.  A node deaf for longer than that does not
answer its peers' PINGs either, and they drop it.
"""

from __future__ import annotations

import enum
import functools
import math
from typing import Final, final

__all__ = ["Deafness", "Liveness", "Presence", "PresenceAction", "answer_time"]


class Liveness(enum.Enum):
    """Where a peer stands."""

    ALIVE = "alive"
    PINGED = "pinged"  # quiet, pinged, its answer not yet due: still responsive
    EVASIVE = "evasive"
    SILENT = "silent"


# The members that every message and every request reads (heard, beacon,
# responsive), as module globals: a member is a lookup on its enum's class,
# about ten times a global's.
_ALIVE: Final = Liveness.ALIVE
_PINGED: Final = Liveness.PINGED


class PresenceAction(enum.Enum):
    """What the owner of a :class:`Presence` must do now."""

    EVASIVE = "evasive"  # report Evasive (its PING went out earlier, unanswered)
    SILENT = "silent"  # send a PING, report Silent
    PING = "ping"  # send a PING
    EXPIRED = "expired"  # remove the peer, report Exit


def answer_time(evasive: float) -> float:
    """How long a peer has to answer its first PING before it is reported evasive.

    zyre's reap interval (1 s), and at most half of ``evasive`` so that
    evasive and silent stay two steps.  A PING-OK takes a round trip.
    """
    return min(1.0, evasive / 2)


@final
class Deafness:
    """When the node could not read its inbox: one per node, shared by its peers' clocks.

    The owner calls :meth:`stopped` when a reader starts waiting and
    :meth:`resumed` when it reads again (they nest: the node is deaf while
    any reader waits).  Pure: times are passed in, on the clock the peers'
    :class:`Presence` use.  Bad input: :meth:`resumed` without
    :meth:`stopped` raises ``RuntimeError``.
    """

    __slots__ = ("_depth", "since", "total")

    def __init__(self) -> None:
        self.total = 0.0  # seconds deaf, over the intervals that ended
        self.since: float | None = None  # when the current deafness began
        self._depth = 0

    @property
    def deaf(self) -> bool:
        """Whether a reader is waiting now."""
        return self.since is not None

    def stopped(self, now: float) -> None:
        """A reader stopped reading at ``now``."""
        self._depth += 1
        if self._depth == 1:
            self.since = now

    def resumed(self, now: float) -> None:
        """A reader reads again at ``now``."""
        if self._depth == 0:
            raise RuntimeError("resumed() without stopped()")
        self._depth -= 1
        if self._depth == 0:
            assert self.since is not None
            self.total += max(0.0, now - self.since)
            self.since = None

    def mark(self, now: float) -> float:
        """Seconds deaf up to ``now``: the difference of two marks is the deafness between them.

        For a ``now`` inside an interval that already ended the mark is a
        little high, which only credits a peer less.
        """
        since = self.since
        if since is None or now <= since:
            return self.total
        return self.total + (now - since)


_NEVER_DEAF = Deafness()  # never stopped: for clocks whose owner is always reading
# Shared by every peer's clock (a float is 24 B, and 100 nodes of a process
# hold 9,900 clocks): a link PING not yet planned, and each evasive time's
# answer time, made once.
_NO_PING = -math.inf


@functools.lru_cache(maxsize=64)
def _evasive_at(evasive: float) -> float:
    return evasive + answer_time(evasive)


@final
class Presence:
    """The liveness clock of one peer.

    Bad input: non-positive timeouts raise ``ValueError``.  Times are any
    monotonic float clock (the node passes ``trio.current_time()``), the
    same for ``deafness``, which the node shares between its peers.
    """

    __slots__ = (
        "_answer",
        "_deafness",
        "_evasive",
        "_expired",
        "_heard_mark",
        "_link_mark",
        "_next_link_ping",
        "_next_ping",
        "last_heard",
        "last_link",
        "liveness",
    )

    def __init__(
        self, now: float, evasive: float, expired: float, deafness: Deafness | None = None
    ) -> None:
        if evasive <= 0 or expired <= 0:
            raise ValueError(f"timeouts must be positive, got {evasive=} {expired=}")
        self._evasive = evasive
        self._expired = expired
        self._answer = _evasive_at(evasive)  # the silence at which it is evasive
        self._deafness = _NEVER_DEAF if deafness is None else deafness
        self.last_heard = now  # traffic or a beacon
        self.last_link = now  # traffic over the link
        self._heard_mark = self._link_mark = self._deafness.mark(now)
        self.liveness = Liveness.ALIVE
        self._next_ping = _NO_PING  # set where it is read: on PINGED and on SILENT
        self._next_link_ping = _NO_PING

    @property
    def responsive(self) -> bool:
        """False once it left a PING unanswered (evasive or silent), until it is heard again."""
        liveness = self.liveness
        return liveness is _ALIVE or liveness is _PINGED

    def heard(self, now: float) -> None:
        """Traffic arrived from the peer at ``now``: it is alive, and so is our link."""
        deafness = self._deafness
        mark = deafness.total if deafness.since is None else deafness.mark(now)
        self.last_heard = self.last_link = now
        self._heard_mark = self._link_mark = mark
        self.liveness = _ALIVE

    def beacon(self, now: float) -> None:
        """A beacon arrived at ``now``: the peer is alive, but this says nothing of the link."""
        deafness = self._deafness  # as heard(): every beacon of every peer comes here
        self.last_heard = now
        self._heard_mark = deafness.total if deafness.since is None else deafness.mark(now)
        self.liveness = _ALIVE

    # Silence is measured from a start: when it was last heard, moved on by
    # the deafness since (capped).  While the node is deaf, deadline()
    # takes the whole cap (nothing is due until the deafness ends or the
    # cap is reached); the owner asks again once the node reads again.

    def _credit(self, mark: float, now: float) -> float:
        return min(self._expired, self._deafness.mark(now) - mark)

    def _planned_credit(self, mark: float) -> float:
        deafness = self._deafness
        if deafness.since is not None:
            return self._expired
        return min(self._expired, deafness.total - mark)

    def link_only(self, now: float) -> bool:
        """Whether an expiry at ``now`` is its link's silence alone (its beacons arrive)."""
        return now < self.last_heard + self._credit(self._heard_mark, now) + self._expired

    def deadline(self) -> float:
        """The earliest time at which :meth:`poll` may have an action.

        Exact while the node's deafness stays as it is (read or deaf); when
        it changes, ask again.
        """
        start = self.last_heard + self._planned_credit(self._heard_mark)
        link = self.last_link + self._planned_credit(self._link_mark)
        expiry = min(start + self._expired, link + 2 * self._expired)
        if self.last_link < self.last_heard:
            expiry = min(expiry, max(link + self._expired, self._next_link_ping))
        if self.liveness is Liveness.ALIVE:
            return min(expiry, start + self._evasive)
        if self.liveness is Liveness.PINGED:
            return min(expiry, start + self._answer)
        if self.liveness is Liveness.EVASIVE:
            return min(expiry, start + 2 * self._evasive)
        return min(expiry, self._next_ping)

    def poll(self, now: float) -> PresenceAction | None:
        """The action due at ``now``, if any; call again until ``None``."""
        # Compare against times built exactly as deadline() builds them, so
        # that poll(deadline()) always fires despite float rounding.
        start = self.last_heard + self._credit(self._heard_mark, now)
        link = self.last_link + self._credit(self._link_mark, now)
        if now >= start + self._expired or now >= link + 2 * self._expired:
            return PresenceAction.EXPIRED
        if self.last_link < self.last_heard and now >= max(
            link + self._expired, self._next_link_ping
        ):
            self._next_link_ping = now + self._evasive
            return PresenceAction.PING
        liveness = self.liveness
        if liveness is Liveness.ALIVE and now >= start + self._evasive:
            self.liveness = Liveness.PINGED
            self._next_ping = now + self._evasive
            return PresenceAction.PING
        if liveness is Liveness.PINGED and now >= start + self._answer:
            self.liveness = Liveness.EVASIVE
            return PresenceAction.EVASIVE
        if liveness is Liveness.EVASIVE and now >= start + 2 * self._evasive:
            self.liveness = Liveness.SILENT
            self._next_ping = now + self._evasive
            return PresenceAction.SILENT
        if liveness is Liveness.SILENT and now >= self._next_ping:
            self._next_ping = now + self._evasive
            return PresenceAction.PING
        return None
