"""Freelance: brokerless requests to several servers, failover or shotgun.

See ``patterns/freelance.md``.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager, suppress
from typing import Any, Literal, final
from uuid import UUID

import attrs
import trio

from .. import Node, NodeError
from ..trace import _contract as kinds
from . import _protocol as proto
from ._attempts import _request
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
from ._server import check_service_name

log = logging.getLogger("trizre.patterns")


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
                    tried=peer.int in pending.sent_to,
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
                            pending.sent_to.add(peer.int)  # a reply from any of them counts
                            with suppress(NodeError):
                                if not node.whisper_nowait(peer, *message):
                                    await node.whisper(peer, *message)
                        refused: set[UUID] = set()
                        while True:
                            while pending.reply is None:
                                await pending.wait()
                            reply = pending.reply
                            if reply.status != proto.STATUS_UNAVAILABLE:
                                ok = reply.status == proto.STATUS_OK
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
