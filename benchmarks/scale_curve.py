"""What a mesh costs as it grows, trizre beside zyre (issue 28): one row per N.

    sudo .venv/bin/python benchmarks/scale_curve.py [--curve 25,50,100,250,500]
        [--per-process K] [--idle-seconds 10] [--no-zyre] [--unwatched] [--json FILE]
    python benchmarks/scale_curve.py --table FILE      # print a saved run's table

For each N, trizre: N nodes over the fewest processes (at least 5) whose
descriptors fit the hard limit, as ``make scale`` lays them out, or
N / ``--per-process`` processes (``benchmarks/scale_process.py``, nodes
only, no patterns; the options of ``make scale``: beacons every 2 s,
``beacons_refresh``; ``--unwatched``: ``watch_links=False``) on ``lo`` of
a namespace of their own; zyre (``benchmarks/zyre_worker.c``, default
options: beacons every 1 s): N processes of one node each, on the veth of a
namespace pair (``tests/support/netns.py``; zyre picks an interface, so it
only ever runs there).  Measured, for each:

* time to full mesh: from starting the processes until every node sees
  N - 1 peers;
* idle CPU: all processes, % of one core, over ``--idle-seconds`` of the
  quiet mesh (after 5 s to settle);
* RSS and descriptors per peer link: all processes' total over the N(N-1)
  links (a link is one node's view of one peer), and the marginal cost,
  above what the same processes hold alone (a process of k nodes started
  with no other process to meet: its own in-memory links and everything
  else), over the links they add.

Before starting a size it checks each process's descriptors against the
hard ``RLIMIT_NOFILE``; a size that does not fit is reported as such and
skipped (zyre: 3 per link, as ``bench_zre.py`` counts).  Each size ends
with its processes; a mesh not reached within ``--mesh-limit`` seconds is
reported with the links seen, and the curve goes on.  A size whose RSS,
estimated from the size before's cost a link, would pass 80 % of the
memory available is not run, saying so.  Needs root.
"""

# The table is Markdown for people: en dashes and multiplication signs on purpose.
# ruff: noqa: RUF001

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.bench_zre import ZYRE_WORKER, zyre_worker_unavailable  # noqa: E402
from benchmarks.scale import (  # noqa: E402
    Run,
    available_mb,
    cpu_seconds,
    descriptors,
    files_needed,
    fitting_processes,
    hard_file_limit,
    rss_mb,
    spread,
)
from tests.support.netns import (  # noqa: E402
    Agent,
    Namespace,
    netns_available,
    open_lo_namespace,
    open_netns_pair,
)

SETTLE = 5.0  # after the mesh, before the idle window: handshakes and GC done
ZYRE_FDS_PER_LINK = 3  # its DEALER (TCP and mailbox) and the accepted connection


def _links(layout: list[int]) -> tuple[int, int]:
    """All links of a full mesh over ``layout``, and those within a process."""
    n = sum(layout)
    return n * (n - 1), sum(k * (k - 1) for k in layout)


def _namespace() -> contextlib.AbstractContextManager[str]:
    """A namespace with only ``lo`` up; every process in it is killed on the way out."""
    return open_lo_namespace(f"tzc{os.getpid() % 100000}")


def memory_check(
    n: int, layout: list[int], per_link_kb: float | None, base: dict[int, tuple[float, int]]
) -> str | None:
    """Why ``n`` nodes would not fit in memory (by the last size's cost a link), or None.

    A mesh that swallows the machine's memory would take every other
    process on it down with it: estimated first, at most 80 % of what is
    available.
    """
    if per_link_kb is None or any(k not in base for k in set(layout)):
        return None
    links, within = _links(layout)
    need = sum(base[k][0] for k in layout) + per_link_kb * (links - within) / 1024
    if need <= 0.8 * available_mb():
        return None
    return (
        f"not run: about {need / 1024:.1f} GB of RSS ({per_link_kb:.0f} kB a link, as "
        f"measured at the size before), over 80 % of the {available_mb() / 1024:.1f} GB available"
    )


def _idle(pids: list[int], seconds: float) -> float:
    """CPU of ``pids`` over ``seconds``, in % of one core."""
    before, at = sum(map(cpu_seconds, pids)), time.monotonic()
    time.sleep(seconds)  # measuring a quiet mesh over a fixed window
    return 100 * (sum(map(cpu_seconds, pids)) - before) / (time.monotonic() - at)


def _wait(done: Callable[[], bool], limit: float, alive: Callable[[], bool]) -> float | None:
    started = time.monotonic()
    while not done():
        if time.monotonic() - started > limit or not alive():
            return None
        time.sleep(0.5)  # polling what the processes write
    return time.monotonic() - started


def _row(
    n: int, layout: list[int], mesh: float | None, cpu: float, rss: list[float], fds: list[int],
    base: dict[int, tuple[float, int]],
) -> dict[str, Any]:  # fmt: skip
    links, within = _links(layout)
    added = links - within
    base_rss = sum(base[k][0] for k in layout)
    base_fds = sum(base[k][1] for k in layout)
    return {
        "nodes": n,
        "processes": len(layout),
        "nodes_per_process": max(layout),
        "links": links,
        "time_to_mesh_s": None if mesh is None else round(mesh, 1),
        "idle_cpu_percent": round(cpu, 1),
        "rss_mb_total": round(sum(rss), 1),
        "rss_mb_max_process": round(max(rss), 1),
        "descriptors_max_process": max(fds),
        "rss_kb_per_link": round(1024 * sum(rss) / links, 1),
        "rss_kb_per_added_link": round(1024 * (sum(rss) - base_rss) / added, 1),
        "descriptors_per_link": round(sum(fds) / links, 2),
        "descriptors_per_added_link": round((sum(fds) - base_fds) / added, 2),
    }


class Trizre:
    """N nodes over processes of ``per_process`` nodes, in one namespace on ``lo``."""

    def __init__(self, args: argparse.Namespace, out: Path) -> None:
        self.args = args
        self.out = out
        self.base: dict[int, tuple[float, int]] = {}
        self.per_link_kb: float | None = None  # the last size's, for the memory check

    def layout(self, n: int) -> list[int]:
        if self.args.per_process:
            return spread(n, max(1, n // self.args.per_process))
        fits = fitting_processes(n, hard_file_limit(), 5, unwatched=self.args.unwatched)
        return spread(n, fits or n)

    def _run(self, n: int, layout: list[int], name: str) -> Run:
        run_dir = self.out / name
        shutil.rmtree(run_dir, ignore_errors=True)
        for sub in ("logs", "ready", "status"):
            (run_dir / sub).mkdir(parents=True)
        options = argparse.Namespace(
            nodes=n, processes=len(layout), rate=0.0, unwatched=self.args.unwatched
        )
        return Run(options, run_dir, "", roles=False)

    def _start(self, run: Run, namespace: str) -> None:
        run.namespace = namespace
        for index in range(len(run.layout)):
            run.start(index)

    @staticmethod
    def _stop(run: Run) -> None:
        for process in run.processes.values():
            process.send_signal(signal.SIGTERM)
        for process in run.processes.values():
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def alone(self, k: int) -> tuple[float, int]:
        """RSS (MB) and descriptors of one process of ``k`` nodes that meets no other."""
        if k not in self.base:
            run = self._run(k, [k], f"alone-{k}")
            with _namespace() as namespace:
                self._start(run, namespace)
                try:
                    run.args.nodes = k
                    if _wait(run.meshed, 120, lambda: not run.unexpected) is None:
                        raise RuntimeError(f"{k} nodes alone never met each other")
                    time.sleep(SETTLE)  # as the mesh is measured
                    pid = run.processes[0].pid
                    self.base[k] = (rss_mb(pid), descriptors(pid))
                finally:
                    self._stop(run)
        return self.base[k]

    def measure(self, n: int) -> dict[str, Any]:
        layout = self.layout(n)
        needed = files_needed(n, len(layout), unwatched=self.args.unwatched)
        if needed > hard_file_limit():
            return {"nodes": n, "skipped": f"{needed:,} descriptors a process, over the limit"}
        for k in set(layout):
            self.alone(k)
        if (why := memory_check(n, layout, self.per_link_kb, self.base)) is not None:
            return {"nodes": n, "skipped": why}
        run = self._run(n, layout, f"trizre-{n}")
        with _namespace() as namespace:
            self._start(run, namespace)
            try:
                down: set[int] = set()

                def alive() -> bool:
                    run.check_alive(down)
                    return not run.unexpected

                mesh = _wait(run.meshed, self.args.mesh_limit, alive)
                if mesh is None:
                    return {"nodes": n, "skipped": "; ".join(run.unexpected) or "no mesh in time"}
                time.sleep(SETTLE)  # the mesh settles before the quiet window
                pids = [p.pid for p in run.processes.values()]
                cpu = _idle(pids, self.args.idle_seconds)
                row = _row(n, layout, mesh, cpu, run.rss(), run.descriptors(), self.base)
                self.per_link_kb = row["rss_kb_per_added_link"]
                return row
            finally:
                self._stop(run)


class Zyre:
    """N zyre processes of one node each, on the veth of one namespace of a pair."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.base: dict[int, tuple[float, int]] = {}
        self.per_link_kb: float | None = None
        self.port = 5670

    def _agents(self, ns: Namespace, n: int) -> list[Agent]:
        self.port += 1
        return [
            Agent(
                [
                    str(ZYRE_WORKER),
                    "--name",
                    f"z{i}",
                    "--nodes",
                    "1",
                    "--port",
                    str(self.port),
                    "--interface",
                    ns.interface,
                    "--expect-peers",
                    str(n - 1),
                ],
                namespace=ns,
                label=f"zyre z{i}",
            )
            for i in range(n)
        ]

    @staticmethod
    def _stop(agents: list[Agent]) -> None:
        # Killed: a zyre worker asked to stop can take many seconds to leave,
        # and only what was measured before matters.
        for agent in agents:
            with contextlib.suppress(ProcessLookupError):
                agent.proc.kill()
        for agent in agents:
            agent.stop(timeout=5)

    def measure(self, n: int, ns: Namespace) -> dict[str, Any]:
        needed = ZYRE_FDS_PER_LINK * (n - 1) + 100
        if needed > hard_file_limit():
            return {"nodes": n, "skipped": f"{needed:,} descriptors a process, over the limit"}
        if 1 not in self.base:
            (agent,) = self._agents(ns, 1)
            try:
                agent.started(timeout=30)
                time.sleep(SETTLE)
                self.base[1] = (rss_mb(agent.proc.pid), descriptors(agent.proc.pid))
            finally:
                self._stop([agent])
        if (why := memory_check(n, [1] * n, self.per_link_kb, self.base)) is not None:
            return {"nodes": n, "skipped": why}
        launched = time.monotonic()
        agents = self._agents(ns, n)
        try:
            last = 0.0
            for agent in agents:
                left = self.args.mesh_limit - (time.monotonic() - launched)
                try:
                    last = max(last, agent.expect_event("mesh", timeout=max(left, 0.1))["t"])
                except AssertionError:
                    seen = 0
                    for other in agents:
                        other.send({"cmd": "status"})
                        seen += sum(other.expect_event("status", timeout=30)["peers"])
                    return {
                        "nodes": n,
                        "skipped": f"no full mesh in {self.args.mesh_limit:g} s "
                        f"({seen:,} of {n * (n - 1):,} links)",
                    }
            mesh = last - launched
            time.sleep(SETTLE)
            pids = [agent.proc.pid for agent in agents]
            cpu = _idle(pids, self.args.idle_seconds)
            rss = [rss_mb(pid) for pid in pids]
            fds = [descriptors(pid) for pid in pids]
            row = _row(n, [1] * n, mesh, cpu, rss, fds, self.base)
            self.per_link_kb = row["rss_kb_per_added_link"]
            return row
        finally:
            self._stop(agents)


COLUMNS = (
    ("layout", "processes × nodes"),
    ("time_to_mesh_s", "time to full mesh, s"),
    ("idle_cpu_percent", "idle CPU, % of a core"),
    ("rss_kb_per_link", "RSS per link, kB"),
    ("rss_kb_per_added_link", "RSS per link above the processes alone, kB"),
    ("descriptors_per_link", "descriptors per link"),
    ("rss_mb_max_process", "RSS of the largest process, MB"),
    ("descriptors_max_process", "descriptors of the fullest process"),
)


def _cell(value: Any) -> str:
    if value is None:
        return "–"  # not measured
    return f"{value:,}" if isinstance(value, int) else str(value)


def table(results: dict[str, Any]) -> str:
    """The curve as one Markdown table: a row per N and implementation."""
    lines = [
        "| N | impl | " + " | ".join(title for _, title in COLUMNS) + " |",
        "|---|---|" + "---|" * len(COLUMNS),
    ]
    for point in results["curve"]:
        for impl in ("trizre", "trizre-unwatched", "zyre"):
            row = point.get(impl)
            if row is None:
                continue
            if "skipped" in row:
                cells = [row["skipped"]] + [""] * (len(COLUMNS) - 1)
            else:
                row = {**row, "layout": f"{row['processes']} × {row['nodes_per_process']}"}
                cells = [_cell(row.get(key)) for key, _ in COLUMNS]
            label = f"{impl} ({row['source']})" if "source" in row else impl
            lines.append(f"| {point['nodes']} | {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--curve", default="25,50,100,250,500", help="the sizes N, in order")
    parser.add_argument(
        "--per-process",
        type=int,
        default=0,
        help="trizre nodes a process (default: the fewest processes, at least 5, that fit)",
    )
    parser.add_argument("--idle-seconds", type=float, default=10.0)
    parser.add_argument("--mesh-limit", type=float, default=600.0)
    parser.add_argument("--no-zyre", action="store_true")
    parser.add_argument(
        "--unwatched",
        action="store_true",
        help="trizre nodes with watch_links=False (no socket monitor on TCP links)",
    )
    parser.add_argument("--json", type=Path, help="write the results (and merge into a file)")
    parser.add_argument("--table", type=Path, help="only print the table of a saved run")
    args = parser.parse_args()
    if args.table:
        print(table(json.loads(args.table.read_text())))
        return 0
    if os.geteuid() != 0 or (why := netns_available()) is not None:
        print("scale_curve: needs root and network namespaces")
        return 2
    sizes = [int(n) for n in args.curve.split(",")]
    zyre = not args.no_zyre
    if zyre and (why := zyre_worker_unavailable()) is not None:
        print(f"scale_curve: zyre skipped: {why}", file=sys.stderr)
        zyre = False
    results: dict[str, Any] = {"curve": []}
    if args.json and args.json.exists():  # a curve measured in parts
        results = json.loads(args.json.read_text())
    results.update(
        cores=os.cpu_count(),
        descriptor_limit=hard_file_limit(),
        per_process=args.per_process,
        idle_seconds=args.idle_seconds,
    )

    def interrupted(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)  # through the finally blocks: no process or namespace left

    signal.signal(signal.SIGTERM, interrupted)
    out = Path(tempfile.mkdtemp(prefix="trizre-curve-"))
    trizre = Trizre(args, out)
    zyre_side = Zyre(args)
    try:
        with contextlib.ExitStack() as stack:
            pair = stack.enter_context(open_netns_pair()) if zyre else None
            for n in sizes:
                point: dict[str, Any] = {
                    "nodes": n,
                    "when": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
                }
                impl = "trizre-unwatched" if args.unwatched else "trizre"
                print(f"N = {n}: {impl}", flush=True)
                point[impl] = trizre.measure(n)
                print(json.dumps(point[impl]), flush=True)
                if pair is not None:
                    print(f"N = {n}: zyre", flush=True)
                    point["zyre"] = zyre_side.measure(n, pair.a)
                    print(json.dumps(point["zyre"]), flush=True)
                old = next((p for p in results["curve"] if p["nodes"] == n), {})
                point = {**old, **point}  # a run of one implementation keeps the others'
                results["curve"] = [p for p in results["curve"] if p["nodes"] != n] + [point]
                results["curve"].sort(key=lambda p: p["nodes"])
                if args.json:
                    args.json.write_text(json.dumps(results, indent=1) + "\n")
    finally:
        shutil.rmtree(out, ignore_errors=True)
    # What a process holds alone (RSS MB, descriptors), by its nodes.
    base = results.setdefault("alone", {})
    base["trizre-unwatched" if args.unwatched else "trizre"] = trizre.base
    if zyre:
        base["zyre"] = zyre_side.base
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")
    print(table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
