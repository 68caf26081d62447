"""The cost of the ways users read events, on one WHISPER flood, in one run.

Two processes on loopback, one trizre node each: a sender floods N
100-byte WHISPERs as fast as the node takes them (``whisper_nowait``,
``whisper`` only when the queue is full), and a receiver reads them with
one of these loops:

* ``bench``: the benchmarks' receiver (``type(event) is Whisper``);
* ``readme``: the README's idiom, ``async for`` with an ``isinstance``
  chain over the event types;
* ``match``: the same with a ``match`` statement and class patterns;
* ``move_on_after``: an idle timeout the obvious way, a fresh
  ``trio.move_on_after`` around each ``events.receive()``;
* ``pushed``: one cancel scope around the loop whose deadline each event
  pushes forward, the cheapest idle timeout a loop can make for itself;
* ``idle_timeout``: the subscription's own, ``node.events(idle_timeout=)``,
  which sets a timer only when the reader has to wait (``docs/node.md``);
* ``batch``: ``bench``'s test over ``events.receive_batch()``, every
  event buffered at each call (issue 28).

Figures: received messages/s from the receiver's first message to its
last, and the receiver's CPU per message; median (min-max) of REPEAT
runs, loops interleaved run by run; ratios are to ``readme``'s medians,
the idiom users start from, and to ``bench``.

    python benchmarks/bench_receive.py [--repeat 5] [--messages 200000] [--quick] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import trizre
from benchmarks.bench_forged_beacons import free_udp_port
from benchmarks.processes import summary

HERE = Path(__file__).resolve()
PAYLOAD = b"x" * 100
IDLE = 5.0  # seconds without an event that end a timed loop


# -------------------------------------------------------------- the loops


class Tally:
    """What a receiving loop counts: messages, and when the first and last came."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.got = 0
        self.first = self.last = 0.0
        self.cpu_first = self.cpu_last = 0.0

    def whisper(self) -> bool:
        """Count one WHISPER; True when all have come."""
        if not self.got:
            self.first, self.cpu_first = time.perf_counter(), time.process_time()
        self.got += 1
        if self.got == self.n:
            self.last, self.cpu_last = time.perf_counter(), time.process_time()
            return True
        return False


async def loop_bench(events: trizre.EventStream, tally: Tally) -> None:
    whisper_t = trizre.Whisper
    async for event in events:
        if type(event) is whisper_t and tally.whisper():
            return


async def loop_readme(events: trizre.EventStream, tally: Tally) -> None:
    peers = set()
    async for event in events:
        if isinstance(event, trizre.Whisper):
            if tally.whisper():
                return
        elif isinstance(event, trizre.Shout):
            pass
        elif isinstance(event, trizre.Enter):
            peers.add(event.peer)
        elif isinstance(event, trizre.Exit):
            peers.discard(event.peer)


async def loop_match(events: trizre.EventStream, tally: Tally) -> None:
    peers = set()
    async for event in events:
        match event:
            case trizre.Whisper():
                if tally.whisper():
                    return
            case trizre.Shout():
                pass
            case trizre.Enter(peer=peer):
                peers.add(peer)
            case trizre.Exit(peer=peer):
                peers.discard(peer)


async def loop_move_on_after(events: trizre.EventStream, tally: Tally) -> None:
    while True:
        with trio.move_on_after(IDLE):
            event = await events.receive()
        if isinstance(event, trizre.Whisper) and tally.whisper():
            return


async def loop_pushed(events: trizre.EventStream, tally: Tally) -> None:
    with trio.CancelScope() as idle:
        async for event in events:
            idle.deadline = trio.current_time() + IDLE
            if isinstance(event, trizre.Whisper) and tally.whisper():
                return


async def loop_idle_timeout(events: trizre.EventStream, tally: Tally) -> None:
    # ``events`` was made with idle_timeout=IDLE: EventsIdle after that long.
    async for event in events:
        if isinstance(event, trizre.Whisper) and tally.whisper():
            return


async def loop_batch(events: trizre.EventStream, tally: Tally) -> None:
    whisper_t = trizre.Whisper
    while True:
        for event in await events.receive_batch():
            if type(event) is whisper_t and tally.whisper():
                return


LOOPS: dict[str, Callable[[trizre.EventStream, Tally], Awaitable[None]]] = {
    "bench": loop_bench,
    "readme": loop_readme,
    "match": loop_match,
    "move_on_after": loop_move_on_after,
    "pushed": loop_pushed,
    "idle_timeout": loop_idle_timeout,
    "batch": loop_batch,
}


# ---------------------------------------------------------- the processes


async def receive(loop: str, n: int, port: int) -> None:
    async with trizre.open_node("flood-receiver", interface="lo", beacon_port=port) as node:
        events = node.events(idle_timeout=IDLE if loop == "idle_timeout" else None)
        await node.wait_for_peer("flood-sender")
        print("ready", flush=True)
        tally = Tally(n)
        with trio.fail_after(60):
            await LOOPS[loop](events, tally)
        seconds = tally.last - tally.first
        result = {
            "rate": (n - 1) / seconds,
            "cpu_us": (tally.cpu_last - tally.cpu_first) / (n - 1) * 1e6,
        }
        print(json.dumps(result), flush=True)


async def send(n: int, port: int) -> None:
    async with trizre.open_node("flood-sender", interface="lo", beacon_port=port) as node:
        peer = await node.wait_for_peer("flood-receiver")
        print("ready", flush=True)
        await trio.to_thread.run_sync(sys.stdin.readline)  # "go"
        whisper_nowait, whisper = node.whisper_nowait, node.whisper
        for seq in range(n):
            if not whisper_nowait(peer, PAYLOAD):
                await whisper(peer, PAYLOAD)
            elif not seq & 255:
                await trio.lowlevel.checkpoint()
        await trio.to_thread.run_sync(sys.stdin.read, abandon_on_cancel=True)  # until told


def _spawn(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(HERE), *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )


def one_run(loop: str, n: int) -> dict[str, float]:
    port = str(free_udp_port())
    receiver = _spawn("--receiver", loop, str(n), port)
    sender = _spawn("--sender", str(n), port)
    try:
        assert receiver.stdout is not None and sender.stdout is not None
        assert sender.stdin is not None
        for proc in (receiver, sender):
            line = proc.stdout.readline().strip() if proc.stdout else ""
            if line != "ready":
                raise RuntimeError(f"a {loop} process did not start: {line!r}")
        sender.stdin.write("go\n")
        sender.stdin.flush()
        line = receiver.stdout.readline()
        if not line:
            raise RuntimeError(f"the {loop} receiver ended without a result")
        result: dict[str, float] = json.loads(line)
        return result
    finally:
        for proc in (receiver, sender):
            proc.kill()
            proc.wait()


# ------------------------------------------------------------- reporting


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--quick", action="store_true", help="20,000 messages, one run")
    parser.add_argument("--json", help="also write the results to this file")
    parser.add_argument("--receiver", nargs=3, metavar=("LOOP", "N", "PORT"))
    parser.add_argument("--sender", nargs=2, metavar=("N", "PORT"))
    args = parser.parse_args()
    if args.receiver:
        trio.run(receive, args.receiver[0], int(args.receiver[1]), int(args.receiver[2]))
        return
    if args.sender:
        trio.run(send, int(args.sender[0]), int(args.sender[1]))
        return

    repeat, n = (1, 20_000) if args.quick else (args.repeat, args.messages)
    load = os.getloadavg()[0]
    results: dict[str, list[dict[str, float]]] = {loop: [] for loop in LOOPS}
    for _ in range(repeat):
        for loop in LOOPS:
            results[loop].append(one_run(loop, n))

    def median(loop: str, key: str) -> float:
        return statistics.median(run[key] for run in results[loop])

    print(
        f"\nreceiving a WHISPER flood of {n:,} on loopback, 100 B, {os.cpu_count()} cores, "
        f"load {load:.2f}, median (min-max) of {repeat}\n"
    )
    print("| loop | received msg/s | vs readme | vs bench | receiver CPU per message, µs |")
    print("|---|---|---|---|---|")
    for loop in LOOPS:
        rates = [run["rate"] for run in results[loop]]
        cpu = [run["cpu_us"] for run in results[loop]]
        print(
            f"| {loop} | {summary(rates)} | {median(loop, 'rate') / median('readme', 'rate'):.2f}x"
            f" | {median(loop, 'rate') / median('bench', 'rate'):.2f}x | {summary(cpu, 2)} |"
        )
    readme = median("readme", "rate") / median("bench", "rate")
    idle = median("idle_timeout", "rate") / median("readme", "rate")
    print(
        f"\ntargets: the README's idiom >= 0.8x the benchmark's receiver: "
        f"{'met' if readme >= 0.8 else 'MISSED'} ({readme:.2f}x); "
        f"an idle timeout >= 0.8x the plain loop (idle_timeout=): "
        f"{'met' if idle >= 0.8 else 'MISSED'} ({idle:.2f}x)"
    )
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        with open(args.json, "w") as out:
            json.dump({"load": load, "messages": n, "results": results}, out, indent=2)


if __name__ == "__main__":
    main()
