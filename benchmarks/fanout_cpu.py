"""CPU per delivery in one process: a sender SHOUTs and WHISPERs to K receivers.

    PYTHONPATH=<tree> python benchmarks/fanout_cpu.py K N

The nodes are linked in memory (``discovery="memory"``, no packet leaves
the process), so the figure is the node's own work per delivery: encoding,
the in-process links, each receiver's reader and fan-out.  CPU time, not
wall time: it stays comparable on a loaded machine, where rates do not.
Prints one line, ``cpu/delivery <µs> us``.
"""

from __future__ import annotations

import sys
import time

import trio

import trizre


async def main(k: int, n: int) -> float:
    opts = {"beacon_interval": 0.05, "interface": "lo", "discovery": "memory"}
    counts = [0] * k
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
                        if counts[i] == 2 * n:
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
        for _ in range(n):
            for peer in peers:
                await sender.whisper(peer, payload)
        await received.wait()
        used = time.process_time() - start
        done.set()
    return used / sum(counts) * 1e6


if __name__ == "__main__":
    k = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 20_000
    print(f"cpu/delivery {trio.run(main, k, n):.3f} us")
