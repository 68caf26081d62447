"""The floor under trizre: what the least Trio program on pyzmq reaches, beside raw pyzmq.

Issue 15 asks trizre for ratios to raw (blocking) pyzmq.  Part of any such
gap is Trio's, not trizre's: a Trio program waits for a socket through the
run loop (epoll, then libzmq's EVENTS) where blocking pyzmq waits inside
libzmq.  This measures that part, in one run, on 127.0.0.1, 100 B
messages, each load alternated between the implementations:

* pingpong: a DEALER sends, a ROUTER in another process echoes, in
  sequence.  ``raw``: blocking calls on both sides.  ``trio floor``: one
  Trio task a side, no schedule point but the wait for the socket.
  ``trizre``: two nodes WHISPERing (``interface="lo"``), as in bench_zre.
* services: 100 requests in flight to 4 echo processes.  ``raw`` and
  ``trizre`` are bench_patterns.py's "pipelined, 4 workers" (raw: one
  client loop, no task per request).  ``trio floor``: a task per caller,
  each waiting on a ``trio.Event`` its reply sets, one reader task, echo
  workers that are a single Trio task: what a user who skips ZRE and the
  patterns would write.

Each figure is the median (min-max) of REPEAT runs; CPU is user plus
system of every thread (libzmq's I/O threads included).

    python benchmarks/trio_floor.py [--repeat 3] [--round-trips 20000] [--requests 100000]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import trio
import zmq

import trizre

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_patterns  # the services load's raw and trizre runs, unchanged

HERE = Path(__file__).resolve()
PAYLOAD = b"x" * 100
WARM_UP = 500
WINDOW = 100
WORKERS = 4
TICK = os.sysconf("SC_CLK_TCK")


def _cpu(pid: int) -> float:
    """User and system CPU seconds of a running process (/proc fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def _child(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(HERE), "--child", *args], stdout=subprocess.PIPE, text=True
    )


class _Wait:
    """One task's wait for a socket, which another task's send can end.

    A send on the socket may consume the edge of its FD (libzmq reads its
    mailbox in any call), so a waiter would sleep with messages queued:
    ``nudge`` after a send makes it read EVENTS again (DESIGN.md, Rule 1).
    """

    def __init__(self) -> None:
        self.scope: trio.CancelScope | None = None

    def nudge(self) -> None:
        if self.scope is not None:
            self.scope.cancel()


async def _receive_batch(sock: zmq.Socket[bytes], wait: _Wait | None = None) -> list[list[bytes]]:
    """Every message ready now, after waiting for the first: the least a Trio reader does."""
    while True:
        batch = []
        try:
            while True:
                batch.append(sock.recv_multipart(zmq.NOBLOCK))
        except zmq.Again:
            pass
        if batch:
            return batch
        if sock.getsockopt(zmq.EVENTS) & zmq.POLLIN:
            continue  # arrived since the recv: the FD's edge may be spent
        if wait is None:
            await trio.lowlevel.wait_readable(sock.FD)
        else:
            with trio.CancelScope() as wait.scope:
                await trio.lowlevel.wait_readable(sock.FD)
            wait.scope = None


# ------------------------------------------------------------------ pingpong


def _echo(mode: str, endpoint: str) -> None:
    router = zmq.Context.instance().socket(zmq.ROUTER)
    router.setsockopt(zmq.LINGER, 0)
    router.connect(endpoint)
    if mode == "raw":
        while (frames := router.recv_multipart())[1] != b"stop":
            router.send_multipart(frames)
        return

    async def serve() -> None:
        while True:
            for frames in await _receive_batch(router):
                if frames[1] == b"stop":
                    return
                router.send_multipart(frames, zmq.NOBLOCK)

    trio.run(serve)


def pingpong(mode: str, count: int) -> tuple[float, float]:
    """Round trips/s and the pinging process's CPU a round trip (µs)."""
    dealer = zmq.Context.instance().socket(zmq.DEALER)
    dealer.setsockopt(zmq.LINGER, 0)
    port = dealer.bind_to_random_port("tcp://127.0.0.1")  # ok-net: loopback
    echo = _child("echo", mode, f"tcp://127.0.0.1:{port}")  # ok-net: loopback
    try:
        dealer.send(PAYLOAD)  # blocks until the echo has connected
        dealer.recv_multipart()
        if mode == "raw":

            def trips(n: int) -> None:
                for _ in range(n):
                    dealer.send(PAYLOAD)
                    dealer.recv_multipart()

            trips(WARM_UP)
            cpu, start = time.process_time(), time.perf_counter()
            trips(count)
        else:

            async def trips_async(n: int) -> None:
                for _ in range(n):
                    dealer.send(PAYLOAD, zmq.NOBLOCK)
                    await _receive_batch(dealer)

            async def timed() -> tuple[float, float]:
                await trips_async(WARM_UP)
                cpu, start = time.process_time(), time.perf_counter()
                await trips_async(count)
                return cpu, start

            cpu, start = trio.run(timed)
        elapsed, used = time.perf_counter() - start, time.process_time() - cpu
        dealer.send(b"stop")
        echo.wait(timeout=10)
        return count / elapsed, 1e6 * used / count
    finally:
        if echo.poll() is None:
            echo.kill()
        dealer.close()


def _trizre_echo(port: int) -> None:
    async def serve() -> None:
        async with trizre.open_node("floor-echo", interface="lo", beacon_port=port) as node:
            print("ready", flush=True)
            async for event in node.events():  # until terminated
                if isinstance(event, trizre.Whisper):
                    await node.whisper(event.peer, *event.frames)

    trio.run(serve)


def trizre_pingpong(count: int) -> tuple[float, float]:
    """The same load between two trizre nodes' WHISPERs."""
    port = bench_patterns._port()
    echo = _child("trizre-echo", str(port))

    async def run() -> tuple[float, float]:
        async with trizre.open_node("floor-ping", interface="lo", beacon_port=port) as node:
            with trio.fail_after(30):
                peer = await node.wait_for_peer("floor-echo")
            events = node.events()

            async def trips(n: int) -> None:
                for _ in range(n):
                    await node.whisper(peer, PAYLOAD)
                    async for event in events:
                        if isinstance(event, trizre.Whisper):
                            break

            with trio.fail_after(30 + count / 500):  # a lost WHISPER fails the run
                await trips(WARM_UP)
                cpu, start = time.process_time(), time.perf_counter()
                await trips(count)
            elapsed, used = time.perf_counter() - start, time.process_time() - cpu
            return count / elapsed, 1e6 * used / count

    try:
        assert echo.stdout is not None and echo.stdout.readline().strip() == "ready"
        return trio.run(run)
    finally:
        # Not a last WHISPER: a closing node drops what it still queues
        # (docs/node.md), and the echo would wait for it forever.
        echo.terminate()
        echo.wait(timeout=10)


# ------------------------------------------------------------------ services


def _floor_worker() -> None:
    async def serve() -> None:
        router = zmq.Context.instance().socket(zmq.ROUTER)
        router.setsockopt(zmq.LINGER, 0)
        port = router.bind_to_random_port("tcp://127.0.0.1")  # ok-net: loopback
        print(port, flush=True)
        while True:
            for frames in await _receive_batch(router):
                if frames[1] == b"stop":
                    return
                router.send_multipart(frames, zmq.NOBLOCK)

    trio.run(serve)


def floor_services(count: int) -> tuple[float, float]:
    """Requests/s, and CPU a request (µs) of the client and the workers together."""
    workers = [_child("worker") for _ in range(WORKERS)]
    dealer = zmq.Context.instance().socket(zmq.DEALER)
    dealer.setsockopt(zmq.LINGER, 0)
    try:
        for worker in workers:
            assert worker.stdout is not None
            dealer.connect(f"tcp://127.0.0.1:{int(worker.stdout.readline())}")  # ok-net: loopback
        waiting: dict[bytes, trio.Event] = {}
        wait = _Wait()
        left = count
        numbers = iter(range(1, 1 << 62))

        async def read_replies() -> None:
            while True:
                for frames in await _receive_batch(dealer, wait):
                    waiting.pop(frames[0]).set()

        async def caller() -> None:
            nonlocal left
            while left > 0:
                left -= 1
                rid = next(numbers).to_bytes(8, "big")
                waiting[rid] = done = trio.Event()
                dealer.send_multipart([rid, PAYLOAD], zmq.NOBLOCK)
                wait.nudge()
                await done.wait()

        async def run() -> tuple[float, float]:
            async with trio.open_nursery() as reading:
                reading.start_soon(read_replies)
                # Each worker has connected once it has answered one request.
                for _ in range(WORKERS * 4):
                    rid = next(numbers).to_bytes(8, "big")
                    waiting[rid] = done = trio.Event()
                    dealer.send_multipart([rid, PAYLOAD])
                    wait.nudge()
                    await done.wait()
                before = sum(_cpu(w.pid) for w in workers)
                cpu, start = time.process_time(), time.perf_counter()
                async with trio.open_nursery() as callers:
                    for _ in range(WINDOW):
                        callers.start_soon(caller)
                elapsed, used = time.perf_counter() - start, time.process_time() - cpu
                used += sum(_cpu(w.pid) for w in workers) - before
                reading.cancel_scope.cancel()
            return count / elapsed, 1e6 * used / count

        rate, cpu_each = trio.run(run)
        for _ in workers:
            dealer.send_multipart([b"stop"])  # round robin: one each
        for worker in workers:
            worker.wait(timeout=10)
        return rate, cpu_each
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.kill()
        dealer.close()


# ------------------------------------------------------------- orchestration


def _median(values: list[float], digits: int = 0) -> str:
    fmt = f"{{:,.{digits}f}}"
    med, low, high = statistics.median(values), min(values), max(values)
    return f"{fmt.format(med)} ({fmt.format(low)}-{fmt.format(high)})"


def _table(
    title: str,
    unit: str,
    each: str,
    runs: dict[str, Callable[[], tuple[float, float | None]]],
    repeat: int,
) -> dict[str, dict[str, float | None]]:
    """Run each load ``repeat`` times, alternated; print a table; return the medians."""
    rates: dict[str, list[float]] = {name: [] for name in runs}
    cpus: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(repeat):
        for name, run in runs.items():
            rate, cpu = run()
            rates[name].append(rate)
            if cpu is not None:
                cpus[name].append(cpu)
    raw = statistics.median(rates["raw"])
    print(f"\n{title}\n")
    print(f"| implementation | {unit} | vs raw | CPU a {each}, µs |")
    print("|---|---|---|---|")
    for name in runs:
        cpu = _median(cpus[name]) if cpus[name] else "-"
        ratio = statistics.median(rates[name]) / raw
        print(f"| {name} | {_median(rates[name])} | {ratio:.2f}x | {cpu} |")
    return {
        name: {
            "rate": statistics.median(rates[name]),
            "vs_raw": statistics.median(rates[name]) / raw,
            "cpu_us": statistics.median(cpus[name]) if cpus[name] else None,
        }
        for name in runs
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--round-trips", type=int, default=20_000)
    parser.add_argument("--requests", type=int, default=100_000)
    parser.add_argument("--json", type=Path, help="also write the medians here")
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        role, *rest = args.child
        if role == "echo":
            _echo(rest[0], rest[1])
        elif role == "trizre-echo":
            _trizre_echo(int(rest[0]))
        else:
            _floor_worker()
        return
    load = os.getloadavg()[0]
    print(
        f"127.0.0.1, 100 B, {os.cpu_count()} cores, load {load:.2f}, "
        f"median (min-max) of {args.repeat}"
    )
    n = args.round_trips
    results: dict[str, object] = {
        "date": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime()),
        "command": "benchmarks/trio_floor.py " + " ".join(sys.argv[1:]),
        "python": sys.version.split()[0],
        "cores": os.cpu_count(),
        "load": load,
        "repeat": args.repeat,
    }
    results["pingpong"] = _table(
        "pingpong, pinging process's CPU",
        "round trips/s",
        "round trip",
        {
            "raw": lambda: pingpong("raw", n),
            "trio floor": lambda: pingpong("trio", n),
            "trizre": lambda: trizre_pingpong(n),
        },
        args.repeat,
    )
    m = args.requests
    results["services"] = _table(
        f"services, {WINDOW} in flight, {WORKERS} workers, CPU of all processes",
        "requests/s",
        "request",
        {
            "raw": lambda: (bench_patterns.raw_rate(WORKERS, m, WINDOW), None),
            "trio floor": lambda: floor_services(m),
            "trizre": lambda: (bench_patterns.trizre_rate(WORKERS, m, WINDOW), None),
        },
        args.repeat,
    )
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
