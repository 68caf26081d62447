"""Instructions per request of the services client's own work, counted by valgrind.

    PYTHONPATH=<tree> python benchmarks/client_instructions.py [--requests 1000] [--more 5000]

A :class:`~trizre.patterns.ServiceClient` with 100 requests in flight
over a stub node of four workers: its sends are kept in a list, and a
task answers each one with a REPLY routed as the node's port would (the
request decoded, a reply handed to the router).  No socket, no timer, no
other node: what is left is the pattern layer's per-request work (the
ranking of workers, the retry rules, the deadline heap, the in-flight
bound, the waits and wake-ups), beside ``--least``, the least client
that does the same with a ``trio.Event`` and a dict per request.

The process runs twice under ``valgrind --tool=callgrind`` (it must be
installed), with ``--requests`` and with ``--requests`` plus ``--more``;
the difference over ``--more`` requests is printed.  Start-up cancels
out, and nothing in the run depends on time, so the count repeats within
about 0.05 %: two trees compare where CPU time on a shared VM moves by
tens of percent between runs.  It says nothing of libzmq or the node;
``services_cpu.py`` and ``profile_services.py`` measure those.  About 50
times slower than the run it counts (a minute or two).
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable

import _callgrind  # beside this script
import trio

from trizre._concurrency import clock_reader
from trizre.patterns import RetryPolicy, ServiceClient
from trizre.patterns import _protocol as proto
from trizre.patterns._common import ReplyRouter

WINDOW = 100
PAYLOAD = b"x" * 100


class _StubNode:
    """The node calls a service client makes: four workers, sends kept in a list."""

    tracer = None

    def __init__(self) -> None:
        # Fixed ids: the same dict layouts in every counted run.
        self.workers = [uuid.UUID(int=i + 1) for i in range(4)]
        self.sent: list[tuple[uuid.UUID, tuple[bytes, ...]]] = []
        self.lot = trio.lowlevel.ParkingLot()

    def peers_by_group(self, group: str) -> list[uuid.UUID]:
        return list(self.workers)

    def peer_is_responsive(self, peer: uuid.UUID) -> bool:
        return True

    def peer_name(self, peer: uuid.UUID) -> str:
        return "w"

    def whisper_nowait(self, peer: uuid.UUID, *frames: bytes) -> bool:
        self.sent.append((peer, frames))
        self.lot.unpark_all()
        return True


async def _client(count: int) -> None:
    node = _StubNode()
    router = ReplyRouter(node)  # type: ignore[arg-type]
    router.now = clock_reader()  # as open_reply_router sets it
    client = ServiceClient(router, RetryPolicy(10, 3))

    async def answer() -> None:
        while True:
            if not node.sent:
                await node.lot.park()
            batch, node.sent = node.sent, []
            await trio.lowlevel.checkpoint()  # as a port's pump reads a batch per turn
            for peer, frames in batch:
                request = proto.decode(list(frames))
                assert isinstance(request, proto.Request)
                # As the port hands a version-2 reply to a node's lone router.
                reply = proto.new_reply(request.request_id, proto.STATUS_OK, request.body, 2)
                router.on_reply(peer, reply)

    await _window(count, lambda: client.request("echo", PAYLOAD), answer, router.run_clock)


async def _least(count: int) -> None:
    sent: list[bytes] = []
    lot = trio.lowlevel.ParkingLot()
    waiting: dict[bytes, trio.Event] = {}
    numbers = iter(range(1, 1 << 62))

    async def answer() -> None:
        nonlocal sent
        while True:
            if not sent:
                await lot.park()
            batch, sent = sent, []
            await trio.lowlevel.checkpoint()
            for request_id in batch:
                waiting.pop(request_id).set()

    async def request() -> None:
        request_id = next(numbers).to_bytes(8, "big")
        waiting[request_id] = done = trio.Event()
        sent.append(request_id)
        lot.unpark_all()
        await done.wait()

    await _window(count, request, answer)


async def _window(
    count: int,
    request: Callable[[], Awaitable[object]],
    *beside: Callable[[], Awaitable[None]],
) -> None:
    """``count`` requests, ``WINDOW`` in flight, with ``beside`` tasks running."""
    left = count

    async def loop() -> None:
        nonlocal left
        while left > 0:
            left -= 1
            await request()

    async with trio.open_nursery() as nursery:
        for task in beside:
            nursery.start_soon(task)
        async with trio.open_nursery() as callers:
            for _ in range(WINDOW):
                callers.start_soon(loop)
        nursery.cancel_scope.cancel()


def main() -> None:
    _callgrind.main(
        __file__,
        __doc__.split("\n", 1)[0],
        "the services client",
        "the least client",
        lambda requests, least: trio.run(_least if least else _client, requests),
    )


if __name__ == "__main__":
    main()
