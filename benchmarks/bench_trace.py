"""What tracing costs: the WHISPER flood with tracing off and on, in one run.

Two processes on loopback, node A floods node B with N 100-byte WHISPERs;
B's process reports messages/s from the first to the last arrival. With
tracing on, both nodes record every message (whisper-sent and
whisper-received lines) to a temporary directory.

    python benchmarks/bench_trace.py [--repeat 5] [--messages 100000] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import trio

import trizre

HERE = Path(__file__).resolve()
PAYLOAD = b"x" * 100


async def _receiver(port: int, count: int, trace_dir: str | None) -> float:
    async with trizre.open_node("rx", interface="lo", beacon_port=port, trace_dir=trace_dir) as rx:
        events = rx.events()
        print("ready", flush=True)
        got = 0
        first = 0.0
        async for event in events:
            if isinstance(event, trizre.Whisper):
                got += 1
                if got == 1:
                    first = time.perf_counter()
                if got == count:
                    return (count - 1) / (time.perf_counter() - first)
    raise RuntimeError("the receiver stopped early")


async def _sender(port: int, count: int, trace_dir: str | None) -> None:
    async with trizre.open_node("tx", interface="lo", beacon_port=port, trace_dir=trace_dir) as tx:
        peer = await tx.wait_for_peer("rx")
        for _ in range(count):
            await tx.whisper(peer, PAYLOAD)
        # Stay until the receiver is done, so nothing queued is dropped.
        await trio.to_thread.run_sync(sys.stdin.read, abandon_on_cancel=True)


def measure(count: int, traced: bool) -> float:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with tempfile.TemporaryDirectory() as tmp:
        trace = ["--trace", tmp] if traced else []
        common = [sys.executable, str(HERE), "--port", str(port), "--messages", str(count), *trace]
        rx = subprocess.Popen([*common, "--role", "rx"], stdout=subprocess.PIPE, text=True)
        assert rx.stdout is not None and rx.stdout.readline().strip() == "ready"
        tx = subprocess.Popen([*common, "--role", "tx"], stdin=subprocess.PIPE, text=True)
        try:
            out, _ = rx.communicate(timeout=300)
        finally:
            tx.kill()
            tx.wait()
            rx.kill()
        return float(json.loads(out.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", help="also write the results to this file")
    parser.add_argument("--role", choices=["rx", "tx"])
    parser.add_argument("--port", type=int)
    parser.add_argument("--trace")
    args = parser.parse_args()
    if args.role == "rx":
        print(json.dumps(trio.run(_receiver, args.port, args.messages, args.trace)), flush=True)
        return
    if args.role == "tx":
        trio.run(_sender, args.port, args.messages, args.trace)
        return

    repeat, count = (1, 2_000) if args.quick else (args.repeat, args.messages)
    load = os.getloadavg()[0]
    if load > 0.5:
        print(f"warning: load average {load:.2f}; figures will be noisy", file=sys.stderr)
    off: list[float] = []
    on: list[float] = []
    for _ in range(repeat):  # interleaved, so drift hits both alike
        off.append(measure(count, traced=False))
        on.append(measure(count, traced=True))
    ratio = statistics.median(on) / statistics.median(off)
    print(f"\nWHISPER flood, {count:,} x 100 B, loopback, {os.cpu_count()} cores, load {load:.2f}")
    print("| tracing | received msg/s, median (min-max) |")
    print("|---|---|")
    for label, values in (("off", off), ("on", on)):
        low, mid, high = min(values), statistics.median(values), max(values)
        print(f"| {label} | {mid:,.0f} ({low:,.0f}-{high:,.0f}) |")
    print(f"\ntracing on / off: {ratio:.2f}x (aim: >= 0.7x)")
    if args.json:
        Path(args.json).write_text(json.dumps({"load": load, "off": off, "on": on}, indent=2))


if __name__ == "__main__":
    main()
