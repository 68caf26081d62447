"""Freelance round trips: one server against three, failover and shotgun.

Echo servers in their own processes on loopback; one client sends
``--requests`` sequential 100-byte requests per case and prints the median
and 99th-percentile round trip.  The Guide reports about 60 µs against one
server and 80 µs against three for its C model 3 client.

    .venv/bin/python benchmarks/bench_freelance.py [--requests 5000]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import trizre
from benchmarks.bench_forged_beacons import free_udp_port
from benchmarks.processes import ECHO_SERVER, python_processes
from trizre import patterns


async def case(port: int, names: list[str], model: str, requests: int) -> dict[str, Any]:
    payload = b"x" * 100
    times: list[float] = []
    async with (
        trizre.open_node("client", interface="lo", beacon_port=port, local_links=False) as node,
        patterns.open_freelance_client(node, names, model=model) as client,  # type: ignore[arg-type]
    ):
        with trio.fail_after(30):
            for name in names:
                await node.wait_for_peer(name)
        for _ in range(200):  # warm up
            await client.request(payload)
        for _ in range(requests):
            start = trio.current_time()
            await client.request(payload)
            times.append(trio.current_time() - start)
    times.sort()
    return {
        "case": f"{model}, {len(names)} server{'s' if len(names) > 1 else ''}",
        "median_us": round(statistics.median(times) * 1e6),
        "p99_us": round(times[int(len(times) * 0.99)] * 1e6),
    }


async def run(requests: int) -> list[dict[str, Any]]:
    port = free_udp_port()
    names = ["s1", "s2", "s3"]
    async with python_processes(ECHO_SERVER, [[str(port), name] for name in names]):
        return [
            await case(port, names[:1], "failover", requests),
            await case(port, names, "failover", requests),
            await case(port, names[:1], "shotgun", requests),
            await case(port, names, "shotgun", requests),
        ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=5000)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    results = trio.run(run, args.requests)
    print("| case | median round trip | p99 |")
    print("|---|---|---|")
    for r in results:
        print(f"| {r['case']} | {r['median_us']} µs | {r['p99_us']} µs |")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
