"""Issue 28's low-latency mode: WHISPER round trips at several ``busy_poll``, beside zyre.

One sitting, alternated: each round runs zyre, then trizre at every
``--poll`` (µs; 0 is the mode off) in turn, each a fresh pair of processes
in two network namespaces (``tests/support/netns.py``; as
``bench_zre.py --scenario pingpong``): round trips/s, p50 and p99 round
trip, and CPU per round trip of both processes (all their threads, libzmq's
too), and the share of the inboxes' polls that caught the next message
without parking.  Then the mode's idle cost: a linked trizre pair at the largest
``--poll``, and one with the mode off, left alone for ``--idle`` seconds:
CPU % of a core of both processes together.  Medians (min-max) over
``--repeat`` rounds, as a Markdown table.

    python benchmarks/bench_lowlat.py [--repeat 5] [--poll 0 20 50 100] [--n 5000]

Without namespaces (not root) it runs trizre alone on loopback.  A
benchmark, not a test: it never fails on times.
"""

# ruff: noqa: RUF001

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_zre  # noqa: E402
from bench_zre import Bench, Results, Site, Sizes, _cpu_seconds  # noqa: E402

from tests.support import netns  # noqa: E402


class PollBench(Bench):
    """bench_zre's Bench, whose trizre workers get ``--busy-poll``."""

    def poll(self, us: float) -> None:
        self.trizre_args = ["--busy-poll", str(us / 1e6)] if us else []


def pingpong(bench: PollBench, impl: str, n: int, size: int) -> dict[str, float]:
    with bench.workers() as agents:
        a, b = bench._pair(impl, agents)
        b.send({"cmd": "status"})
        before = b.expect_event("status", timeout=10)
        a.send({"cmd": "status"})
        a_before = a.expect_event("status", timeout=10)
        a.send({"cmd": "pingpong", "n": n, "size": size})
        result = a.expect_event("pingpong", timeout=30 + n / 500)
        b.send({"cmd": "status"})
        after = b.expect_event("status", timeout=10)
        used = result["cpu"] - result["cpu0"] + after["cpu"] - before["cpu"]
        polls = hits = 0
        for start, end in ((a_before, result), (before, after)):
            polls += end.get("busy_polls", 0) - start.get("busy_polls", 0)
            hits += end.get("busy_poll_hits", 0) - start.get("busy_poll_hits", 0)
        return {
            "rate": result["rate"],
            "p50": result["p50_us"],
            "p99": result["p99_us"],
            "cpu": used / n * 1e6,
            "hits": 100 * hits / polls if polls else 0.0,
        }


def idle_cpu(bench: PollBench, window: float) -> float:
    """CPU % of a core of a linked trizre pair left alone for ``window`` s."""
    with bench.workers() as agents:
        a, b = bench._pair("trizre", agents)
        time.sleep(1.0)  # past the handshake's traffic
        pids = [a.proc.pid, b.proc.pid]
        before, t0 = sum(map(_cpu_seconds, pids)), time.monotonic()
        time.sleep(window)
        return 100 * (sum(map(_cpu_seconds, pids)) - before) / (time.monotonic() - t0)


def cell(values: list[float], fmt: str = "{:,.0f}") -> str:
    if not values:
        return "—"
    median = fmt.format(statistics.median(values))
    if len(values) == 1:
        return median
    return f"{median} ({fmt.format(min(values))}–{fmt.format(max(values))})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5, help="rounds (default 5)")
    parser.add_argument("--poll", type=float, nargs="+", default=[0, 20, 50, 100], help="µs")
    parser.add_argument("--n", type=int, default=5000, help="round trips per run")
    parser.add_argument("--size", type=int, default=100, help="payload octets")
    parser.add_argument("--idle", type=float, default=5.0, help="idle window, s (0: skip)")
    args = parser.parse_args()
    load = os.getloadavg()[0]
    results = Results()
    reason = netns.netns_available()
    context: contextlib.AbstractContextManager[Any] = (
        contextlib.nullcontext(None) if reason is not None else netns.open_netns_pair()
    )
    runs: dict[str, dict[str, list[float]]] = {}
    idle: dict[str, list[float]] = {}
    started = time.monotonic()
    with context as pair:
        site = Site(pair.a, pair.b) if pair is not None else Site(None, None)
        bench = PollBench(site, Sizes(), 1, results)
        impls = [impl for impl in bench.impls if impl == "zyre"]
        variants = [(impl, 0.0) for impl in impls] + [("trizre", us) for us in args.poll]
        for _ in range(args.repeat):
            for impl, us in variants:
                label = impl if impl != "trizre" else f"trizre busy_poll={us:g} µs"
                bench.poll(us)
                try:
                    got = pingpong(bench, impl, args.n, args.size)
                except Exception as exc:
                    print(f"error: {label}: {type(exc).__name__}: {exc}", file=sys.stderr)
                    continue
                row = runs.setdefault(label, {})
                for key, value in got.items():
                    row.setdefault(key, []).append(value)
                print(f"{label}: {got}", file=sys.stderr, flush=True)
        if args.idle > 0:
            for us in (0.0, max(args.poll)):
                bench.poll(us)
                label = f"busy_poll={us:g} µs"
                idle.setdefault(label, []).append(idle_cpu(bench, args.idle))
    zyre = statistics.median(runs["zyre"]["rate"]) if "zyre" in runs else None
    print(
        f"\nWHISPER round trips, {args.size} B, {args.n:,} per run, {args.repeat} rounds "
        f"alternated; {'loopback' if pair is None else 'two namespaces, veth'}; "
        f"{os.cpu_count()} cores, load {load:.2f} before, {os.getloadavg()[0]:.2f} after; "
        f"{time.monotonic() - started:.0f} s\n"
    )
    print(
        "| variant | round trips/s | ×zyre | p50 µs | p99 µs | CPU per round trip, µs "
        "| polls that caught the message, % |"
    )
    print("|---|---|---|---|---|---|---|")
    for label, row in runs.items():
        ratio = f"{statistics.median(row['rate']) / zyre:.2f}×" if zyre else "—"
        print(
            f"| {label} | {cell(row['rate'])} | {ratio} | {cell(row['p50'])} "
            f"| {cell(row['p99'])} | {cell(row['cpu'])} | {cell(row['hits'])} |"
        )
    if idle:
        print(f"\nIdle linked trizre pair, {args.idle:g} s: CPU % of a core, both processes")
        for label, values in idle.items():
            print(f"- {label}: {cell(values, '{:.2f}')} %")
    return 0


if __name__ == "__main__":
    bench_zre.signal.signal(bench_zre.signal.SIGTERM, bench_zre._interrupt)
    sys.exit(main())
