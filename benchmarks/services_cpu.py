"""CPU per pipelined service request in one process: a client and K workers.

    PYTHONPATH=<tree> python benchmarks/services_cpu.py [--workers 4] [--requests 40000]

The client and its workers are nodes of one Trio run on ``lo``, linked in
memory (in-process peers use local links; only beacons touch loopback), and
the client keeps 100 requests in flight to the "echo" service, as
``bench_patterns.py``'s pipelined case does between processes.  The figure
is the process's CPU time per request: the patterns' and the nodes' own
work, with no libzmq and no scheduler between processes, so two trees
compare within about 1 % (``profile_services.py``, over TCP, moves about
4 % between runs).  Prints ``<µs> us CPU/request, <rate>/s``.
"""

from __future__ import annotations

import argparse
import random
import time
from contextlib import AsyncExitStack

import trio

import trizre
from trizre import patterns

WINDOW = 100
PAYLOAD = b"x" * 16


async def main(workers: int, count: int) -> tuple[float, float]:
    port = random.randint(20000, 40000)

    async def echo(request: patterns.IncomingRequest) -> tuple[bytes, ...]:
        return request.body

    async with AsyncExitStack() as stack:
        for i in range(workers):
            node = await stack.enter_async_context(
                trizre.open_node(f"w{i}", interface="lo", beacon_port=port)
            )
            await stack.enter_async_context(
                patterns.open_server(node, echo, service="echo", max_concurrency=WINDOW)
            )
        node = await stack.enter_async_context(
            trizre.open_node("client", interface="lo", beacon_port=port)
        )
        client = await stack.enter_async_context(
            patterns.open_service_client(node, patterns.RetryPolicy(10, 3))
        )
        with trio.fail_after(30):
            await client.wait_for_service("echo", workers)
        left = 0

        async def loop() -> None:
            nonlocal left
            while left > 0:
                left -= 1
                await client.request("echo", PAYLOAD)

        async def run(requests: int) -> None:
            nonlocal left
            left = requests
            async with trio.open_nursery() as nursery:
                for _ in range(WINDOW):
                    nursery.start_soon(loop)

        await run(2000)  # warm up: every worker reached, caches filled
        cpu, start = time.process_time(), time.perf_counter()
        await run(count)
        used, elapsed = time.process_time() - cpu, time.perf_counter() - start
        return 1e6 * used / count, count / elapsed


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--requests", type=int, default=40000)
    args = parser.parse_args()
    if args.workers < 1 or args.requests < 1:
        parser.error("--workers and --requests must be at least 1")
    cpu_each, rate = trio.run(main, args.workers, args.requests)
    print(f"{cpu_each:.2f} us CPU/request, {rate:,.0f}/s")
