"""What N idle trizre nodes in one process cost: CPU, run-loop turns, task steps, Python calls.

    python benchmarks/idle_cpu.py [--nodes 100] [--settle 2] [--window 10] [--calls]

The nodes run on ``lo`` (beacons to 127.255.255.255 on a random port, and
in-memory links between them), as ``bench_zre.py``'s footprint does, and
the window starts ``--settle`` seconds after every node saw every other.
Prints the time to the full mesh, the process's CPU over the window (% of
a core), then the run loop's turns and each task's steps a second (a Trio
instrument, one hook a turn and a step: on in a second window, so it does
not weigh on the CPU figure).  ``--calls`` counts Python calls a second by
function in a third window, under ``sys.setprofile`` (slow: the deterministic
measure, for comparing two trees).
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections import Counter
from contextlib import AsyncExitStack
from types import FrameType
from typing import Any

import trio

import trizre


class _Counts(trio.abc.Instrument):
    """Turns of the run loop and steps by task name."""

    def __init__(self) -> None:
        self.turns = 0
        self.steps: Counter[str] = Counter()

    def after_io_wait(self, timeout: float) -> None:
        self.turns += 1

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self.steps[task.name.rsplit(".", 1)[-1]] += 1


async def main(nodes: int, settle: float, window: float, calls: bool) -> None:
    port = random.randint(20000, 40000)
    async with AsyncExitStack() as stack:
        start = time.monotonic()
        opened = [
            await stack.enter_async_context(
                trizre.open_node(f"n{i}", interface="lo", beacon_port=port)
            )
            for i in range(nodes)
        ]
        with trio.fail_after(60):
            for node in opened:
                for other in opened:
                    if other is not node:
                        await node.wait_for_peer(other.uuid)
        print(f"{nodes} nodes, full mesh {time.monotonic() - start:.2f} s after the first opened")
        await trio.sleep(settle)

        cpu, wall = time.process_time(), time.monotonic()
        await trio.sleep(window)
        cpu, wall = time.process_time() - cpu, time.monotonic() - wall
        print(f"idle CPU {100 * cpu / wall:.2f} % of a core over {wall:.1f} s")

        counts = _Counts()
        trio.lowlevel.add_instrument(counts)
        wall = time.monotonic()
        await trio.sleep(window)
        wall = time.monotonic() - wall
        trio.lowlevel.remove_instrument(counts)
        steps = sum(counts.steps.values())
        print(f"turns {counts.turns / wall:.1f}/s, task steps {steps / wall:.1f}/s:")
        for name, n in counts.steps.most_common(8):
            print(f"  {n / wall:8.1f}/s {name}")

        if calls:
            by_function: Counter[tuple[str, str]] = Counter()

            def profile(frame: FrameType, event: str, arg: Any) -> None:
                if event == "call":
                    code = frame.f_code
                    where = code.co_filename.rsplit("site-packages/", 1)[-1]
                    by_function[where.rsplit("/trizre/", 1)[-1], code.co_name] += 1

            wall = time.monotonic()
            sys.setprofile(profile)
            try:
                await trio.sleep(window)
            finally:
                sys.setprofile(None)
            wall = time.monotonic() - wall
            print(f"Python calls {sum(by_function.values()) / wall:,.0f}/s; the most:")
            for (where, name), n in by_function.most_common(15):
                print(f"  {n / wall:8.0f}/s {where}:{name}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=100)
    parser.add_argument("--settle", type=float, default=2.0)
    parser.add_argument("--window", type=float, default=10.0)
    parser.add_argument("--calls", action="store_true")
    args = parser.parse_args()
    trio.run(main, args.nodes, args.settle, args.window, args.calls)
