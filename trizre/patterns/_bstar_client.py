"""The Binary Star client: requests to a pair, sent to the server it believes active.

See ``patterns/binary-star.md``; the servers are ``_bstar.py``'s.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, final
from uuid import UUID

import attrs

from .. import Node
from ..trace import _contract as kinds
from ._attempts import _request
from ._common import (
    ReplyRouter,
    RetryPolicy,
    _Pending,
    open_reply_router,
)


@final
class BinaryStarClient:
    """Requests to a Binary Star pair, known by the names of its two servers.

    It talks to the server it believes active (the primary at first).
    When an attempt times out, the server is gone, or it refuses (a
    passive server answers 503), the next attempt goes to the other
    server, resending the same request; the servers' failover timeout
    must be no longer than ``policy.attempt_timeout``.  It stays with
    whichever server last answered, so there is no fail-back by itself.
    """

    def __init__(self, router: ReplyRouter, primary: str, backup: str, policy: RetryPolicy) -> None:
        self._router = router
        self.servers = (primary, backup)
        self.policy = policy
        self._current = 0
        self.failovers = 0

    @property
    def current(self) -> str:
        """The name of the server the next request goes to first."""
        return self.servers[self._current]

    def _switch(self) -> None:
        self._current ^= 1
        self.failovers += 1

    def _target(self, attempt: int, pending: _Pending) -> UUID | None:
        # pending.memo: (attempt, server name) of this request's last send.
        memo = pending.memo
        if isinstance(memo, tuple) and memo[0] != attempt and memo[1] == self.current:
            # An attempt at the current server failed (timeout or refusal):
            # fail over.  Requests that failed with it find it switched.
            self._switch()
        pending.memo = (attempt, self.current)
        return self._router.node.peer_by_name(self.current)

    def statistics(self) -> dict[str, dict[str, Any]]:
        """What this client's requests met, per service: requests, retries, 503s
        (``refused``), error answers, abandoned requests and a histogram of the
        time to an answer (:class:`~trizre.patterns._common.ClientStats`).

        For monitoring (``trizre.metrics.ClientCollector``); never blocks.
        """
        return self._router.stats.snapshot()

    async def request(self, *frames: bytes) -> tuple[bytes, ...]:
        """Send a request to the active server and return the reply's frames.

        Raises :class:`RequestAbandoned` after ``policy.attempts`` attempts
        without a reply, :class:`RemoteError` for an error status,
        ``trio.ClosedResourceError`` once the node has stopped (as
        :meth:`LazyPirateClient.request`).
        Cancellation: the request is abandoned.
        """
        return await _request(
            self._router,
            frames,
            self.policy,
            service="",
            target=self._target,
            describe=f"binary star {self.servers[0]}/{self.servers[1]}",
            pattern=kinds.BINARY_STAR,
        )


@asynccontextmanager
async def open_binary_star_client(
    node: Node,
    primary: str,
    backup: str,
    policy: RetryPolicy | None = None,
    *,
    max_in_flight: int = 1000,
) -> AsyncIterator[BinaryStarClient]:
    """A :class:`BinaryStarClient` for the pair; it listens while the block runs.

    The default policy gives each attempt 2.5 s (longer than the default
    2 s failover) and 10 attempts, so a failover is ridden out.  A request
    the server has accepted is retried after ``attempt_timeout`` too,
    unless the policy sets its own ``hold_timeout``: only the active
    server runs requests (the passive one refuses, 503), so that retry
    cannot run a request twice, and a primary killed while holding
    requests costs one attempt, not the two ``evasive_timeout`` it takes
    to look silent.

    ``max_in_flight`` (default 1000) bounds the requests in flight at
    once; :meth:`request` calls beyond it wait for a place (backpressure),
    and a value below 1 raises ``ValueError``.
    """
    if primary == backup:
        raise ValueError("the two servers of a Binary Star pair need different names")
    async with open_reply_router(node, max_in_flight) as router:
        policy = policy or RetryPolicy(attempts=10)
        if policy.hold_timeout is None:
            policy = attrs.evolve(policy, hold_timeout=policy.attempt_timeout)
        yield BinaryStarClient(router, primary, backup, policy)
