"""Time the PySpark audit end to end on a large synthetic trace.

Generates (or reuses, when its ``_generated.json`` matches) a trace directory
with ``gen_traces.py``, then runs ``python -m trizre.audit`` on it in a fresh
process, exactly as a user would, and reports the wall time — JVM start and
report writing included — and events (trace lines) per second::

    .venv/bin/python benchmarks/bench_audit.py --events 10000000

Traces are big (about 220 bytes a line): keep them under /tmp, not in the repo.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gen_traces import MARKER, generate

ROOT = Path(__file__).resolve().parent.parent


def _matches(directory: Path, events: int, seed: int) -> bool:
    try:
        info = json.loads((directory / MARKER).read_text())
    except (OSError, ValueError):
        return False
    return bool(info.get("events") == events and info.get("seed") == seed)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--events", type=int, default=10_000_000)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--traces", type=Path, default=None, help="default /tmp/trizre-traces-<N>")
    p.add_argument("--out", type=Path, default=None, help="default /tmp/trizre-audit-<N>")
    p.add_argument("--master", default="local[*]")
    p.add_argument("--driver-memory", default=None)
    p.add_argument("--runs", type=int, default=1, help="audit runs (report the best and all)")
    p.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = p.parse_args()

    traces = args.traces or Path(f"/tmp/trizre-traces-{args.events}")
    out = args.out or Path(f"/tmp/trizre-audit-{args.events}")
    if _matches(traces, args.events, args.seed):
        info = json.loads((traces / MARKER).read_text())
        print(f"reusing {traces} ({info['lines']:,} lines)")
    else:
        started = time.perf_counter()
        info = generate(traces, args.events, seed=args.seed)
        elapsed = time.perf_counter() - started
        print(f"generated {info['lines']:,} lines in {elapsed:.1f} s into {traces}")
    lines = int(info["lines"])
    size_gb = int(info["bytes"]) / 1e9

    command = [sys.executable, "-m", "trizre.audit", str(traces), "--out", str(out)]
    command += ["--master", args.master, "--quiet"]
    if args.driver_memory:
        command += ["--driver-memory", args.driver_memory]
    times = []
    for _ in range(args.runs):
        load = os.getloadavg()[0]
        started = time.perf_counter()
        done = subprocess.run(command, cwd=ROOT, check=False)
        elapsed = time.perf_counter() - started
        if done.returncode not in (0, 1):
            print(f"audit failed with exit code {done.returncode}", file=sys.stderr)
            return done.returncode
        times.append(elapsed)
        print(
            f"audit: {elapsed:.1f} s, {lines / elapsed:,.0f} events/s "
            f"(exit {done.returncode}, load before {load:.2f})"
        )
    summary = json.loads((out / "summary.json").read_text())
    best = min(times)
    result = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d"),
        "events": lines,
        "gigabytes": round(size_gb, 2),
        "files": info["files"],
        "cores": os.cpu_count(),
        "master": args.master,
        "seconds": [round(t, 1) for t in times],
        "events_per_second": round(lines / best),
        "audit_internal_seconds": summary["audit"]["seconds"],
        "requests": summary["requests"]["counts"]["requests"],
        "exit_code": summary["audit"]["exit_code"],
    }
    print(
        f"{lines:,} events ({size_gb:.2f} GB, {info['files']} files), {os.cpu_count()} cores, "
        f"{args.master}: best {best:.1f} s end to end = {lines / best:,.0f} events/s "
        f"({summary['requests']['counts']['requests']:,} requests)"
    )
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
