"""The socket layer beside raw pyzmq and zmq.asyncio, in one run, as ratios.

Two processes, DEALER -> ROUTER over tcp on 127.0.0.1, 100-byte payloads:

* one-way: the DEALER sends N messages; the ROUTER's process times the
  first to the last arrival and reports messages/s;
* round trips: the DEALER sends one message, the ROUTER echoes it, M times
  in sequence; the DEALER's process reports round trips/s.

Both ends of a pair use the same implementation.  Each figure is the median
(min-max) of REPEAT runs; the ratio is to raw (blocking) pyzmq.

    python benchmarks/bench_socket.py [--repeat 5] [--messages 200000] [--round-trips 20000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import trio
import zmq
import zmq.asyncio

from trizre.transport._zsock import ZSocket, context

# trizre: one strict `await send()` per message (a schedule point each);
# trizre-batch: `send_some()` hands libzmq up to 256 messages per schedule point.
IMPLS = ("raw", "asyncio", "trizre", "trizre-batch")
PAYLOAD = b"x" * 100
HWM = 10_000


def _sock(ctx: zmq.Context[Any], kind: int) -> zmq.Socket[Any]:
    sock = ctx.socket(kind)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.SNDHWM, HWM)
    sock.setsockopt(zmq.RCVHWM, HWM)
    return sock


def _flush_and_close(ctx: zmq.Context[Any], sock: zmq.Socket[Any]) -> None:
    """Block until every queued message has left: exiting earlier loses them."""
    sock.setsockopt(zmq.LINGER, -1)
    sock.close()
    ctx.term()


def _announce(router: zmq.Socket[Any]) -> None:
    print(router.getsockopt_string(zmq.LAST_ENDPOINT), flush=True)


# --------------------------------------------------------------- raw pyzmq


def raw_server(mode: str, count: int) -> float:
    ctx = zmq.Context()
    router = _sock(ctx, zmq.ROUTER)
    router.bind("tcp://127.0.0.1:*")
    _announce(router)
    if mode == "echo":
        for _ in range(count):
            router.send_multipart(router.recv_multipart())
        return 0.0
    router.recv_multipart()
    start = time.perf_counter()
    for _ in range(count - 1):
        router.recv_multipart()
    return (count - 1) / (time.perf_counter() - start)


def raw_client(mode: str, count: int, endpoint: str) -> float:
    ctx = zmq.Context()
    dealer = _sock(ctx, zmq.DEALER)
    dealer.connect(endpoint)
    if mode == "oneway":
        for _ in range(count):
            dealer.send(PAYLOAD)
        _flush_and_close(ctx, dealer)
        return 0.0
    start = time.perf_counter()
    for _ in range(count):
        dealer.send(PAYLOAD)
        dealer.recv()
    return count / (time.perf_counter() - start)


# -------------------------------------------------------------- zmq.asyncio


def asyncio_server(mode: str, count: int) -> float:
    async def run() -> float:
        ctx = zmq.asyncio.Context()
        router = _sock(ctx, zmq.ROUTER)
        router.bind("tcp://127.0.0.1:*")
        _announce(router)
        if mode == "echo":
            for _ in range(count):
                await router.send_multipart(await router.recv_multipart())
            return 0.0
        await router.recv_multipart()
        start = time.perf_counter()
        for _ in range(count - 1):
            await router.recv_multipart()
        return (count - 1) / (time.perf_counter() - start)

    return asyncio.run(run())


def asyncio_client(mode: str, count: int, endpoint: str) -> float:
    async def run() -> float:
        ctx = zmq.asyncio.Context()
        dealer = _sock(ctx, zmq.DEALER)
        dealer.connect(endpoint)
        if mode == "oneway":
            for _ in range(count):
                await dealer.send(PAYLOAD)
            _flush_and_close(ctx, dealer)
            return 0.0
        start = time.perf_counter()
        for _ in range(count):
            await dealer.send(PAYLOAD)
            await dealer.recv()
        return count / (time.perf_counter() - start)

    return asyncio.run(run())


# ------------------------------------------------------------------ trizre


def trizre_server(mode: str, count: int) -> float:
    async def run() -> float:
        router = ZSocket(_sock(context(), zmq.ROUTER))
        router.zmq_socket.bind("tcp://127.0.0.1:*")
        _announce(router.zmq_socket)
        if mode == "echo":
            for _ in range(count):
                router.send_nowait(await router.receive())
            return 0.0
        seen = len(await router.receive_batch())
        start = time.perf_counter()
        while seen < count:
            seen += len(await router.receive_batch())
        return (count - 1) / (time.perf_counter() - start)

    return trio.run(run)


def trizre_client(mode: str, count: int, endpoint: str, batched: bool = False) -> float:
    async def run() -> float:
        dealer = ZSocket(_sock(context(), zmq.DEALER))
        dealer.zmq_socket.connect(endpoint)
        if mode == "oneway":
            if batched:
                batch = [[PAYLOAD]] * 256
                left = count
                while left:
                    left -= await dealer.send_some(batch[: min(left, 256)])
            else:
                frames = [PAYLOAD]
                for _ in range(count):
                    await dealer.send(frames)
            _flush_and_close(context(), dealer.zmq_socket)
            return 0.0
        start = time.perf_counter()
        for _ in range(count):
            await dealer.send([PAYLOAD])
            await dealer.receive()
        return count / (time.perf_counter() - start)

    return trio.run(run)


SERVERS: dict[str, Callable[[str, int], float]] = {
    "raw": raw_server,
    "asyncio": asyncio_server,
    "trizre": trizre_server,
    "trizre-batch": trizre_server,
}
CLIENTS: dict[str, Callable[[str, int, str], float]] = {
    "raw": raw_client,
    "asyncio": asyncio_client,
    "trizre": trizre_client,
    "trizre-batch": lambda mode, count, endpoint: trizre_client(mode, count, endpoint, True),
}


# ------------------------------------------------------------- orchestration


def _child(args: list[str]) -> subprocess.Popen[str]:
    cmd = [sys.executable, os.path.abspath(__file__), *args]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)


def measure(impl: str, mode: str, count: int) -> float:
    """Run one server and one client process; return the measured rate."""
    server = _child(["--serve", impl, mode, str(count)])
    assert server.stdout is not None
    endpoint = server.stdout.readline().strip()
    client = _child(["--client", impl, mode, str(count), endpoint])
    try:
        client_out, _ = client.communicate(timeout=120)
        server_out, _ = server.communicate(timeout=60)
    finally:
        client.kill()
        server.kill()
    if client.returncode or server.returncode:
        raise RuntimeError(f"{impl}/{mode}: a benchmark process failed")
    return float(json.loads(server_out if mode == "oneway" else client_out))


def summary(values: list[float]) -> str:
    return f"{statistics.median(values):,.0f} ({min(values):,.0f}-{max(values):,.0f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--round-trips", type=int, default=20_000)
    parser.add_argument("--serve", nargs=3, metavar=("IMPL", "MODE", "COUNT"))
    parser.add_argument("--client", nargs=4, metavar=("IMPL", "MODE", "COUNT", "ENDPOINT"))
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args()
    if args.serve:
        impl, mode, count = args.serve
        print(json.dumps(SERVERS[impl](mode, int(count))), flush=True)
        return
    if args.client:
        impl, mode, count, endpoint = args.client
        print(json.dumps(CLIENTS[impl](mode, int(count), endpoint)), flush=True)
        return

    load = os.getloadavg()[0]
    if load > 0.5:
        print(f"warning: load average {load:.2f}; figures will be noisy", file=sys.stderr)
    results: dict[str, dict[str, list[float]]] = {impl: {} for impl in IMPLS}
    for mode, count in (("oneway", args.messages), ("echo", args.round_trips)):
        for _ in range(args.repeat):
            for impl in IMPLS:  # interleaved, so drift hits every impl alike
                results[impl].setdefault(mode, []).append(measure(impl, mode, count))

    print(
        f"\nsocket layer, 2 processes, tcp 127.0.0.1, 100 B, {os.cpu_count()} cores, "
        f"load {load:.2f}, median (min-max) of {args.repeat}\n"
    )
    print("| implementation | one-way msg/s | ratio | round trips/s | ratio |")
    print("|---|---|---|---|---|")
    raw = {mode: statistics.median(results["raw"][mode]) for mode in ("oneway", "echo")}
    for impl in IMPLS:
        ow, rt = results[impl]["oneway"], results[impl]["echo"]
        print(
            f"| {impl} | {summary(ow)} | {statistics.median(ow) / raw['oneway']:.2f}x "
            f"| {summary(rt)} | {statistics.median(rt) / raw['echo']:.2f}x |"
        )
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"load": load, "results": results}, out, indent=2)


if __name__ == "__main__":
    main()
