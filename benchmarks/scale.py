"""A big mesh under load and faults: time to mesh, memory, CPU, and the audit's verdict.

    sudo .venv/bin/python benchmarks/scale.py [--nodes 500] [--processes P]
        [--load-seconds 300] [--rate 100] [--fault-every 30] [--json FILE]

``--nodes`` nodes spread over ``--processes`` processes as evenly as can be
(``benchmarks/scale_process.py``).  Each process holds about 3 descriptors
per pair of a node of its own and a node of another process
(:func:`files_needed`); the run checks that against the hard
``RLIMIT_NOFILE`` before it starts anything, and refuses a layout that does
not fit, naming the one that would.  Without ``--processes`` it takes the
fewest processes that fit (500 nodes under a limit of 20,000: 39 processes
of 12 or 13 nodes).  All on ``lo`` of one network namespace
made for the run: nodes of one process talk in memory, nodes of different
processes over TCP.  Phases:

1. **Mesh**: every process starts at once; the time until every node sees
   every other node (``nodes - 1`` peers) is the time to mesh.
2. **Idle**: 30 s of a quiet full mesh: CPU (all processes, in cores) and
   RSS per process.
3. **Load**: clients in process 0 send ``--rate`` requests/s in all, over
   the four patterns (service workers and Freelance servers in processes 4
   and up, the Binary Star pair in 1 and 2, Titanic in 3), for
   ``--load-seconds``; every ``--fault-every`` seconds one of the server
   processes is killed (kill -9: 1/``processes`` of the mesh vanishes at
   once) and restarted 5 s later.  CPU and RSS again.
4. **Verdict**: clients stop cleanly, then everything; ``trizre audit``
   judges the traces of the nodes that took part in requests (local
   Spark), and each client's own tally must equal the audit's count.

Prints a table and, with ``--json``, writes the figures.  Exit 0 when the
mesh formed, the audit passed and the counts agree.  Needs root.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import resource
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.scale_process import BSTAR_HEARTBEAT  # noqa: E402
from benchmarks.spark_cluster import spark_env  # noqa: E402
from tests.support.netns import open_lo_namespace  # noqa: E402
from trizre.audit import _java  # noqa: E402

PROCESS = ROOT / "benchmarks" / "scale_process.py"
TICKS = os.sysconf("SC_CLK_TCK")


def spread(nodes: int, processes: int) -> list[int]:
    """Nodes per process: ``nodes`` over ``processes`` as evenly as can be, the larger first."""
    share, extra = divmod(nodes, processes)
    return [share + (index < extra) for index in range(processes)]


def files_needed(nodes: int, processes: int, *, unwatched: bool = False) -> int:
    """File descriptors the fullest process of a full mesh holds, about.

    Each link to a node of another process is a DEALER (its TCP connection
    and its mailbox's eventfd) and, at the other end, an accepted TCP
    connection: 3 per (local, remote) pair, plus a few hundred of its
    own.  Watching links (issues 25, 28) adds 2 a node, not a link: the
    monitor on its inbox and what reads it (none with ``--unwatched``).
    """
    local = -(-nodes // processes)  # the fullest process
    return 3 * local * (nodes - local) + (0 if unwatched else 2 * local) + 500


# RSS of a full mesh, measured (benchmarks/scale_curve.py, issue 28): a link
# to a node of another process, and a process of a few nodes with no peers.
KB_PER_LINK = {False: 62.0, True: 61.0}  # by unwatched (watched: one InboxWatch a node)
MB_PER_PROCESS = 45.0


MEMORY_FLOOR_MB = 1024  # a run that leaves less is stopped (Run.check_alive)


def memory_needed_mb(nodes: int, processes: int, *, unwatched: bool = False) -> float:
    """RSS of the whole mesh, about, in MB (links within a process counted free)."""
    layout = spread(nodes, processes)
    remote = sum(k * (nodes - k) for k in layout)
    return processes * MB_PER_PROCESS + remote * KB_PER_LINK[unwatched] / 1024


def available_mb() -> float:
    """MemAvailable, in MB."""
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) / 1024
    return float("inf")


def fitting_processes(
    nodes: int, limit: int, least: int = 1, *, unwatched: bool = False
) -> int | None:
    """The fewest processes (at least ``least``) whose fullest one fits ``limit`` descriptors.

    Fewer processes is cheaper (links within a process are in memory, and
    every process hears every beacon); one process needs no TCP at all,
    hence ``least``.  ``None`` when not even one node a process fits.
    """
    for processes in range(max(1, least), nodes + 1):
        if files_needed(nodes, processes, unwatched=unwatched) <= limit:
            return processes
    return None


def hard_file_limit() -> int:
    """RLIMIT_NOFILE's hard limit (unlimited counts as a very large number)."""
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    return 1 << 30 if hard == resource.RLIM_INFINITY else hard


def _raise_file_limit(
    needed: int, nodes: int = 0, least: int = 1, *, unwatched: bool = False
) -> None:
    """Raise this process's limit (children inherit it) as far as allowed, or say why not.

    When ``needed`` is over the hard limit and this process may not raise
    it, exits with a message naming the limit and (given ``nodes``) the
    fewest processes that would fit, before anything was started.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = max(needed, soft)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, max(want, hard)))
    except (ValueError, OSError):
        if needed > hard:
            fits = fitting_processes(nodes, hard, least, unwatched=unwatched) if nodes else None
            advice = (
                f"--processes {fits} fits ({max(spread(nodes, fits))} nodes in the fullest "
                f"process, about {files_needed(nodes, fits, unwatched=unwatched)} descriptors)"
                if fits is not None
                else "use fewer nodes or more processes"
            )
            raise SystemExit(
                f"scale: each process needs about {needed} file descriptors and the hard "
                f"limit is {hard}, which this process may not raise (no CAP_SYS_RESOURCE): "
                f"{advice}"
            ) from None
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / TICKS


def rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def descriptors(pid: int) -> int:
    """Open file descriptors of a process (0 once it is gone)."""
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return 0


class Run:
    """The processes of one mesh in ``namespace``; ``roles=False``: nodes only, no patterns."""

    def __init__(
        self, args: argparse.Namespace, run: Path, namespace: str, *, roles: bool = True
    ) -> None:
        self.args = args
        self.run = run
        self.namespace = namespace
        self.layout = spread(args.nodes, args.processes)
        self.roles = roles
        self.extra: list[str] = ["--unwatched"] if getattr(args, "unwatched", False) else []
        self.processes: dict[int, subprocess.Popen[bytes]] = {}
        self.lives: dict[int, int] = {}
        self.unexpected: list[str] = []

    def role(self, index: int) -> str:
        if not self.roles:
            return "none"
        return {0: "clients", 1: "bstar-primary", 2: "bstar-backup", 3: "titanic"}.get(
            index, "servers"
        )

    def wait_ready(self, index: int, limit: float = 600.0) -> None:
        deadline = time.monotonic() + limit
        while not (self.run / "ready" / str(index)).exists():
            if time.monotonic() > deadline or self.processes[index].poll() is not None:
                raise RuntimeError(f"process {index} never became ready")
            time.sleep(0.2)  # polling a file the process writes

    def start(self, index: int) -> None:
        (self.run / "ready" / str(index)).unlink(missing_ok=True)
        (self.run / "status" / f"{index}.json").unlink(missing_ok=True)
        self.lives[index] = self.lives.get(index, 0) + 1
        log = (self.run / "logs" / f"p{index}.{self.lives[index]}.log").open("wb")
        self.processes[index] = subprocess.Popen(
            ["ip", "netns", "exec", self.namespace, sys.executable, str(PROCESS), str(index),
             "--nodes", str(self.layout[index]), "--processes", str(self.args.processes),
             "--port", "5670", "--run", str(self.run), "--rate", str(self.args.rate),
             "--role", self.role(index), *self.extra],
            stdout=log, stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )  # fmt: skip

    def meshed(self) -> bool:
        want = self.args.nodes - 1
        for index in self.processes:
            try:
                status = json.loads((self.run / "status" / f"{index}.json").read_text())
            except (OSError, ValueError):
                return False
            if status["min"] < want:
                return False
        return True

    def stalls(self) -> dict[int, float]:
        """Each process's worst event-loop stall, seconds (see scale_process.report)."""
        found = {}
        for index in self.processes:
            with contextlib.suppress(OSError, ValueError, KeyError):
                status = json.loads((self.run / "status" / f"{index}.json").read_text())
                found[index] = round(float(status["stall_max"]), 2)
        return found

    def check_alive(self, down: set[int]) -> None:
        """Note processes that died; stop the run if the machine runs out of memory."""
        if available_mb() < MEMORY_FLOOR_MB:
            # Before the kernel's OOM killer picks a process, maybe not ours.
            raise MemoryError(f"under {MEMORY_FLOOR_MB} MB of memory left: the run stopped")
        for index, process in self.processes.items():
            if index not in down and process.poll() is not None:
                self.unexpected.append(f"process {index} exited with {process.returncode}")
                down.add(index)

    def cpu(self) -> float:
        return sum(cpu_seconds(p.pid) for p in self.processes.values())

    def rss(self) -> list[float]:
        return [round(rss_mb(p.pid), 1) for p in self.processes.values()]

    def descriptors(self) -> list[int]:
        return [descriptors(p.pid) for p in self.processes.values()]


def wait_mesh(run: Run, limit: float, down: set[int]) -> float | None:
    started = time.monotonic()
    while not run.meshed():
        run.check_alive(down)
        if time.monotonic() - started > limit or run.unexpected:
            return None
        time.sleep(0.5)  # polling files the processes write
    return time.monotonic() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument(
        "--processes",
        type=int,
        default=None,
        help="default: the fewest whose fullest process fits the descriptor limit",
    )
    parser.add_argument("--idle-seconds", type=float, default=30.0)
    parser.add_argument("--load-seconds", type=float, default=300.0)
    parser.add_argument("--rate", type=float, default=100.0)
    parser.add_argument("--fault-every", type=float, default=30.0)
    parser.add_argument("--mesh-limit", type=float, default=900.0)
    parser.add_argument("--out", type=Path, default=Path("scale-run"))
    parser.add_argument("--json", type=Path)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument(
        "--unwatched",
        action="store_true",
        help="nodes with watch_links=False: 3 descriptors a pair, not 4, and less memory",
    )
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("scale: needs root (a network namespace of its own)")
        return 2
    unwatched = args.unwatched
    if args.processes is None:
        args.processes = (
            fitting_processes(args.nodes, hard_file_limit(), least=5, unwatched=unwatched) or 5
        )
    if args.processes < 5 or args.nodes < 4 * args.processes:
        print("scale: --processes >= 5, and at least 4 nodes per process")
        return 2
    _raise_file_limit(
        files_needed(args.nodes, args.processes, unwatched=unwatched),
        args.nodes,
        least=5,
        unwatched=unwatched,
    )
    memory = memory_needed_mb(args.nodes, args.processes, unwatched=unwatched)
    if memory > 0.8 * available_mb():  # load and restarts grow it
        print(
            f"scale: the mesh needs about {memory / 1024:.1f} GB of RSS "
            f"({KB_PER_LINK[unwatched]:.0f} kB a link between processes, measured), over "
            f"80 % of the {available_mb() / 1024:.1f} GB available"
            + ("" if unwatched else "; --unwatched needs less")
        )
        return 2
    java = _java.find_java().path
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    rng = random.Random(seed)
    out = args.out.resolve()
    shutil.rmtree(out, ignore_errors=True)
    for sub in ("logs", "traces", "ready", "status", "counts"):
        (out / sub).mkdir(parents=True)
    namespace = f"tzs{os.getpid() % 100000}"
    results: dict[str, Any] = {
        "nodes": args.nodes,
        "processes": args.processes,
        "nodes_per_process": spread(args.nodes, args.processes),
        "descriptors_needed": files_needed(args.nodes, args.processes, unwatched=unwatched),
        "memory_needed_mb": round(memory),
        "watch_links": not unwatched,
        "rate": args.rate,
        "load_seconds": args.load_seconds,
        "seed": seed,
        "cores": os.cpu_count(),
    }
    stack = contextlib.ExitStack()
    stack.enter_context(open_lo_namespace(namespace))  # left last, after the processes
    run = Run(args, out, namespace)
    down: set[int] = set()

    def interrupted(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, interrupted)
    try:
        print(f"scale: {args.nodes} nodes in {args.processes} processes, seed {seed}", flush=True)
        for index in range(args.processes):
            run.start(index)
        mesh = wait_mesh(run, args.mesh_limit, down)
        results["time_to_mesh_s"] = None if mesh is None else round(mesh, 1)
        print(f"time to full mesh: {results['time_to_mesh_s']} s", flush=True)
        if mesh is None:
            raise RuntimeError("no full mesh: " + "; ".join(run.unexpected or ["too slow"]))
        run.wait_ready(0)  # its clients have found their servers
        # Idle.
        before, at = run.cpu(), time.monotonic()
        time.sleep(args.idle_seconds)  # measuring a quiet mesh over a fixed window
        results["idle_cpu_cores"] = round((run.cpu() - before) / (time.monotonic() - at), 3)
        results["idle_rss_mb"] = run.rss()
        results["idle_descriptors"] = run.descriptors()
        print(f"idle: {results['idle_cpu_cores']} cores, RSS MB {results['idle_rss_mb']}")
        # Load, with faults.
        run.processes[0].send_signal(signal.SIGUSR1)  # the clients: go
        at = time.monotonic()
        baseline = {p.pid: cpu_seconds(p.pid) for p in run.processes.values()}
        spent = 0.0  # CPU of the phase, killed lives included
        faults: list[str] = []
        peak = [0.0] * args.processes
        end = at + args.load_seconds
        next_fault = at + args.fault_every
        restart_at: dict[int, float] = {}
        while time.monotonic() < end:
            now = time.monotonic()
            for index, when in list(restart_at.items()):
                if now >= when:
                    run.start(index)
                    down.discard(index)
                    del restart_at[index]
            run.check_alive(down)
            if now >= next_fault:
                victim = rng.randrange(4, args.processes)
                if victim not in down:
                    pid = run.processes[victim].pid
                    spent += cpu_seconds(pid) - baseline.get(pid, 0.0)
                    run.processes[victim].kill()
                    run.processes[victim].wait()
                    down.add(victim)
                    restart_at[victim] = now + 5.0
                    faults.append(f"{now - at:6.1f} s  kill -9 process {victim}")
                    print(f"  {faults[-1]}", flush=True)
                next_fault = now + args.fault_every
            peak = [max(a, b) for a, b in zip(peak, run.rss(), strict=False)]
            time.sleep(1.0)  # the load phase's tick
        spent += sum(
            cpu_seconds(p.pid) - baseline.get(p.pid, 0.0)
            for i, p in run.processes.items()
            if i not in down
        )
        loaded = spent / (time.monotonic() - at)
        for index in list(restart_at):
            run.start(index)
            down.discard(index)
        results["loaded_cpu_cores"] = round(loaded, 3)
        results["loaded_peak_rss_mb"] = [round(x, 1) for x in peak]
        results["faults"] = faults
        remesh = wait_mesh(run, args.mesh_limit, down)
        results["remesh_after_load_s"] = None if remesh is None else round(remesh, 1)
        print(f"loaded: {results['loaded_cpu_cores']} cores, peak RSS MB {peak}")
        # Stop: clients first (they drain), then the rest.
        run.processes[0].send_signal(signal.SIGTERM)
        code = run.processes[0].wait(timeout=180)
        if code != 0:
            run.unexpected.append(f"the clients' process stopped with {code}")
        for index in range(1, args.processes):
            run.processes[index].send_signal(signal.SIGTERM)
        for index in range(1, args.processes):
            try:
                run.processes[index].wait(timeout=120)
            except subprocess.TimeoutExpired:
                run.unexpected.append(f"process {index} did not stop")
    finally:
        for process in run.processes.values():
            if process.poll() is None:
                process.kill()
                process.wait()
        stack.close()
    # Verdict.
    audit = subprocess.run(
        [sys.executable, "-m", "trizre.audit", str(out / "traces"), "--out", str(out / "report"),
         "--quiet"],
        env=spark_env(java), capture_output=True, text=True, timeout=1800, check=False,
    )  # fmt: skip
    summary = json.loads((out / "report" / "summary.json").read_text())
    by_client = summary["requests"]["by_client"]
    mismatches = []
    tallies = {}
    for path in sorted((out / "counts").glob("*.json")):
        tally = json.loads(path.read_text())
        tallies[tally["role"]] = tally
        audited = by_client.get(tally["node"], {})
        for key in ("requests", "answered", "abandoned"):
            if tally[key] != audited.get(key):
                mismatches.append(f"{tally['role']} {key}: {tally[key]} vs {audited.get(key)}")
        if audited.get("lost") or audited.get("interrupted") or tally["wrong_replies"]:
            mismatches.append(f"{tally['role']}: {audited} wrong {tally['wrong_replies']}")
    results["audit_exit_code"] = audit.returncode
    results["requests"] = {
        role: {k: t[k] for k in ("requests", "answered", "abandoned")}
        for role, t in tallies.items()
    }
    results["audit_flags"] = {
        flag: entry["count"] for flag, entry in summary["requests"]["flags"].items()
    }
    results["dual_active"] = len(summary["bstar"]["dual_active"])
    results["stall_max_s"] = stalls = run.stalls()
    failover = 2 * BSTAR_HEARTBEAT
    for index in (1, 2):  # the Binary Star pair (see Run.role)
        if stalls.get(index, 0.0) > failover and (results["dual_active"] or run.unexpected):
            print(
                f"diagnosis: process {index} (Binary Star) had its loop stalled up to "
                f"{stalls[index]:.1f} s, over the pair's {failover:.0f} s failover timeout: "
                "its partner could take over while it still served (an overloaded machine)"
            )
    results["failures"] = (
        run.unexpected
        + mismatches
        + ([] if audit.returncode == 0 else [f"audit exit code {audit.returncode}"])
    )
    if len(tallies) != 4:
        results["failures"].append(f"{4 - len(tallies)} client tallies missing")
    print(json.dumps(results, indent=1))
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")
    return 0 if not results["failures"] else 1


if __name__ == "__main__":
    sys.exit(main())
