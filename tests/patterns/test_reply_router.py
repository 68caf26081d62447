"""Reply routing, the reply cache, and the clients' retry rules, without sockets.

The :class:`ReplyRouter` is fed trizre events from a memory channel we
control; the clients run over :class:`StubNode`, a stand-in with just the
node methods they call.  These are the receiver rules of
``patterns/README.md`` §9 and the client behaviour promised by
``patterns/lazy-pirate.md`` and ``patterns/services.md``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Awaitable, Callable
from pathlib import Path
from uuid import UUID

import pytest
import trio
import trio.testing

import trizre
from tests.support.patterns import (
    StubNode,
    as_events,
    blocks,
    deliver,
    pending_to,
    reply_event,
    running_router,
    stub_clients,
)
from tests.support.uuids import counting_uuids
from tests.support.waiting import waiting
from trizre.patterns import (
    BinaryStarClient,
    LazyPirateClient,
    RemoteError,
    ReplyCache,
    RequestAbandoned,
    RetryPolicy,
    ServiceClient,
)
from trizre.patterns._common import InFlight, ReplyRouter
from trizre.patterns._protocol import Reply, Request, State, decode, encode
from trizre.patterns._server import _IN_PROGRESS

VECTORS_PATH = Path(__file__).resolve().parents[2] / "patterns" / "vectors" / "envelope.json"

A, B, C = UUID(int=0xA), UUID(int=0xB), UUID(int=0xC)


# ======================================================== ReplyRouter: replies


async def test_reply_from_the_target_is_delivered_and_wakes_the_waiter() -> None:
    with trio.fail_after(5):
        async with running_router() as (router, events):
            pending = pending_to(router, 1, A)
            async with waiting(pending.wait) as waiter:
                assert not waiter.done
                await deliver(events, reply_event(A, 1, 200, b"pong", b""))
                await waiter.returned.wait()
            assert pending.reply == Reply(1, 200, (b"pong", b""))
            assert router.dropped == 0


async def test_reply_from_an_earlier_target_is_accepted() -> None:
    """A slow server answering attempt 1 answers the same request."""
    with trio.fail_after(5):
        async with running_router() as (router, events):
            pending = pending_to(router, 2, A, B)  # the next attempt went elsewhere
            assert pending.sent_to == {A.int, B.int} and pending.current == B
            await deliver(events, reply_event(A, 2, 200, b"late"))
            assert pending.reply == Reply(2, 200, (b"late",))
            assert router.dropped == 0


async def test_stale_reply_is_dropped_and_counted() -> None:
    with trio.fail_after(5):
        async with running_router() as (router, events):
            await deliver(events, reply_event(A, 99))  # never opened
            assert router.dropped == 1
            pending = pending_to(router, 3, A)
            router.close(3)  # finished, abandoned or cancelled
            await deliver(events, reply_event(A, 3))
            assert router.dropped == 2
            assert pending.reply is None


async def test_duplicate_reply_is_dropped_and_the_first_kept() -> None:
    with trio.fail_after(5):
        async with running_router() as (router, events):
            pending = pending_to(router, 4, A)
            await deliver(events, reply_event(A, 4, 200, b"first"))
            await deliver(events, reply_event(A, 4, 200, b"second"))
            await deliver(events, reply_event(A, 4, 500, b"third"))
            assert pending.reply == Reply(4, 200, (b"first",))
            assert router.dropped == 2


async def test_foreign_reply_is_dropped_and_wakes_nobody(
    autojump_clock: trio.abc.Clock,
) -> None:
    with trio.fail_after(5):
        async with running_router() as (router, events):
            pending = pending_to(router, 5, A)
            await deliver(events, reply_event(B, 5, 200, b"not yours"))
            assert router.dropped == 1
            assert pending.reply is None
            assert await blocks(pending.wait)
            # The real target's reply still gets through.
            await deliver(events, reply_event(A, 5, 200, b"yours"))
            assert pending.reply == Reply(5, 200, (b"yours",))
            assert router.dropped == 1


async def test_a_used_up_reply_lets_the_next_one_in() -> None:
    """After a 503 the client clears ``reply``; the request is still pending."""
    with trio.fail_after(5):
        async with running_router() as (router, events):
            pending = pending_to(router, 6, A)
            await deliver(events, reply_event(A, 6, 503))
            assert pending.reply == Reply(6, 503)
            pending.reply = None
            await deliver(events, reply_event(A, 6, 200, b"ok"))
            assert pending.reply == Reply(6, 200, (b"ok",))
            assert router.dropped == 0


async def test_many_pending_requests_are_routed_by_id() -> None:
    with trio.fail_after(5):
        async with running_router() as (router, events):
            pendings = {}
            for request_id in (10, 11, 12):
                pendings[request_id] = router.open(request_id)
                router.send_to(pendings[request_id], A)
            await deliver(events, *(reply_event(A, i, 200, str(i).encode()) for i in (12, 10, 11)))
            for request_id, pending in pendings.items():
                assert pending.reply == Reply(request_id, 200, (str(request_id).encode(),))


# ======================================================= ReplyRouter: presence


@pytest.mark.parametrize("lost_event", [trizre.Exit, trizre.Silent])
async def test_exit_or_silent_of_the_current_target_marks_lost_and_wakes(
    lost_event: type[trizre.Exit] | type[trizre.Silent],
) -> None:
    with trio.fail_after(5):
        async with running_router() as (router, events):
            pending = pending_to(router, 20, A, B)
            other = pending_to(router, 21, A)
            async with waiting(pending.wait) as waiter:
                await deliver(events, lost_event(B, "b"))
                await waiter.returned.wait()
            assert pending.lost
            assert pending.reply is None
            assert not other.lost  # it targets A, which is fine


@pytest.mark.parametrize(
    "event",
    [
        pytest.param(trizre.Exit(C, "c"), id="exit-of-another-peer"),
        pytest.param(trizre.Silent(C, "c"), id="silent-of-another-peer"),
        pytest.param(trizre.Evasive(A, "a"), id="evasive-of-the-target"),
        pytest.param(trizre.Leave(A, "a", "echo"), id="leave-of-the-target"),
    ],
)
async def test_other_presence_events_do_not_mark_lost(event: object) -> None:
    with trio.fail_after(5):
        async with running_router() as (router, events):
            pending = pending_to(router, 22, A)
            await deliver(events, event)
            assert not pending.lost


async def test_exit_after_the_reply_does_not_mark_lost() -> None:
    with trio.fail_after(5):
        async with running_router() as (router, events):
            pending = pending_to(router, 23, A)
            await deliver(events, reply_event(A, 23), trizre.Exit(A, "a"))
            assert pending.reply == Reply(23, 200)
            assert not pending.lost


@pytest.mark.parametrize(
    "event",
    [
        pytest.param(trizre.Enter(A, "a", (), "tcp://127.0.0.1:49152"), id="enter"),
        pytest.param(trizre.Exit(A, "a"), id="exit"),
        pytest.param(trizre.Join(A, "a", "echo"), id="join"),
        pytest.param(trizre.Leave(A, "a", "echo"), id="leave"),
        pytest.param(trizre.Evasive(A, "a"), id="evasive"),
        pytest.param(trizre.Silent(A, "a"), id="silent"),
    ],
)
async def test_membership_events_wake_membership_waiters(event: object) -> None:
    with trio.fail_after(5):
        async with running_router() as (router, events):
            async with waiting(router.membership_changed, tasks=2) as waiters:
                await deliver(events, event)
                await waiters.returned.wait()
            # It is an edge, not a level: a new waiter waits for the next event.
            assert await blocks(router.membership_changed, 0.05)


async def test_whispers_do_not_signal_membership(autojump_clock: trio.abc.Clock) -> None:
    with trio.fail_after(5):
        async with (
            running_router() as (router, events),
            waiting(router.membership_changed) as waiter,
        ):
            await deliver(
                events,
                reply_event(A, 1),
                trizre.Whisper(A, "a", (b"hello",)),
                trizre.Whisper(A, "a", (b"TZRP",)),
            )
            await trio.sleep(1)
            assert not waiter.done
            assert waiter.nursery is not None
            waiter.nursery.cancel_scope.cancel()


# ================================================ ReplyRouter: unexpected input


def _vector_frames(section: str) -> list[tuple[bytes, ...]]:
    vectors = json.loads(VECTORS_PATH.read_text(encoding="utf-8"))
    return [tuple(bytes.fromhex(f) for f in v["frames"]) for v in vectors[section]]


async def test_malformed_and_application_whispers_are_ignored() -> None:
    """README §9 rules 1 and 2: ignored, not counted, the router carries on."""
    with trio.fail_after(5):
        async with running_router() as (router, events):
            pending = pending_to(router, 42, A)
            junk = _vector_frames("invalid") + _vector_frames("not_pattern")
            await deliver(events, *(trizre.Whisper(A, "a", frames) for frames in junk))
            assert router.dropped == 0
            assert pending.reply is None and not pending.lost
            await deliver(events, reply_event(A, 42, 200, b"still here"))
            assert pending.reply == Reply(42, 200, (b"still here",))


async def test_requests_and_states_are_not_replies() -> None:
    with trio.fail_after(5):
        async with running_router() as (router, events):
            pending = pending_to(router, 43, A)
            await deliver(
                events,
                trizre.Whisper(A, "a", tuple(encode(Request(43, "", (b"x",))))),
                trizre.Whisper(A, "a", tuple(encode(State(3)))),
            )
            assert pending.reply is None
            assert router.dropped == 0


async def test_a_reply_in_a_shout_is_ignored() -> None:
    """README §3: pattern messages travel by WHISPER only."""
    with trio.fail_after(5):
        async with running_router() as (router, events):
            pending = pending_to(router, 44, A)
            frames = tuple(encode(Reply(44, 200, (b"shouted",))))
            await deliver(events, trizre.Shout(A, "a", "echo", frames))
            assert pending.reply is None
            assert router.dropped == 0


async def test_run_returns_when_the_events_end() -> None:
    with trio.fail_after(5):
        send, receive = trio.open_memory_channel[object](math.inf)
        router = ReplyRouter(object())  # type: ignore[arg-type]
        await send.send(trizre.Join(A, "a", "echo"))
        await send.aclose()
        await router.run(as_events(receive))  # type: ignore[arg-type]


# ================================================== ReplyRouter: bookkeeping


def test_open_twice_with_the_same_id_raises() -> None:
    router = ReplyRouter(object())  # type: ignore[arg-type]
    router.open(7)
    with pytest.raises(ValueError, match="already in flight"):
        router.open(7)
    router.close(7)
    router.open(7)  # free again once closed
    router.close(12345)  # closing an unknown id is harmless


async def test_outstanding_counts_unanswered_requests_per_current_target() -> None:
    with trio.fail_after(5):
        async with running_router() as (router, events):
            assert router.outstanding(A) == 0
            one, two, three, four = (router.open(i) for i in (1, 2, 3, 4))
            router.send_to(one, A)
            router.send_to(two, A)
            router.send_to(three, B)
            router.send_to(four, C)
            assert [router.outstanding(p) for p in (A, B, C)] == [2, 1, 1]
            await deliver(events, reply_event(A, 1))  # answered: no longer counts
            assert router.outstanding(A) == 1
            router.send_to(two, B)  # moved on: counts for its new target only
            assert [router.outstanding(p) for p in (A, B)] == [0, 2]
            router.close(3)  # finished or abandoned
            assert router.outstanding(B) == 1
            await deliver(events, trizre.Exit(B, "b"))  # lost: no longer counts
            assert router.outstanding(B) == 0 and two.lost
            router.send_to(four, C)  # a resend to the same peer counts once
            assert router.outstanding(C) == 1


async def test_a_timed_out_target_is_suspect_until_it_replies() -> None:
    with trio.fail_after(5):
        async with running_router() as (router, events):
            pending = router.open(1)
            router.timed_out(pending)  # no target yet: nothing to suspect
            assert router.suspicion == {}
            router.send_to(pending, A)
            router.timed_out(pending)
            router.timed_out(pending)
            assert router.suspicion == {A: 2}
            # Any reply proves the peer works, even one that is then dropped.
            await deliver(events, reply_event(A, 999))
            assert router.dropped == 1
            assert A not in router.suspicion


async def test_pending_wait_consumes_one_wake(autojump_clock: trio.abc.Clock) -> None:
    with trio.fail_after(5):
        router = ReplyRouter(object())  # type: ignore[arg-type]
        pending = router.open(1)
        pending.wake()
        pending.wake()
        await pending.wait()  # returns at once
        assert await blocks(pending.wait)  # both wakes were consumed by one wait


async def test_in_flight_hands_a_freed_place_to_the_longest_waiter(
    autojump_clock: trio.abc.Clock,
) -> None:
    limit = InFlight(2)
    order: list[str] = []
    release = {name: trio.Event() for name in ("a", "b", "c", "d", "a again")}

    async def holder(name: str) -> None:
        async with limit:
            order.append(name)
            await release[name].wait()

    async def again() -> None:
        await holder("a")
        # Back at once, with no schedule point in between (a client task
        # starting its next request): the place it just freed is c's.
        await holder("a again")

    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(again)
            for name in "bcd":
                await trio.sleep(1)  # they arrive in this order
                nursery.start_soon(holder, name)
            await trio.sleep(1)
            assert order == ["a", "b"]  # c and d wait
            release["a"].set()
            await trio.sleep(1)
            assert order == ["a", "b", "c"]
            for name in ("b", "c", "d", "a again"):
                release[name].set()
                await trio.sleep(1)
            assert order == ["a", "b", "c", "d", "a again"]


async def test_in_flight_a_cancelled_waiter_takes_no_place(
    autojump_clock: trio.abc.Clock,
) -> None:
    limit = InFlight(1)
    with trio.fail_after(5):
        async with limit:
            with trio.move_on_after(1) as waited:
                async with limit:
                    pytest.fail("entered with the only place taken")
            assert waited.cancelled_caught
        # The place came back, and the cancelled waiter holds none of it.
        async with limit:
            pass
        assert await blocks(lambda: _enter_twice(limit))


async def _enter_twice(limit: InFlight) -> None:
    async with limit, limit:
        pass


# ================================================================ ReplyCache

KEY_A1, KEY_A2, KEY_A3, KEY_A4 = ((A, 1), (A, 2), (A, 3), (A, 4))


def test_cache_lookup_start_finish_forget() -> None:
    cache = ReplyCache(max_entries=10, max_age=60.0)
    assert cache.lookup(KEY_A1, now=0.0) is None
    cache.start(KEY_A1, now=0.0)
    assert cache.lookup(KEY_A1, now=1.0) is _IN_PROGRESS
    reply = Reply(1, 200, (b"done",))
    cache.finish(KEY_A1, reply, now=2.0)
    assert cache.lookup(KEY_A1, now=3.0) == reply
    assert len(cache) == 1
    cache.forget(KEY_A1)
    assert cache.lookup(KEY_A1, now=4.0) is None
    assert len(cache) == 0
    cache.forget(KEY_A1)  # forgetting twice is harmless


def test_cache_in_progress_marker_is_not_a_reply() -> None:
    assert _IN_PROGRESS is not None
    assert not isinstance(_IN_PROGRESS, Reply)


def test_cache_counts_hits_of_finished_replies() -> None:
    cache = ReplyCache()
    cache.start(KEY_A1, now=0.0)
    cache.finish(KEY_A1, Reply(1, 200), now=0.0)
    assert cache.hits == 0
    cache.lookup(KEY_A1, now=0.0)
    cache.lookup(KEY_A1, now=0.0)
    cache.lookup(KEY_A2, now=0.0)  # a miss
    assert cache.hits == 2


def test_cache_keys_are_per_client() -> None:
    cache = ReplyCache()
    cache.start((A, 1), now=0.0)
    cache.finish((A, 1), Reply(1, 200, (b"for a",)), now=0.0)
    assert cache.lookup((B, 1), now=0.0) is None


def test_cache_finish_stores_only_what_was_started() -> None:
    """A forgotten or evicted entry is not brought back by ``finish``."""
    cache = ReplyCache()
    cache.finish(KEY_A1, Reply(1, 200), now=0.0)
    assert cache.lookup(KEY_A1, now=0.0) is None
    cache.start(KEY_A2, now=0.0)
    cache.forget(KEY_A2)
    cache.finish(KEY_A2, Reply(2, 200), now=0.0)
    assert cache.lookup(KEY_A2, now=0.0) is None


def test_cache_error_replies_are_cached_too() -> None:
    cache = ReplyCache()
    cache.start(KEY_A1, now=0.0)
    failed = Reply(1, 500, (b"ValueError",))
    cache.finish(KEY_A1, failed, now=0.0)
    assert cache.lookup(KEY_A1, now=1.0) == failed


def test_cache_evicts_the_oldest_beyond_max_entries() -> None:
    cache = ReplyCache(max_entries=3, max_age=1000.0)
    for i, key in enumerate((KEY_A1, KEY_A2, KEY_A3)):
        cache.start(key, now=float(i))
    assert len(cache) == 3
    cache.start(KEY_A4, now=3.0)
    assert len(cache) == 3
    assert cache.lookup(KEY_A1, now=3.0) is None  # the oldest went
    assert cache.lookup(KEY_A2, now=3.0) is _IN_PROGRESS


def test_cache_finish_makes_an_entry_the_newest() -> None:
    cache = ReplyCache(max_entries=3, max_age=1000.0)
    for i, key in enumerate((KEY_A1, KEY_A2, KEY_A3)):
        cache.start(key, now=float(i))
    cache.finish(KEY_A1, Reply(1, 200), now=3.0)  # order now: A2, A3, A1
    cache.start(KEY_A4, now=4.0)
    assert cache.lookup(KEY_A2, now=4.0) is None
    assert cache.lookup(KEY_A1, now=4.0) == Reply(1, 200)
    assert cache.lookup(KEY_A3, now=4.0) is _IN_PROGRESS


def test_cache_max_entries_one() -> None:
    cache = ReplyCache(max_entries=1)
    cache.start(KEY_A1, now=0.0)
    cache.start(KEY_A2, now=0.0)
    assert len(cache) == 1
    assert cache.lookup(KEY_A1, now=0.0) is None
    assert cache.lookup(KEY_A2, now=0.0) is _IN_PROGRESS


def test_cache_evicts_by_age() -> None:
    cache = ReplyCache(max_entries=100, max_age=10.0)
    cache.start(KEY_A1, now=0.0)
    cache.start(KEY_A2, now=5.0)
    assert cache.lookup(KEY_A1, now=10.0) is _IN_PROGRESS  # exactly max_age: kept
    assert cache.lookup(KEY_A1, now=10.5) is None  # older than max_age: gone
    assert cache.lookup(KEY_A2, now=10.5) is _IN_PROGRESS
    assert cache.lookup(KEY_A2, now=15.5) is None
    assert len(cache) == 0


def test_cache_age_of_a_finished_entry_counts_from_finish() -> None:
    cache = ReplyCache(max_entries=100, max_age=10.0)
    cache.start(KEY_A1, now=0.0)
    cache.finish(KEY_A1, Reply(1, 200), now=8.0)
    assert cache.lookup(KEY_A1, now=17.0) == Reply(1, 200)
    assert cache.lookup(KEY_A1, now=18.5) is None


def test_cache_expiry_happens_on_start_and_finish_too() -> None:
    cache = ReplyCache(max_entries=100, max_age=10.0)
    cache.start(KEY_A1, now=0.0)
    cache.start(KEY_A2, now=20.0)
    assert len(cache) == 1
    cache.finish(KEY_A2, Reply(2, 200), now=40.0)  # finish, then expire: A2 is fresh
    assert len(cache) == 1


@pytest.mark.parametrize(
    ("max_entries", "max_age"),
    [(0, 10.0), (-1, 10.0), (10, 0.0), (10, -1.0), (10, math.nan), (10, math.inf)],
)
def test_cache_bad_arguments_raise(max_entries: int, max_age: float) -> None:
    with pytest.raises(ValueError):
        ReplyCache(max_entries=max_entries, max_age=max_age)


def test_cache_defaults() -> None:
    cache = ReplyCache()
    assert (cache.max_entries, cache.max_age) == (10_000, 300.0)


# ============================================= clients over a stand-in node


POLICY = RetryPolicy(attempt_timeout=1.0, attempts=3)
ECHO2 = (("w1", "echo"), ("w2", "echo"))  # two workers of the echo service


async def test_lazy_pirate_sends_the_same_request_every_attempt_then_abandons(
    autojump_clock: trio.abc.Clock,
) -> None:
    with trio.fail_after(5):
        async with stub_clients("srv") as (node, (server,), router, _events, _):
            client = LazyPirateClient(router, "srv", POLICY)
            start = trio.current_time()
            with pytest.raises(RequestAbandoned) as info:
                await client.request(b"ping", b"")
            assert trio.current_time() - start == pytest.approx(3.0)
        assert info.value.attempts == 3
        assert [round(t - start, 6) for t, _, _ in node.sent] == [0.0, 1.0, 2.0]
        assert {peer for _, peer, _ in node.sent} == {server}
        assert len({frames for _, _, frames in node.sent}) == 1  # byte-identical resends
        message = decode(node.sent[0][2])
        assert message == Request(info.value.request_id, "", (b"ping", b""))
        router.open(info.value.request_id)  # the id was released


async def test_lazy_pirate_follows_a_restarted_server_at_once(
    autojump_clock: trio.abc.Clock,
) -> None:
    with trio.fail_after(5):
        async with stub_clients("srv") as (node, (old,), router, events, nursery):
            client = LazyPirateClient(router, "srv", POLICY)

            async def servers() -> None:
                peer, first = await node.outbox.receive()
                assert peer == old
                node.remove(old)
                await events.send(trizre.Exit(old, "srv"))
                await trio.sleep(0.25)
                new = node.add("srv")
                await events.send(trizre.Enter(new, "srv", (), "tcp://127.0.0.1:49153"))
                peer, again = await node.outbox.receive()
                assert (peer, again) == (new, first)
                await events.send(reply_event(new, first.request_id, 200, b"pong"))

            nursery.start_soon(servers)
            start = trio.current_time()
            assert await client.request(b"ping") == (b"pong",)
            assert trio.current_time() - start == pytest.approx(0.25)


async def test_lazy_pirate_by_uuid_resends_at_once_when_the_server_goes_silent(
    autojump_clock: trio.abc.Clock,
) -> None:
    with trio.fail_after(5):
        async with stub_clients("srv") as (node, (server,), router, events, nursery):
            client = LazyPirateClient(router, server, POLICY)

            async def script() -> None:
                _, first = await node.outbox.receive()
                await trio.sleep(0.5)
                await events.send(trizre.Silent(server, "srv"))
                peer, again = await node.outbox.receive()  # same peer: still present
                assert (peer, again) == (server, first)
                assert trio.current_time() - start == pytest.approx(0.5)
                await events.send(reply_event(server, first.request_id, 200, b"ok"))

            start = trio.current_time()
            nursery.start_soon(script)
            assert await client.request(b"x") == (b"ok",)


async def test_a_503_moves_on_at_once_and_a_second_one_running_waits_out_the_attempt(
    autojump_clock: trio.abc.Clock,
) -> None:
    """A refusal (a passive Binary Star server) is not a silence: no attempt timeout is lost.

    Refused twice running, the pair is between states: the client waits
    out that attempt rather than spend its attempts in a burst.
    """
    with trio.fail_after(5):
        async with stub_clients("srv") as (node, (server,), router, events, nursery):
            client = LazyPirateClient(router, "srv", POLICY)

            async def script() -> None:
                _, request = await node.outbox.receive()
                await events.send(reply_event(server, request.request_id, 503))
                _, again = await node.outbox.receive()
                assert again == request
                assert trio.current_time() - start == 0  # at once
                await events.send(reply_event(server, request.request_id, 503))
                _, third = await node.outbox.receive()
                assert third == request
                assert trio.current_time() - start == pytest.approx(1.0)  # waited out
                await events.send(reply_event(server, request.request_id, 200, b"ok"))

            start = trio.current_time()
            nursery.start_soon(script)
            assert await client.request(b"x") == (b"ok",)
        assert router.suspicion.get(server, 0) == 0  # refusing is not being stuck


@pytest.mark.parametrize("status", [404, 500, 501, 418])
async def test_other_statuses_raise_remote_error_without_retry(status: int) -> None:
    with trio.fail_after(5):
        async with stub_clients("srv") as (node, (server,), router, events, nursery):
            client = LazyPirateClient(router, "srv", POLICY)

            async def script() -> None:
                _, request = await node.outbox.receive()
                await events.send(reply_event(server, request.request_id, status, b"Boom"))

            nursery.start_soon(script)
            with pytest.raises(RemoteError) as info:
                await client.request(b"x")
        assert (info.value.status, info.value.body) == (status, (b"Boom",))
        assert len(node.sent) == 1


async def test_a_200_arriving_while_a_503_is_waited_out_is_returned(
    autojump_clock: trio.abc.Clock,
) -> None:
    with trio.fail_after(5):
        result: tuple[bytes, ...] | None = None
        async with stub_clients("p", "b") as (node, (primary, backup), router, events, nursery):
            client = BinaryStarClient(
                router, "p", "b", RetryPolicy(attempt_timeout=1.0, attempts=2)
            )

            async def servers() -> None:
                peer, request = await node.outbox.receive()
                assert peer == primary  # slow: it will answer late
                peer, _ = await node.outbox.receive()
                assert peer == backup  # attempt 2, at t=1: passive, refuses
                await events.send(reply_event(backup, request.request_id, 503))
                await trio.sleep(0.5)
                await events.send(reply_event(primary, request.request_id, 200, b"late"))

            nursery.start_soon(servers)
            try:
                result = await client.request(b"x")
            except RequestAbandoned:
                result = None
        assert result == (b"late",)


async def test_lazy_pirate_prefers_a_responsive_instance_of_the_name(
    autojump_clock: trio.abc.Clock,
) -> None:
    with trio.fail_after(5):
        crashed_first = stub_clients("srv", "srv", unresponsive=[0])  # then restarted
        async with crashed_first as (node, (_, restarted), router, events, nursery):
            client = LazyPirateClient(router, "srv", RetryPolicy(attempt_timeout=1.0, attempts=1))

            async def servers() -> None:
                while True:
                    peer, request = await node.outbox.receive()
                    if peer == restarted:
                        await events.send(reply_event(peer, request.request_id, 200, b"ok"))

            nursery.start_soon(servers)
            assert await client.request(b"x") == (b"ok",)
            nursery.cancel_scope.cancel()
        assert node.sent[0][1] == restarted  # never the crashed instance


# --------------------------------------------------------- service client


async def test_service_client_spreads_pipelined_requests(
    autojump_clock: trio.abc.Clock,
) -> None:
    with trio.fail_after(5):
        results: dict[bytes, tuple[bytes, ...]] = {}
        echo = [(f"w{i}", "echo") for i in range(3)]
        async with stub_clients(*echo) as (node, workers, router, events, nursery):
            client = ServiceClient(router, POLICY)

            async def ask(body: bytes) -> None:
                results[body] = await client.request("echo", body)

            for body in (b"a", b"b", b"c"):
                nursery.start_soon(ask, body)
            received = [await node.outbox.receive() for _ in range(3)]
            assert sorted(peer.int for peer, _ in received) == sorted(w.int for w in workers)
            assert {r.service for _, r in received} == {"echo"}
            for peer, request in reversed(received):  # answered out of order
                await events.send(reply_event(peer, request.request_id, 200, *request.body))
        assert results == {b"a": (b"a",), b"b": (b"b",), b"c": (b"c",)}


async def test_service_client_uses_the_least_recently_used_worker() -> None:
    with trio.fail_after(5):
        chosen: list[UUID] = []
        async with stub_clients(*ECHO2) as (node, (w1, w2), router, events, nursery):
            client = ServiceClient(router, POLICY)

            async def workers() -> None:
                while True:
                    peer, request = await node.outbox.receive()
                    chosen.append(peer)
                    await events.send(reply_event(peer, request.request_id))

            nursery.start_soon(workers)
            for _ in range(4):
                await client.request("echo")
            nursery.cancel_scope.cancel()
        assert chosen == [w1, w2, w1, w2]


async def _the_other_worker_gets_it(
    lose: Callable[[StubNode, trio.MemorySendChannel[object], UUID], Awaitable[None]],
    after: float,
) -> None:
    """Of two echo workers, the first asked is lost by ``lose``; ``after`` seconds on the
    same request goes to the other, and its reply is the client's answer."""
    async with stub_clients(*ECHO2) as (node, _, router, events, nursery):
        client = ServiceClient(router, POLICY)

        async def workers() -> None:
            first, request = await node.outbox.receive()
            await lose(node, events, first)
            peer, again = await node.outbox.receive()
            assert peer != first and again == request
            assert trio.current_time() - start == pytest.approx(after)
            await events.send(reply_event(peer, request.request_id, 200, b"ok"))

        start = trio.current_time()
        nursery.start_soon(workers)
        assert await client.request("echo") == (b"ok",)


async def test_service_client_tries_another_worker_after_a_timeout(
    autojump_clock: trio.abc.Clock,
) -> None:
    async def stuck(node: StubNode, events: trio.MemorySendChannel[object], peer: UUID) -> None:
        pass  # it never answers

    with trio.fail_after(5):
        await _the_other_worker_gets_it(stuck, 1.0)


async def test_service_client_resends_at_once_when_the_worker_exits(
    autojump_clock: trio.abc.Clock,
) -> None:
    async def gone(node: StubNode, events: trio.MemorySendChannel[object], peer: UUID) -> None:
        await trio.sleep(0.1)
        node.remove(peer)
        await events.send(trizre.Exit(peer, "w"))

    with trio.fail_after(5):
        await _the_other_worker_gets_it(gone, 0.1)


async def test_service_client_prefers_responsive_workers(
    autojump_clock: trio.abc.Clock,
) -> None:
    with trio.fail_after(5):
        async with stub_clients(*ECHO2, unresponsive=[0]) as (node, (_, alive), router, _, _):
            client = ServiceClient(router, RetryPolicy(attempt_timeout=1.0, attempts=1))
            with pytest.raises(RequestAbandoned):
                await client.request("echo")
        assert [peer for _, peer, _ in node.sent] == [alive]


async def test_service_client_a_timed_out_worker_sinks_below_an_evasive_one(
    autojump_clock: trio.abc.Clock,
) -> None:
    """services.md §3: suspicion (unanswered attempts) ranks first, for every request."""
    with trio.fail_after(5):
        async with stub_clients(*ECHO2, unresponsive=[0]) as (node, (evasive, stuck), router, _, _):
            client = ServiceClient(router, RetryPolicy(attempt_timeout=1.0, attempts=2))
            with pytest.raises(RequestAbandoned):
                await client.request("echo")
            # A new request also avoids the stuck worker now.
            with pytest.raises(RequestAbandoned):
                await client.request("echo")
        assert [peer for _, peer, _ in node.sent] == [stuck, evasive, stuck, evasive]
        assert router.suspicion == {stuck: 2, evasive: 2}


async def test_service_client_waits_for_a_worker_to_join(
    autojump_clock: trio.abc.Clock,
) -> None:
    with trio.fail_after(5):
        async with stub_clients() as (node, _, router, events, nursery):
            client = ServiceClient(router, POLICY)

            async def late_worker() -> None:
                await trio.sleep(0.5)
                worker = node.add("w", "echo")
                await events.send(trizre.Join(worker, "w", "echo"))
                peer, request = await node.outbox.receive()
                assert peer == worker
                await events.send(reply_event(peer, request.request_id, 200, b"ok"))

            nursery.start_soon(late_worker)
            start = trio.current_time()
            assert await client.request("echo") == (b"ok",)
            assert trio.current_time() - start == pytest.approx(0.5)


async def test_service_client_without_workers_abandons(autojump_clock: trio.abc.Clock) -> None:
    with trio.fail_after(5):
        async with stub_clients() as (node, _, router, _events, _):
            client = ServiceClient(router, POLICY)
            start = trio.current_time()
            with pytest.raises(RequestAbandoned):
                await client.request("echo", b"x")
            assert trio.current_time() - start == pytest.approx(3.0)
        assert node.sent == []


async def test_mmi_is_answered_locally() -> None:
    with trio.fail_after(5):
        async with stub_clients(("w", "echo")) as (node, _, router, _events, _):
            client = ServiceClient(router, POLICY)
            assert client.mmi("mmi.service", b"echo") == 200
            assert client.mmi("mmi.service", b"nope") == 404
            assert client.mmi("mmi.stats") == 501
            assert await client.request("mmi.service", b"echo") == (b"200",)
            assert await client.request("mmi.service", b"nope") == (b"404",)
            assert await client.request("mmi.anything", b"echo") == (b"501",)
            with pytest.raises(ValueError):
                await client.request("mmi.service")
            with pytest.raises(ValueError):
                await client.request("")
            with pytest.raises(ValueError):
                await client.request("x" * 256)
        assert node.sent == []


def test_a_requests_load_bookkeeping_hashes_no_uuid() -> None:
    """Issue 28: the load per worker is keyed by the worker's UUID as an int, so
    sending, answering and closing a request hashes no UUID (the set of peers it
    went to holds their ints too), where it once took five calls of the
    Python-level ``UUID.__hash__``."""
    make, hashed = counting_uuids()
    worker = make(0xD)
    router = ReplyRouter(object())  # type: ignore[arg-type]
    pending = router.open(7, "echo")
    router.send_to(pending, worker)
    assert router.outstanding(worker) == 1
    router.on_message(worker, Reply(7, 200, (b"ok",)))  # the current target: by identity
    assert pending.reply == Reply(7, 200, (b"ok",)) and router.outstanding(worker) == 0
    router.close(7)
    assert router.load == {}
    assert hashed() == 0
