"""How a server's runners take held requests, on virtual time, without sockets.

The server reads trizre events from a memory channel we feed; replies go
to :class:`RecordingNode`, a stand-in with the node methods a server calls.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator
from uuid import UUID

import pytest
import trio
import trio.testing

import trizre
from trizre.patterns import IncomingRequest
from trizre.patterns._protocol import Accepted, Reply, Request, decode, encode
from trizre.patterns._server import Server, _as_frames

CLIENT = UUID(int=0xC)


class RecordingNode:
    """The node methods a server calls; replies are decoded into ``replies``."""

    tracer = None

    def __init__(self) -> None:
        self.replies: list[Reply] = []
        self._send, self._receive = trio.open_memory_channel[object](math.inf)

    def events(self) -> AsyncIterator[object]:
        async def stream() -> AsyncIterator[object]:
            # As the node's streams: a buffered event is no schedule point.
            while True:
                try:
                    yield self._receive.receive_nowait()
                except trio.WouldBlock:
                    yield await self._receive.receive()

        return stream()

    def request(self, request_id: int) -> None:
        frames = tuple(encode(Request(request_id, "work", (b"x",))))
        self._send.send_nowait(trizre.Whisper(CLIENT, "client", frames))

    def whisper_nowait(self, peer: UUID, *frames: bytes) -> bool:
        message = decode(frames)
        if isinstance(message, Reply):
            self.replies.append(message)
        else:
            assert isinstance(message, Accepted)
        return True

    async def whisper(self, peer: UUID, *frames: bytes) -> None:
        raise AssertionError("a client with room is never waited for")


class RunnerSteps(trio.abc.Instrument):
    """Counts the steps of the server's runner tasks."""

    def __init__(self) -> None:
        self.steps = 0

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        if task.name.endswith("Server._runner"):
            self.steps += 1


def _serving(server: Server, nursery: trio.Nursery) -> None:
    nursery.start_soon(server._serve, nursery)
    nursery.start_soon(server._send_replies)
    nursery.start_soon(server._accept)


async def test_a_batch_of_fast_requests_takes_one_runner_step_not_one_each(
    autojump_clock: trio.abc.Clock,
) -> None:
    node = RecordingNode()

    async def fast(request: IncomingRequest) -> bytes:
        return b"ok"

    server = Server(node, "work", fast, max_concurrency=64)  # type: ignore[arg-type]
    counter = RunnerSteps()
    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            _serving(server, nursery)
            for request_id in range(20):
                node.request(request_id)  # one batch: all there before the server reads
            trio.lowlevel.add_instrument(counter)
            await trio.sleep(1)
            trio.lowlevel.remove_instrument(counter)
            nursery.cancel_scope.cancel()
    assert sorted(reply.request_id for reply in node.replies) == list(range(20))
    # One runner ran all twenty; the one it summoned in case a handler
    # waited found nothing left and parked.
    assert counter.steps <= 3, counter.steps
    assert server._runners == 2


async def test_a_handler_that_waits_holds_up_none_of_the_others(
    autojump_clock: trio.abc.Clock,
) -> None:
    node = RecordingNode()
    release = trio.Event()
    running = 0

    async def slow_first(request: IncomingRequest) -> bytes:
        nonlocal running
        running += 1
        if request.request_id == 0:
            await release.wait()
        return b"ok"

    server = Server(node, "work", slow_first, max_concurrency=64)  # type: ignore[arg-type]
    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            _serving(server, nursery)
            for request_id in range(5):
                node.request(request_id)
            await trio.sleep(1)
            assert running == 5
            assert sorted(reply.request_id for reply in node.replies) == [1, 2, 3, 4]
            release.set()
            await trio.sleep(1)
            nursery.cancel_scope.cancel()
    assert sorted(reply.request_id for reply in node.replies) == list(range(5))


@pytest.mark.parametrize("seconds", [0.0002, 0.003])
def test_handlers_that_never_yield_still_let_other_tasks_run(seconds: float) -> None:
    """A runner running requests back to back yields every millisecond or so."""
    clock = trio.testing.MockClock()
    node = RecordingNode()
    ticks: list[int] = []

    async def busy(request: IncomingRequest) -> bytes:
        clock.jump(seconds)  # CPU work that takes this long, and never yields
        return b"ok"

    async def ticker() -> None:
        while True:
            ticks.append(len(node.replies))
            await trio.lowlevel.checkpoint()

    async def main() -> None:
        server = Server(node, "work", busy, max_concurrency=1)  # type: ignore[arg-type]
        with trio.fail_after(5):
            await serve(server)

    async def serve(server: Server) -> None:
        async with trio.open_nursery() as nursery:
            _serving(server, nursery)
            for request_id in range(40):
                node.request(request_id)
            nursery.start_soon(ticker)
            while len(node.replies) < 40:
                await trio.lowlevel.checkpoint()
            nursery.cancel_scope.cancel()

    trio.run(main, clock=clock)
    # The ticker ran between requests, not only once they were all done: about
    # once a millisecond of handlers (it may see a count twice, running first
    # in one turn and last in the next).
    ran_between = [count for count in ticks if 0 < count < 40]
    slices = min(39, 40 * seconds / 0.001)
    assert len(ran_between) >= slices // 2, ran_between


def test_a_handlers_result_is_checked_frame_by_frame() -> None:
    """Bytes or a sequence of bytes; anything else is the handler's TypeError (a 500)."""
    assert _as_frames(b"a") == (b"a",)
    body = (b"a", b"b")
    assert _as_frames(body) is body  # a tuple is sent as it is
    assert _as_frames([b"a", b""]) == (b"a", b"")
    with pytest.raises(TypeError, match="bytes or a sequence of bytes"):
        _as_frames([b"a", "b"])  # type: ignore[list-item]
