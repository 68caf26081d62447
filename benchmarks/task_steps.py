"""Task steps per pipelined service request, by task: where Trio's run loop goes.

A client and 4 workers in one process, their nodes linked over TCP on
``lo`` as between processes (``local_links=False``), the load of
``bench_patterns.py``'s "pipelined (100 in flight), 4 workers".  A Trio
instrument counts every task step while the requests run; each step is a
trip through the run queue (~6 us here), so steps per request say how
much of a request's cost is scheduling, whatever the machine's speed.
One process also leaves out the context switches between processes that
``profile_services.py`` shows.

    python benchmarks/task_steps.py [--requests 20000] [--port PORT]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from pathlib import Path

import trio

import trizre
from trizre import patterns
from trizre.patterns import IncomingRequest, RetryPolicy

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_patterns as bench  # the same payload, window and port helper

WORKERS = 4


class _Steps(trio.abc.Instrument):
    """Counts steps by task name (the task's function, qualified)."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self.counts[task.name] += 1


def _short(name: str) -> str:
    """``trizre.patterns._server.Server._runner`` -> ``Server._runner``."""
    return ".".join(name.replace(".<locals>", "").split(".")[-2:])


async def _echo(request: IncomingRequest) -> tuple[bytes, ...]:
    return request.body


async def _worker(name: str, port: int, task_status: trio.TaskStatus[None]) -> None:
    async with (
        trizre.open_node(name, interface="lo", beacon_port=port, local_links=False) as node,
        patterns.open_server(node, _echo, service="echo", max_concurrency=bench.WINDOW),
    ):
        task_status.started()
        await trio.sleep_forever()


async def run(requests: int, port: int) -> tuple[float, float, Counter[str]]:
    """Requests/s, CPU µs a request, and task steps by task over the run."""
    steps = _Steps()
    async with trio.open_nursery() as workers:
        for i in range(WORKERS):
            await workers.start(_worker, f"w{i}", port)
        async with (
            trizre.open_node("client", interface="lo", beacon_port=port, local_links=False) as node,
            patterns.open_service_client(node, RetryPolicy(10, 3)) as client,
        ):
            with trio.fail_after(30):
                await client.wait_for_service("echo", WORKERS)
            trio.lowlevel.add_instrument(steps)
            cpu, start = time.process_time(), time.perf_counter()
            with trio.fail_after(30 + requests / 500):
                await bench.pipeline(client, requests, bench.WINDOW)
            elapsed, used = time.perf_counter() - start, time.process_time() - cpu
            trio.lowlevel.remove_instrument(steps)
        workers.cancel_scope.cancel()
    return requests / elapsed, 1e6 * used / requests, steps.counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--port", type=int, help="beacon port (default: a free one)")
    args = parser.parse_args()
    rate, cpu, counts = trio.run(run, args.requests, args.port or bench._port())
    total = sum(counts.values()) / args.requests
    print(
        f"{rate:,.0f} requests/s, {cpu:.0f} us CPU a request (one process), "
        f"{total:.2f} task steps a request"
    )
    for name, count in counts.most_common(8):
        print(f"  {count / args.requests:6.3f}  {_short(name)}")


if __name__ == "__main__":
    main()
