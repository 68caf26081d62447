"""Peer presence as a sans-I/O state machine: time goes in, actions come out.

A peer is *alive* while we hear TCP traffic from it.  Silent for
``evasive`` seconds, it becomes *evasive*: we PING it and report it.  Still
silent ``evasive`` seconds later, it is *silent*: reported again, and pinged
every ``evasive`` seconds from then on.  Silent for ``expired`` seconds in
all, it has *expired*: the node removes it.  Any traffic makes it alive
again.  If ``expired <= evasive`` the evasive and silent steps never happen.

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
"""

from __future__ import annotations

import enum
import math
from typing import final

__all__ = ["Liveness", "Presence", "PresenceAction"]


class Liveness(enum.Enum):
    """Where a peer stands."""

    ALIVE = "alive"
    EVASIVE = "evasive"
    SILENT = "silent"


class PresenceAction(enum.Enum):
    """What the owner of a :class:`Presence` must do now."""

    EVASIVE = "evasive"  # send a PING, report Evasive
    SILENT = "silent"  # send a PING, report Silent
    PING = "ping"  # send a PING (still silent)
    EXPIRED = "expired"  # remove the peer, report Exit


@final
class Presence:
    """The liveness clock of one peer.

    Bad input: non-positive timeouts raise ``ValueError``.  Times are any
    monotonic float clock (the node passes ``trio.current_time()``).
    """

    __slots__ = (
        "_evasive",
        "_expired",
        "_next_link_ping",
        "_next_ping",
        "last_heard",
        "last_link",
        "liveness",
    )

    def __init__(self, now: float, evasive: float, expired: float) -> None:
        if evasive <= 0 or expired <= 0:
            raise ValueError(f"timeouts must be positive, got {evasive=} {expired=}")
        self._evasive = evasive
        self._expired = expired
        self.last_heard = now  # traffic or a beacon
        self.last_link = now  # traffic over the link
        self.liveness = Liveness.ALIVE
        self._next_ping = now + evasive
        self._next_link_ping = -math.inf

    def heard(self, now: float) -> None:
        """Traffic arrived from the peer at ``now``: it is alive, and so is our link."""
        self.last_heard = now
        self.last_link = now
        self.liveness = Liveness.ALIVE

    def beacon(self, now: float) -> None:
        """A beacon arrived at ``now``: the peer is alive, but this says nothing of the link."""
        self.last_heard = now
        self.liveness = Liveness.ALIVE

    def link_only(self, now: float) -> bool:
        """Whether an expiry at ``now`` is its link's silence alone (its beacons arrive)."""
        return now < self.last_heard + self._expired

    def _link_ping_at(self) -> float:
        return max(self.last_link + self._expired, self._next_link_ping)

    def deadline(self) -> float:
        """The earliest time at which :meth:`poll` may have an action."""
        expiry = min(self.last_heard + self._expired, self.last_link + 2 * self._expired)
        if self.last_link < self.last_heard:
            expiry = min(expiry, self._link_ping_at())
        if self.liveness is Liveness.ALIVE:
            return min(expiry, self.last_heard + self._evasive)
        if self.liveness is Liveness.EVASIVE:
            return min(expiry, self.last_heard + 2 * self._evasive)
        return min(expiry, self._next_ping)

    def poll(self, now: float) -> PresenceAction | None:
        """The action due at ``now``, if any; call again until ``None``."""
        # Compare against times built exactly as deadline() builds them, so
        # that poll(deadline()) always fires despite float rounding.
        last = self.last_heard
        if now >= last + self._expired or now >= self.last_link + 2 * self._expired:
            return PresenceAction.EXPIRED
        if self.last_link < last and now >= self._link_ping_at():
            self._next_link_ping = now + self._evasive
            return PresenceAction.PING
        if self.liveness is Liveness.ALIVE and now >= last + self._evasive:
            self.liveness = Liveness.EVASIVE
            self._next_ping = now + self._evasive
            return PresenceAction.EVASIVE
        if self.liveness is Liveness.EVASIVE and now >= last + 2 * self._evasive:
            self.liveness = Liveness.SILENT
            self._next_ping = now + self._evasive
            return PresenceAction.SILENT
        if self.liveness is Liveness.SILENT and now >= self._next_ping:
            self._next_ping = now + self._evasive
            return PresenceAction.PING
        return None
