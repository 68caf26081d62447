"""The Trio-pyzmq socket layer: stress, lost wake-ups, cancellation, close."""

from __future__ import annotations

import gc
import random
import struct
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing
import zmq

from trizre.transport import _zsock
from trizre.transport._zsock import ZSocket, context
from trizre.wire import OVERSIZE


def _socket(kind: int, hwm: int) -> zmq.Socket[Any]:
    sock = context().socket(kind)
    sock.setsockopt(zmq.SNDHWM, hwm)
    sock.setsockopt(zmq.RCVHWM, hwm)
    return sock


@asynccontextmanager
async def dealer_pair(endpoint: str, hwm: int = 1) -> AsyncIterator[tuple[ZSocket, ZSocket]]:
    """Two DEALERs connected over ``endpoint`` (a ``tcp://127.0.0.1:*`` binds ephemeral)."""
    a = ZSocket(_socket(zmq.DEALER, hwm))
    b = ZSocket(_socket(zmq.DEALER, hwm))
    try:
        a.zmq_socket.bind(endpoint)
        b.zmq_socket.connect(a.zmq_socket.getsockopt_string(zmq.LAST_ENDPOINT))
        yield a, b
    finally:
        a.close()
        b.close()


def _endpoints(tmp_path: Path) -> dict[str, str]:
    return {
        "tcp": "tcp://127.0.0.1:*",
        "ipc": f"ipc://{tmp_path}/s",
        "inproc": f"inproc://stress-{random.random()}",
    }


@pytest.mark.parametrize("transport", ["tcp", "ipc", "inproc"])
async def test_two_way_stress_tiny_hwm(transport: str, tmp_path: Path) -> None:
    """100k messages, both directions at once on each socket, HWM 1."""
    n = 50_000  # per direction
    pack, unpack = struct.Struct(">I").pack, struct.Struct(">I").unpack
    received: dict[str, list[int]] = {"a": [], "b": []}

    async def pump(tx: ZSocket) -> None:
        for i in range(n):
            await tx.send([pack(i), b"x" * 20])

    async def drain(rx: ZSocket, name: str) -> None:
        got = received[name]
        while len(got) < n:
            for frames in await rx.receive_batch(64):
                assert len(frames) == 2
                got.append(unpack(frames[0])[0])

    with trio.fail_after(60):
        async with (
            dealer_pair(_endpoints(tmp_path)[transport], hwm=1) as (a, b),
            trio.open_nursery() as nursery,
        ):
            nursery.start_soon(pump, a)
            nursery.start_soon(pump, b)
            nursery.start_soon(drain, a, "a")
            nursery.start_soon(drain, b, "b")
    assert received["a"] == list(range(n))
    assert received["b"] == list(range(n))


@contextmanager
def naive_wakeups(monkeypatch: pytest.MonkeyPatch, naive: bool) -> Iterator[None]:
    """The naive variant: after a zmq call, nobody else's waiter is woken.

    This is the bug every careful wrapper must avoid: our own call consumed
    the descriptor's edge, and the task waiting on the descriptor never
    hears of it.
    """
    if naive:
        monkeypatch.setattr(ZSocket, "_wake_waiters", lambda self: None)
    yield


async def _fill(tx: ZSocket) -> int:
    sent = 0
    while tx.send_nowait([b"fill"]):
        sent += 1
    return sent


@pytest.mark.parametrize("naive", [False, True], ids=["careful", "naive"])
async def test_no_lost_wakeup_receive_direction(
    naive: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A receiver waits; a message arrives; a send on the same socket eats the edge."""
    got: list[list[bytes]] = []
    async with dealer_pair(f"inproc://lw-rx-{naive}") as (a, b):
        await _fill(b)  # b cannot send: its send attempt will fail and read EVENTS

        async def receiver() -> None:
            got.append(await b.receive())

        with naive_wakeups(monkeypatch, naive), trio.move_on_after(1) as scope:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(receiver)
                await trio.testing.wait_all_tasks_blocked()
                # No checkpoint between these two lines: the arrival signal
                # and its consumption happen before the receiver can run.
                assert a.send_nowait([b"wake"])
                assert not b.send_nowait([b"more"])
    if naive:
        assert scope.cancelled_caught and got == [], "the test failed to catch a lost wake-up"
    else:
        assert not scope.cancelled_caught
        assert got == [[b"wake"]]


@pytest.mark.parametrize("naive", [False, True], ids=["careful", "naive"])
async def test_no_lost_wakeup_send_direction(naive: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """A sender waits for room; room appears; a failed receive eats the edge."""
    sent: list[bool] = []
    async with dealer_pair(f"inproc://lw-tx-{naive}") as (a, b):
        filled = await _fill(b)

        async def sender() -> None:
            await b.send([b"late"])
            sent.append(True)

        with naive_wakeups(monkeypatch, naive), trio.move_on_after(1) as scope:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(sender)
                await trio.testing.wait_all_tasks_blocked()
                for _ in range(filled):
                    assert a.receive_nowait() == [b"fill"]
                # b has nothing to receive: libzmq processes its pending
                # commands (including "room to send") and the edge is gone.
                assert b.receive_nowait() is None
        if naive:
            assert scope.cancelled_caught and sent == [], "the test failed to catch a lost wake-up"
        else:
            assert not scope.cancelled_caught
            assert sent == [True]
            assert a.receive_nowait() == [b"late"]


async def test_random_cancellation_exactly_once_in_order() -> None:
    """Cancel sends and receives at random: every message arrives once, in order."""
    n = 3_000
    rng = random.Random(20261121)
    got: list[int] = []
    cancelled = {"send": 0, "receive": 0}

    async def sender(tx: ZSocket) -> None:
        i = 0
        while i < n:
            with trio.move_on_after(rng.choice([0, 0, 1e-6, 1e-5, 1e-4, 1])) as scope:
                await tx.send([str(i).encode()])
                i += 1  # reached only if the send happened
            cancelled["send"] += scope.cancelled_caught

    async def receiver(rx: ZSocket) -> None:
        while len(got) < n:
            with trio.move_on_after(rng.choice([0, 0, 1e-6, 1e-5, 1e-4, 1])) as scope:
                if rng.random() < 0.5:
                    got.append(int((await rx.receive())[0]))
                else:
                    got.extend(int(m[0]) for m in await rx.receive_batch(7))
            cancelled["receive"] += scope.cancelled_caught

    with trio.fail_after(60):
        async with (
            dealer_pair("tcp://127.0.0.1:*", hwm=2) as (a, b),
            trio.open_nursery() as nursery,
        ):
            nursery.start_soon(sender, a)
            nursery.start_soon(receiver, b)
    assert got == list(range(n))
    # The test only means something if cancellations really happened.
    assert cancelled["send"] > 100
    assert cancelled["receive"] > 100


async def test_receive_batch_drains_what_is_ready() -> None:
    async with dealer_pair("inproc://batch", hwm=1000) as (a, b):
        for i in range(10):
            assert a.send_nowait([b"m", bytes([i])])
        with trio.fail_after(5):
            first = await b.receive_batch(4)
            rest = await b.receive_batch()
        assert first == [[b"m", bytes([i])] for i in range(4)]
        assert rest == [[b"m", bytes([i])] for i in range(4, 10)]
        with pytest.raises(ValueError, match="at least 1"):
            await b.receive_batch(0)


async def test_interrupt_ends_a_batch_wait_and_loses_nothing() -> None:
    async with dealer_pair("inproc://interrupt", hwm=1000) as (a, b):
        b.interrupt()  # nobody waits: nothing is kept for a later call
        with trio.fail_after(5):
            async with trio.open_nursery() as nursery:
                got: list[list[list[bytes]]] = []

                async def take() -> None:
                    got.append(await b.receive_batch())

                nursery.start_soon(take)
                await trio.testing.wait_all_tasks_blocked()
                assert not got  # the early interrupt was not kept
                b.interrupt()
            assert got == [[]]  # woken with nothing ready
            assert a.send_nowait([b"after"])
            assert await b.receive_batch() == [[b"after"]]  # what came later is read
        b.close()
        b.interrupt()  # closed: nothing to do, no error


async def test_a_waiting_receive_holds_no_exception() -> None:
    """Issue 28: a receive waits outside its ``except zmq.Again``.

    Inside it, the Again and its traceback lived as long as the wait: about
    2 kB for every idle socket, a link's monitor (which waits for the
    link's lifetime) included.
    """
    async with dealer_pair("inproc://idle-wait", hwm=10) as (a, b):
        got: list[list[bytes]] = []
        async with trio.open_nursery() as nursery:

            async def receive() -> None:
                got.append(await b.receive())

            nursery.start_soon(receive)
            await trio.testing.wait_all_tasks_blocked()
            gc.collect()
            assert not [o for o in gc.get_objects() if isinstance(o, zmq.Again)]
            with trio.fail_after(5):
                await a.send([b"x"])
        assert got == [[b"x"]]


async def test_empty_message_is_refused() -> None:
    async with dealer_pair("inproc://empty") as (a, _b):
        with pytest.raises(ValueError, match="at least one frame"):
            await a.send([])
        with pytest.raises(ValueError, match="at least one frame"):
            a.send_nowait([])


async def test_close_wakes_every_waiter_and_later_calls_fail() -> None:
    outcomes: list[str] = []
    async with dealer_pair("inproc://close") as (a, b):
        await _fill(b)

        async def wait_for(what: str, call: Any) -> None:
            with pytest.raises(trio.ClosedResourceError):
                await call()
            outcomes.append(what)

        with trio.fail_after(5):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(wait_for, "receive", b.receive)
                nursery.start_soon(wait_for, "batch", b.receive_batch)
                nursery.start_soon(wait_for, "send", lambda: b.send([b"x"]))
                await trio.testing.wait_all_tasks_blocked()
                b.close()
        assert sorted(outcomes) == ["batch", "receive", "send"]
        assert b.closed
        b.close()  # idempotent
        await b.aclose()  # idempotent too
        for call in (b.receive, b.receive_batch, lambda: b.send([b"x"])):
            with pytest.raises(trio.ClosedResourceError, match="closed"):
                await call()
        with pytest.raises(trio.ClosedResourceError):
            b.send_nowait([b"x"])
        with pytest.raises(trio.ClosedResourceError):
            b.receive_nowait()
        assert a.receive_nowait() is not None  # the other end is unaffected


async def test_cancelled_before_start_sends_nothing() -> None:
    async with dealer_pair("inproc://precancel", hwm=10) as (a, b):
        with trio.CancelScope() as scope:
            scope.cancel()
            await a.send([b"never"])
        assert scope.cancelled_caught
        assert b.receive_nowait() is None


def test_one_context_per_process() -> None:
    assert context() is context()


async def test_send_some_sends_a_prefix_and_waits_for_room() -> None:
    async with dealer_pair("inproc://some", hwm=2) as (a, b):
        messages = [[bytes([i])] for i in range(10)]
        with trio.fail_after(5):
            first = await a.send_some(messages)
        assert 1 <= first < 10  # stopped at the high water mark
        got: list[list[bytes]] = []

        async def reader() -> None:
            while len(got) < 10:
                got.extend(await b.receive_batch())

        with trio.fail_after(5):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(reader)
                sent = first
                while sent < 10:
                    sent += await a.send_some(messages[sent:])
        assert got == messages
        with pytest.raises(ValueError, match="at least one message"):
            await a.send_some([])
        with pytest.raises(ValueError, match="at least one message"):
            await a.send_some([[b"ok"], []])


# ---------------------------------------------------------------- corking


@asynccontextmanager
async def corked_pair(hwm: int = 1000) -> AsyncIterator[tuple[ZSocket, ZSocket]]:
    """``a`` corks every send after the first of a turn, ``b`` reads."""
    a = ZSocket(_socket(zmq.DEALER, hwm), cork=True)
    b = ZSocket(_socket(zmq.DEALER, hwm))
    try:
        b.zmq_socket.bind(f"inproc://cork-{random.random()}")
        a.zmq_socket.connect(b.zmq_socket.getsockopt_string(zmq.LAST_ENDPOINT))
        yield a, b
    finally:
        a.close()
        b.close()


async def test_corked_sends_go_out_in_order_when_the_sender_yields() -> None:
    with trio.fail_after(5):
        async with corked_pair() as (a, b):
            for i in range(10):
                assert a.send_nowait([b"%d" % i])
            # The first went to libzmq at once; the others wait for a yield.
            assert b.receive_nowait() == [b"0"]
            assert b.receive_nowait() is None
            await trio.testing.wait_all_tasks_blocked()
            got = [b.receive_nowait() for _ in range(9)]
            assert got == [[b"%d" % i] for i in range(1, 10)]


async def test_held_messages_of_any_frame_count_go_out_whole_and_in_order() -> None:
    """The flusher hands held messages of one, two and three frames over intact.

    Also past a full libzmq queue (the drain), and an empty message is
    refused while others are held, as when none are.
    """
    with trio.fail_after(10):
        async with corked_pair(hwm=4) as (a, b):
            shapes = [[b"%d" % i, b"c"][: 1 + i % 2] + [b"t"] * (i % 3 == 2) for i in range(120)]
            accepted = 0
            for frames in shapes:
                if not a.send_nowait(frames):
                    break
                accepted += 1
            assert 0 < accepted < len(shapes) and a._cork  # held, then libzmq full
            with pytest.raises(ValueError, match="at least one frame"):
                a.send_nowait([])
            got: list[list[bytes]] = []

            async def read() -> None:
                while len(got) < len(shapes):
                    got.append(await b.receive())

            async with trio.open_nursery() as nursery:
                nursery.start_soon(read)
                for frames in shapes[accepted:]:
                    await a.send(frames)
            assert got == shapes


async def test_each_turn_sends_its_first_message_at_once() -> None:
    """Isolated sends (a round trip) never wait for the flusher, however close in time."""
    with trio.fail_after(5):
        async with corked_pair() as (a, b):
            for i in range(3):
                assert a.send_nowait([b"%d" % i])
                assert b.receive_nowait() == [b"%d" % i]
                await trio.testing.wait_all_tasks_blocked()  # the turn ends


class _FlusherSteps(trio.abc.Instrument):
    def __init__(self) -> None:
        self.steps = 0

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        if task.name.endswith("_Flusher.run"):
            self.steps += 1


async def test_a_turn_of_one_send_does_not_wake_the_flusher() -> None:
    """A round trip's send costs no flusher step; a second send in a turn still corks."""
    with trio.fail_after(5):
        async with corked_pair() as (a, b):
            assert a.send_nowait([b"a"]) and a.send_nowait([b"b"])  # starts the flusher
            await trio.testing.wait_all_tasks_blocked()
            assert [b.receive_nowait(), b.receive_nowait()] == [[b"a"], [b"b"]]
            assert a.send_nowait([b"alone"])  # after a burst: held, the flusher ends it
            await trio.testing.wait_all_tasks_blocked()
            assert b.receive_nowait() == [b"alone"]
            steps = _FlusherSteps()
            trio.lowlevel.add_instrument(steps)
            try:
                for i in range(20):
                    assert a.send_nowait([b"%d" % i])
                    assert b.receive_nowait() == [b"%d" % i]
                    await trio.testing.wait_all_tasks_blocked()  # the turn ends
            finally:
                trio.lowlevel.remove_instrument(steps)
            assert steps.steps == 0
            assert a.send_nowait([b"x"]) and a.send_nowait([b"y"])
            assert b.receive_nowait() == [b"x"]
            assert b.receive_nowait() is None  # held until the turn ends
            await trio.testing.wait_all_tasks_blocked()
            assert b.receive_nowait() == [b"y"]


async def test_after_a_burst_the_next_turn_holds_its_first_message_too() -> None:
    """A socket that sent several in a turn hands the next turn's all at once."""
    with trio.fail_after(5):
        async with corked_pair() as (a, b):
            assert a.send_nowait([b"0"])
            assert a.send_nowait([b"1"])  # a burst of two
            await trio.testing.wait_all_tasks_blocked()
            assert [b.receive_nowait(), b.receive_nowait()] == [[b"0"], [b"1"]]
            for i in (2, 3):
                assert a.send_nowait([b"%d" % i])
            assert b.receive_nowait() is None  # the first of this turn is held as well
            await trio.testing.wait_all_tasks_blocked()
            assert [b.receive_nowait(), b.receive_nowait()] == [[b"2"], [b"3"]]


async def test_a_turn_of_one_send_ends_the_burst() -> None:
    """Held once more after a burst, a lone send makes the next one go at once."""
    with trio.fail_after(5):
        async with corked_pair() as (a, b):
            assert a.send_nowait([b"0"])
            assert a.send_nowait([b"1"])
            await trio.testing.wait_all_tasks_blocked()
            assert a.send_nowait([b"2"])  # alone in its turn, but after a burst: held
            assert [b.receive_nowait(), b.receive_nowait(), b.receive_nowait()] == [
                [b"0"],
                [b"1"],
                None,
            ]
            await trio.testing.wait_all_tasks_blocked()
            assert b.receive_nowait() == [b"2"]
            assert a.send_nowait([b"3"])
            assert b.receive_nowait() == [b"3"]  # a round trip's pace again: at once


async def test_sends_of_many_tasks_in_one_turn_go_out_together() -> None:
    """Many tasks sending one message each are corked like one task's flood."""
    with trio.fail_after(5):
        async with corked_pair() as (a, b):
            go = trio.Event()

            async def sender(i: int) -> None:
                await go.wait()
                assert a.send_nowait([b"%d" % i])

            async with trio.open_nursery() as nursery:
                for i in range(5):
                    nursery.start_soon(sender, i)
                await trio.testing.wait_all_tasks_blocked()
                go.set()  # all five run in the same turn
                await trio.testing.wait_all_tasks_blocked()
            got = [b.receive_nowait() for _ in range(5)]
            assert sorted(got) == [[b"%d" % i] for i in range(5)]
            assert a._cork is not None and not a._cork  # the four held ones went out


async def test_a_waiting_send_goes_after_the_corked_ones() -> None:
    with trio.fail_after(5):
        async with corked_pair() as (a, b):
            for i in range(5):
                assert a.send_nowait([b"%d" % i])
            await a.send([b"last"])  # hands the held ones over first
            got = [(await b.receive())[0] for _ in range(6)]
            assert got == [b"0", b"1", b"2", b"3", b"4", b"last"]


async def test_cork_beyond_the_hwm_is_bounded_and_drained() -> None:
    """libzmq full: at most _CORK_MAX more are held, then refused; all arrive."""
    with trio.fail_after(10):
        async with corked_pair(hwm=5) as (a, b):
            accepted = 0
            while a.send_nowait([accepted.to_bytes(4, "big")]):
                accepted += 1
            assert accepted <= 5 + 5 + _zsock._CORK_MAX  # both HWMs, then the cork
            await trio.testing.wait_all_tasks_blocked()  # the flusher finds libzmq full
            assert a._draining
            got = []
            while len(got) < accepted:
                got.append(int.from_bytes((await b.receive())[0], "big"))
            assert got == list(range(accepted))
            await trio.testing.wait_all_tasks_blocked()
            assert not a._draining and not a._cork


async def test_close_drops_the_cork_and_ends_the_drain() -> None:
    with trio.fail_after(5):
        async with corked_pair(hwm=1) as (a, _b):
            while a.send_nowait([b"x"]):
                pass
            await trio.testing.wait_all_tasks_blocked()
            assert a._draining
            a.close()
            await trio.testing.wait_all_tasks_blocked()
            assert not a._draining
            with pytest.raises(trio.ClosedResourceError):
                a.send_nowait([b"y"])


async def test_a_router_gives_a_message_over_its_total_size_as_oversize_uncopied() -> None:
    """Each frame is under the limit, the message is not: [identity, OVERSIZE] (issue 25)."""
    router = ZSocket(_socket(zmq.ROUTER, 100), max_message_size=1000)
    dealer = ZSocket(_socket(zmq.DEALER, 100))
    try:
        router.zmq_socket.bind("tcp://127.0.0.1:*")
        dealer.zmq_socket.setsockopt(zmq.IDENTITY, b"me")
        dealer.zmq_socket.connect(router.zmq_socket.getsockopt_string(zmq.LAST_ENDPOINT))
        with trio.fail_after(10):
            await dealer.send([b"a" * 500, b"b" * 500])  # 1000: at the limit
            await dealer.send([b"c" * 600] * 24)  # 14,400 in all
            await dealer.send([b"d" * 1001])  # one frame over
            await dealer.send([b"after"])
            got: list[list[bytes]] = []
            while len(got) < 4:
                got.extend(await router.receive_batch())
        assert got[0] == [b"me", b"a" * 500, b"b" * 500]
        assert got[1] == [b"me", OVERSIZE] and got[1][1] is OVERSIZE
        assert got[2] == [b"me", OVERSIZE] and got[2][1] is OVERSIZE
        assert got[3] == [b"me", b"after"]
    finally:
        router.close()
        dealer.close()


async def test_a_wait_for_the_socket_opens_no_cancel_scope(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 28: entering and leaving a cancel scope cost ~3.7 us, on every wait of a round trip.

    A receive and a send that wait for the descriptor make none (a wake-up
    from another task ends the wait through ``notify_closing``).
    """
    made: list[object] = []
    real = trio.CancelScope

    def counting(*args: Any, **kwargs: Any) -> trio.CancelScope:
        scope = real(*args, **kwargs)
        made.append(scope)
        return scope

    async with dealer_pair("inproc://no-scope", hwm=1) as (a, b):
        filled = await _fill(b)
        got: list[list[list[bytes]]] = []
        with trio.fail_after(5):
            async with trio.open_nursery() as nursery:

                async def take() -> None:
                    got.append(await b.receive_batch())  # nothing comes to b yet

                async def put() -> None:
                    await b.send([b"late"])  # b is full

                monkeypatch.setattr(trio, "CancelScope", counting)
                nursery.start_soon(take)
                nursery.start_soon(put)
                await trio.testing.wait_all_tasks_blocked()
                monkeypatch.undo()
                assert made == []
                # Both still wake as they should: room for the sender, a message for the receiver.
                for _ in range(filled):
                    assert a.receive_nowait() == [b"fill"]
                assert a.send_nowait([b"for b"])
        assert got == [[[b"for b"]]]
        assert await a.receive_batch() == [[b"late"]]


async def test_a_woken_wait_waits_again_and_hears_the_next_message() -> None:
    """A wake-up (interrupt) leaves the descriptor usable: the next wait still hears arrivals."""
    async with dealer_pair("inproc://rewait", hwm=1000) as (a, b):
        with trio.fail_after(10):
            for i in range(200):
                async with trio.open_nursery() as nursery:
                    got: list[list[list[bytes]]] = []

                    async def take(got: list[list[list[bytes]]]) -> None:
                        got.append(await b.receive_batch())
                        got.append(await b.receive_batch())

                    nursery.start_soon(take, got)
                    await trio.testing.wait_all_tasks_blocked()
                    b.interrupt()  # the first wait ends with nothing
                    await trio.testing.wait_all_tasks_blocked()
                    assert got == [[]]
                    assert a.send_nowait([str(i).encode()])  # the second wait hears it
                assert got == [[], [[str(i).encode()]]]


async def test_a_wake_up_ends_only_its_own_sockets_wait() -> None:
    """Waking one socket's waiter (notify_closing on its descriptor) leaves another's waiting."""
    async with (
        dealer_pair("inproc://own-a", hwm=10) as (a1, b1),
        dealer_pair("inproc://own-b", hwm=10) as (a2, b2),
    ):
        with trio.fail_after(5):
            async with trio.open_nursery() as nursery:
                got: dict[str, list[list[bytes]]] = {}

                async def take(name: str, sock: ZSocket) -> None:
                    got[name] = await sock.receive_batch()

                nursery.start_soon(take, "one", b1)
                nursery.start_soon(take, "two", b2)
                await trio.testing.wait_all_tasks_blocked()
                b1.interrupt()
                await trio.testing.wait_all_tasks_blocked()
                assert got == {"one": []}
                assert not b2.closed and not b1.closed
                assert a2.send_nowait([b"two"])
            assert got == {"one": [], "two": [[b"two"]]}
            assert a1.send_nowait([b"one"])
            assert await b1.receive_batch() == [[b"one"]]


@contextmanager
def _counting_events(
    monkeypatch: pytest.MonkeyPatch, target: zmq.Socket[Any]
) -> Iterator[list[int]]:
    """Count ``EVENTS`` reads on ``target`` by the module's hot path (the spin's, _wait's too)."""
    calls: list[int] = []
    real = _zsock._backend_get

    def get(zsock: zmq.Socket[Any], option: int) -> int:
        if zsock is target:
            calls.append(option)
        return real(zsock, option)

    monkeypatch.setattr(_zsock, "_backend_get", get)
    yield calls


async def _one_woken_receive(
    a: ZSocket, b: ZSocket, *payloads: bytes, events: list[int] | None = None
) -> list[list[bytes]]:
    """One ``receive_batch`` woken by ``payloads``, sent at once while it waits.

    ``events``: a ``_counting_events`` list, which must not grow between
    the first payload's send and the call's return.
    """
    got: list[list[list[bytes]]] = []
    async with trio.open_nursery() as nursery:

        async def take() -> None:
            got.append(await b.receive_batch())

        nursery.start_soon(take)
        await trio.testing.wait_all_tasks_blocked()
        assert not got  # it waits on the descriptor
        before = None if events is None else len(events)
        for payload in payloads:
            assert a.send_nowait([payload])
    if events is not None:
        assert len(events) == before, "EVENTS read between the message and its return"
    return got[0]


async def test_a_round_trips_receive_asks_events_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 28: a receive that waits for one message reads ``EVENTS`` once, not three times.

    Each read is a Python enum in pyzmq and a poll and a getpid syscall in
    libzmq.  The one read left says whether more messages are ready, and
    that the descriptor will signal the next.  It is made before the wait,
    for the message before: none between a message's arrival and its
    return, which is a round trip's critical path (the caller answers
    first).  The one before the wait is that same answer, no zmq call
    since; the one after the wake-up is a guess that a message came (a
    wrong guess costs an Again).
    """
    async with dealer_pair("inproc://events-once", hwm=1000) as (a, b):
        raw = b.zmq_socket  # taken before: handing it out counts as a call on it
        with trio.fail_after(5):
            # The first wake-up asks after its message: one message came.
            assert await _one_woken_receive(a, b, b"first") == [[b"first"]]
            with _counting_events(monkeypatch, raw) as calls:
                for i in range(5):
                    message = b"m%d" % i
                    assert await _one_woken_receive(a, b, message, events=calls) == [[message]]
            # The first of these waited on that answer; each other read
            # it for the message before.
            assert calls == [zmq.EVENTS] * 4


async def test_a_burst_after_lone_wake_ups_is_taken_in_two_calls_then_whole() -> None:
    """After lone wake-ups, a wake-up's first message returns at once; the rest follows.

    The call after takes the rest without a wait or a schedule point of
    its own (the wait was the batch's), and the wake-up after a burst
    takes its messages in one batch again.
    """
    async with dealer_pair("inproc://burst-after-lone", hwm=1000) as (a, b):
        with trio.fail_after(5):
            for i in range(3):
                assert await _one_woken_receive(a, b, b"w%d" % i) == [[b"w%d" % i]]
            burst = [b"b%d" % i for i in range(5)]
            assert await _one_woken_receive(a, b, *burst) == [[b"b0"]]
            with trio.testing.assert_no_checkpoints():
                assert await b.receive_batch(checked=True) == [[m] for m in burst[1:]]
            again = [b"c%d" % i for i in range(5)]
            assert await _one_woken_receive(a, b, *again) == [[m] for m in again]
            # One message alone makes the next wake-up's return early again.
            assert await _one_woken_receive(a, b, b"x") == [[b"x"]]
            assert await _one_woken_receive(a, b, b"y0", b"y1") == [[b"y0"]]
            assert await b.receive_batch() == [[b"y1"]]


async def test_early_returns_lose_and_reorder_nothing() -> None:
    """Lone messages and bursts of every size in turn: all arrive, in order."""
    async with dealer_pair("inproc://early-order", hwm=10_000) as (a, b):
        sent: list[bytes] = []
        got: list[bytes] = []
        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:

                async def take() -> None:
                    while len(got) < 600:
                        got.extend(frames[0] for frames in await b.receive_batch(7))

                nursery.start_soon(take)
                for size in [1, 1, 3, 1, 1, 1, 12, 2, 1, 40, 1, 1] * 8:
                    await trio.testing.wait_all_tasks_blocked()
                    for _ in range(size):
                        if len(sent) < 600:
                            sent.append(b"%d" % len(sent))
                            assert a.send_nowait([sent[-1]])
                while len(sent) < 600:
                    sent.append(b"%d" % len(sent))
                    assert a.send_nowait([sent[-1]])
        assert got == sent


async def test_a_message_between_receives_is_heard_without_asking_events() -> None:
    """The skipped ``EVENTS`` before a wait: a message that came meanwhile signalled the FD."""
    async with dealer_pair("inproc://between", hwm=1000) as (a, b):
        with trio.fail_after(5):
            for i in range(50):
                assert await _one_woken_receive(a, b, b"w%d" % i) == [[b"w%d" % i]]
                assert a.send_nowait([b"m%d" % i])  # arrives before the next call
                await trio.testing.wait_all_tasks_blocked()
                assert await b.receive_batch() == [[b"m%d" % i]]


@pytest.mark.parametrize("call", ["send", "raw", "receive_nowait"])
async def test_a_zmq_call_between_receives_makes_the_next_ask_events(call: str) -> None:
    """Any zmq call on the socket between two receives may take the descriptor's signal.

    The next receive must then ask ``EVENTS`` before it waits (Rule 1):
    else it would sleep with the message queued.
    """
    async with dealer_pair(f"inproc://between-call-{call}", hwm=1000) as (a, b):
        with trio.fail_after(5):
            for i in range(20):
                assert await _one_woken_receive(a, b, b"w") == [[b"w"]]
                assert a.send_nowait([b"m%d" % i])
                await trio.testing.wait_all_tasks_blocked()
                # The call processes libzmq's commands: the arrival's signal is spent.
                if call == "send":
                    assert b.send_nowait([b"to a"])
                    assert a.receive_nowait() == [b"to a"]
                elif call == "raw":
                    b.zmq_socket.getsockopt(zmq.EVENTS)
                else:
                    assert b.receive_nowait() == [b"m%d" % i]
                    assert a.send_nowait([b"m%d" % i])  # another one, after the call
                    b.zmq_socket.getsockopt(zmq.EVENTS)
                with trio.move_on_after(1) as scope:
                    got = await b.receive_batch()
                assert not scope.cancelled_caught, "a queued message was not heard"
                assert got == [[b"m%d" % i]]


async def test_a_wake_up_without_a_message_waits_again() -> None:
    """The guess after a wake-up is wrong when the FD spoke for room to send: no empty batch."""
    async with dealer_pair("inproc://room-wake", hwm=1) as (a, b):
        filled = await _fill(b)
        with trio.fail_after(5):
            async with trio.open_nursery() as nursery:
                got: list[list[list[bytes]]] = []

                async def take() -> None:
                    got.append(await b.receive_batch())

                nursery.start_soon(take)
                await trio.testing.wait_all_tasks_blocked()
                for _ in range(filled):  # b gets room: its descriptor signals, no message
                    assert a.receive_nowait() == [b"fill"]
                await trio.testing.wait_all_tasks_blocked()
                assert not got  # it waits again, rather than return nothing
                assert a.send_nowait([b"late"])
            assert got == [[[b"late"]]]
