"""A one-way WHISPER flood between two processes on loopback, for profilers.

Not a comparison (``bench_zre.py`` is): a steady load with each side's CPU
per message, long enough to attach ``py-spy record -p PID`` or
``perf record -p PID`` to either process.  The receiver and the sender are
this same script, started with ``--role``; without it, it starts both.

    python benchmarks/profile_flood.py [--messages 300000] [--port 23998]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time

import trio

import trizre


async def run(role: str, n: int, port: int) -> None:
    async with trizre.open_node(role, beacon_port=port, interface="lo") as node:
        events = node.events()
        peer = await node.wait_for_peer("rx" if role == "tx" else "tx")
        if role == "rx":
            received, start, cpu0 = 0, 0.0, 0.0
            async for event in events:
                if type(event) is trizre.Whisper:
                    if not received:
                        start, cpu0 = time.perf_counter(), time.process_time()
                    received += 1
                    if received == n:
                        break
            elapsed = time.perf_counter() - start
            cpu = (time.process_time() - cpu0) / n * 1e6
            print(f"rx: {n / elapsed:,.0f} msg/s, {cpu:.2f} us CPU a message", flush=True)
        else:
            await trio.sleep(0.5)  # let the receiver meet us too
            payload = b"x" * 100
            start, cpu0 = time.perf_counter(), time.process_time()
            for _ in range(n):
                await node.whisper(peer, payload)
            cpu = (time.process_time() - cpu0) / n * 1e6
            rate = n / (time.perf_counter() - start)
            print(f"tx: {rate:,.0f} msg/s sent, {cpu:.2f} us CPU a message", flush=True)
            await trio.sleep(3)  # the receiver drains before we leave


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--role", choices=("rx", "tx"))
    parser.add_argument("--messages", type=int, default=300_000)
    parser.add_argument("--port", type=int, default=23998, help="UDP beacon port on lo")
    args = parser.parse_args()
    if args.role:
        trio.run(run, args.role, args.messages, args.port)
        return 0
    common = ["--messages", str(args.messages), "--port", str(args.port)]
    procs = [
        subprocess.Popen([sys.executable, __file__, "--role", role, *common])
        for role in ("rx", "tx")
    ]
    return max(proc.wait() for proc in procs)


if __name__ == "__main__":
    sys.exit(main())
