"""The requesting side: Lazy Pirate, services over groups, Binary Star clients."""

from __future__ import annotations

import functools
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager, suppress
from typing import Any, Literal, final
from uuid import UUID

import attrs
import trio

from .. import Node, NodeError
from .._concurrency import checkpoint
from ..trace import _contract as kinds
from . import _protocol as proto
from ._common import (
    ClientStats,
    RemoteError,
    ReplyRouter,
    RequestAbandoned,
    RetryPolicy,
    _Pending,
    new_request_id,
    open_reply_router,
)
from ._retry import (
    Abandoned,
    Answered,
    Retried,
    Retry,
    RetryDecision,
    Sent,
)
from ._server import check_service_name

__all__ = [
    "BinaryStarClient",
    "Candidate",
    "FreelanceClient",
    "LazyPirateClient",
    "ServiceClient",
    "freelance_choice",
    "open_binary_star_client",
    "open_freelance_client",
    "open_lazy_pirate_client",
    "open_service_client",
]

log = logging.getLogger("trizre.patterns")

_Outcome = proto.Reply | None  # None: this attempt timed out or was refused


async def _attempt(
    router: ReplyRouter,
    pending: _Pending,
    message: list[bytes],
    target: Callable[[], UUID | None],
    retry: Retry,
    *,
    timer: trio.CancelScope,
) -> proto.Reply:
    """Send ``message`` to a live target and wait for its reply.

    If the target exits or goes silent, or cannot be sent to, the request
    goes at once to whatever ``target()`` names next (waiting for one to
    appear).  ``retry`` (the pure rules) says how long ``timer``, the
    attempt's scope, runs: held by a target that said ACCEPTED, then lost.
    Only ``timer`` ends an attempt.
    """
    node = router.node
    while True:
        peer = target()
        if peer is None:
            await router.membership_changed()
            continue
        router.send_to(pending, peer)
        retry.sending()
        try:
            # Without a checkpoint when there is room, so that many requests
            # started together reach libzmq back to back.
            if not node.whisper_nowait(peer, *message):
                await node.whisper(peer, *message)
        except NodeError as exc:
            log.debug("request could not go to %s: %s", peer, exc)
            pending.lost = True
            await checkpoint()  # never spin without a checkpoint
        else:
            retry.sent(peer)
        while pending.reply is None and not pending.lost:
            if pending.accepted:
                # Held by a live worker: its silence counts, not the time it takes.
                timer.deadline = retry.accepted(trio.current_time())
            await pending.wait()
        if pending.reply is not None:
            return pending.reply
        timer.deadline = retry.lost(trio.current_time())


def _trace_observer(node: Node) -> Callable[[RetryDecision], None] | None:
    """The client's trace, written from the retry core's decisions (``docs/traces.md``)."""
    tracer = node.tracer
    if tracer is None:
        return None

    def observe(decision: RetryDecision) -> None:
        if isinstance(decision, Sent):
            peer = decision.peer
            tracer.record(
                kinds.REQUEST_SENT,
                rid=f"{decision.rid:016x}",
                pattern=decision.pattern,
                service=decision.service,
                peer=peer,
                peer_name=node.peer_name(peer) if peer in node.peers() else "",
                attempt=decision.attempt,
            )
        elif isinstance(decision, Retried):
            tracer.record(
                kinds.REQUEST_RETRIED,
                rid=f"{decision.rid:016x}",
                pattern=decision.pattern,
                service=decision.service,
                attempt=decision.attempt,
            )
        elif isinstance(decision, Answered):
            tracer.record(
                kinds.REQUEST_ANSWERED,
                rid=f"{decision.rid:016x}",
                pattern=decision.pattern,
                service=decision.service,
                peer=decision.peer,
                status=decision.status,
                latency=round(decision.latency, 6),
                attempt=decision.attempt,
            )
        elif isinstance(decision, Abandoned):
            tracer.record(
                kinds.REQUEST_ABANDONED,
                rid=f"{decision.rid:016x}",
                pattern=decision.pattern,
                service=decision.service,
                attempt=decision.attempts,
            )

    return observe


async def _request(
    router: ReplyRouter,
    frames: Sequence[bytes],
    policy: RetryPolicy,
    *,
    service: str,
    target: Callable[[int, _Pending], UUID | None],
    describe: str,
    pattern: str,
    request_id: int | None = None,
) -> tuple[bytes, ...]:
    """The retry loop every client shares: the Trio shell of :class:`Retry`.

    ``target(attempt, pending)`` names the peer for this attempt (or None
    while there is none).  A timeout or a 503 refusal ends the attempt;
    any other non-200 status raises :class:`RemoteError` at once.
    """
    if request_id is None:
        request_id = new_request_id()
    # encode rejects frames that are not bytes (TypeError) before anything waits
    message = proto.encode(proto.Request(request_id, service, tuple(frames)))
    async with router.in_flight:  # backpressure: at most max_in_flight at once
        pending = router.open(request_id, service)
        trace = None if router.node.tracer is None else _trace_observer(router.node)
        retry = Retry(
            policy,
            request_id,
            trio.current_time(),
            service=service,
            pattern=pattern,
            observers=() if trace is None else (trace,),
        )
        counts = router.stats.of(service)  # the client's statistics(), counted here
        counts.requests += 1
        try:
            while (deadline := retry.next_attempt(trio.current_time())) is not None:
                attempt = retry.attempt
                if attempt:
                    counts.retries += 1
                with trio.CancelScope(deadline=deadline) as scope:
                    reply = await _attempt(
                        router,
                        pending,
                        message,
                        functools.partial(target, attempt, pending),
                        retry,
                        timer=scope,
                    )
                    while reply.status == proto.Status.UNAVAILABLE:
                        # Refused (a passive Binary Star server): not executed.
                        counts.refused += 1
                        pending.reply = None
                        if retry.refused():
                            scope.cancel()  # move on at once: the next attempt goes elsewhere
                        # Refused twice running (the pair is between states), or
                        # the last attempt: wait it out; an answer to an earlier
                        # attempt still counts if it comes.
                        while pending.reply is None:
                            await pending.wait()
                        reply = pending.reply
                    now = trio.current_time()
                    retry.answered(reply.status, pending.replied_by, now)
                    ok = reply.status == proto.Status.OK
                    ClientStats.answered(counts, now - retry.started, ok)
                    if ok:
                        return reply.body
                    raise RemoteError(reply.status, reply.body)
                if scope.cancelled_caught and retry.timed_out():
                    router.timed_out(pending)
                    log.debug(
                        "request %#x: attempt %d to %s timed out", request_id, attempt + 1, describe
                    )
            counts.abandoned += 1
            raise RequestAbandoned(
                request_id,
                policy.attempts,
                describe,
                sent=retry.reached,
                waited=trio.current_time() - retry.started,
            )
        finally:
            router.close(request_id)


# ----------------------------------------------------------------- Lazy Pirate


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


# -------------------------------------------------------- services over groups


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
        self._last_used: dict[UUID, int] = {}
        self._uses = 0

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

    def _choose(self, service: str, pending: _Pending) -> UUID | None:
        node = self._router.node
        workers = node.peers_by_group(service)
        if not workers:
            return None
        router = self._router
        # The ranking of the class docstring, one tuple per worker.  It runs
        # for every request, and each lookup by UUID costs a Python-level
        # hash: maps that are usually empty (suspicion, tried) are skipped.
        suspicion, tried = router.suspicion, pending.sent_to
        load, last_used = router.load, self._last_used
        responsive = node.peer_is_responsive
        choice, best = workers[0], None
        for worker in workers:
            rank = (
                suspicion.get(worker, 0) if suspicion else 0,
                not responsive(worker),
                worker in tried if tried else False,
                load.get(worker, 0),
                last_used.get(worker, -1),
            )
            if best is None or rank < best:
                choice, best = worker, rank
        self._uses += 1
        self._last_used[choice] = self._uses
        if (tracer := node.tracer) is not None:
            tracer.record(
                kinds.WORKER_CHOSEN,
                rid=f"{pending.request_id:016x}",
                service=service,
                peer=choice,
                peer_name=node.peer_name(choice),
            )
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
        check_service_name(service)
        return await _request(
            self._router,
            frames,
            self.policy,
            service=service,
            target=lambda _attempt, pending: self._choose(service, pending),
            describe=f"service {service!r}",
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


# ----------------------------------------------------------------- Binary Star


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


# ------------------------------------------------------------------ Freelance

FreelanceModel = Literal["failover", "shotgun"]


@final
@attrs.frozen
class Candidate:
    """A Freelance server as the choice sees it (``patterns/freelance.md`` §3)."""

    rank: int  # its place in the list the client was given (0 first); for a group, 0
    responsive: bool  # not Evasive or Silent
    suspicion: int  # attempts to it that timed out since it last answered
    tried: bool  # this request was already sent to it


def freelance_choice(candidates: Sequence[Candidate]) -> int | None:
    """Which of the present ``candidates`` a failover request goes to next (its index).

    The lowest on (suspicion, unresponsive, tried, rank), the first in
    ``candidates`` on a tie; ``None`` for none.  Pure: the contract's
    vectors (``patterns/vectors/freelance.json``) test it.
    """
    if not candidates:
        return None
    return min(
        range(len(candidates)),
        key=lambda i: (
            candidates[i].suspicion,
            not candidates[i].responsive,
            candidates[i].tried,
            candidates[i].rank,
        ),
    )


@final
class FreelanceClient:
    """Brokerless requests to several servers: the Guide's Freelance pattern over ZRE.

    ``servers`` are peer names, tried in that order, or ``service`` a
    group whose members all serve it.  Two models (``patterns/freelance.md``):

    * ``"failover"`` (the Guide's model 3): each request goes to one live
      server, the best by ZRE presence and past timeouts; when it exits or
      goes silent the request moves on at once, and when an attempt times
      out, the next one goes to another server.
    * ``"shotgun"`` (model 1): each attempt goes to every live server at
      once; the first 200 reply wins and the others are dropped by request
      id.  Every server runs every request: for idempotent, cheap requests
      where latency matters most.
    """

    def __init__(
        self,
        router: ReplyRouter,
        servers: Sequence[str],
        service: str,
        model: FreelanceModel,
        policy: RetryPolicy,
    ) -> None:
        self._router = router
        self.servers = tuple(servers)
        self.service = service
        self.model = model
        self.policy = policy

    def live(self) -> list[UUID]:
        """The servers present now, in their order (for a group, the node's order)."""
        node = self._router.node
        if self.service:
            return node.peers_by_group(self.service)
        found = (node.peer_by_name(name) for name in self.servers)
        return [peer for peer in found if peer is not None]

    def _best(self, _attempt: int, pending: _Pending) -> UUID | None:
        node, router = self._router.node, self._router
        live = self.live()
        pick = freelance_choice(
            [
                Candidate(
                    rank=0 if self.service else rank,
                    responsive=node.peer_is_responsive(peer),
                    suspicion=router.suspicion.get(peer, 0),
                    tried=peer in pending.sent_to,
                )
                for rank, peer in enumerate(live)
            ]
        )
        return None if pick is None else live[pick]

    def _describe(self) -> str:
        return f"service {self.service!r}" if self.service else f"servers {list(self.servers)}"

    def statistics(self) -> dict[str, dict[str, Any]]:
        """What this client's requests met, per service: requests, retries, 503s
        (``refused``), error answers, abandoned requests and a histogram of the
        time to an answer (:class:`~trizre.patterns._common.ClientStats`).

        For monitoring (``trizre.metrics.ClientCollector``); never blocks.
        """
        return self._router.stats.snapshot()

    async def request(self, *frames: bytes) -> tuple[bytes, ...]:
        """Send a request by the client's model and return the reply's frames.

        Raises :class:`RequestAbandoned` after ``policy.attempts`` attempts
        without a reply, :class:`RemoteError` for an error status,
        ``TypeError`` for frames that are not bytes, ``trio.ClosedResourceError``
        once the node has stopped.  Cancellation: the request is abandoned;
        late replies are dropped.
        """
        if self.model == "failover":
            return await _request(
                self._router,
                frames,
                self.policy,
                service=self.service,
                target=self._best,
                describe=self._describe(),
                pattern=kinds.FREELANCE,
            )
        return await self._shotgun(frames)

    async def _shotgun(self, frames: Sequence[bytes]) -> tuple[bytes, ...]:
        router, policy = self._router, self.policy
        node = router.node
        request_id = new_request_id()
        message = proto.encode(proto.Request(request_id, self.service, tuple(frames)))
        counts = router.stats.of(self.service)
        counts.requests += 1
        started, reached = trio.current_time(), 0
        async with router.in_flight:
            pending = router.open(request_id, self.service)
            try:
                for attempt in range(policy.attempts):
                    if attempt:
                        counts.retries += 1
                    with trio.move_on_after(policy.attempt_timeout):
                        while not (targets := self.live()):
                            await router.membership_changed()
                        reached += 1
                        for peer in targets:
                            pending.sent_to.add(peer)  # a reply from any of them counts
                            with suppress(NodeError):
                                if not node.whisper_nowait(peer, *message):
                                    await node.whisper(peer, *message)
                        refused: set[UUID] = set()
                        while True:
                            while pending.reply is None:
                                await pending.wait()
                            reply = pending.reply
                            if reply.status != proto.Status.UNAVAILABLE:
                                ok = reply.status == proto.Status.OK
                                ClientStats.answered(counts, trio.current_time() - started, ok)
                                if ok:
                                    return reply.body
                                raise RemoteError(reply.status, reply.body)
                            # One refused; the others may still answer.
                            counts.refused += 1
                            pending.reply = None
                            if pending.replied_by is not None:
                                refused.add(pending.replied_by)
                            if refused >= set(targets):
                                break  # all refused: the next attempt, at once
                    log.debug("request %#x: shotgun attempt %d unanswered", request_id, attempt + 1)
                counts.abandoned += 1
                raise RequestAbandoned(
                    request_id,
                    policy.attempts,
                    self._describe(),
                    sent=reached,
                    waited=trio.current_time() - started,
                )
            finally:
                router.close(request_id)


@asynccontextmanager
async def open_freelance_client(
    node: Node,
    servers: Sequence[str] = (),
    *,
    service: str | None = None,
    model: FreelanceModel = "failover",
    policy: RetryPolicy | None = None,
    max_in_flight: int = 1000,
) -> AsyncIterator[FreelanceClient]:
    """A :class:`FreelanceClient`; it listens for replies while the block runs.

    Give ``servers`` (peer names, in order of preference; they run
    :func:`open_server` with no service) or ``service`` (a group name;
    its workers run ``open_server(service=...)``), not both.

    Bad input: neither or both, an empty or repeated server name, an
    invalid service name, or a ``model`` other than ``"failover"`` and
    ``"shotgun"`` raise ``ValueError`` (a name that is not a ``str``,
    ``TypeError``); ``max_in_flight`` as for the other clients.
    """
    if isinstance(servers, str):
        raise TypeError("servers is a sequence of names; for one server, use [name]")
    names = tuple(servers)
    if bool(names) == (service is not None):
        raise ValueError("give the servers' names or a service, not both")
    for name in names:
        if not isinstance(name, str):
            raise TypeError(f"a server name is a str, got {type(name).__name__}")
        if not name:
            raise ValueError("a server name cannot be empty")
    if len(set(names)) != len(names):
        raise ValueError(f"a server is named twice in {list(names)}")
    if service is not None:
        check_service_name(service)
    if model not in ("failover", "shotgun"):
        raise ValueError(f"model is 'failover' or 'shotgun', got {model!r}")
    async with open_reply_router(node, max_in_flight) as router:
        yield FreelanceClient(router, names, service or "", model, policy or RetryPolicy())
