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
"""

from __future__ import annotations

import argparse
import functools
import time

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


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("k", type=int, nargs="?", default=3, help="receivers")
    parser.add_argument("n", type=int, nargs="?", default=20_000, help="messages of each kind")
    parser.add_argument("--shout-only", action="store_true", help="no WHISPERs")
    parser.add_argument("--tcp", action="store_true", help="link over TCP on loopback")
    args = parser.parse_args()
    run = functools.partial(main, args.k, args.n, whispers=not args.shout_only, tcp=args.tcp)
    print(f"cpu/delivery {trio.run(run):.3f} us")
