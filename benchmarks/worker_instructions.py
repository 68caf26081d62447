"""Instructions per request of a services worker's own work, counted by valgrind.

    PYTHONPATH=<tree> python benchmarks/worker_instructions.py [--requests 1000] [--more 5000]

A service's worker, ``open_server`` itself (its runners, its reply
sender, its ACCEPTED and status tasks), behind the node's pattern port,
over a stub node: a task keeps 100 requests in
flight, each a WHISPER handed to the port in batches as the node hands
them; the server's replies are kept by the stub's ``whisper_nowait``, and
each one frees the next request.  The handler echoes.  No socket, no
other node: what is left is the pattern layer's work for a request (the
port's one-pass decode, admission, the runner, the reply's frames and
bookkeeping), beside ``--least``, one task that echoes each request's
frames.

Under a mock clock that never moves (the server's run slice and its
ACCEPTED timer read the clock), nothing depends on time, so two counts of
one tree agree within a few hundredths of a per cent.  It says nothing
of libzmq or the node's own send and receive (``profile_services.py
--profile worker`` sees those).  About 50 times slower than the run it
counts (a minute or two).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from typing import Any

import _callgrind  # beside this script
import trio
import trio.testing

import trizre
from trizre.patterns import IncomingRequest, open_server
from trizre.patterns import _protocol as proto
from trizre.patterns._port import open_port

WINDOW = 100
BATCH = 16  # requests handed to the port at once, as the node reads a run of them
PAYLOAD = b"x" * 100
CLIENT = uuid.UUID(int=1)


class _NoEvents:
    """The stub's subscription: nothing comes (the meter hands the port its events)."""

    async def receive_batch(self, most: int) -> list[object]:
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    def close(self) -> None:
        pass


class _StubNode:
    """The node calls a server and its port make: replies kept in a list."""

    tracer = None
    name = "worker"

    def __init__(self) -> None:
        self.sent: list[tuple[bytes, ...]] = []
        self.lot = trio.lowlevel.ParkingLot()

    def events(self) -> _NoEvents:
        return _NoEvents()

    async def join(self, group: str) -> None:
        pass

    async def leave(self, group: str) -> None:
        pass

    async def shout(self, group: str, *frames: bytes) -> None:
        pass  # the server's status, once at the start: no watcher reads it

    def peers_by_group(self, group: str) -> list[uuid.UUID]:
        return []  # no watcher in the status group

    def whisper_nowait(self, peer: uuid.UUID, *frames: bytes) -> bool:
        self.sent.append(frames)
        self.lot.unpark_all()
        return True


async def _echo(request: IncomingRequest) -> Sequence[bytes]:
    return request.body


async def _drive(
    count: int,
    sent: list[tuple[bytes, ...]],
    lot: trio.lowlevel.ParkingLot,
    deliver: Callable[[Sequence[trizre.Whisper]], None],
) -> None:
    """``count`` requests, ``WINDOW`` in flight, handed over ``BATCH`` at a time."""
    ids = iter(range(1, 1 << 62))
    requests = [
        trizre.Whisper(CLIENT, "client", tuple(proto.encode_request(next(ids), "echo", (PAYLOAD,))))
        for _ in range(count)
    ]
    given = answered = 0
    while answered < count:
        # A batch whenever there is room for one (or for the last few).
        while (take := min(BATCH, WINDOW - (given - answered), count - given)) > 0 and (
            take == BATCH or given + take == count
        ):
            deliver(requests[given : given + take])
            given += take
        if not sent:
            await lot.park()
        answered += len(sent)
        sent.clear()
        await trio.lowlevel.checkpoint()


async def _worker(count: int) -> None:
    node: Any = _StubNode()
    # ACCEPTED far beyond the run (the clock stands still anyway); the port
    # open_server registers on is the node's one, which open_port finds.
    async with open_server(node, _echo, service="echo", accept_after=1e9), open_port(node) as port:
        await _drive(count, node.sent, node.lot, port.dispatch_batch)


async def _least(count: int) -> None:
    sent: list[tuple[bytes, ...]] = []
    lot = trio.lowlevel.ParkingLot()
    inbox: list[Sequence[trizre.Whisper]] = []
    ready = trio.lowlevel.ParkingLot()

    async def echo() -> None:
        while True:
            if not inbox:
                await ready.park()
            for batch in inbox:
                for event in batch:
                    sent.append(event.frames)
            inbox.clear()
            lot.unpark_all()
            await trio.lowlevel.checkpoint()

    def deliver(batch: Sequence[trizre.Whisper]) -> None:
        inbox.append(batch)
        ready.unpark_all()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(echo)
        await _drive(count, sent, lot, deliver)
        nursery.cancel_scope.cancel()


def _run(requests: int, least: bool) -> None:
    # A clock that never moves: the server's run slice and ACCEPTED timer read it.
    trio.run(_least if least else _worker, requests, clock=trio.testing.MockClock())


def main() -> None:
    _callgrind.main(
        __file__, __doc__.split("\n", 1)[0], "the services worker", "the least worker", _run
    )


if __name__ == "__main__":
    main()
