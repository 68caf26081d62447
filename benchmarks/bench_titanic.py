"""Titanic: what durability costs, and requests accepted and completed per second.

1. The store alone (no network): requests accepted per second into SQLite
   in WAL mode, committing each one with ``synchronous=FULL`` (an fsync per
   request: what Titanic did before its group commit), with
   ``synchronous=NORMAL`` (WAL syncs at checkpoints: survives ``kill -9``,
   not a power cut), and in groups of 100 per commit with FULL (what
   Titanic's group commit does when requests arrive together).
2. End to end on loopback: Titanic (``synchronous=FULL``, group commit)
   and a client in this process, four echo workers in their own
   processes; ``--requests`` submitted 50 at a time (accepted per
   second), then every result collected (completed per second from the
   first submit).

    .venv/bin/python benchmarks/bench_titanic.py [--requests 2000]
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import trizre
from benchmarks.bench_forged_beacons import free_udp_port
from benchmarks.processes import ECHO_SERVER, python_processes
from trizre import patterns
from trizre.patterns._titanic import _pack


def store_rate(synchronous: str, group: int, n: int) -> float:
    """Accepts per second into a fresh WAL database."""
    folder = Path(tempfile.mkdtemp(prefix="trizre-bench-"))
    db = sqlite3.connect(folder / "t.db", isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute(f"PRAGMA synchronous={synchronous}")
    db.execute("CREATE TABLE requests (id TEXT PRIMARY KEY, service TEXT, body BLOB)")
    body = _pack([b"x" * 100])
    start = time.perf_counter()
    for i in range(0, n, group):
        db.execute("BEGIN")
        for j in range(i, min(i + group, n)):
            db.execute("INSERT INTO requests VALUES (?, ?, ?)", (f"{j:032x}", "echo", body))
        db.execute("COMMIT")
    elapsed = time.perf_counter() - start
    db.close()
    return n / elapsed


async def end_to_end(requests: int) -> dict[str, Any]:
    port = free_udp_port()
    folder = Path(tempfile.mkdtemp(prefix="trizre-bench-"))
    async with (
        python_processes(ECHO_SERVER, [[str(port), f"w{i}", "echo"] for i in range(4)]),
        trizre.open_node("titanic", interface="lo", beacon_port=port, local_links=False) as t,
        patterns.open_titanic(t, folder / "titanic.db", max_dispatch=64) as titanic,
        trizre.open_node("client", interface="lo", beacon_port=port, local_links=False) as c,
        patterns.open_titanic_client(c) as client,
    ):
        with trio.fail_after(60):
            async with patterns.open_service_client(t) as probe:
                await probe.wait_for_service("echo", 4)
        ids: list[str] = []
        start = trio.current_time()
        limit = trio.CapacityLimiter(50)

        async def submit(i: int) -> None:
            async with limit:
                ids.append(await client.submit("echo", b"%d" % i))

        async with trio.open_nursery() as nursery:
            for i in range(requests):
                nursery.start_soon(submit, i)
        accepted = trio.current_time() - start
        with trio.fail_after(300):
            async with trio.open_nursery() as nursery:
                for titanic_id in ids:
                    nursery.start_soon(client.result, titanic_id)
        done = trio.current_time() - start
        assert titanic.completed == requests
    return {
        "requests": requests,
        "accepted_per_s": round(requests / accepted),
        "completed_per_s": round(requests / done),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    result: dict[str, Any] = {
        "store_full_each": round(store_rate("FULL", 1, 2000)),
        "store_normal_each": round(store_rate("NORMAL", 1, 2000)),
        "store_full_groups_of_100": round(store_rate("FULL", 100, 20000)),
    }
    result.update(trio.run(end_to_end, args.requests))
    print(json.dumps(result))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
