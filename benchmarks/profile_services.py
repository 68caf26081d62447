"""Pipelined service requests with each process's CPU per request, for profilers.

Not a comparison (``bench_patterns.py`` is, beside raw pyzmq): the same
load as its "pipelined (100 in flight), N workers" case, reporting the
rate and the CPU each side spent per request: the client's (this process)
and the workers' (summed, from ``/proc/PID/stat``).  ``--profile client``
runs the client under cProfile, ``--profile worker`` the first worker
(its statistics are written when it exits, so workers are stopped by
closing their stdin rather than killed); ``--out`` names the file for
``python -m pstats``.  ``perf record -p PID`` or ``py-spy`` can attach
to the PIDs it prints instead.

    python benchmarks/profile_services.py [--workers 4] [--requests 20000] [--runs 3]
        [--profile client|worker --out FILE] [--raw]
"""

from __future__ import annotations

import argparse
import cProfile
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_patterns as bench  # the benchmark's own client and workers

TICK = os.sysconf("SC_CLK_TCK")

# The worker under cProfile, timed by CPU rather than the wall clock: a
# process that shares two cores with five others is often runnable but not
# running, and wall time would charge that to whatever it was doing.
_PROFILED_WORKER = """
import cProfile, runpy, sys, time
out, sys.argv = sys.argv[1], sys.argv[2:]  # the script and its own arguments
profiler = cProfile.Profile(time.process_time)
try:
    profiler.runcall(runpy.run_path, sys.argv[0], run_name="__main__")
finally:
    profiler.dump_stats(out)
"""


def _cpu_seconds(pid: int) -> tuple[float, float]:
    """User and system CPU of a running process, from /proc (fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) / TICK, int(fields[12]) / TICK


def _switches(pid: int) -> int:
    """Context switches of every thread of a process (libzmq's I/O threads too)."""
    total = 0
    for status in Path(f"/proc/{pid}/task").glob("*/status"):
        for line in status.read_text().splitlines():
            if "ctxt_switches:" in line:  # voluntary and nonvoluntary
                total += int(line.split()[1])
    return total


def _self_cpu() -> tuple[float, float]:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime, usage.ru_stime


def _workers_cpu(procs: list[subprocess.Popen[str]]) -> tuple[float, float]:
    times = [_cpu_seconds(proc.pid) for proc in procs]
    return sum(user for user, _ in times), sum(system for _, system in times)


def run(workers: int, count: int, profile: str | None, out: str, raw: bool) -> dict[str, float]:
    port = bench._port()
    script = str(bench.HERE)
    procs = []
    for i in range(workers):
        prefix = ["-c", _PROFILED_WORKER, out] if profile == "worker" and i == 0 else []
        role = ["--raw-worker"] if raw else ["--worker", f"w{i}", str(port)]
        procs.append(
            subprocess.Popen(
                [sys.executable, *prefix, script, *role],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
        )
    try:
        # A trizre worker says "ready", a raw one its endpoint.
        said = [proc.stdout.readline().strip() for proc in procs if proc.stdout is not None]
        assert raw or said == ["ready"] * workers
        print("workers:", " ".join(str(p.pid) for p in procs), "client:", os.getpid())
        workers_cpu0 = _workers_cpu(procs)
        switches0 = sum(_switches(p.pid) for p in procs), _switches(os.getpid())
        cpu0, start = _self_cpu(), time.perf_counter()
        profiler = cProfile.Profile(time.process_time) if profile == "client" else None
        if profiler is not None:
            profiler.enable()
        # The rate is the benchmark's own measure (wait for the workers excluded).
        if raw:
            rate = trio.run(bench._raw_run, said, count, bench.WINDOW)
        else:
            rate = trio.run(bench._trizre_run, port, workers, count, bench.WINDOW)
        if profiler is not None:
            profiler.disable()
            profiler.dump_stats(out)
        elapsed = time.perf_counter() - start
        client_cpu = [after - before for after, before in zip(_self_cpu(), cpu0, strict=True)]
        workers_cpu = [
            after - before for after, before in zip(_workers_cpu(procs), workers_cpu0, strict=True)
        ]
        workers_switches = sum(_switches(p.pid) for p in procs) - switches0[0]
        client_switches = _switches(os.getpid()) - switches0[1]
    finally:
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.close()  # the worker leaves its block, cProfile writes its file
        for proc in procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    return {
        "rate": rate,
        # Per request, over the whole client run (startup included: a few ms).
        "client_us": sum(client_cpu) / count * 1e6,
        "client_sys_us": client_cpu[1] / count * 1e6,
        "workers_us": sum(workers_cpu) / count * 1e6,
        "workers_sys_us": workers_cpu[1] / count * 1e6,
        "elapsed": elapsed,
        "client_switches": client_switches / count,
        "workers_switches": workers_switches / count,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--profile", choices=("client", "worker"))
    parser.add_argument("--out", default="services.prof")
    parser.add_argument("--raw", action="store_true", help="raw pyzmq's echo instead, for scale")
    args = parser.parse_args()
    print(f"load {os.getloadavg()[0]:.2f}, {os.cpu_count()} cores")
    for _ in range(args.runs):
        r = run(args.workers, args.requests, args.profile, args.out, args.raw)
        print(
            f"{r['rate']:,.0f} requests/s; CPU per request: "
            f"client {r['client_us']:.0f} us ({r['client_sys_us']:.0f} system), "
            f"workers {r['workers_us']:.0f} us ({r['workers_sys_us']:.0f} system), "
            f"total {r['client_us'] + r['workers_us']:.0f} us; "
            f"context switches per request: client {r['client_switches']:.2f}, "
            f"workers {r['workers_switches']:.2f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
