"""CPU and Trio task steps per WHISPER round trip, two nodes in one process over TCP.

    PYTHONPATH=<tree> python benchmarks/roundtrip_cpu.py [--round-trips N] [--steps]

A pinging node WHISPERs, an echoing node WHISPERs each one back, in
sequence, over TCP on ``lo`` (``local_links=False``, beacons in memory: no
packet leaves the process), each node read by one subscriber: the load of
``trio_floor.py``'s pingpong, both sides in one process.  CPU time of the
Python thread (``time.thread_time``, libzmq's I/O threads left out) and of
the whole process, per round trip: comparable on a loaded machine, where
rates are not.  ``--steps`` also counts Trio task steps per round trip, by
task, in a second run (a Trio instrument slows the run a little);
``--calls`` counts Python calls per round trip in another (``sys.setprofile``:
each resumption of a coroutine counts as a call, so every frame of an
``await`` chain that a wake-up passes through is counted; the load on the
machine does not move it, where CPU time does).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from typing import Any

import trio

import trizre

PAYLOAD = b"x" * 100
WARM_UP = 500


class _Steps(trio.abc.Instrument):
    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self.counts[task.name] += 1


class _Calls:
    """Counts Python calls (and coroutine resumptions) and C calls while on."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()

    def _profile(self, frame: Any, event: str, arg: Any) -> None:
        self.counts[event] += 1

    def start(self) -> None:
        sys.setprofile(self._profile)

    def stop(self) -> None:
        sys.setprofile(None)


async def run(count: int, steps: _Steps | None, calls: _Calls | None = None) -> tuple[float, float]:
    """Thread and process CPU µs per round trip."""
    opts: dict[str, Any] = {"interface": "lo", "discovery": "memory", "local_links": False}
    async with (
        trizre.open_node("echo", **opts) as echo,
        trizre.open_node("ping", **opts) as ping,
        trio.open_nursery() as nursery,
    ):
        echo_events = echo.events()

        async def serve() -> None:
            async for event in echo_events:
                if type(event) is trizre.Whisper:
                    await echo.whisper(event.peer, *event.frames)

        nursery.start_soon(serve)
        with trio.fail_after(30):
            peer = await ping.wait_for_peer("echo")
        events = ping.events()

        async def trips(n: int) -> None:
            for _ in range(n):
                await ping.whisper(peer, PAYLOAD)
                async for event in events:
                    if type(event) is trizre.Whisper:
                        break

        with trio.fail_after(30 + count / 500):  # a lost WHISPER fails the run
            await trips(WARM_UP)
            if steps is not None:
                trio.lowlevel.add_instrument(steps)
            if calls is not None:
                calls.start()
            thread, process = time.thread_time(), time.process_time()
            await trips(count)
            thread, process = time.thread_time() - thread, time.process_time() - process
            if calls is not None:
                calls.stop()
            if steps is not None:
                trio.lowlevel.remove_instrument(steps)
        nursery.cancel_scope.cancel()
    return 1e6 * thread / count, 1e6 * process / count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--round-trips", type=int, default=20_000)
    parser.add_argument("--steps", action="store_true", help="also count task steps")
    parser.add_argument("--calls", action="store_true", help="also count Python calls")
    args = parser.parse_args()
    n = args.round_trips
    thread, process = trio.run(run, n, None)
    print(f"cpu/round-trip thread {thread:.1f} us, process {process:.1f} us")
    if args.steps:
        steps = _Steps()
        trio.run(run, n, steps)
        print(f"task steps/round-trip {sum(steps.counts.values()) / n:.2f}")
        for name, c in steps.counts.most_common(6):
            print(f"  {c / n:6.3f}  {'.'.join(name.replace('.<locals>', '').split('.')[-2:])}")
    if args.calls:
        calls = _Calls()
        trio.run(run, n, None, calls)
        print(
            f"python calls/round-trip {calls.counts['call'] / n:.2f}, "
            f"C calls {calls.counts['c_call'] / n:.2f}"
        )


if __name__ == "__main__":
    main()
