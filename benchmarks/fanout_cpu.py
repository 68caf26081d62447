"""CPU per delivery in one process: a sender SHOUTs and WHISPERs to K receivers.

    PYTHONPATH=<tree> python benchmarks/fanout_cpu.py K N [--shout-only] [--tcp]

The nodes are linked in memory (``discovery="memory"``, no packet leaves
the process), so the figure is the node's own work per delivery: encoding,
the in-process links, each receiver's reader and fan-out.  CPU time, not
wall time: it stays comparable on a loaded machine, where rates do not.
``--shout-only``: N SHOUTs and no WHISPER (the fan-out alone);
``--tcp``: the nodes still find each other in memory but link over TCP on
loopback (``local_links=False``), libzmq's work included.
Prints one line, ``cpu/delivery <µs> us``.

``--sender``: the sender's share alone.  The K receivers run in another
process (``zre_worker.py``, beacons and TCP on loopback only), and the
figure is the sending thread's CPU time over N SHOUTs (no WHISPERs), per
delivery: what ``Node.shout`` and the links cost, libzmq's calls in that
thread included, its I/O thread not (the receivers run this checkout's
trizre, as ``zre_worker.py`` does; the sender the one on ``PYTHONPATH``).
Prints ``sender thread cpu/delivery <µs> us``.
"""

from __future__ import annotations

import argparse
import functools
import json
import random
import subprocess
import sys
import time
from pathlib import Path

import trio

import trizre


async def main(k: int, n: int, *, whispers: bool = True, tcp: bool = False) -> float:
    opts = {
        "beacon_interval": 0.05,
        "interface": "lo",
        "discovery": "memory",
        "local_links": not tcp,
    }
    counts = [0] * k
    per_receiver = 2 * n if whispers else n
    received, done = trio.Event(), trio.Event()
    finished = 0
    async with trizre.open_node("S", **opts) as sender, trio.open_nursery() as nursery:
        joins = sender.events()

        async def receiver(i: int) -> None:
            nonlocal finished
            async with trizre.open_node(f"R{i}", **opts) as node:
                events = node.events()
                await node.join("G")
                async for event in events:
                    if type(event) is trizre.Shout or type(event) is trizre.Whisper:
                        counts[i] += 1
                        if counts[i] == per_receiver:
                            break
                finished += 1
                if finished == k:
                    received.set()
                await done.wait()

        for i in range(k):
            nursery.start_soon(receiver, i)
        async for event in joins:  # every receiver in the group, as the sender sees it
            if isinstance(event, trizre.Join) and len(sender.peers_by_group("G")) == k:
                break
        await joins.aclose()
        peers = sender.peers_by_group("G")
        payload = b"x" * 100
        start = time.process_time()
        for _ in range(n):
            await sender.shout("G", payload)
        if whispers:
            for _ in range(n):
                for peer in peers:
                    await sender.whisper(peer, payload)
        await received.wait()
        used = time.process_time() - start
        done.set()
    return used / sum(counts) * 1e6


def start_receivers(k: int, port: int) -> subprocess.Popen[str]:
    """K receiving nodes in a zre_worker process, on loopback, in group G."""
    worker = Path(__file__).resolve().with_name("zre_worker.py")
    argv = [sys.executable, str(worker), "--impl", "trizre", "--name", "R", "--nodes", str(k)]
    argv += ["--port", str(port), "--group", "G", "--expect-peers", "1", "--interface", "lo"]
    return subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


async def sender_only(receivers: subprocess.Popen[str], port: int, k: int, n: int) -> float:
    """The sending thread's CPU per delivery, the K receivers in ``receivers``."""
    assert receivers.stdin is not None and receivers.stdout is not None
    stdin, stdout = receivers.stdin, receivers.stdout

    def expect(kind: str) -> dict[str, object]:
        for line in stdout:
            event: dict[str, object] = json.loads(line)
            if event["event"] == kind:
                return event
        raise RuntimeError(f"the receivers ended before {kind!r}")

    def command(**cmd: object) -> None:
        stdin.write(json.dumps(cmd) + "\n")
        stdin.flush()

    try:
        async with trizre.open_node("S", interface="lo", beacon_port=port) as sender:
            with trio.fail_after(60):
                async with sender.events() as joins:
                    async for event in joins:
                        if isinstance(event, trizre.Join) and len(sender.peers_by_group("G")) == k:
                            break
                await trio.to_thread.run_sync(expect, "mesh")
            command(cmd="count", n=n, stall=5)
            await trio.to_thread.run_sync(expect, "counting")
            payload = b"x" * 92
            shout = sender.shout
            start = time.thread_time()
            for seq in range(n):
                await shout("G", seq.to_bytes(8, "big") + payload)
            used = time.thread_time() - start
            counted = await trio.to_thread.run_sync(expect, "counted")
            nodes = counted["nodes"]
            assert isinstance(nodes, list)
            received = sum(node["received"] for node in nodes)
            if received != k * n:
                raise RuntimeError(f"{k * n - received} of {k * n} not delivered")
    finally:
        command(cmd="stop")
    return used / (k * n) * 1e6


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("k", type=int, nargs="?", default=3, help="receivers")
    parser.add_argument("n", type=int, nargs="?", default=20_000, help="messages of each kind")
    parser.add_argument("--shout-only", action="store_true", help="no WHISPERs")
    parser.add_argument("--tcp", action="store_true", help="link over TCP on loopback")
    parser.add_argument(
        "--sender", action="store_true", help="the sending thread alone, receivers elsewhere"
    )
    args = parser.parse_args()
    if args.sender:
        beacon_port = random.randrange(40000, 50000)
        remote = start_receivers(args.k, beacon_port)
        try:
            used = trio.run(sender_only, remote, beacon_port, args.k, args.n)
        finally:
            remote.wait(10)
        print(f"sender thread cpu/delivery {used:.3f} us")
        sys.exit(0)
    run = functools.partial(main, args.k, args.n, whispers=not args.shout_only, tcp=args.tcp)
    print(f"cpu/delivery {trio.run(run):.3f} us")
