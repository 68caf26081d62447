"""Event fan-outs for tests: a fan-out with its subscribers, events to publish, draining."""

from __future__ import annotations

import uuid

from trizre.node._fanout import EventStream, Fanout, Overflow
from trizre.sansio._events import Event, Join

__all__ = ["drain", "joins", "subscribed"]

Spec = tuple[int, Overflow] | tuple[int, Overflow, float]


def subscribed(*specs: Spec) -> tuple[Fanout, list[EventStream]]:
    """A new fan-out and one subscription per ``(max_buffer, overflow[, idle_timeout])``."""
    fanout = Fanout()
    return fanout, [fanout.subscribe(*spec) for spec in specs]


def joins(n: int) -> list[Event]:
    """``n`` distinct events (JOINs of one peer to groups g0, g1, ...)."""
    peer = uuid.uuid4()
    return [Join(peer, "n", f"g{i}") for i in range(n)]


async def drain(stream: EventStream) -> list[Event]:
    """Every event left in ``stream`` until it ends (``async for``)."""
    return [event async for event in stream]
