"""What strangers may make a node do: the rules, sans I/O, with time passed in.

Anyone who can send a UDP datagram to the beacon port can claim to be
anyone, from almost any address: a beacon is not evidence of anything but
that someone sent it.  The node asks these rules before it acts on one, and
before it writes a log line that a remote party can trigger:

* :class:`LeaveHints`: a leaving beacon (port 0) is a hint, never a
  verdict.  One that names a known peer, from the peer's host and (CURVE)
  with the peer's key (:func:`credible_leave`), starts a check: the peer is
  PINGed, and ended only if no PING-OK comes back within ``grace``
  seconds.  A live peer answers and stays; one that really left answers
  nothing and goes ``grace`` seconds after its beacon (two at most while
  a forger repeats them).  Any traffic would not do as an answer: a
  leaver's last messages may arrive just after its beacon.
* :class:`NewPeerBudget`: how many new peers beacons may bring, per
  source address and all sources together, so that forgers spreading
  over many (spoofed) addresses cost a bounded number of sockets a second.
* :class:`LogLimiter`: at most ``burst`` lines per kind of event every
  ``every`` seconds, so a flood cannot fill a disk.

Nothing here imports trio or zmq; the tests run them at exact times.
"""

from __future__ import annotations

import ipaddress
import logging
import math
from collections.abc import Callable
from typing import Final, final
from uuid import UUID

__all__ = [
    "LEAVE_GRACE",
    "LogLimiter",
    "LeaveHints",
    "NewPeerBudget",
    "credible_leave",
    "log_rarely",
]

LEAVE_GRACE: Final = 1.0
"""Seconds a peer announced leaving has to prove its link alive before it is ended."""


def _same_host(address: str, endpoint: str) -> bool:
    """Whether ``address`` (a beacon's sender) is the host of ``endpoint`` (``tcp://h:p``).

    IPv6 scopes are ignored: a beacon's sender and a HELLO's endpoint spell
    them differently (``%eth0``, ``%2``, none), and the interface is one.
    """
    if not endpoint.startswith("tcp://"):
        return False
    host = endpoint[6:].rsplit(":", 1)[0].strip("[]").partition("%")[0]
    try:
        return ipaddress.ip_address(host) == ipaddress.ip_address(address.partition("%")[0])
    except ValueError:
        return False


def credible_leave(
    address: str, beacon_key: bytes | None, endpoint: str, peer_key: bytes | None
) -> bool:
    """Whether a leaving beacon could be the peer's own: its host, and its key if it has one.

    ``address``: the beacon's sender; ``beacon_key``: the CURVE key it
    carries; ``endpoint``: the peer's ``tcp://host:port``; ``peer_key``: the
    32-octet key the peer's link authenticates (``None`` without CURVE).
    A forger elsewhere on the network, or one without the peer's key, fails
    this; one who spoofs both still only starts a PING (:class:`LeaveHints`).
    Never raises: malformed input is simply not credible.
    """
    if peer_key is not None and beacon_key != peer_key:
        return False
    return _same_host(address, endpoint)


@final
class LeaveHints:
    """Peers announced leaving, waiting to prove their link alive.

    :meth:`hint` opens a check for a peer at ``now``, noting how many
    PING-OKs it had sent us; the caller PINGs it.  :meth:`due` closes the
    checks whose ``grace`` is up: a peer with no PING-OK since has left.
    One that answered stays; if more leaving beacons named it meanwhile,
    its check opens again at once (one more PING), so that a forger
    repeating them cannot hide the peer's real leave behind a check it
    answered: that leave then ends it within two ``grace``, one otherwise.
    A check judges by the PING-OKs its caller's reader processed: if that
    reader could not read for part of the grace (``mark``, the caller's
    count of seconds it was deaf, moved), a silent peer is not blamed for
    it; its check opens again (one more PING).
    A flood of hints costs one PING a ``grace`` per peer.  At most one
    check per peer, and only peers the caller knows are hinted: memory is
    bounded by its peer table.  Bad input: a ``grace`` that is not a
    positive finite number raises ``ValueError``.
    """

    __slots__ = ("_grace", "_open")

    def __init__(self, grace: float = LEAVE_GRACE) -> None:
        if not (grace > 0 and math.isfinite(grace)):
            raise ValueError(f"grace must be a positive number of seconds, got {grace!r}")
        self._grace = grace
        # peer -> (when its check opened, its PING-OKs then, hinted again since,
        # the caller's deafness mark then), oldest first
        self._open: dict[UUID, tuple[float, int, bool, float]] = {}

    def __len__(self) -> int:
        return len(self._open)

    def __contains__(self, peer: object) -> bool:
        return peer in self._open

    def hint(self, peer: UUID, now: float, pongs: int, mark: float = 0.0) -> bool:
        """A credible leaving beacon for ``peer`` at ``now``; True when a check opened (PING it).

        ``pongs``: the PING-OKs the peer has sent us so far; ``mark``: the
        seconds our reader has been deaf so far (see :meth:`due`).
        """
        found = self._open.get(peer)
        if found is not None:
            if not found[2]:
                self._open[peer] = (found[0], found[1], True, found[3])
            return False
        self._open[peer] = (now, pongs, False, mark)
        return True

    def deadline(self) -> float:
        """When the next check is due (``math.inf`` with none open)."""
        for opened, _, _, _ in self._open.values():
            return opened + self._grace  # insertion order is opening order
        return math.inf

    def due(
        self, now: float, pongs: Callable[[UUID], int | None], mark: float = 0.0
    ) -> tuple[list[UUID], list[UUID]]:
        """Close the checks due at ``now``: the peers that left, and those to PING again.

        ``pongs(peer)``: the PING-OKs it has sent us by now, ``None`` if it
        is gone already (its check just closes).  ``mark``: the seconds our
        reader has been deaf by now; a check during which it grew judges
        nobody (its PING-OK may wait unread) and opens again.
        """
        left: list[UUID] = []
        again: list[UUID] = []
        while self._open:
            peer, (opened, then, hinted, deaf_then) = next(iter(self._open.items()))
            if now < opened + self._grace:
                break
            del self._open[peer]
            current = pongs(peer)
            if current is None:
                continue
            if current == then and mark > deaf_then:
                self._open[peer] = (now, current, hinted, mark)  # we were deaf: ask again
                again.append(peer)
            elif current == then:
                left.append(peer)
            elif hinted:
                self._open[peer] = (now, current, False, mark)
                again.append(peer)
        return left, again

    def forget(self, peer: UUID) -> None:
        """``peer`` is gone by other means: drop its check, if any."""
        self._open.pop(peer, None)


@final
class NewPeerBudget:
    """Token buckets for new peers announced by beacons: per source, and for all sources.

    A source address may bring ``burst`` new peers at once, then ``rate``
    a second (one forger's flood); all sources together may bring
    ``total_burst`` at once, then ``total_rate`` a second (a forger
    spoofing many addresses).  Each new peer costs a socket and a
    handshake; established peers cost nothing here, so handshakes cannot
    starve them.  A refused peer is taken at a later beacon, or at once
    when its HELLO comes.  At most ``max_sources`` addresses are
    remembered; past that the table starts over (the total still holds).
    Bad input: non-positive rates, or bursts below 1, raise ``ValueError``.
    """

    __slots__ = (
        "_buckets",
        "_burst",
        "_max_sources",
        "_rate",
        "_total",
        "_total_burst",
        "_total_rate",
    )

    def __init__(
        self,
        rate: float,
        burst: int,
        total_rate: float,
        total_burst: int,
        max_sources: int = 4096,
    ) -> None:
        if not rate > 0 or burst < 1 or not total_rate > 0 or total_burst < 1:
            raise ValueError(
                "a budget needs rates > 0 and bursts >= 1, got "
                f"{rate!r}, {burst!r}, {total_rate!r}, {total_burst!r}"
            )
        self._rate = rate
        self._burst = float(burst)
        self._total_rate = total_rate
        self._total_burst = float(total_burst)
        self._max_sources = max_sources
        self._buckets: dict[str, tuple[float, float]] = {}  # source -> (tokens, at)
        self._total: tuple[float, float] | None = None  # (tokens, at)

    def admit(self, source: str, now: float) -> str | None:
        """Take a token for ``source`` and one from the total at ``now``.

        ``None`` when admitted; otherwise why not (``"source"`` or
        ``"total"``), having taken nothing.
        """
        tokens, at = self._buckets.get(source, (self._burst, now))
        tokens = min(self._burst, tokens + (now - at) * self._rate)
        total, total_at = self._total or (self._total_burst, now)
        total = min(self._total_burst, total + (now - total_at) * self._total_rate)
        refused: str | None = None
        if tokens < 1.0:
            refused = "source"
        elif total < 1.0:
            refused = "total"
        else:
            tokens -= 1.0
            total -= 1.0
        if source not in self._buckets and len(self._buckets) >= self._max_sources:
            self._buckets.clear()
        self._buckets[source] = (tokens, now)
        self._total = (total, now)
        return refused


@final
class LogLimiter:
    """Which log lines get written: per topic, ``burst`` every ``every`` seconds.

    Topics are fixed strings of the code, kinds of event (not one per
    peer): a flood of one kind writes ``burst`` lines every ``every``
    seconds, and the next line written says how many were left out.  At
    most ``max_topics`` are remembered (past that the table starts over).
    Bad input: an ``every`` that is not a positive finite number, or a
    ``burst`` below 1, raises ``ValueError``.
    """

    __slots__ = ("_burst", "_every", "_max_topics", "_skipped", "_windows")

    def __init__(self, every: float = 10.0, burst: int = 1, max_topics: int = 256) -> None:
        if not (every > 0 and math.isfinite(every)) or burst < 1:
            raise ValueError(
                f"a log limiter needs every > 0 and burst >= 1, got {every!r}, {burst!r}"
            )
        self._every = every
        self._burst = burst
        self._max_topics = max_topics
        self._windows: dict[str, tuple[float, int]] = {}  # topic -> (window start, lines)
        self._skipped: dict[str, int] = {}

    @property
    def note(self) -> str:
        """What a line says of its rate limit."""
        if self._burst == 1:
            return f"this is logged at most every {self._every:g} s"
        return f"this is logged at most {self._burst} times every {self._every:g} s"

    def admit(self, topic: str, now: float) -> int | None:
        """``None``: leave this line out.  Else write it: the lines left out since the last."""
        window = self._windows.get(topic)
        if window is None or now - window[0] >= self._every:
            if window is None and len(self._windows) >= self._max_topics:
                self._windows.clear()
                self._skipped.clear()
            self._windows[topic] = (now, 1)
        elif window[1] < self._burst:
            self._windows[topic] = (window[0], window[1] + 1)
        else:
            self._skipped[topic] = self._skipped.get(topic, 0) + 1
            return None
        return self._skipped.pop(topic, 0)


def log_rarely(
    logger: logging.Logger,
    limiter: LogLimiter,
    topic: str,
    level: int,
    message: str,
    *args: object,
    now: float,
    exc_info: bool = False,
) -> None:
    """``logger.log(level, message, *args)``, unless ``limiter`` leaves ``topic`` out at ``now``.

    The line ends saying it is rate-limited, and how many were left out
    since the last; ``exc_info`` adds the exception being handled.  Costs
    one dict lookup when left out, nothing when the level is off.
    """
    if not logger.isEnabledFor(level):
        return
    skipped = limiter.admit(topic, now)
    if skipped is None:
        return
    note = f"; {limiter.note}"
    if skipped:
        note += f" ({skipped} more since the last)"
    logger.log(level, message + "%s", *args, note, exc_info=exc_info)
