"""Python memory per peer of n nodes in one process, in full mesh (tracemalloc).

Counts what tracemalloc sees (Python allocations, not libzmq's) once the
mesh is reached, divided by the n(n-1) peers, and lists the lines that
allocate most per peer.  ``bench_zre.py --scenario footprint`` measures RSS.

    python benchmarks/peer_memory.py [--nodes 40] [--port 23457] [--tcp]

``--tcp`` links the nodes over TCP (``local_links=False``), as nodes of
different processes are: the Python side of a TCP peer, its entry in
the inbox watch included (libzmq's own memory is not traced).

    python benchmarks/peer_memory.py --libzmq 2000

measures libzmq's side instead, by RSS, in a fresh process: what one
DEALER connected to a ROUTER over TCP on loopback costs, both ends (what
a node holds for each peer in another process: its DEALER to the peer,
the peer's connection into its inbox), before and after one message
each, and what watching the links adds (issue 28: one socket monitor
on the inbox, ``InboxWatch``, for all of them).
"""

from __future__ import annotations

import argparse
import gc
import os
import time
import tracemalloc
from typing import Any

import trio
import zmq

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


def _rss_kb() -> int:
    for line in open("/proc/self/status"):  # noqa: SIM115 (a few lines, read once)
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def libzmq_links(n: int) -> None:
    """RSS a TCP link costs in libzmq: ``n`` DEALERs into one ROUTER, then its monitor."""
    ctx: zmq.Context[Any] = zmq.Context()
    ctx.set(zmq.MAX_SOCKETS, n + 100)
    router = ctx.socket(zmq.ROUTER)
    port = router.bind_to_random_port("tcp://127.0.0.1")
    fds = len(os.listdir("/proc/self/fd"))
    base = _rss_kb()
    dealers = []
    for i in range(n):
        dealer = ctx.socket(zmq.DEALER)
        dealer.setsockopt(zmq.LINGER, 0)
        dealer.setsockopt(zmq.IDENTITY, b"%d" % i)
        dealer.connect(f"tcp://127.0.0.1:{port}")
        dealers.append(dealer)
    while len(os.listdir("/proc/self/fd")) < fds + 3 * n:  # each connection made and accepted
        time.sleep(0.1)
    print(f"{n:,} links, connected, idle:      {(_rss_kb() - base) / n:5.1f} kB a link (both ends)")
    for dealer in dealers:
        dealer.send(b"hello")
    for _ in range(n):
        router.recv_multipart()
    print(f"after one message each:        {(_rss_kb() - base) / n:5.1f} kB a link")
    # What watching the links adds (watch_links, InboxWatch): one socket
    # monitor on the inbox and its reader, whatever the number of links.
    before, fds = _rss_kb(), len(os.listdir("/proc/self/fd"))
    watch = ctx.socket(zmq.PAIR)
    router.monitor("inproc://monitor", zmq.EVENT_DISCONNECTED)
    watch.connect("inproc://monitor")
    time.sleep(0.5)
    print(
        f"watched (one monitor on the inbox, one reader): {_rss_kb() - before} kB in all, "
        f"{len(os.listdir('/proc/self/fd')) - fds} descriptors"
    )
    router.disable_monitor()
    ctx.destroy(linger=0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=40)
    parser.add_argument("--port", type=int, default=23457, help="UDP beacon port on lo")
    parser.add_argument(
        "--tcp", action="store_true", help="TCP links between the nodes, as between processes"
    )
    parser.add_argument("--libzmq", type=int, metavar="N", help="libzmq's RSS of N TCP links")
    args = parser.parse_args()
    if args.libzmq:
        libzmq_links(args.libzmq)
        return
    tracemalloc.start()
    trio.run(measure, args.nodes, args.port, args.tcp)


if __name__ == "__main__":
    main()
