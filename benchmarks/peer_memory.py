"""Python memory per peer of n nodes in one process, in full mesh (tracemalloc).

Counts what tracemalloc sees (Python allocations, not libzmq's) once the
mesh is reached, divided by the n(n-1) peers, and lists the lines that
allocate most per peer.  ``bench_zre.py --scenario footprint`` measures RSS.

    python benchmarks/peer_memory.py [--nodes 40] [--port 23457] [--tcp]

``--tcp`` links the nodes over TCP (``local_links=False``), as nodes of
different processes are: the Python side of a TCP peer, its link's
watcher included (libzmq's own memory is not traced).
"""

from __future__ import annotations

import argparse
import gc
import tracemalloc

import trio

import trizre


async def measure(n: int, port: int, tcp: bool) -> None:
    nodes: list[trizre.Node] = []
    meshed = 0
    mesh, done = trio.Event(), trio.Event()

    async def run(i: int) -> None:
        nonlocal meshed
        async with trizre.open_node(
            f"n{i}", beacon_port=port, interface="lo", local_links=not tcp
        ) as node:
            nodes.append(node)
            for k in range(1, n):  # every other node
                await node.wait_for_peer(f"n{(i + k) % n}")
            meshed += 1
            if meshed == n:
                mesh.set()
            await done.wait()

    async with trio.open_nursery() as nursery:
        for i in range(n):
            nursery.start_soon(run, i)
        with trio.fail_after(60):
            await mesh.wait()
        gc.collect()
        stats = tracemalloc.take_snapshot().statistics("lineno")
        peers = n * (n - 1)
        total = sum(stat.size for stat in stats)
        per_peer = total / peers
        print(f"{n} nodes, {peers:,} peers: {total / 1e6:.2f} MB traced, {per_peer:,.0f} B a peer")
        for stat in stats[:12]:
            print(f"  {stat.size / peers:7,.0f} B a peer  {stat.traceback}")
        done.set()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=40)
    parser.add_argument("--port", type=int, default=23457, help="UDP beacon port on lo")
    parser.add_argument(
        "--tcp", action="store_true", help="TCP links between the nodes, as between processes"
    )
    args = parser.parse_args()
    tracemalloc.start()
    trio.run(measure, args.nodes, args.port, args.tcp)


if __name__ == "__main__":
    main()
