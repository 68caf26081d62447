"""Services over groups: requests to a service, the ZRE group its workers join.

See ``patterns/services.md``; the workers are ``_server.py``'s.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Final, final
from uuid import UUID

from .. import Node
from .._concurrency import checkpoint
from ..trace import _contract as kinds
from . import _protocol as proto
from ._attempts import _request
from ._common import (
    ReplyRouter,
    RetryPolicy,
    _Pending,
    open_reply_router,
)
from ._server import check_service_name

# Ranks an unresponsive worker after any responsive one: above any load
# (a count of requests in flight, bounded by max_in_flight).
_UNRESPONSIVE: Final = 1 << 62

_MAX_CHECKED: Final = 1024  # service names remembered as valid, at most


@final
class ServiceClient:
    """Requests to services, where a service is the ZRE group its workers join.

    Each request goes to one live worker of the group, never one that has
    exited, ranked by: fewest unanswered attempts since its last reply (a
    stuck worker that still answers ZRE PINGs sinks to the bottom after one
    timeout), responsive (not evasive or silent), not already tried for
    this request, fewest of our requests outstanding, least recently used.  When a worker
    exits or goes silent, requests in flight to it are resent at once to
    another; when an attempt times out (a stuck worker), the next attempt
    goes elsewhere.  Many requests may be in flight at once (call
    :meth:`request` from many tasks): each has its own id.

    ``mmi.service`` is answered locally from group membership: see
    :meth:`mmi`.
    """

    def __init__(self, router: ReplyRouter, policy: RetryPolicy) -> None:
        self._router = router
        self.policy = policy
        self._last_used: dict[int, int] = {}  # by the worker's UUID as an int, as router.load
        self._uses = 0
        # Service names found valid (bounded), each with its description
        # for errors and logs: neither is made again per request.
        self._checked: dict[str, str] = {}

    def workers(self, service: str) -> list[UUID]:
        """The peers currently offering ``service`` (members of its group)."""
        return self._router.node.peers_by_group(service)

    async def wait_for_service(self, service: str, workers: int = 1) -> None:
        """Wait until at least ``workers`` peers offer ``service``.

        Cancellation: nothing changes; bound it with ``trio.fail_after``.
        Raises ``trio.ClosedResourceError`` if the node has stopped, or
        when it stops while this waits.
        """
        while len(self.workers(service)) < workers:
            await self._router.membership_changed()
        await checkpoint()

    def _target(self, _attempt: int, pending: _Pending) -> UUID | None:
        """The worker for ``pending``'s next send (``_request``'s ``target``)."""
        node = self._router.node
        service = pending.service
        workers = node.peers_by_group(service)
        if not workers:
            return None
        router = self._router
        # The ranking of the class docstring.  It runs for every request, and
        # each lookup by UUID costs a Python-level hash: maps that are
        # usually empty (suspicion, tried) are skipped.
        suspicion, tried = router.suspicion, pending.sent_to
        load, last_used = router.load, self._last_used
        responsive = node.peer_is_responsive
        choice = workers[0]
        if suspicion or tried:
            best: tuple[int, bool, bool, int, int] | None = None
            for worker in workers:
                rank = (
                    suspicion.get(worker, 0),
                    not responsive(worker),
                    worker.int in tried,
                    load.get(worker.int, 0),
                    last_used.get(worker.int, -1),
                )
                if best is None or rank < best:
                    choice, best = worker, rank
        else:
            # The common case (nothing suspect, a first attempt): the least
            # loaded worker, the least recently used among equals.  Only it
            # is asked whether it is responsive (a node call and a UUID hash
            # each): when it is, it is the ranking's first (the ranking puts
            # responsive workers first, and none outranks it among them);
            # when not, the full ranking decides.
            choice_load = choice_used = -1
            for worker in workers:
                key = worker.int
                worker_load = load.get(key, 0)
                if choice_load >= 0 and worker_load > choice_load:
                    continue  # more loaded than the one chosen so far
                used = last_used.get(key, -1)
                if choice_load < 0 or worker_load < choice_load or used < choice_used:
                    choice, choice_load, choice_used = worker, worker_load, used
            if not responsive(choice):
                choice = self._rank_all(workers)
        self._uses += 1
        self._last_used[choice.int] = self._uses
        if (tracer := router.tracer) is not None:
            tracer.record(
                kinds.WORKER_CHOSEN,
                rid=f"{pending.request_id:016x}",
                service=service,
                peer=choice,
                peer_name=node.peer_name(choice),
            )
        return choice

    def _rank_all(self, workers: list[UUID]) -> UUID:
        """The first attempt's ranking over every worker, as one int each
        (unresponsive above any load), the last use looked up only to break
        a tie: for when no least loaded worker is responsive."""
        load, last_used = self._router.load, self._last_used
        responsive = self._router.node.peer_is_responsive
        choice = workers[0]
        least = -1
        choice_used: int | None = None
        for worker in workers:
            key = load.get(worker.int, 0)
            if not responsive(worker):
                key += _UNRESPONSIVE
            if least < 0 or key < least:
                choice, least, choice_used = worker, key, None
            elif key == least:
                if choice_used is None:
                    choice_used = last_used.get(choice.int, -1)
                used = last_used.get(worker.int, -1)
                if used < choice_used:
                    choice, choice_used = worker, used
        return choice

    def statistics(self) -> dict[str, dict[str, Any]]:
        """What this client's requests met, per service: requests, retries, 503s
        (``refused``), error answers, abandoned requests and a histogram of the
        time to an answer (:class:`~trizre.patterns._common.ClientStats`).

        For monitoring (``trizre.metrics.ClientCollector``); never blocks.
        """
        return self._router.stats.snapshot()

    async def request(
        self, service: str, *frames: bytes, request_id: int | None = None
    ) -> tuple[bytes, ...]:
        """Send a request to ``service`` and return the reply's frames.

        ``request_id`` (a 64-bit number) makes the request's id stable, for
        a caller that may send the same request again after a restart, to
        a worker whose ``ReplyCache(per_client=False)`` then runs it once;
        ``None`` (the default) picks a random one.  An id already in flight
        from this client, or outside 64 bits, raises ``ValueError``.

        ``mmi.*`` services are answered locally (see :meth:`mmi`).  Raises
        :class:`RequestAbandoned` when no worker answered within
        ``policy.attempts`` attempts (also when there is no worker at all),
        :class:`RemoteError` for an error status, ``ValueError`` for an
        invalid service name, ``trio.ClosedResourceError`` once the node
        has stopped (as :meth:`LazyPirateClient.request`).  Cancellation:
        the request is abandoned.
        """
        if not isinstance(service, str):
            raise TypeError(f"a service name is a str, got {type(service).__name__}")
        if service.startswith("mmi."):
            status = self.mmi(service, *frames)
            return (str(status).encode(),)
        describe = self._checked.get(service)
        if describe is None:  # checked once, not per request
            check_service_name(service)
            if len(self._checked) >= _MAX_CHECKED:
                self._checked.clear()
            describe = self._checked[service] = f"service {service!r}"
        return await _request(
            self._router,
            frames,
            self.policy,
            service=service,
            target=self._target,
            describe=describe,
            pattern=kinds.SERVICE,
            request_id=request_id,
        )

    def mmi(self, query: str, *args: bytes) -> int:
        """The Majordomo management interface, answered from ZRE groups.

        ``mmi("mmi.service", b"echo")`` is 200 when at least one worker
        offers ``echo``, 404 when none does; any other ``mmi.*`` query is
        501.  Nothing goes on the wire.
        """
        if query != "mmi.service":
            return proto.Status.NOT_IMPLEMENTED
        if len(args) != 1:
            raise ValueError("mmi.service takes exactly one argument: the service name")
        name = args[0].decode("utf-8", "replace")
        return proto.Status.OK if self.workers(name) else proto.Status.NOT_FOUND


@asynccontextmanager
async def open_service_client(
    node: Node, policy: RetryPolicy | None = None, *, max_in_flight: int = 1000
) -> AsyncIterator[ServiceClient]:
    """A :class:`ServiceClient`; it listens for replies while the block runs.

    ``max_in_flight`` (default 1000) bounds the requests in flight at
    once; :meth:`request` calls beyond it wait for a place (backpressure),
    and a value below 1 raises ``ValueError``.
    """
    async with open_reply_router(node, max_in_flight) as router:
        yield ServiceClient(router, policy or RetryPolicy())
