"""Services' per-request bookkeeping, made cheaper for issue 28, keeps its rules.

One clock per reply router ends every request's attempts: their
deadlines live in one heap watched by one task
(``ReplyRouter.run_clock``) instead of a ``trio.CancelScope`` per attempt;
each attempt must still end at its own time, a held request must outlive
its neighbours' deadlines, and the heap must stay bounded however many
requests come and go.  Virtual time throughout.  The service client's
cheaper first-attempt ranking must rank as the documented one.
"""

from __future__ import annotations

import gc
import random
import uuid
import weakref

import pytest
import trio
import trio.testing

import trizre
from tests.support.patterns import StubNode, reply_event, stub_clients
from trizre.patterns import RequestAbandoned, RetryPolicy, ServiceClient
from trizre.patterns._common import ReplyRouter
from trizre.patterns._protocol import Accepted, encode

POLICY = RetryPolicy(attempt_timeout=1.0, attempts=2)


async def test_one_clock_ends_each_attempt_at_its_own_time(
    autojump_clock: trio.abc.Clock,
) -> None:
    with trio.fail_after(10):
        ended: dict[float, float] = {}
        async with stub_clients(("w", "echo")) as (node, (worker,), router, events, nursery):
            client = ServiceClient(router, POLICY)
            start = trio.current_time()

            async def ask(offset: float) -> None:
                await trio.sleep(offset)
                with pytest.raises(RequestAbandoned):
                    await client.request("echo", b"%f" % offset)
                ended[offset] = trio.current_time() - start

            async def answered() -> None:
                # A request answered in the middle disturbs nobody's deadline.
                await trio.sleep(0.4)
                assert await client.request("echo", b"answered") == (b"yes",)
                ended[-1.0] = trio.current_time() - start

            async def worker_answers_one() -> None:
                while True:
                    peer, request = await node.outbox.receive()
                    if request.body == (b"answered",):
                        await trio.sleep(0.5)
                        await events.send(reply_event(peer, request.request_id, 200, b"yes"))

            nursery.start_soon(worker_answers_one)
            async with trio.open_nursery() as asking:
                for offset in (0.0, 0.25, 0.6):
                    asking.start_soon(ask, offset)
                asking.start_soon(answered)
            nursery.cancel_scope.cancel()
        assert ended == {
            0.0: pytest.approx(2.0),
            0.25: pytest.approx(2.25),
            0.6: pytest.approx(2.6),
            -1.0: pytest.approx(0.9),
        }
        # Each unanswered request went out at its start and once more a second later.
        unanswered = [t for t, _, frames in node.sent if b"answered" not in frames]
        sent = sorted(round(t - start, 6) for t in unanswered)
        assert sent == [0.0, 0.25, 0.6, 1.0, 1.25, 1.6]
        assert {peer for _, peer, _ in node.sent} == {worker}


async def test_a_held_request_outlives_its_neighbours_deadlines(
    autojump_clock: trio.abc.Clock,
) -> None:
    with trio.fail_after(10):
        results: dict[bytes, object] = {}
        async with stub_clients(("w", "echo")) as (node, _, router, events, nursery):
            client = ServiceClient(router, RetryPolicy(attempt_timeout=1.0, attempts=1))
            start = trio.current_time()

            async def ask(body: bytes) -> None:
                try:
                    results[body] = await client.request("echo", body)
                except RequestAbandoned:
                    results[body] = trio.current_time() - start

            async def worker() -> None:
                peer, held = await node.outbox.receive()
                _, dropped = await node.outbox.receive()
                assert dropped.body == (b"dropped",)
                await trio.sleep(0.5)
                frames = tuple(encode(Accepted(held.request_id)))
                await events.send(trizre.Whisper(peer, "w", frames))
                await trio.sleep(9.0)  # far past every attempt's deadline
                await events.send(reply_event(peer, held.request_id, 200, b"at last"))

            nursery.start_soon(worker)
            async with trio.open_nursery() as asking:
                asking.start_soon(ask, b"held")
                await trio.testing.wait_all_tasks_blocked()
                asking.start_soon(ask, b"dropped")
        assert results == {b"held": (b"at last",), b"dropped": pytest.approx(1.0)}
        assert trio.current_time() - start == pytest.approx(9.5)


async def test_the_deadline_heap_stays_bounded(autojump_clock: trio.abc.Clock) -> None:
    with trio.fail_after(10):
        async with stub_clients(("w", "echo")) as (node, _, router, events, nursery):
            client = ServiceClient(router, RetryPolicy(attempt_timeout=60.0, attempts=1))
            largest = 0

            async def worker() -> None:
                while True:
                    peer, request = await node.outbox.receive()
                    await events.send(reply_event(peer, request.request_id, 200))

            async def caller() -> None:
                nonlocal largest
                for _ in range(500):
                    await client.request("echo")
                    largest = max(largest, len(router._deadlines))

            nursery.start_soon(worker)
            async with trio.open_nursery() as callers:
                for _ in range(8):
                    callers.start_soon(caller)
            nursery.cancel_scope.cancel()
        # 4,000 requests answered well within their minute: their entries
        # were pruned, not kept until due.
        assert largest <= 2 * 8 + 64 + 1
        assert trio.current_time() < 60.0


def test_the_first_attempts_ranking_is_the_documented_one() -> None:
    """The fast ranking (nothing suspect, nothing tried) picks what the full one picks:
    responsive first, then fewest in flight, then least recently used."""
    rng = random.Random(28)
    for _ in range(300):
        node = StubNode()
        workers = [node.add(f"w{i}", "echo") for i in range(rng.randint(1, 6))]
        router = ReplyRouter(node)  # type: ignore[arg-type]
        client = ServiceClient(router, POLICY)
        for worker in workers:
            if rng.random() < 0.3:
                node.unresponsive.add(worker)
            if load := rng.choice([0, 0, 1, 2, 3]):
                router.load[worker.int] = load
            if rng.random() < 0.7:
                client._last_used[worker.int] = rng.randint(0, 4)
        expected = min(
            workers,
            key=lambda w: (
                w in node.unresponsive,
                router.load.get(w.int, 0),
                client._last_used.get(w.int, -1),
            ),
        )
        assert client._target(0, router.open(rng.getrandbits(64), "echo")) == expected


def test_the_deadline_heap_stays_bounded_when_each_deadline_is_earlier() -> None:
    """Deadlines that come ever earlier (mixed policies) are pruned too."""
    router = ReplyRouter(object())  # type: ignore[arg-type]
    for i in range(2_000):
        pending = router.open(i)
        router.set_deadline(pending, 10_000.0 - i)
        router.close(i)
        assert len(router._deadlines) <= 2 * 1 + 64 + 1  # one request open at a time


def test_the_first_attempt_asks_only_its_choice_whether_it_is_responsive() -> None:
    """Issue 28: each responsiveness check is a node call and a UUID hash; with
    requests in flight the ranking needs only the answer of the worker it would
    pick (the least loaded, least recently used), unless that one is unresponsive."""
    asked: list[uuid.UUID] = []

    class Counting(StubNode):
        def peer_is_responsive(self, peer: uuid.UUID) -> bool:
            asked.append(peer)
            return super().peer_is_responsive(peer)

    node = Counting()
    workers = [node.add(f"w{i}", "echo") for i in range(4)]
    router = ReplyRouter(node)  # type: ignore[arg-type]
    client = ServiceClient(router, POLICY)
    for worker, load in zip(workers, (3, 1, 2, 1), strict=True):
        router.load[worker.int] = load
    client._last_used[workers[1].int] = 5
    client._last_used[workers[3].int] = 2
    assert client._target(0, router.open(1, "echo")) == workers[3]  # least recently used
    assert asked == [workers[3]]
    # The least loaded is unresponsive: the next one up, as the full ranking says.
    asked.clear()
    node.unresponsive.update({workers[1], workers[3]})
    assert client._target(0, router.open(2, "echo")) == workers[2]


class _Held:
    """Something a weak reference can watch."""


def test_an_ended_request_is_freed_at_once_not_held_by_its_deadline() -> None:
    """Issue 28: the heap keeps a deadline and a request id, not the request.
    An entry holding the ``_Pending`` kept every answered request (its latch,
    its set of workers tried) alive until the next pruning: on a busy client,
    the garbage collector's young generation filled with them and each of its
    passes took several times longer."""
    router = ReplyRouter(object())  # type: ignore[arg-type]
    pending = router.open(7)
    router.set_deadline(pending, 100.0)
    pending.memo = held = _Held()  # _Pending has slots and no weak references: this goes with it
    ended = weakref.ref(held)
    router.close(7)
    del pending, held
    gc.disable()  # freed by its reference count alone, not by a collection
    try:
        assert ended() is None
    finally:
        gc.enable()
    assert router._deadlines  # its stale entry is still there, to be skipped or pruned


async def test_a_stale_deadline_does_not_end_a_request_that_reuses_its_id(
    autojump_clock: trio.abc.Clock,
) -> None:
    """A caller's stable request id may be reused once its request ended: the
    old entry (same id, earlier deadline) must not end the new attempt."""
    with trio.fail_after(10):
        router = ReplyRouter(object())  # type: ignore[arg-type]
        async with trio.open_nursery() as nursery:
            nursery.start_soon(router.run_clock)
            start = trio.current_time()
            first = router.open(42)
            router.set_deadline(first, start + 1.0)
            router.close(42)
            again = router.open(42)
            router.set_deadline(again, start + 3.0)
            await trio.sleep(2.0)
            assert not again.expired
            await again.wait()
            assert again.expired
            assert trio.current_time() - start == pytest.approx(3.0)
            nursery.cancel_scope.cancel()
