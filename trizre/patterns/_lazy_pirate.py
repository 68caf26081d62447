"""Lazy Pirate over ZRE: reliable requests to one server peer, found by name or UUID.

See ``patterns/lazy-pirate.md``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, final
from uuid import UUID

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
class LazyPirateClient:
    """Reliable requests to one server peer, found by name or UUID.

    Each request is sent, waited for ``policy.attempt_timeout``, and resent
    (with the same request id, so a server with a reply cache runs it once)
    up to ``policy.attempts`` times.  The server is looked up by name at
    every send, so a server that restarts (new UUID, same name) is followed
    — the ZRE equivalent of the Guide's close-and-reopen — and a server
    that exits gets the request again as soon as it is back.
    """

    def __init__(self, router: ReplyRouter, server: str | UUID, policy: RetryPolicy) -> None:
        self._router = router
        self.server = server
        self.policy = policy

    def _target(self, _attempt: int, _pending: _Pending) -> UUID | None:
        node = self._router.node
        if isinstance(self.server, UUID):
            return self.server if self.server in node.peers() else None
        return node.peer_by_name(self.server)

    def statistics(self) -> dict[str, dict[str, Any]]:
        """What this client's requests met, per service: requests, retries, 503s
        (``refused``), error answers, abandoned requests and a histogram of the
        time to an answer (:class:`~trizre.patterns._common.ClientStats`).

        For monitoring (``trizre.metrics.ClientCollector``); never blocks.
        """
        return self._router.stats.snapshot()

    async def request(self, *frames: bytes) -> tuple[bytes, ...]:
        """Send a request and return the reply's frames.

        Raises :class:`RequestAbandoned` after ``policy.attempts`` attempts
        without a reply, :class:`RemoteError` if the server answered with
        an error status, ``TypeError`` for frames that are not bytes, and
        ``trio.ClosedResourceError`` once the node has stopped (at once;
        a request in flight then sees it at its next attempt).
        Cancellation: the request is abandoned; a late reply is dropped.
        """
        return await _request(
            self._router,
            frames,
            self.policy,
            service="",
            target=self._target,
            describe=f"server {self.server}",
            pattern=kinds.LAZY_PIRATE,
        )


@asynccontextmanager
async def open_lazy_pirate_client(
    node: Node,
    server: str | UUID,
    policy: RetryPolicy | None = None,
    *,
    max_in_flight: int = 1000,
) -> AsyncIterator[LazyPirateClient]:
    """A :class:`LazyPirateClient` for ``server``; it listens while the block runs.

    ``max_in_flight`` (default 1000) bounds the requests in flight at
    once; :meth:`request` calls beyond it wait for a place (backpressure),
    and a value below 1 raises ``ValueError``.
    """
    if not isinstance(server, str | UUID):
        raise TypeError(f"server is a peer name or UUID, got {type(server).__name__}")
    async with open_reply_router(node, max_in_flight) as router:
        yield LazyPirateClient(router, server, policy or RetryPolicy())
