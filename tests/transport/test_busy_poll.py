"""The socket layer's low-latency mode (issue 28): busy-poll after a message, bounded.

Under ``autojump_clock`` (virtual time, rate 0) the poll's first phase,
waiting for the run to be idle, ends only when it is idle; the spin that
follows runs on a clock that steps once a look (``spin_by_count``), so
its length is a count of reads, whatever the machine's load.  A
message "arrives during the spin" by being sent on an inproc peer from
inside the spin's own ``EVENTS`` read: inproc hands it over at once.
"""

from __future__ import annotations

import itertools
import math
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing
import zmq

from trizre.transport import _zsock
from trizre.transport._zsock import BUSY_POLL_MAX, ZSocket, check_busy_poll

from .test_zsock import dealer_pair

POLL = BUSY_POLL_MAX
STEP = 1e-6  # the spin's clock advances this much a read: a 1 ms spin is 1000 reads
_names = itertools.count()


def _inproc(tag: str) -> str:
    # Fresh each time: libzmq frees a closed inproc name in the background.
    return f"inproc://{tag}-{next(_names)}"


@pytest.fixture(autouse=True)
def spin_by_count(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The spin's clock steps ``STEP`` a look, so its length does not depend on
    the machine's load; its yields are counted, not made."""
    ticks = itertools.count()
    yields: list[int] = []
    monkeypatch.setattr(_zsock, "_spin_clock", lambda: next(ticks) * STEP)
    monkeypatch.setattr(_zsock, "_sched_yield", lambda: yields.append(1))
    return yields


@contextmanager
def counted_parks(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """How many times a task parked on a descriptor (``wait_readable``) inside the block."""
    parks: list[int] = []
    real = trio.lowlevel.wait_readable

    async def wait_readable(fd: Any) -> None:
        parks.append(fd)
        await real(fd)

    monkeypatch.setattr(trio.lowlevel, "wait_readable", wait_readable)
    yield parks
    monkeypatch.setattr(trio.lowlevel, "wait_readable", real)


def send_during_spin(
    monkeypatch: pytest.MonkeyPatch, rx: ZSocket, tx: ZSocket, spins: int = 1
) -> list[int]:
    """On the ``spins``-th EVENTS read of ``rx``'s spin, send one message from ``tx``.

    A poll reads EVENTS once when the run turns idle, then once per turn
    of the spin: the second read of a poll is the spin's first.
    """
    real: Callable[[Any, int], Any] = _zsock._backend_get
    reads: list[int] = []

    def get(zsock: Any, option: int) -> Any:
        if zsock is rx.zmq_socket and rx.busy_polls and option == zmq.EVENTS:
            reads.append(rx.busy_polls)
            if len(reads) == 1 + spins:
                tx.zmq_socket.send(b"during the spin", zmq.NOBLOCK)
        return real(zsock, option)

    monkeypatch.setattr(_zsock, "_backend_get", get)
    return reads


@pytest.mark.parametrize(
    ("value", "kind"),
    [
        (-1e-6, ValueError),
        (BUSY_POLL_MAX * 1.001, ValueError),
        (math.inf, ValueError),
        (math.nan, ValueError),
        (True, TypeError),
        ("0.00005", TypeError),
        (None, TypeError),
    ],
)
async def test_a_bad_busy_poll_is_refused(value: Any, kind: type[Exception]) -> None:
    with pytest.raises(kind, match="busy_poll"):
        check_busy_poll(value)
    raw = _zsock.context().socket(zmq.DEALER)
    try:
        with pytest.raises(kind, match="busy_poll"):
            ZSocket(raw, busy_poll=value)
    finally:
        raw.close(linger=0)
    async with dealer_pair(_inproc("bp-bad")) as (a, _b):
        with pytest.raises(kind, match="busy_poll"):
            a.busy_poll = value
        assert a.busy_poll == 0.0  # unchanged


def test_the_bounds_are_accepted() -> None:
    assert check_busy_poll(0) == 0.0
    assert check_busy_poll(BUSY_POLL_MAX) == BUSY_POLL_MAX
    assert check_busy_poll(50e-6) == 50e-6


async def test_a_message_arriving_during_the_spin_is_taken_without_parking(
    autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with dealer_pair(_inproc("bp-hit"), hwm=100) as (tx, rx):
        rx.busy_poll = POLL
        assert tx.send_nowait([b"first"])
        with trio.fail_after(5):
            assert await rx.receive_batch() == [[b"first"]]
            reads = send_during_spin(monkeypatch, rx, tx)
            with counted_parks(monkeypatch) as parks:
                assert await rx.receive_batch() == [[b"during the spin"]]
        assert reads[:2] == [1, 1]  # the idle look found nothing; the spin's first read sent
        assert (rx.busy_polls, rx.busy_poll_hits) == (1, 1)
        assert parks == []


async def test_a_spin_that_finds_nothing_parks_as_before(
    autojump_clock: trio.testing.MockClock,
    monkeypatch: pytest.MonkeyPatch,
    spin_by_count: list[int],
) -> None:
    async with dealer_pair(_inproc("bp-miss"), hwm=100) as (tx, rx):
        rx.busy_poll = POLL
        assert tx.send_nowait([b"first"])

        async def later() -> None:
            await trio.sleep(1)  # virtual: long after the spin gave up
            assert tx.send_nowait([b"later"])

        with trio.fail_after(5):
            assert await rx.receive_batch() == [[b"first"]]
            with counted_parks(monkeypatch) as parks:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(later)
                    assert await rx.receive_batch() == [[b"later"]]
        assert (rx.busy_polls, rx.busy_poll_hits) == (1, 0)
        # busy_poll long, a look and a yield a step: then it gave up.
        assert 990 <= len(spin_by_count) <= 1000
        assert parks, "after the spin the reader waits on its descriptor"
        # A message re-arms it: the next wait polls first again.
        with trio.move_on_after(1):
            await rx.receive_batch()
        assert rx.busy_polls == 2


async def test_an_idle_socket_never_polls(
    autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only a message arms the poll: a socket that received nothing parks at once."""
    async with dealer_pair(_inproc("bp-idle"), hwm=100) as (_tx, rx):
        rx.busy_poll = POLL
        with counted_parks(monkeypatch) as parks, trio.move_on_after(10):
            await rx.receive_batch()
        assert rx.busy_polls == 0
        assert parks


async def test_off_is_the_old_path(
    autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def never(self: ZSocket) -> None:
        raise AssertionError("busy_poll is off: no poll")

    monkeypatch.setattr(ZSocket, "_busy_poll_once", never)
    async with dealer_pair(_inproc("bp-off"), hwm=100) as (tx, rx):
        assert rx.busy_poll == 0.0
        assert tx.send_nowait([b"first"])

        async def later() -> None:
            await trio.sleep(1)
            assert tx.send_nowait([b"later"])

        with trio.fail_after(5), counted_parks(monkeypatch) as parks:
            assert await rx.receive_batch() == [[b"first"]]
            async with trio.open_nursery() as nursery:
                nursery.start_soon(later)
                assert await rx.receive_batch() == [[b"later"]]
        assert rx.busy_polls == 0
        assert parks


async def test_the_poll_lets_the_other_tasks_run_first(
    autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The spin starts only once every other task waits: the reply a reader's
    message asks for goes out before the reader holds the run."""
    async with dealer_pair(_inproc("bp-first"), hwm=100) as (tx, rx):
        rx.busy_poll = POLL
        assert tx.send_nowait([b"first"])
        steps: list[str] = []

        async def worker() -> None:
            for _ in range(50):
                steps.append("work")
                await trio.lowlevel.checkpoint()

        def get_spy(zsock: Any, option: int) -> Any:
            if zsock is rx.zmq_socket and rx.busy_polls:
                steps.append("poll")
            return real(zsock, option)

        real = _zsock._backend_get
        with trio.fail_after(5):
            assert await rx.receive_batch() == [[b"first"]]
            monkeypatch.setattr(_zsock, "_backend_get", get_spy)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(worker)
                with trio.move_on_after(1):
                    await rx.receive_batch()
        assert rx.busy_polls == 1
        assert steps.index("poll") == 50, "all the work ran before the first poll"


async def test_a_poll_cancelled_while_the_run_is_busy_takes_nothing(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with dealer_pair(_inproc("bp-cancel"), hwm=100) as (tx, rx):
        rx.busy_poll = POLL
        assert tx.send_nowait([b"first"])
        with trio.fail_after(5):
            assert await rx.receive_batch() == [[b"first"]]
            async with trio.open_nursery() as nursery:
                scope = trio.CancelScope()

                async def reader() -> None:
                    with scope:
                        await rx.receive_batch()
                        raise AssertionError("the reader was to be cancelled")

                nursery.start_soon(reader)
                # Busy (a checkpoint a turn): the reader's poll waits for idle.
                while not rx.busy_polls:
                    await trio.lowlevel.checkpoint()
                assert tx.send_nowait([b"kept"])
                scope.cancel()
            assert scope.cancelled_caught
            assert await rx.receive_batch() == [[b"kept"]]


async def test_one_spin_polls_every_socket_waiting_to_spin(
    autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two sockets busy-poll in one run: one spin serves both, the run is held once."""
    async with (
        dealer_pair(_inproc("bp-two-a"), hwm=100) as (tx1, rx1),
        dealer_pair(_inproc("bp-two-b"), hwm=100) as (tx2, rx2),
    ):
        rx1.busy_poll = rx2.busy_poll = POLL
        assert tx1.send_nowait([b"1"])
        assert tx2.send_nowait([b"2"])
        spins_before = _zsock._spinner().generation
        real = _zsock._backend_get
        spinning: list[Any] = []

        def get(zsock: Any, option: int) -> Any:
            # Count the spin's reads of rx2 (done by whichever spins) and
            # hand rx2 a message on the third: the spinner must notice it.
            if zsock is rx2.zmq_socket and rx1.busy_polls and rx2.busy_polls:
                spinning.append(zsock)
                if len(spinning) == 3:
                    tx2.zmq_socket.send(b"for 2", zmq.NOBLOCK)
            return real(zsock, option)

        got: dict[str, list[list[bytes]]] = {}

        async def read(name: str, rx: ZSocket) -> None:
            assert await rx.receive_batch() == [[name.encode()]]
            got[name] = await rx.receive_batch()

        with trio.fail_after(5), counted_parks(monkeypatch) as parks:
            async with trio.open_nursery() as nursery:
                monkeypatch.setattr(_zsock, "_backend_get", get)
                nursery.start_soon(read, "1", rx1)
                nursery.start_soon(read, "2", rx2)
                while "2" not in got:
                    await trio.testing.wait_all_tasks_blocked()
                    await trio.sleep(0.1)
                nursery.cancel_scope.cancel()
        assert got["2"] == [[b"for 2"]]
        assert _zsock._spinner().generation == spins_before + 1, "one spin for both"
        assert rx2.busy_poll_hits == 1  # the idle look after the spin found it
        assert rx2.zmq_socket.FD not in parks


async def test_two_tasks_receiving_on_one_socket_may_both_be_polling(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Any number of tasks may receive on one socket; with the poll on, two can
    wait to spin at once, and each message is still taken once."""

    async def until(condition: Callable[[], bool]) -> None:
        while not condition():  # a checkpoint a turn: the run never idles
            await trio.lowlevel.checkpoint()

    async with dealer_pair(_inproc("bp-tasks"), hwm=100) as (tx, rx):
        rx.busy_poll = POLL
        got: list[bytes] = []

        async def reader() -> None:
            while True:
                for frames in await rx.receive_batch(1):
                    got.append(frames[0])

        with trio.fail_after(60):
            async with trio.open_nursery() as nursery:
                assert tx.send_nowait([b"0"])
                nursery.start_soon(reader)
                await until(lambda: rx.busy_polls == 1)  # reader 1 took it, waits to spin
                assert tx.send_nowait([b"1"])
                nursery.start_soon(reader)
                await until(lambda: rx.busy_polls == 2)  # reader 2 took it, waits too
                assert list(_zsock._spinner().waiting) == [rx]  # one entry for both
                await trio.sleep(1)  # idle: both poll, then park
                assert tx.send_nowait([b"2"])
                await until(lambda: len(got) == 3)
                nursery.cancel_scope.cancel()
        assert got == [b"0", b"1", b"2"]


async def test_an_interrupt_during_the_spin_ends_the_call_without_parking(
    autojump_clock: trio.testing.MockClock,
    monkeypatch: pytest.MonkeyPatch,
    spin_by_count: list[int],
) -> None:
    """A lone subscriber reading the inbox (the lead) is woken for an event
    queued elsewhere even while it busy-polls: nothing waits for the next message."""
    async with dealer_pair(_inproc("bp-interrupt"), hwm=100) as (tx, rx):
        rx.busy_poll = POLL
        assert tx.send_nowait([b"first"])
        real: Callable[[Any, int], Any] = _zsock._backend_get
        reads: list[int] = []

        def get(zsock: Any, option: int) -> Any:
            if zsock is rx.zmq_socket and rx.busy_polls and option == zmq.EVENTS:
                reads.append(1)
                if len(reads) == 2:  # the spin's first look
                    rx.interrupt()
            return real(zsock, option)

        with trio.fail_after(5):
            assert await rx.receive_batch() == [[b"first"]]
            monkeypatch.setattr(_zsock, "_backend_get", get)
            with counted_parks(monkeypatch) as parks:
                assert await rx.receive_batch() == []  # interrupted: nothing taken
        assert parks == []
        assert len(spin_by_count) < 10  # the spin stopped at the interrupt


ROOT = str(Path(__file__).resolve().parents[2])  # this checkout, not an installed trizre
_WEIGHT = """
import sys, trio, trizre, trizre.patterns

async def main():
    async with trizre.open_node("light", interface="lo", discovery="memory") as node:
        assert node.peers() == []

trio.run(main)
print(",".join(name for name in ("trio.testing", "_pytest") if name in sys.modules))
"""


async def test_a_process_that_never_busy_polls_loads_no_test_modules() -> None:
    """``trio.testing`` (which loads pytest when it is installed, ~10 MB of RSS)
    is imported on the first busy poll only: ``make bench`` found a node
    process 9 MB heavier once the mode imported it for every process."""
    with trio.fail_after(60):
        done = await trio.run_process(
            [sys.executable, "-c", _WEIGHT],
            capture_stdout=True,
            capture_stderr=True,
            env={**os.environ, "PYTHONPATH": ROOT},
        )
    assert done.stdout.decode().strip() == "", done.stdout
