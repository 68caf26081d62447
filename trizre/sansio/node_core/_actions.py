"""What the node's core asks its shell to do, and what it reads of the shell's peers.

The convention of :mod:`trizre.sansio._election`: inputs carry the time, the
outputs are plain records the shell carries out in order.
"""

from __future__ import annotations

from typing import Generic, Protocol, TypeAlias, TypeVar, final
from uuid import UUID

import attrs

from ...trace._contract import ExitReason
from .._events import Event
from .._peer import PeerProtocol

__all__ = ["Action", "Connect", "Drop", "Flush", "Held", "Publish", "S", "Trim", "WakeAt"]


class Held(Protocol):
    """What the core reads of the shell's per-peer object (the node's ``PeerSession``)."""

    beacon_key: bytes | None  # the discovery's key of its beacon; the core sets it

    @property
    def protocol(self) -> PeerProtocol: ...

    @property
    def uuid(self) -> UUID: ...

    @property
    def in_process(self) -> bool: ...


S = TypeVar("S", bound=Held)


@final
@attrs.frozen
class Connect:
    """Link to ``uuid`` at ``endpoint``; ``key``: its raw CURVE key (CURVE mode).

    ``source``: the beacon's sender (its new TCP peers are budgeted);
    ``answering``: linked on hearing its HELLO (see PeerProtocol).
    """

    uuid: UUID
    endpoint: str
    key: bytes | None = None
    source: str | None = None
    answering: bool = False


@final
@attrs.frozen
class Flush(Generic[S]):
    """Protocol messages wait in ``peer``'s queue: hand them to its link."""

    peer: S


@final
@attrs.frozen
class Publish(Generic[S]):
    """Report ``event`` to subscribers; ``peer``: the peer it came from, if any (traces)."""

    event: Event
    peer: S | None = None


@final
@attrs.frozen
class Drop(Generic[S]):
    """``peer`` is out of every table: close its link; ``reason`` and ``detail`` say why."""

    peer: S
    reason: ExitReason
    detail: str = ""


@final
@attrs.frozen
class WakeAt:
    """Something is due at ``at``: :meth:`NodeCore.poll`, or a peer's presence clock."""

    at: float


@final
@attrs.frozen
class Trim:
    """A crowd of sockets was closed a while ago: hand their memory back to the OS."""


Action: TypeAlias = Connect | Flush[S] | Publish[S] | Drop[S] | WakeAt | Trim
