"""Python calls a message of a one-way WHISPER flood, two nodes in one process over TCP.

    PYTHONPATH=<tree> python benchmarks/flood_calls.py [--messages N] [--nowait]

A sending node WHISPERs ``N`` messages of 100 bytes to a receiving node,
over TCP on ``lo`` (``local_links=False``, beacons in memory: no packet
leaves the process), with ``await whisper`` or, with ``--nowait``,
``whisper_nowait`` (``await whisper`` when refused); one subscriber reads them.
Python and C calls made while the flood runs (both sides: one thread) are
counted with ``sys.setprofile``, each resumption of a coroutine as a call,
and given per message: a figure the machine's load does not move, for
comparing two trees where CPU time cannot resolve a few calls.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from typing import Any

import trio

import trizre

PAYLOAD = b"x" * 100
WARM_UP = 1000


async def run(count: int, nowait: bool) -> Counter[str]:
    """The calls counted over ``count`` messages, by profile event."""
    opts: dict[str, Any] = {"interface": "lo", "discovery": "memory", "local_links": False}
    counts: Counter[str] = Counter()

    def profile(frame: Any, event: str, arg: Any) -> None:
        counts[event] += 1

    async with (
        trizre.open_node("rx", **opts) as rx,
        trizre.open_node("tx", **opts) as tx,
        trio.open_nursery() as nursery,
    ):
        events = rx.events()
        with trio.fail_after(30):
            peer = await tx.wait_for_peer("rx")
        done = trio.Event()

        async def receive(n: int) -> None:
            got = 0
            async for event in events:
                if type(event) is trizre.Whisper:
                    got += 1
                    if got == n:
                        break
            done.set()

        async def send(n: int) -> None:
            for _ in range(n):
                # Refused (no room): the waiting send, which queues it in turn.
                if not (nowait and tx.whisper_nowait(peer, PAYLOAD)):
                    await tx.whisper(peer, PAYLOAD)

        nursery.start_soon(receive, WARM_UP + count)
        with trio.fail_after(30 + count / 1000):  # a lost WHISPER fails the run
            await send(WARM_UP)
            sys.setprofile(profile)
            try:
                await send(count)
                await done.wait()
            finally:
                sys.setprofile(None)
        nursery.cancel_scope.cancel()
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--nowait", action="store_true", help="send with whisper_nowait")
    args = parser.parse_args()
    n = args.messages
    counts = trio.run(run, n, args.nowait)
    print(
        f"python calls/message {counts['call'] / n:.2f}, C calls {counts['c_call'] / n:.2f}"
        f" ({'whisper_nowait' if args.nowait else 'await whisper'})"
    )


if __name__ == "__main__":
    main()
