"""The ZRE node beside zyre (C), pyre 0.3.4 and raw pyzmq, in one run, as ratios.

Every figure is measured for trizre, zyre and pyre back to back in the same
run (plus raw pyzmq DEALER/ROUTER where a transport ceiling applies), and
printed as one Markdown table: median (min-max) over ``--repeat`` runs, with
the ratios trizre/zyre, trizre/pyre and trizre/raw and the targets beside
them.  zyre runs as ``benchmarks/zyre_worker.c`` (our driver against
libzyre, built by ``scripts/build-zyre.sh`` with zyre from
``../shared/vendor``); where it is not built, or was built from another
``zyre_worker.c`` than this checkout's, its column is skipped, saying why.

Network safety (shared/DESIGN.md section 3): pyre beacons on the first
non-loopback interface and zyre on the one it is given, so every process runs
inside two network namespaces
this script creates (``tests/support/netns.py``), joined by a veth pair: one node
per namespace, 100-byte payloads, unless a scenario says otherwise.  trizre
and raw pyzmq use that same veth.  Without namespaces (not root, no ``ip``)
pyre and zyre are skipped and trizre and raw pyzmq run on loopback.

Scenarios (``--scenario NAME``, repeatable; default all):

* discovery: start of node B -> A sees Enter(B), and -> B sees Enter(A);
* pingpong: sequential WHISPER round trips: round trips/s, p50/p99;
* flood: one-way WHISPER flood: received/s, lost, reordered;
* burst: 50k x 4 kB WHISPERs to a reader that sleeps 1 ms every 1000:
  delivered, lost, time to deliver all (the wait ends after ``--stall``
  seconds without progress; lost = sent - received);
* fanout: SHOUT to K = 2, 5, 10 receivers, as K processes and as K nodes in
  one process: deliveries/s, lost;
* death: kill -9 of a peer -> the other side reports Exit, default timeouts
  (fewer runs: about 30 s each) and, for trizre, 0.5 s / 2 s;
* footprint: RSS, threads, descriptors and idle CPU of one process holding
  1, 20 and 100 nodes in a full mesh, and the time to reach the mesh.

    python benchmarks/bench_zre.py [--repeat 5] [--quick] [--scenario flood] [--json PATH]

Times are CLOCK_MONOTONIC (``time.monotonic()``), system-wide on Linux, so
times taken in different processes and namespaces compare.  A benchmark is
not a test: it never fails on absolute times (shared/DESIGN.md section 7);
it exits non-zero only when a scenario could not be run at all.
"""

# The table is Markdown for people: en dashes and multiplication signs on purpose.
# ruff: noqa: RUF001

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import dataclasses
import datetime
import hashlib
import itertools
import json
import os
import platform
import random
import resource
import signal
import statistics
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.interop import zyre_cache  # noqa: E402
from tests.support import netns  # noqa: E402
from tests.support.netns import Agent, Namespace  # noqa: E402

WORKER = Path(__file__).resolve().with_name("zre_worker.py")
ZYRE_WORKER_SOURCE = WORKER.with_name("zyre_worker.c")
ZYRE_WORKER = zyre_cache() / "bin" / "zyre_worker"  # built from ZYRE_WORKER_SOURCE
SCENARIOS = ("discovery", "pingpong", "flood", "burst", "fanout", "death", "footprint")
ZRE = ("trizre", "pyre")
GROUP = "bench"
NOFILE = 65536  # a 100-node mesh in one process needs ~30k descriptors


@dataclass(frozen=True)
class Sizes:
    payload: int = 100
    round_trips: int = 5000
    flood: int = 100_000
    burst: int = 50_000
    burst_size: int = 4096
    stall: float = 5.0  # a counting reader gives up after this long without progress
    fanout_deliveries: int = 50_000  # per run: K receivers x (this / K) shouts
    fanout_ks: tuple[int, ...] = (2, 5, 10)
    death_default_runs: int = 2  # runs with default timeouts (~30 s each, in parallel)
    death_bound: float = 45.0  # stop waiting for Exit after this long
    footprint_nodes: tuple[int, ...] = (1, 20, 100)
    footprint_pyre_nodes: tuple[int, ...] = (1, 20, 100)
    footprint_runs: int = 2
    mesh_bound: float = 60.0  # a footprint mesh not reached by then is reported as such
    settle: float = 2.0  # after the mesh, before measuring idle CPU
    idle_window: float = 5.0


DEFAULT = Sizes()
QUICK = Sizes(
    round_trips=200,
    flood=2000,
    burst=2000,
    stall=1.5,
    fanout_deliveries=1000,
    fanout_ks=(2,),
    death_default_runs=1,
    death_bound=1.0,
    footprint_nodes=(1, 5),
    footprint_pyre_nodes=(1, 5),
    footprint_runs=1,
    mesh_bound=20.0,
    settle=0.2,
    idle_window=0.5,
)


def zyre_worker_unavailable() -> str | None:
    """None when zyre's worker is built from this checkout's source; else why not.

    scripts/build-zyre.sh writes the source's SHA-256 beside the binary
    (``.worker-from``).  The cache is per machine, shared by every checkout:
    a binary built from another ``zyre_worker.c`` is not measured.
    """
    if not (ZYRE_WORKER.is_file() and os.access(ZYRE_WORKER, os.X_OK)):
        return (
            f"{ZYRE_WORKER} is not built (scripts/build-zyre.sh builds it with zyre; "
            "see its warnings)"
        )
    try:
        built_from = (ZYRE_WORKER.parents[1] / ".worker-from").read_text().strip()
    except OSError:
        built_from = ""
    if built_from != hashlib.sha256(ZYRE_WORKER_SOURCE.read_bytes()).hexdigest():
        return (
            f"{ZYRE_WORKER} was built from another {ZYRE_WORKER_SOURCE.name} than this "
            "checkout's (run scripts/build-zyre.sh)"
        )
    return None


# ------------------------------------------------------------------ results


@dataclass
class Row:
    """One measure of one scenario: values per implementation."""

    scenario: str
    measure: str
    fmt: str = "{:,.0f}"
    target: str = ""
    values: dict[str, list[float]] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)

    def add(self, impl: str, value: float) -> None:
        self.values.setdefault(impl, []).append(value)

    def median(self, impl: str) -> float | None:
        values = self.values.get(impl)
        return statistics.median(values) if values else None

    def cell(self, impl: str) -> str:
        values = self.values.get(impl)
        note = self.notes.get(impl, "")
        if not values:
            return note or "–"
        text = self.fmt.format(statistics.median(values))
        if len(values) > 1 and min(values) != max(values):
            text += f" ({self.fmt.format(min(values))}–{self.fmt.format(max(values))})"
        return f"{text} {note}".strip()

    def ratio(self, other: str) -> str:
        """trizre's median over ``other``'s, as a ratio (empty if either is missing)."""
        mine, theirs = self.median("trizre"), self.median(other)
        if mine is None or theirs is None or theirs == 0:
            return ""
        return f"{mine / theirs:.2f}×"


class Results:
    def __init__(self) -> None:
        self.rows: dict[tuple[str, str], Row] = {}
        self.notes: list[str] = []
        self.errors: list[str] = []

    def row(self, scenario: str, measure: str, fmt: str = "{:,.0f}", target: str = "") -> Row:
        key = (scenario, measure)
        if key not in self.rows:
            self.rows[key] = Row(scenario, measure, fmt, target)
        return self.rows[key]

    def get(self, scenario: str, measure: str) -> Row | None:
        return self.rows.get((scenario, measure))

    def table(self) -> str:
        header = (
            "| scenario | measure | trizre | zyre (C) | pyre | raw pyzmq "
            "| trizre/zyre | trizre/pyre | trizre/raw | target |"
        )
        lines = [header, "|---|---|---|---|---|---|---|---|---|---|"]
        for row in self.rows.values():
            cells = [row.cell(impl) for impl in ("trizre", "zyre", "pyre", "raw")]
            ratios = [row.ratio(impl) for impl in ("zyre", "pyre", "raw")]
            lines.append(
                f"| {row.scenario} | {row.measure} | {' | '.join(cells)} "
                f"| {' | '.join(ratios)} | {row.target} |"
            )
        return "\n".join(lines)

    def to_json(self) -> list[dict[str, Any]]:
        return [asdict(row) for row in self.rows.values()]


# ------------------------------------------------------------------ workers


@dataclass(frozen=True)
class Site:
    """Where workers run: side "a" and side "b" of a namespace pair, or loopback."""

    a: Namespace | None
    b: Namespace | None

    @property
    def netns(self) -> bool:
        return self.a is not None

    def namespace(self, side: str) -> Namespace | None:
        return self.a if side == "a" else self.b

    def interface(self, side: str) -> str:
        ns = self.namespace(side)
        return ns.interface if ns else "lo"  # netns: the veth end inside the namespace

    def address(self, side: str) -> str:
        ns = self.namespace(side)
        return ns.address if ns else "127.0.0.1"  # netns: the namespace's veth address


def speed_note(probes: list[float]) -> str:
    """The report's words on the machine's speed over the run, from :func:`speed_probe`."""
    if not probes:
        return ""
    low, high = min(probes), max(probes)
    note = (
        f"; a fixed Python loop took {low:.1f}–{high:.1f} ms over {len(probes)} experiments "
        f"(the machine's speed moved {high / low:.2f}×"
    )
    if high > 1.2 * low:
        note += ": figures between runs are noisy; ratios are of runs made side by side"
    return note + ")"


def speed_probe() -> float:
    """Milliseconds of CPU a fixed pure-Python loop takes now: the machine's speed.

    Taken before every experiment and reported as its spread: on a shared
    VM the same loop has taken 261 to 531 ms within minutes, and a ratio of
    two runs means little when the spread is that wide.
    """
    start = time.thread_time()
    total = 0
    for i in range(200_000):
        total += i
    return (time.thread_time() - start) * 1e3


class Bench:
    def __init__(self, site: Site, sizes: Sizes, repeat: int, results: Results) -> None:
        self.site = site
        self.sizes = sizes
        self.repeat = repeat
        self.results = results
        # Every experiment gets its own beacon port, so no two ever hear each
        # other.  Inside namespaces ports are private; on loopback pick a
        # random range to stay clear of anybody else's nodes.
        base = 20000 if site.netns else random.randrange(30000, 60000, 1000)
        self._ports = itertools.count(base)
        self.impls: tuple[str, ...] = ZRE if site.netns else ("trizre",)
        if site.netns:
            if (why := zyre_worker_unavailable()) is None:
                self.impls += ("zyre",)
            else:
                print(f"warning: zyre skipped: {why}", file=sys.stderr)
                results.notes.append(f"zyre skipped: {why}")
        self.footprint_largest: int | None = None
        self.trizre_args: list[str] = []  # more flags for trizre's workers (bench_lowlat.py)
        self.detail = False  # --detail: the fan-out's split by side (measurement only)
        self.probes: list[float] = []  # speed_probe() before each experiment

    def spawn(
        self,
        impl: str,
        side: str,
        name: str,
        *,
        port: int,
        nodes: int = 1,
        group: str | None = None,
        expect_peers: int = 0,
        expect_group: str | None = None,
        echo: bool = False,
        timers: tuple[float, float] | None = None,
        beacons_refresh: bool = False,
        nofile: int = 0,
        connect: str | None = None,
    ) -> Agent:
        if impl == "zyre":
            argv = [str(ZYRE_WORKER), "--name", name]
        else:
            argv = [sys.executable, "-u", str(WORKER), "--impl", impl, "--name", name]
        argv += ["--nodes", str(nodes), "--port", str(port), "--expect-peers", str(expect_peers)]
        argv += ["--interface", self.site.interface(side)]
        if impl == "raw" and connect is None:
            argv += ["--address", self.site.address(side)]
        if connect:
            argv += ["--connect", connect]
        if group:
            argv += ["--group", group]
        if expect_group:
            argv += ["--expect-group", expect_group]
        if echo:
            argv.append("--echo")
        if timers:
            argv += ["--evasive", str(timers[0]), "--expired", str(timers[1])]
        if beacons_refresh:
            argv.append("--beacons-refresh")
        if nofile:
            argv += ["--nofile", str(nofile)]
        if impl == "trizre":
            argv += self.trizre_args
        ns = self.site.namespace(side)
        return Agent(argv, namespace=ns, label=f"{impl} {name} on {side}")

    def port(self) -> int:
        return next(self._ports)

    def attempt(self, what: str, run: Callable[[], None]) -> None:
        """Run one experiment; record (not raise) a failure, and go on."""
        self.probes.append(speed_probe())
        try:
            run()
        except Exception as exc:
            message = f"{what}: {type(exc).__name__}: {exc}"
            self.results.errors.append(message)
            print(f"error: {message}", file=sys.stderr)
            if not isinstance(exc, AssertionError):
                traceback.print_exc()

    @contextlib.contextmanager
    def workers(self) -> Iterator[list[Agent]]:
        """A list to put agents in; all are stopped on the way out."""
        agents: list[Agent] = []
        try:
            yield agents
        finally:
            for agent in agents:
                agent.stop(timeout=10)

    # ---------------------------------------------------------- scenarios

    def discovery(self) -> None:
        rows = (
            self.results.row("discovery", "B starts → A sees Enter(B), ms", "{:.1f}", "≤ pyre"),
            self.results.row("discovery", "B starts → B sees Enter(A), ms", "{:.1f}", "≤ pyre"),
        )
        for _ in range(self.repeat):
            for impl in self.impls:
                self.attempt(f"discovery/{impl}", lambda impl=impl: self._discovery(impl, rows))

    def _discovery(self, impl: str, rows: tuple[Row, Row]) -> None:
        port = self.port()
        with self.workers() as agents:
            a = self.spawn(impl, "a", "A", port=port, expect_peers=1)
            agents.append(a)
            a.started(timeout=30)
            b = self.spawn(impl, "b", "B", port=port, expect_peers=1)
            agents.append(b)
            t0 = b.started(timeout=30)["t0"]
            rows[0].add(impl, (a.expect_event("mesh", timeout=10)["t"] - t0) * 1e3)
            rows[1].add(impl, (b.expect_event("mesh", timeout=10)["t"] - t0) * 1e3)

    def _pair(self, impl: str, agents: list[Agent]) -> tuple[Agent, Agent]:
        """A sender/initiator on side a, an echoing receiver on side b, linked."""
        port = self.port()
        if impl == "raw":
            b = self.spawn("raw", "b", "B", port=port, echo=True)
            agents.append(b)
            endpoint = b.started(timeout=30)["endpoint"]
            a = self.spawn("raw", "a", "A", port=port, connect=endpoint)
            agents.append(a)
        else:
            b = self.spawn(impl, "b", "B", port=port, expect_peers=1, echo=True)
            agents.append(b)
            a = self.spawn(impl, "a", "A", port=port, expect_peers=1)
            agents.append(a)
        a.expect_event("mesh", timeout=30)
        b.expect_event("mesh", timeout=30)
        return a, b

    def pingpong_and_flood(self, pingpong: bool, flood: bool) -> None:
        s = self.sizes
        if pingpong:
            rate = self.results.row("pingpong", "round trips/s", target="≥ 1.1× zyre, ≥ 0.7× raw")
            p50 = self.results.row("pingpong", "p50 round trip, µs")
            p99 = self.results.row("pingpong", "p99 round trip, µs")
            rt_cpu = self.results.row("pingpong", "CPU per round trip, both processes, µs")
        if flood:
            label = f"flood {s.flood:,}"
            received = self.results.row(label, "received msg/s", target="≥ 1.0× zyre, ≥ 0.8× raw")
            lost = self.results.row(label, "lost", target="0")
            reordered = self.results.row(label, "reordered", target="0")
            cpu = self.results.row(label, "CPU per message, both processes, µs", "{:.1f}")
            nowait = self.results.row(
                label, "received msg/s, sender on whisper_nowait", target="≥ 1.0× zyre, ≥ 0.8× raw"
            )
            nowait_cpu = self.results.row(
                label, "CPU per message, sender on whisper_nowait, µs", "{:.1f}"
            )
            nowait_lost = self.results.row(label, "lost, sender on whisper_nowait", target="0")
            # raw pyzmq sends one frame a message; a WHISPER is two (header,
            # content), received as three: the same work is this ceiling.
            same_frames = self.results.row(
                label, "received msg/s, raw sending a WHISPER's two frames", target="≥ 0.8× raw"
            )
        for _ in range(self.repeat):
            for impl in (*self.impls, "raw"):

                def run(impl: str = impl) -> None:
                    with self.workers() as agents:
                        a, b = self._pair(impl, agents)
                        if pingpong:
                            b.send({"cmd": "status"})
                            echo_cpu = b.expect_event("status", timeout=10)["cpu"]
                            a.send({"cmd": "pingpong", "n": s.round_trips, "size": s.payload})
                            result = a.expect_event("pingpong", timeout=30 + s.round_trips / 500)
                            b.send({"cmd": "status"})
                            echo_cpu = b.expect_event("status", timeout=10)["cpu"] - echo_cpu
                            rate.add(impl, result["rate"])
                            p50.add(impl, result["p50_us"])
                            p99.add(impl, result["p99_us"])
                            used = result["cpu"] - result["cpu0"] + echo_cpu
                            rt_cpu.add(impl, used / s.round_trips * 1e6)
                        if flood:
                            got = self._one_way(a, b, s.flood, s.payload, slow=False)
                            received.add(impl, got["rate"])
                            lost.add(impl, got["lost"])
                            reordered.add(impl, got["reordered"])
                            cpu.add(impl, got["cpu_us"])
                            if impl == "raw":
                                got = self._one_way(
                                    a, b, s.flood, s.payload, slow=False, whisper_frames=True
                                )
                                same_frames.add(impl, got["rate"])
                            if impl == "trizre":
                                got = self._one_way(
                                    a, b, s.flood, s.payload, slow=False, nowait=True
                                )
                                nowait.add(impl, got["rate"])
                                nowait_cpu.add(impl, got["cpu_us"])
                                nowait_lost.add(impl, got["lost"])

                self.attempt(f"pingpong/flood/{impl}", run)
        if flood:
            if "trizre" in received.values:
                same_frames.values["trizre"] = received.values["trizre"]
                same_frames.notes["trizre"] = "(as above)"
            for impl in ("zyre", "pyre", "raw"):  # the same runs, for the ratios
                for row, source in ((nowait, received), (nowait_cpu, cpu)):
                    if impl in source.values:
                        row.values[impl] = source.values[impl]
                        row.notes[impl] = "(as above)"

    def _one_way(
        self,
        a: Agent,
        b: Agent,
        n: int,
        size: int,
        *,
        slow: bool,
        nowait: bool = False,
        whisper_frames: bool = False,
    ) -> dict[str, float]:
        """b counts while a whispers n messages; rate is from a's first send to b's last."""
        b.send({"cmd": "count", "n": n, "slow": slow, "stall": self.sizes.stall})
        counting = b.expect_event("counting", timeout=10)
        a.send(
            {
                "cmd": "flood",
                "n": n,
                "size": size,
                "nowait": nowait,
                "whisper_frames": whisper_frames,
            }
        )
        sent = a.expect_event("sent", timeout=60 + n / 1000)
        counted = b.expect_event("counted", timeout=60 + n / 1000)
        report = counted["nodes"][0]
        elapsed = report["last"] - sent["first"]
        used = sent["cpu"] - sent["cpu0"] + counted["cpu"] - counting["cpu"]
        return {
            "cpu_us": used / n * 1e6,
            "received": report["received"],
            "lost": report["lost"],
            "reordered": report["reordered"],
            "elapsed": elapsed,
            "rate": report["received"] / elapsed if report["received"] else 0.0,
        }

    def burst(self) -> None:
        s = self.sizes
        label = f"burst {s.burst // 1000}k × {s.burst_size // 1024} kB, slow reader"
        delivered = self.results.row(label, "delivered")
        lost = self.results.row(label, "lost", target="0")
        seconds = self.results.row(label, "time to deliver all, s", "{:.2f}")
        for _ in range(self.repeat):
            for impl in self.impls:

                def run(impl: str = impl) -> None:
                    with self.workers() as agents:
                        a, b = self._pair(impl, agents)
                        got = self._one_way(a, b, s.burst, s.burst_size, slow=True)
                        delivered.add(impl, got["received"])
                        lost.add(impl, got["lost"])
                        if not got["lost"]:
                            seconds.add(impl, got["elapsed"])

                self.attempt(f"burst/{impl}", run)
        for impl, values in lost.values.items():
            if losses := sum(1 for value in values if value):
                # Only runs that delivered everything have a time to deliver all.
                seconds.notes[impl] = f"[{losses} of {len(values)} runs lost messages]"

    def fanout(self) -> None:
        for k in self.sizes.fanout_ks:
            for layout in ("processes", "nodes in 1 process"):
                label = f"SHOUT to {k} ({layout})"
                rate = self.results.row(label, "deliveries/s")
                lost = self.results.row(label, "lost", target="0")
                cpu = self.results.row(label, "CPU per delivery, all processes, µs", "{:.2f}")
                # raw pyzmq: a SHOUT's frames from plain sockets, no Trio and
                # no ZRE state; the ceiling for any Python peer on pyzmq.
                # The implementations take turns, a run each, as in the
                # pingpong: on a machine whose speed drifts over minutes
                # (a shared VM) a ratio compares runs made side by side.
                for _ in range(self.repeat):
                    for impl in (*self.impls, "raw"):
                        self.attempt(
                            f"fanout/{k}/{layout}/{impl}",
                            lambda impl=impl, k=k, layout=layout, rate=rate, lost=lost, cpu=cpu: (
                                self._fanout(impl, k, layout == "processes", rate, lost, cpu)
                            ),
                        )

    def _fanout(self, impl: str, k: int, processes: bool, rate: Row, lost: Row, cpu: Row) -> None:
        """One run, with K receivers and a sender started for it (a working mesh each time).

        CPU, over the deliveries: the sender's from its first SHOUT and
        each receiving process's from when it started counting, until all
        arrived (a loaded machine moves it much less than the rate).
        """
        shouts = max(self.sizes.fanout_deliveries // k, 1)
        label = rate.scenario
        port = self.port()
        with self.workers() as agents:
            common = {"port": port, "group": GROUP, "expect_peers": k}
            if processes:
                receivers = [self.spawn(impl, "b", f"R{i}", **common) for i in range(k)]
            else:
                receivers = [self.spawn(impl, "b", "R", nodes=k, **common)]
            agents.extend(receivers)
            # raw pyzmq has no discovery: its sender connects a DEALER
            # to each receiving socket it is told of.
            connect = None
            if impl == "raw":
                connect = ",".join(e for r in receivers for e in r.started(timeout=30)["endpoints"])
            sender = self.spawn(
                impl, "a", "S", port=port, expect_peers=k, expect_group=GROUP, connect=connect
            )
            agents.append(sender)
            for agent in agents:
                agent.expect_event("mesh", timeout=60)
            count = {"cmd": "count", "n": shouts, "stall": self.sizes.stall}
            if impl == "raw":
                count["frames"] = True  # the ceiling: pyzmq's cheapest receive
            for receiver in receivers:
                receiver.send(count)
            used = 0.0
            for receiver in receivers:
                used -= receiver.expect_event("counting", timeout=10)["cpu"]
            if self.detail:
                pids = [a.started()["pid"] for a in (sender, *receivers)]
                sched0 = [_schedstat(pid) for pid in pids]
                wall0 = time.monotonic()
            sender.send({"cmd": "shout", "group": GROUP, "n": shouts, "size": 100})
            sent = sender.expect_event("sent", timeout=120)
            first = sent["first"]
            reports = []
            receivers_used = used
            details: dict[str, float] = {}
            for receiver in receivers:
                counted = receiver.expect_event("counted", timeout=120)
                reports += counted["nodes"]
                used += counted["cpu"]
                receivers_used += counted["cpu"]
                for key, value in counted.get("detail", {}).items():
                    # Counts add up; shares are averaged over the receivers.
                    share = 1 / len(receivers) if key.startswith("share") else 1
                    details[key] = details.get(key, 0.0) + value * share
            # Asked once all arrived: zyre's actor thread (and any
            # sender's libzmq I/O thread) works on after "sent".
            sender.send({"cmd": "status"})
            status = sender.expect_event("status", timeout=10)
            used += status["cpu"] - sent["cpu0"]
            total = sum(r["received"] for r in reports)
            last = max(r["last"] for r in reports)
            rate.add(impl, total / (last - first) if total else 0.0)
            lost.add(impl, k * shouts - total)
            if total:
                cpu.add(impl, used / total * 1e6)
            if self.detail and total:
                wall = time.monotonic() - wall0
                sched1 = [_schedstat(pid) for pid in pids]
                self._sched_rows(label, impl, sched0, sched1, wall, total)
                per = 1e6 / total
                self.results.row(label, "sender CPU per delivery, µs", "{:.2f}").add(
                    impl, (status["cpu"] - sent["cpu0"]) * per
                )
                self.results.row(label, "receivers' CPU per delivery, µs", "{:.2f}").add(
                    impl, receivers_used * per
                )
                if "detail" in status:
                    self._detail_rows(label, impl, "sender", status["detail"], total)
                if details:
                    self._detail_rows(label, impl, "receivers", details, total)

    def _sched_rows(
        self,
        label: str,
        impl: str,
        before: list[tuple[int, ...]],
        after: list[tuple[int, ...]],
        wall: float,
        total: int,
    ) -> None:
        """--detail: the kernel's view of the sender and the receivers over one run.

        Per process (all threads), from /proc/PID/task/*/schedstat and
        status: time on a CPU, time runnable but waiting for one (the run
        queue: descheduled), voluntary context switches (a thread went to
        sleep: a wake-up each), preemptions and moves from one CPU to
        another (which leave a thread's cache behind) per 1000 deliveries.
        """
        rows = self.results.row
        for side, pair in (
            ("sender", [(before[0], after[0])]),
            ("receivers", list(zip(before[1:], after[1:], strict=True))),
        ):
            for who, at in (("", 0), (" main thread", 5)):
                run = sum(b[at] - a[at] for a, b in pair) / 1e9
                queued = sum(b[at + 1] - a[at + 1] for a, b in pair) / 1e9
                volunt = sum(b[at + 2] - a[at + 2] for a, b in pair)
                forced = sum(b[at + 3] - a[at + 3] for a, b in pair)
                moved = sum(b[at + 4] - a[at + 4] for a, b in pair)
                name = f"{side}{who}"
                rows(label, f"{name}: share of the run on a CPU", "{:.2f}").add(impl, run / wall)
                rows(label, f"{name}: share of the run waiting for a CPU", "{:.2f}").add(
                    impl, queued / wall
                )
                rows(label, f"{name}: CPU per delivery, µs", "{:.2f}").add(impl, run * 1e6 / total)
                rows(label, f"{name}: sleeps per 1000 deliveries", "{:.1f}").add(
                    impl, volunt * 1000 / total
                )
                rows(label, f"{name}: preemptions per 1000 deliveries", "{:.1f}").add(
                    impl, forced * 1000 / total
                )
                rows(label, f"{name}: moves between CPUs per 1000 deliveries", "{:.1f}").add(
                    impl, moved * 1000 / total
                )

    def _detail_rows(
        self, label: str, impl: str, side: str, detail: dict[str, float], total: int
    ) -> None:
        """--detail, trizre's workers: counts from inside the process (see zre_worker.py)."""
        for key, value in detail.items():
            if key.endswith("_per_k"):
                name = key.removesuffix("_per_k") + " per 1000 deliveries"
                self.results.row(label, f"{side}: {name}", "{:.1f}").add(impl, value * 1000 / total)
            else:
                self.results.row(label, f"{side}: {key}", "{:.2f}").add(impl, value)

    def death(self) -> None:
        s = self.sizes
        default = self.results.row(
            "peer death (kill -9)", "→ Exit, s, default timeouts", "{:.1f}", "(bounded runs)"
        )
        short = self.results.row(
            "peer death (kill -9)", "→ Exit, s, evasive 0.5 s / expired 2 s", "{:.2f}"
        )
        runs = min(self.repeat, s.death_default_runs)
        default.notes["trizre"] = f"[5/30 s, {runs} run{'s' * (runs > 1)}]"
        if "zyre" in self.impls:
            default.notes["zyre"] = f"[5/30 s, {runs} run{'s' * (runs > 1)}]"
        if "pyre" in self.impls:
            default.notes["pyre"] = f"[10/30 s, {runs} run{'s' * (runs > 1)}]"
            short.notes["pyre"] = "n/a: pyre's timeouts cannot be set"
        # The default runs wait ~30 s on a timer: run them all at once, and
        # the short ones beside them (a timer does not notice the company).
        jobs: list[tuple[str, str, tuple[float, float] | None, Row]] = []
        for _ in range(runs):
            jobs += [(impl, f"death/default/{impl}", None, default) for impl in self.impls]
        settable = [impl for impl in self.impls if impl != "pyre"]
        for _ in range(self.repeat):
            jobs += [(impl, f"death/short/{impl}", (0.5, 2.0), short) for impl in settable]
        with concurrent.futures.ThreadPoolExecutor(max_workers=len(self.impls) * runs + 1) as pool:
            futures = []
            for impl, what, timers, row in jobs[: len(self.impls) * runs]:
                futures.append(pool.submit(self._death_guarded, impl, what, timers, row))
            shorts = jobs[len(self.impls) * runs :]

            def short_runs() -> None:
                for impl, what, timers, row in shorts:
                    self._death_guarded(impl, what, timers, row)

            futures.append(pool.submit(short_runs))
            for future in futures:
                future.result()

    def _death_guarded(
        self, impl: str, what: str, timers: tuple[float, float] | None, row: Row
    ) -> None:
        self.attempt(what, lambda: self._death(impl, timers, row))

    def _death(self, impl: str, timers: tuple[float, float] | None, row: Row) -> None:
        port = self.port()
        bound = self.sizes.death_bound if timers is None else 15.0
        with self.workers() as agents:
            a = self.spawn(impl, "a", "A", port=port, expect_peers=1, timers=timers)
            agents.append(a)
            b = self.spawn(impl, "b", "B", port=port, expect_peers=1, timers=timers)
            agents.append(b)
            a.expect_event("mesh", timeout=30)
            b.expect_event("mesh", timeout=30)
            time.sleep(0.2)
            killed = time.monotonic()
            b.proc.kill()  # `ip netns exec` execs: this is the worker itself
            try:
                exit_event = a.expect_event("exit", timeout=bound)
            except AssertionError:
                # Bounded on purpose: say so rather than wait for ever.
                row.notes[impl] = f"no Exit within {bound:g} s (bound)"
                return
            row.add(impl, exit_event["t"] - killed)

    def footprint(self) -> None:
        s = self.sizes
        budget = _descriptor_budget()
        plans: list[tuple[int, str, bool]] = []
        wanted_by_impl = [("trizre", n) for n in s.footprint_nodes]
        for other in ("zyre", "pyre"):
            if other in self.impls:
                wanted_by_impl += [(other, n) for n in s.footprint_pyre_nodes]
        for impl, wanted in sorted(wanted_by_impl, key=lambda plan: (plan[1], plan[0] != "trizre")):
            n = fitting_mesh(wanted, budget, impl)
            if n != wanted:
                self.results.notes.append(
                    f"footprint: {wanted} {impl} nodes in one process need "
                    f"~{_mesh_fds(wanted, impl):,} file descriptors, but RLIMIT_NOFILE's hard "
                    f"limit here is {budget:,} (raising it needs CAP_SYS_RESOURCE, which this "
                    f"root lacks): measured {n} nodes instead (the largest multiple of 5 that fits)"
                )
            if impl == "trizre":
                plans += [(n, "trizre", False), (n, "trizre", True)]
            else:
                plans.append((n, impl, False))
        self.footprint_largest = max(n for n, impl, _ in plans if impl == "trizre")
        for n, impl, refresh in plans:
            label = f"{n} node{'s' * (n > 1)} in 1 process"
            rows = {
                "rss": self.results.row(
                    label, "RSS, MB", "{:.1f}", "≤ 60 MB (for 100)" if n >= 50 else ""
                ),
                "threads": self.results.row(label, "threads"),
                "fds": self.results.row(label, "file descriptors"),
                "cpu": self.results.row(
                    label, "idle CPU, % of a core", "{:.2f}", "≤ 2 % (for 100)" if n >= 50 else ""
                ),
                "cpu_refresh": self.results.row(
                    label, "idle CPU, %, trizre beacons_refresh=True", "{:.2f}"
                ),
                "mesh": self.results.row(label, "time to full mesh, s", "{:.2f}"),
            }
            for _ in range(s.footprint_runs):
                self.attempt(
                    f"footprint/{n}/{impl}{'/refresh' if refresh else ''}",
                    lambda n=n, impl=impl, refresh=refresh, rows=rows: self._footprint(
                        impl, n, refresh, rows
                    ),
                )

    def _footprint(self, impl: str, n: int, refresh: bool, rows: dict[str, Row]) -> None:
        s = self.sizes
        port = self.port()
        with self.workers() as agents:
            agent = self.spawn(
                impl,
                "a",
                "N",
                port=port,
                nodes=n,
                expect_peers=n - 1,
                beacons_refresh=refresh,
                nofile=NOFILE,
            )
            agents.append(agent)
            started = agent.started(timeout=60 + n)
            try:
                mesh = agent.expect_event("mesh", timeout=s.mesh_bound)
            except AssertionError:
                agent.send({"cmd": "status"})
                seen = sum(agent.expect_event("status", timeout=30)["peers"])
                note = f"no full mesh in {s.mesh_bound:g} s ({seen:,}/{n * (n - 1):,} links)"
                rows["mesh"].notes[impl] = note
                self.results.notes.append(f"footprint: {impl} with {n} nodes: {note}; skipped")
                return
            if not refresh:
                rows["mesh"].add(impl, mesh["t"] - started["t0"])
            time.sleep(s.settle)
            pid = agent.proc.pid
            if not refresh:
                status = _proc_status(pid)
                rows["rss"].add(impl, status["VmRSS"] / 1024)
                rows["threads"].add(impl, status["Threads"])
                rows["fds"].add(impl, len(os.listdir(f"/proc/{pid}/fd")))
            before, t_before = _cpu_seconds(pid), time.monotonic()
            time.sleep(s.idle_window)
            used = _cpu_seconds(pid) - before
            percent = 100 * used / (time.monotonic() - t_before)
            rows["cpu_refresh" if refresh else "cpu"].add(impl, percent)
            if not refresh and impl in ("pyre", "zyre"):
                rows["cpu_refresh"].notes[impl] = f"(always: {impl}'s rule)"


def _mesh_fds(n: int, impl: str = "pyre") -> int:
    """Descriptors one process needs for n nodes in full mesh.

    pyre (measured: ~3 per link): each of the n(n-1) links holds a DEALER
    (a TCP socket and libzmq's mailbox eventfd) and an accepted connection
    at the peer's ROUTER, plus ~14 per node for its actor pipes and
    per-node zmq contexts; zyre's nodes link the same way.  trizre links
    the nodes of one process in memory: its ROUTER's listening socket and
    mailbox per node.
    """
    if impl == "trizre":
        return 3 * n + 100
    return 3 * n * (n - 1) + 16 * n + 100


def fitting_mesh(wanted: int, budget: int, impl: str = "pyre") -> int:
    """``wanted``, or the largest multiple of 5 whose mesh fits in ``budget`` descriptors."""
    if _mesh_fds(wanted, impl) <= 0.95 * budget:
        return wanted
    n = wanted
    while n > 5 and _mesh_fds(n, impl) > 0.95 * budget:
        n -= 5
    return n


def _descriptor_budget() -> int:
    """Raise our RLIMIT_NOFILE to NOFILE if we may (workers inherit it); the hard limit."""
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (NOFILE, NOFILE))
        return NOFILE
    return hard


def _proc_status(pid: int) -> dict[str, int]:
    out = {}
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "Threads"):
                out[key] = int(value.split()[0])  # VmRSS in kB
    return out


def _schedstat(pid: int) -> tuple[int, ...]:
    """ns on a CPU, ns waiting for one, voluntary and forced switches, moves between CPUs.

    Five over all the process's threads, then the same five of its main
    thread.  The moves (``se.nr_migrations``) need a kernel that shows
    /proc/PID/task/TID/sched; elsewhere they count 0.
    """
    total = [0, 0, 0, 0, 0]
    main = [0, 0, 0, 0, 0]
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/schedstat") as stat:
                on, waiting, _slices = stat.read().split()
            counts = [int(on), int(waiting), 0, 0, 0]
            with open(f"/proc/{pid}/task/{task}/status") as status:
                for line in status:
                    if line.startswith("voluntary_ctxt_switches"):
                        counts[2] = int(line.split()[1])
                    elif line.startswith("nonvoluntary_ctxt_switches"):
                        counts[3] = int(line.split()[1])
            with (
                contextlib.suppress(FileNotFoundError),
                open(f"/proc/{pid}/task/{task}/sched") as sched,
            ):
                for line in sched:
                    if line.startswith("se.nr_migrations"):
                        counts[4] = int(line.split(":")[1])
        except FileNotFoundError:
            continue  # a thread that ended
        total = [t + c for t, c in zip(total, counts, strict=True)]
        if int(task) == pid:
            main = counts
    return (*total, *main)


def _cpu_seconds(pid: int) -> float:
    """utime + stime of a process (all its threads), from /proc/PID/stat."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# ------------------------------------------------------------------ targets


def check_targets(
    results: Results, sizes: Sizes, netns_ok: bool, footprint_largest: int | None
) -> list[dict[str, Any]]:
    """Compare medians with the goals of the issue: informative, never a failure."""
    checks: list[dict[str, Any]] = []

    def ratio(scenario: str, measure: str, other: str) -> float | None:
        row = results.get(scenario, measure)
        if row is None:
            return None
        mine, theirs = row.median("trizre"), row.median(other)
        return None if mine is None or not theirs else mine / theirs

    def check(goal: str, value: float | None, ok: Callable[[float], bool], shown: str) -> None:
        if value is None:
            checks.append({"target": goal, "status": "not measured", "value": None})
        else:
            status = "met" if ok(value) else "MISSED"
            checks.append({"target": goal, "status": status, "value": shown.format(value)})

    flood = f"flood {sizes.flood:,}"
    if netns_ok:
        check(
            "flood ≥ 1.0× zyre (C)",
            ratio(flood, "received msg/s", "zyre"),
            lambda v: v >= 1.0,
            "{:.2f}×",
        )
        check(
            "round trips ≥ 1.1× zyre (C)",
            ratio("pingpong", "round trips/s", "zyre"),
            lambda v: v >= 1.1,
            "{:.2f}×",
        )
        check(
            "flood ≥ 4× pyre",
            ratio(flood, "received msg/s", "pyre"),
            lambda v: v >= 4,
            "{:.2f}×",
        )
    check(
        "flood ≥ 0.8× raw pyzmq (one frame a message)",
        ratio(flood, "received msg/s", "raw"),
        lambda v: v >= 0.8,
        "{:.2f}×",
    )
    check(
        "round trips ≥ 0.7× raw pyzmq",
        ratio("pingpong", "round trips/s", "raw"),
        lambda v: v >= 0.7,
        "{:.2f}×",
    )
    nowait = "received msg/s, sender on whisper_nowait"
    if netns_ok:
        check(
            "flood ≥ 4× pyre, sender on whisper_nowait",
            ratio(flood, nowait, "pyre"),
            lambda v: v >= 4,
            "{:.2f}×",
        )
    check(
        "flood ≥ 0.8× raw pyzmq sending the same two frames as a WHISPER",
        ratio(flood, "received msg/s, raw sending a WHISPER's two frames", "raw"),
        lambda r: r >= 0.8,
        "{:.2f}×",
    )
    check(
        "flood ≥ 0.8× raw pyzmq, sender on whisper_nowait",
        ratio(flood, nowait, "raw"),
        lambda v: v >= 0.8,
        "{:.2f}×",
    )
    if netns_ok:
        check(
            "round trips ≥ 1.3× pyre",
            ratio("pingpong", "round trips/s", "pyre"),
            lambda v: v >= 1.3,
            "{:.2f}×",
        )
        for measure in ("B starts → A sees Enter(B), ms", "B starts → B sees Enter(A), ms"):
            check(
                f"discovery no slower than pyre ({measure.split(',')[0]})",
                ratio("discovery", measure, "pyre"),
                lambda v: v <= 1.0,
                "{:.2f}× pyre's time",
            )
    lost_rows = [row for row in results.rows.values() if row.measure.startswith("lost")]
    worst = max((max(row.values.get("trizre", [0])) for row in lost_rows), default=None)
    check("0 lost in every scenario (trizre)", worst, lambda v: v == 0, "{:.0f} lost at worst")
    big = footprint_largest or max(sizes.footprint_nodes)
    label = f"{big} nodes in 1 process"
    rss = results.get(label, "RSS, MB")
    cpu = results.get(label, "idle CPU, % of a core")
    cpu_refresh = results.get(label, "idle CPU, %, trizre beacons_refresh=True")
    if max(sizes.footprint_nodes) >= 100:
        if big < 100:
            checks.append(
                {"target": "100 nodes: see the note below", "status": "not measured", "value": None}
            )
        check(
            f"{big} nodes ≤ 60 MB RSS",
            rss.median("trizre") if rss else None,
            lambda v: v <= 60,
            "{:.1f} MB",
        )
        check(
            f"{big} nodes ≤ 2 % idle CPU (default settings)",
            cpu.median("trizre") if cpu else None,
            lambda v: v <= 2,
            "{:.2f} %",
        )
        check(
            f"{big} nodes ≤ 2 % idle CPU (beacons_refresh=True)",
            cpu_refresh.median("trizre") if cpu_refresh else None,
            lambda v: v <= 2,
            "{:.2f} %",
        )
    return checks


# --------------------------------------------------------------------- main


DOCS_BEGIN = "<!-- bench_zre: latest run, written by --update-docs -->"
DOCS_END = "<!-- bench_zre: end of latest run -->"


def update_docs(path: Path, report: str) -> None:
    """Put ``report`` between the markers in ``path`` (appended if they are missing)."""
    text = path.read_text() if path.exists() else ""
    block = f"{DOCS_BEGIN}\n{report}\n{DOCS_END}"
    if DOCS_BEGIN in text and DOCS_END in text:
        head, rest = text.split(DOCS_BEGIN, 1)
        tail = rest.split(DOCS_END, 1)[1]
        text = head + block + tail
    else:
        text = text.rstrip("\n") + "\n\n## ZRE node: latest `make bench` run\n\n" + block + "\n"
    path.write_text(text)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt  # so that the namespaces are deleted on the way out


def main() -> int:
    signal.signal(signal.SIGTERM, _interrupt)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=None, help="runs per figure (default 5)")
    parser.add_argument("--quick", action="store_true", help="tiny sizes, 1 run (smoke test)")
    parser.add_argument(
        "--scenario", action="append", choices=SCENARIOS, help="run only these (repeatable)"
    )
    parser.add_argument("--json", help="also write the results to this file")
    parser.add_argument(
        "--update-docs",
        metavar="MD",
        help="replace the latest-run section of this markdown file (between the "
        f"{DOCS_BEGIN} and {DOCS_END} markers) with this run's report",
    )
    parser.add_argument(
        "--loopback",
        action="store_true",
        help="no namespaces: trizre and raw pyzmq on loopback, no pyre or zyre (the fallback)",
    )
    parser.add_argument(
        "--impl",
        action="append",
        choices=("trizre", "zyre", "pyre"),
        help="measure only these implementations (repeatable; default all available)",
    )
    parser.add_argument(
        "--fanout-k",
        action="append",
        type=int,
        help="fanout: only these group sizes (repeatable; default 2, 5, 10)",
    )
    parser.add_argument(
        "--detail",
        action="store_true",
        help="fanout: also the sender's and the receivers' CPU apart, the kernel's run-queue "
        "waits and sleeps per process, and trizre's counts from inside (waits, batches, "
        "wake-ups, garbage collections)",
    )
    parser.add_argument(
        "--trizre-send-hwm",
        type=int,
        default=0,
        help="trizre's workers open their nodes with this send_hwm (default: the node's default)",
    )
    args = parser.parse_args()
    sizes = QUICK if args.quick else DEFAULT
    if args.fanout_k:
        sizes = dataclasses.replace(sizes, fanout_ks=tuple(args.fanout_k))
    repeat = args.repeat or (1 if args.quick else 5)
    scenarios = args.scenario or list(SCENARIOS)

    load_before = os.getloadavg()
    if load_before[0] > 0.5:
        print(
            f"warning: load average {load_before[0]:.2f} (the machine is not quiet); "
            "figures will be noisy",
            file=sys.stderr,
        )
    started = time.monotonic()
    results = Results()
    reason = "--loopback given" if args.loopback else netns.netns_available()
    if reason is not None:
        print(
            f"warning: no network namespaces ({reason}): pyre and zyre are skipped, trizre and raw "
            "pyzmq run on loopback",
            file=sys.stderr,
        )
        results.notes.append(f"no network namespaces ({reason}): loopback only, no pyre or zyre")
        context: contextlib.AbstractContextManager[Any] = contextlib.nullcontext(None)
    else:
        context = netns.open_netns_pair()
    with context as pair:
        site = Site(pair.a, pair.b) if pair is not None else Site(None, None)
        bench = Bench(site, sizes, repeat, results)
        if args.impl:
            bench.impls = tuple(impl for impl in bench.impls if impl in args.impl)
        if args.detail:
            bench.detail = True
            bench.trizre_args.append("--detail")
        if args.trizre_send_hwm:
            bench.trizre_args += ["--send-hwm", str(args.trizre_send_hwm)]
        for scenario in SCENARIOS:
            if scenario not in scenarios:
                continue
            print(f"running {scenario} ...", file=sys.stderr, flush=True)
            t = time.monotonic()
            if scenario in ("pingpong", "flood"):
                if scenario == "flood" and "pingpong" in scenarios:
                    continue  # done together with pingpong, same processes
                bench.pingpong_and_flood("pingpong" in scenarios, "flood" in scenarios)
            else:
                getattr(bench, scenario)()
            print(f"  {scenario}: {time.monotonic() - t:.1f} s", file=sys.stderr, flush=True)
    elapsed = time.monotonic() - started
    load_after = os.getloadavg()
    targets = check_targets(results, sizes, reason is None, bench.footprint_largest)

    layout = (
        "two network namespaces joined by a veth pair"
        if reason is None
        else "loopback (no namespaces)"
    )
    lines = [
        f"ZRE node, {layout}, one process per namespace, {sizes.payload} B payloads "
        f"unless stated; {os.cpu_count()} cores, load {load_before[0]:.2f} before / "
        f"{load_after[0]:.2f} after; median (min–max) of {repeat} run{'s' * (repeat > 1)} "
        f"unless stated; {elapsed:.0f} s in all{speed_note(bench.probes)}",
        "",
        results.table(),
        "",
        "Targets (informative; a benchmark never fails on times):",
        "",
    ]
    for target in targets:
        value = f" ({target['value']})" if target["value"] is not None else ""
        lines.append(f"- {target['target']}: {target['status']}{value}")
    lines += [f"- note: {note}" for note in results.notes]
    report = "\n".join(lines)
    print("\n" + report)
    if args.update_docs:
        stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
        command = " ".join(["python", *sys.argv])
        update_docs(Path(args.update_docs), f"Run {stamp} with `{command}`:\n\n{report}")
    if results.errors:
        print(f"\n{len(results.errors)} experiment(s) failed:", file=sys.stderr)
        for error in results.errors:
            print(f"  {error}", file=sys.stderr)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        with open(args.json, "w") as out:
            json.dump(
                {
                    "date": datetime.datetime.now().isoformat(timespec="seconds"),
                    "command": " ".join(sys.argv),
                    "platform": platform.platform(),
                    "python": platform.python_version(),
                    "cores": os.cpu_count(),
                    "load_before": load_before,
                    "load_after": load_after,
                    "netns": reason is None,
                    "repeat": repeat,
                    "sizes": asdict(sizes),
                    "elapsed_s": elapsed,
                    "speed_probes_ms": bench.probes,
                    "rows": results.to_json(),
                    "targets": targets,
                    "notes": results.notes,
                    "errors": results.errors,
                },
                out,
                indent=2,
            )
    return 1 if results.errors else 0


if __name__ == "__main__":
    sys.exit(main())
