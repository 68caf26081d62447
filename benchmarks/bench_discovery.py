"""Discovery by beacons and by gossip: time to a full mesh, and what an idle mesh costs.

N nodes in this process on loopback, every link over TCP (as between
processes).  Beacons: UDP on ``lo``.  Gossip: one more node serves the
gossip (ipc), the N join it.  Printed per mode: seconds until every node
sees every other, then the process's CPU use over ``--idle`` seconds of an
idle mesh (beacons or gossip PINGs and refreshes, and ZRE's own PINGs).

    .venv/bin/python benchmarks/bench_discovery.py [--nodes 20] [--idle 10]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import trizre
from benchmarks.bench_forged_beacons import free_udp_port, report


async def mesh(mode: str, n: int, idle: float) -> dict[str, Any]:
    common: dict[str, Any] = {"local_links": False}
    folder = tempfile.mkdtemp(prefix="trizre-bench-")
    hub = f"ipc://{folder}/gossip"
    async with AsyncExitStack() as stack:
        start = trio.current_time()
        nodes: list[trizre.Node] = []
        if mode == "gossip":
            options = {"discovery": "gossip", "endpoint": "tcp://127.0.0.1:*", **common}
            nodes.append(
                await stack.enter_async_context(trizre.open_node("hub", gossip_bind=hub, **options))
            )
            options["gossip_connect"] = hub
        else:
            options = {"interface": "lo", "beacon_port": free_udp_port(), **common}
        for i in range(n):
            nodes.append(await stack.enter_async_context(trizre.open_node(f"n{i}", **options)))
        with trio.fail_after(60):
            for node in nodes:
                for other in nodes:
                    if other is not node:
                        await node.wait_for_peer(other.uuid)
        meshed = trio.current_time() - start
        cpu = time.process_time()
        await trio.sleep(idle)
        cpu = time.process_time() - cpu
        return {
            "mode": mode,
            "nodes": len(nodes),
            "full_mesh_s": round(meshed, 3),
            "idle_cpu_percent": round(100 * cpu / idle, 2),
        }


async def main(args: argparse.Namespace) -> dict[str, Any]:
    return {mode: await mesh(mode, args.nodes, args.idle) for mode in ("beacons", "gossip")}


def cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=20)
    parser.add_argument("--idle", type=float, default=10.0, help="seconds of idle mesh measured")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--quick", action="store_true", help="3 nodes, 1 s idle (smoke test)")
    args = parser.parse_args()
    if args.quick:
        args.nodes, args.idle = 3, 1.0
    report(trio.run(main, args), args.json)


if __name__ == "__main__":
    cli()
