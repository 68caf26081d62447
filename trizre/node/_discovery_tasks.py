"""The node's discovery tasks: beacons out, and the gossip service that replaces them.

What arrives (beacons, gossip tuples) is the core's to judge; these tasks
only send and serve.  Both run in the node's nursery until it stops.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from uuid import UUID

import trio

from .. import wire
from .._concurrency import sleep_until_shared
from ..sansio._gossip import Deliver, Forget
from ..sansio._peer import node_id
from ..transport._curve import CURVE_ALLOW_ANY, CurvePolicy
from ..transport._discovery import Discovery
from ..transport._gossip_service import GossipService, open_gossip
from ._config import NodeConfig

__all__ = ["next_multiple", "run_gossip", "send_beacons"]


async def send_beacons(discovery: Discovery, beacon: wire.Beacon, interval: float) -> None:
    """Send ``beacon`` now, then on every multiple of ``interval`` on the run's clock.

    On the multiples, so that the nodes of one process wake together: one
    run-loop wake-up a beacon interval, not one per node.  Runs until
    cancelled; a send error ends it (the node's nursery sees it).
    """
    while True:
        await discovery.send(beacon)
        # The nodes of a process sleep to the same multiple: one timer for all.
        await sleep_until_shared(next_multiple(trio.current_time(), interval))


async def run_gossip(
    config: NodeConfig,
    me: UUID,
    endpoint: str,
    heard: Callable[[Deliver | Forget], None],
    started: Callable[[GossipService], None],
) -> None:
    """Gossip discovery: publish ``me -> endpoint`` and hand what others publish to ``heard``.

    As zyre's gossip mode: the key is the UUID as 32 upper-case hex
    digits, the value our inbox endpoint, ``|`` our Z85 key with CURVE.
    ``started`` gets the service once it runs (the node unpublishes peers
    it drops through it).  Runs until cancelled.
    """
    bind = [config.gossip_bind] if config.gossip_bind else []
    # With CURVE our hub is a CURVE server under our key, judged by curve_allow.
    allow: CurvePolicy | None = None
    if config.curve is not None:
        allowed = None if config.curve_allow == CURVE_ALLOW_ANY else config.curve_allow
        assert not isinstance(allowed, str)
        allow = CurvePolicy(config.zap_domain, allowed)
    async with open_gossip(
        bind,
        config.gossip_connect,
        heard=heard,
        curve=config.curve,
        server_key=(dict(keys) if isinstance(keys := config.gossip_server_key, tuple) else keys),
        allow=allow,
    ) as gossip:
        started(gossip)
        value = endpoint
        if config.curve is not None:
            value += "|" + config.curve.public_z85
        gossip.publish(node_id(me), value, round(config.gossip_ttl * 1000))
        await trio.sleep_forever()


def next_multiple(now: float, interval: float) -> float:
    """The first multiple of ``interval`` strictly after ``now``.

    Strictly: with a clock that stands still (``trio.testing.MockClock``)
    a deadline rounded down to ``now`` would make the beacon loop spin.
    """
    deadline = (math.floor(now / interval) + 1) * interval
    while deadline <= now:
        deadline += interval
    return deadline
