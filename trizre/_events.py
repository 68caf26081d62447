"""The events a node reports to its subscribers, and the node's errors."""

from __future__ import annotations

import uuid
from typing import TypeAlias, final

import attrs
import trio

__all__ = [
    "Enter",
    "Event",
    "EventsIdle",
    "EventsOverflowed",
    "Evasive",
    "Exit",
    "Join",
    "Leader",
    "Leave",
    "MessageTooLarge",
    "NodeError",
    "PeerDisconnected",
    "Shout",
    "Silent",
    "Stop",
    "UnknownPeer",
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


class NodeError(Exception):
    """Base class of the errors a node raises."""


class UnknownPeer(NodeError, LookupError):
    """No peer with this UUID is present (never seen, not yet entered, or gone)."""

    def __init__(self, peer: uuid.UUID) -> None:
        super().__init__(f"no peer {peer} is present")
        self.peer = peer


class PeerDisconnected(NodeError):
    """The peer went away while a send to it waited for room (it was not sent), or during a ping."""

    def __init__(self, peer: uuid.UUID, message: str | None = None) -> None:
        super().__init__(message or f"peer {peer} disconnected before the message could be queued")
        self.peer = peer


class MessageTooLarge(NodeError, ValueError):
    """A WHISPER or SHOUT larger than this node's ``max_message_size``: nothing was sent.

    ``size`` is the message's encoded frames together, in octets;
    ``limit`` the node's ``max_message_size``.  Raised by
    :meth:`~trizre.Node.whisper`, :meth:`~trizre.Node.whisper_nowait` and
    :meth:`~trizre.Node.shout` before anything is queued and before a
    sequence number is used, so the peer's conversation goes on unharmed.
    A receiver with the same setting would have dropped the link (libzmq
    disconnects on a frame over the limit) and everything after it.
    """

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(
            f"message of {size} octets is over max_message_size ({limit} octets); nothing was sent"
        )
        self.size = size
        self.limit = limit


class EventsOverflowed(NodeError):
    """A subscription with ``overflow="raise"`` fell behind and lost events.

    Raised by the subscription's iterator after it has returned every event
    it did hold: the events after those were dropped for this subscriber
    only, and it should resynchronise from :meth:`Node.peers` and friends.
    """


class EventsIdle(NodeError, trio.TooSlowError):
    """No event came within a subscription's ``idle_timeout``.

    Raised by the subscription's iterator (or ``receive``) when it has
    waited ``idle_timeout`` seconds for the next event.  Nothing is lost and
    the subscription stays open: iterate it again to go on waiting.  A
    ``trio.TooSlowError``, so code written for ``trio.fail_after`` catches
    it too.
    """
