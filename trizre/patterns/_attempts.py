"""The requesting side's shell: one request's attempts, as :class:`Retry` decides.

Every client (Lazy Pirate, services, Binary Star, Freelance's failover)
sends through :func:`_request`; the rules (timeouts, the hold after
ACCEPTED, refusals, abandonment) are the pure core's, ``_retry.py``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from uuid import UUID

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
)
from ._retry import (
    Abandoned,
    Answered,
    Retried,
    Retry,
    RetryDecision,
    Sent,
)

log = logging.getLogger("trizre.patterns")


async def _attempt(
    router: ReplyRouter,
    pending: _Pending,
    message: list[bytes],
    target: Callable[[int, _Pending], UUID | None],
    retry: Retry,
) -> proto.Reply | None:
    """Send ``message`` to a live target and wait for its reply; None once the attempt ends.

    If the target exits or goes silent, or cannot be sent to, the request
    goes at once to whatever ``target(attempt, pending)`` names next (waiting for one to
    appear).  ``retry`` (the pure rules) says when the attempt ends: held
    by a target that said ACCEPTED, then lost.  Only that deadline ends an
    attempt: the router's clock sets ``pending.expired`` (while waiting for
    a reply), or a cancel scope at it does (the rarer waits for a target
    or for room to send, which the clock cannot interrupt).
    """
    node = router.node
    attempt = retry.attempt
    while True:
        peer = target(attempt, pending)
        if peer is None:
            with trio.move_on_at(pending.deadline) as waited:
                await router.membership_changed()
            if waited.cancelled_caught or pending.expired:
                return None
            continue
        router.send_to(pending, peer)
        retry.sending()
        try:
            # Without a checkpoint when there is room, so that many requests
            # started together reach libzmq back to back.
            if not node.whisper_nowait(peer, *message):
                with trio.move_on_at(pending.deadline) as waited:
                    await node.whisper(peer, *message)
                if waited.cancelled_caught:
                    return None
        except NodeError as exc:
            log.debug("request could not go to %s: %s", peer, exc)
            pending.lost = True
            await checkpoint()  # never spin without a checkpoint
        else:
            retry.sent(peer)
        while pending.reply is None and not pending.lost and not pending.expired:
            if pending.accepted:
                # Held by a live worker: its silence counts, not the time it takes.
                router.set_deadline(pending, retry.accepted(router.now()))
                if pending.expired:
                    break
            await pending.wait()
        if pending.reply is not None:
            return pending.reply
        if pending.expired:
            return None
        router.set_deadline(pending, retry.lost(router.now()))
        if pending.expired:
            return None


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
    message = proto.encode_request(request_id, service, frames)
    in_flight = router.in_flight
    await in_flight.acquire()  # backpressure: at most max_in_flight at once
    try:
        pending = router.open(request_id, service)
        trace = None if router.tracer is None else _trace_observer(router.node)
        retry = Retry(  # positional: see Retry.__init__
            policy, request_id, router.now(), service, pattern, () if trace is None else (trace,)
        )
        counts = router.stats.of(service)  # the client's statistics(), counted here
        counts.requests += 1
        try:
            now = retry.started
            while (deadline := retry.next_attempt(now)) is not None:
                attempt = retry.attempt
                if attempt:
                    counts.retries += 1
                router.set_deadline(pending, deadline)
                reply = await _attempt(router, pending, message, target, retry)
                while reply is not None and reply.status == proto.STATUS_UNAVAILABLE:
                    # Refused (a passive Binary Star server): not executed.
                    counts.refused += 1
                    pending.reply = None
                    if retry.refused():
                        reply = None  # move on at once: the next attempt goes elsewhere
                        break
                    # Refused twice running (the pair is between states), or
                    # the last attempt: wait it out; an answer to an earlier
                    # attempt still counts if it comes.
                    while pending.reply is None and not pending.expired:
                        await pending.wait()
                    reply = pending.reply
                now = router.now()
                if reply is not None:
                    retry.answered(reply.status, pending.replied_by, now)
                    ok = reply.status == proto.STATUS_OK
                    ClientStats.answered(counts, now - retry.started, ok)
                    if ok:
                        return reply.body
                    raise RemoteError(reply.status, reply.body)
                if retry.timed_out():
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
                waited=router.now() - retry.started,
            )
        finally:
            router.close(request_id)
    finally:
        in_flight.release()
