"""The events a node reports to its subscribers."""

from __future__ import annotations

import uuid
from typing import TypeAlias, final

import attrs

__all__ = [
    "Enter",
    "Event",
    "Evasive",
    "Exit",
    "Join",
    "Leader",
    "Leave",
    "Shout",
    "Silent",
    "Stop",
    "Whisper",
]


@final
@attrs.frozen
class Enter:
    """A peer said HELLO: it is now known, with its name, headers and endpoint."""

    peer: uuid.UUID
    name: str
    headers: tuple[tuple[str, str], ...]
    endpoint: str


@final
@attrs.frozen
class Exit:
    """A peer left: it said goodbye (by beacon or GOODBYE), expired, or broke the protocol.

    It also leaves all its groups: no :class:`Leave` is reported for them
    (as in zyre).  A node that stops reports no ``Exit`` for its peers; its
    subscriptions end with :class:`Stop`.
    """

    peer: uuid.UUID
    name: str


@final
@attrs.frozen
class Join:
    """A peer joined a group (also reported for each group in its HELLO)."""

    peer: uuid.UUID
    name: str
    group: str


@final
@attrs.frozen
class Leave:
    """A peer left a group (not reported for its groups when it exits: see :class:`Exit`)."""

    peer: uuid.UUID
    name: str
    group: str


@final
@attrs.frozen
class Whisper:
    """A peer sent us a message: ``frames`` holds zero or more frames."""

    peer: uuid.UUID
    name: str
    frames: tuple[bytes, ...]


@final
@attrs.frozen
class Shout:
    """A peer sent a message to ``group``: ``frames`` holds zero or more frames."""

    peer: uuid.UUID
    name: str
    group: str
    frames: tuple[bytes, ...]


@final
@attrs.frozen
class Evasive:
    """A peer left our PING unanswered.

    Silent for ``evasive_timeout``, it was PINGed, and nothing came within
    ``min(1 s, evasive_timeout / 2)``.  A quiet peer that answers is never
    reported.
    """

    peer: uuid.UUID
    name: str


@final
@attrs.frozen
class Silent:
    """A peer has been silent for twice ``evasive_timeout``.

    PINGed again then, and every ``evasive_timeout`` until it answers or
    expires.
    """

    peer: uuid.UUID
    name: str


@final
@attrs.frozen
class Leader:
    """``peer`` now leads ``group`` (our own UUID when we won its election).

    zyre's LEADER event. Every member of the group reports it, whether it
    contests (:meth:`Node.contest <trizre.Node.contest>`) or not, when an
    election ends with a leader other than the one it last reported.
    """

    peer: uuid.UUID
    name: str
    group: str


@final
@attrs.frozen
class Stop:
    """The node stopped; it is the last event of every subscription."""


Event: TypeAlias = Enter | Exit | Join | Leave | Whisper | Shout | Evasive | Silent | Leader | Stop


# Made for every message a node receives (issue 28): attrs' __init__ for a
# frozen class sets each field through a bound object.__setattr__, ~310 ns
# for a Whisper; the slots' own descriptors do it in ~200.  The same
# objects (tests/unit/test_events.py checks the fields and the result).
_new = object.__new__
_whisper_peer = Whisper.__dict__["peer"].__set__
_whisper_name = Whisper.__dict__["name"].__set__
_whisper_frames = Whisper.__dict__["frames"].__set__
_shout_peer = Shout.__dict__["peer"].__set__
_shout_name = Shout.__dict__["name"].__set__
_shout_group = Shout.__dict__["group"].__set__
_shout_frames = Shout.__dict__["frames"].__set__


def new_whisper(peer: uuid.UUID, name: str, frames: tuple[bytes, ...]) -> Whisper:
    """``Whisper(peer, name, frames)``, made faster (the receive path's); no checks."""
    event: Whisper = _new(Whisper)
    _whisper_peer(event, peer)
    _whisper_name(event, name)
    _whisper_frames(event, frames)
    return event


def new_shout(peer: uuid.UUID, name: str, group: str, frames: tuple[bytes, ...]) -> Shout:
    """``Shout(peer, name, group, frames)``, made faster (the receive path's); no checks."""
    event: Shout = _new(Shout)
    _shout_peer(event, peer)
    _shout_name(event, name)
    _shout_group(event, group)
    _shout_frames(event, frames)
    return event
