"""Every error trizre raises derives from :class:`TrizreError`; the node's are here.

A module of its own, with no imports, so that every layer (the codecs, the
sans-I/O rules, the transport, the node, the patterns) can raise them.
"""

from __future__ import annotations

import uuid

__all__ = [
    "ConfigError",
    "ConfigTypeError",
    "ConfigValueError",
    "EventsOverflowed",
    "MessageTooLarge",
    "NodeError",
    "PeerDisconnected",
    "TrizreError",
    "UnknownPeer",
]


class TrizreError(Exception):
    """The root of every error the library raises: ``except TrizreError`` catches them all."""


class NodeError(TrizreError):
    """Base class of the errors a node raises."""


class ConfigError(NodeError):
    """An option of :func:`~trizre.open_node` (a :class:`~trizre.NodeConfig`) the node cannot take.

    Raised before anything starts, with a message that names the option.
    Each is also a ``TypeError`` or a ``ValueError``, its two kinds below,
    as these options raised before the error root existed.
    """


class ConfigValueError(ConfigError, ValueError):
    """An option out of range, or at odds with another (a ``ValueError``)."""


class ConfigTypeError(ConfigError, TypeError):
    """An option of the wrong type (a ``TypeError``)."""


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
