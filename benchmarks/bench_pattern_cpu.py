"""CPU microseconds per pattern request, client and server nodes in one process.

Wall-clock request rates swing with the machine's load; the CPU one
request costs the process does not, much.  Two nodes on loopback in one
Trio run (their link is in memory), a service client and an echo server,
100-byte requests: ``sequential`` one at a time, ``pipelined`` 100 in
flight.  ``--extra`` puts three more patterns on the server's node (two
idle servers and a client), as an application with several services does:
every one of them used to decode every envelope.

    python benchmarks/bench_pattern_cpu.py [--count 10000] [--extra]
"""

from __future__ import annotations

import argparse
import socket
import time
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager

import trio

import trizre
from trizre import patterns

PAYLOAD = b"x" * 100


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@asynccontextmanager
async def _nothing() -> AsyncIterator[None]:
    yield


async def _echo(request: patterns.IncomingRequest) -> tuple[bytes, ...]:
    return request.body


async def run(count: int, extra: bool) -> dict[str, float]:
    """CPU µs per request, sequential and pipelined."""
    port = _free_port()

    def more(make: AbstractAsyncContextManager[object]) -> AbstractAsyncContextManager[object]:
        return make if extra else _nothing()

    async with (
        trizre.open_node("w", interface="lo", beacon_port=port, beacon_interval=0.1) as w,
        patterns.open_server(w, _echo, service="echo", max_concurrency=100),
        more(patterns.open_server(w, _echo, service="other1")),
        more(patterns.open_server(w, _echo, service="other2")),
        more(patterns.open_service_client(w)),
        trizre.open_node("c", interface="lo", beacon_port=port, beacon_interval=0.1) as c,
        patterns.open_service_client(c) as client,
    ):
        with trio.fail_after(30):
            await client.wait_for_service("echo")
        for _ in range(200):  # warm up
            await client.request("echo", PAYLOAD)
        result: dict[str, float] = {}
        sequential = max(1, count // 5)
        started = time.process_time()
        for _ in range(sequential):
            await client.request("echo", PAYLOAD)
        result["sequential"] = (time.process_time() - started) / sequential * 1e6

        async def one_lane(n: int) -> None:
            for _ in range(n):
                await client.request("echo", PAYLOAD)

        lanes = 100
        started = time.process_time()
        async with trio.open_nursery() as nursery:
            for _ in range(lanes):
                nursery.start_soon(one_lane, count // lanes)
        result["pipelined"] = (time.process_time() - started) / (count // lanes * lanes) * 1e6
        return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=10_000, help="pipelined requests")
    parser.add_argument("--extra", action="store_true", help="three more patterns on the server")
    args = parser.parse_args()
    result = trio.run(run, args.count, args.extra)
    print(" ".join(f"{case}={us:.1f}us" for case, us in result.items()))


if __name__ == "__main__":
    main()
