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
    python benchmarks/bench_lowlat.py --timers 5 --repeat 2 --poll 0 100 1000

``--timers NODES`` measures instead what the rest of a run pays: a 1 ms
ticker's lateness in one process holding NODES nodes linked over TCP on
loopback, one shouting every 2 ms, at each ``--poll``.

Without namespaces (not root) it runs trizre alone on loopback.  A
benchmark, not a test: it never fails on times.
"""

# ruff: noqa: RUF001

from __future__ import annotations

import argparse
import contextlib
import json
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


def timer_lateness(busy_poll_us: float, nodes: int, seconds: float) -> dict[str, float]:
    """What the run's other tasks pay: a 1 ms ticker's lateness beside busy-polling nodes.

    ``nodes`` trizre nodes in this process, on loopback, linked over TCP
    (``local_links=False``), node 0 shouting to the rest every 2 ms so
    that every inbox keeps polling; a task sleeping 1 ms at a time
    records how late each wake-up is.  Returns p50/p99/max lateness, µs,
    and the process's CPU, % of a core.
    """
    import trio  # noqa: PLC0415

    import trizre  # noqa: PLC0415
    from tests.support.nodes import free_udp_port  # noqa: PLC0415

    late: list[float] = []

    async def main() -> None:
        port = free_udp_port()
        async with contextlib.AsyncExitStack() as stack:
            opened = [
                await stack.enter_async_context(
                    trizre.open_node(
                        f"n{i}",
                        interface="lo",
                        beacon_port=port,
                        beacon_interval=0.05,
                        local_links=False,
                        busy_poll=busy_poll_us / 1e6,
                    )
                )
                for i in range(nodes)
            ]
            for node in opened[1:]:
                await node.join("g")
            with trio.fail_after(30):
                for node in opened[1:]:
                    await opened[0].wait_for_peer(node.uuid)

            async def drain(node: trizre.Node) -> None:
                async for _ in node.events():
                    pass

            async def shout() -> None:
                while True:
                    await opened[0].shout("g", b"x" * 100)
                    await trio.sleep(0.002)

            async with trio.open_nursery() as nursery:
                for node in opened[1:]:
                    nursery.start_soon(drain, node)
                nursery.start_soon(shout)
                await trio.sleep(0.5)  # the JOINs are in, the polls going
                cpu0 = time.process_time()
                end = trio.current_time() + seconds
                while trio.current_time() < end:
                    due = trio.current_time() + 0.001
                    await trio.sleep_until(due)
                    late.append(trio.current_time() - due)
                cpu.append(100 * (time.process_time() - cpu0) / seconds)
                nursery.cancel_scope.cancel()

    cpu: list[float] = []
    trio.run(main)
    late.sort()
    return {
        "p50": late[len(late) // 2] * 1e6,
        "p99": late[int(len(late) * 0.99)] * 1e6,
        "max": late[-1] * 1e6,
        "cpu": cpu[0],
    }


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
    parser.add_argument("--json", type=Path, default=None, help="also write the runs here")
    parser.add_argument(
        "--timers",
        type=int,
        default=0,
        metavar="NODES",
        help="only measure a 1 ms ticker's lateness beside NODES busy-polling nodes "
        "in one process, on loopback, at each --poll",
    )
    args = parser.parse_args()
    if args.timers:
        print("| busy_poll | ticker late p50 µs | p99 µs | max µs | process CPU, % |")
        print("|---|---|---|---|---|")
        for _ in range(args.repeat):
            for us in args.poll:
                got = timer_lateness(us, args.timers, 3.0)
                print(
                    f"| {us:g} µs | {got['p50']:.0f} | {got['p99']:.0f} | {got['max']:.0f} "
                    f"| {got['cpu']:.0f} |",
                    flush=True,
                )
        return 0
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
    if args.json is not None:
        # benchmarks/targets.py reads it: each variant's runs, zyre's among them.
        record = {"command": " ".join(["benchmarks/bench_lowlat.py", *sys.argv[1:]])}
        record |= {"cores": os.cpu_count(), "load_before": load, "runs": runs, "idle": idle}
        args.json.write_text(json.dumps(record, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    bench_zre.signal.signal(bench_zre.signal.SIGTERM, bench_zre._interrupt)
    sys.exit(main())
