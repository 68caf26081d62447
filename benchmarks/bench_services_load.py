"""Services under load: does any request run twice? The issue's scenario at full size.

Three worker processes on loopback serve ``work`` with 0.3 s handlers (the
default ``max_concurrency``, 64); one client pipelines 2,000 requests with
the default policy (2.5 s attempts).  With ``--kill``, one worker is killed
with SIGKILL a second into the run.  Printed: how many requests were
answered, how many handler runs started and finished, how many requests
finished more than once (ran twice), and the longest wait for a reply.

    .venv/bin/python benchmarks/bench_services_load.py [--requests 2000] [--kill]
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import trizre
from benchmarks.bench_forged_beacons import free_udp_port
from benchmarks.processes import python_processes
from trizre import patterns

WORKER = """
import json, sys
import trio, trizre
from trizre import patterns

port, name, handler_s = int(sys.argv[1]), sys.argv[2], float(sys.argv[3])

async def main():
    async def work(request):
        print(json.dumps({"start": request.body[0].decode()}), flush=True)
        await trio.sleep(handler_s)
        print(json.dumps({"done": request.body[0].decode()}), flush=True)
        return request.body[0]
    async with trizre.open_node(name, interface="lo", beacon_port=port, local_links=False) as node:
        async with patterns.open_server(node, work, service="work"):
            await trio.sleep_forever()

trio.run(main)
"""


async def run(requests: int, handler: float, kill: bool) -> dict[str, Any]:
    port = free_udp_port()
    folder = Path(tempfile.mkdtemp(prefix="trizre-bench-"))
    logs = [folder / f"w{i}.jsonl" for i in range(3)]
    waits: list[float] = []
    failed = 0
    argvs = [[str(port), f"w{i}", str(handler)] for i in range(3)]
    async with (
        python_processes(WORKER, argvs, logs) as procs,
        trizre.open_node("client", interface="lo", beacon_port=port, local_links=False) as node,
        patterns.open_service_client(node) as client,
    ):
        with trio.fail_after(60):
            await client.wait_for_service("work", 3)
        start = trio.current_time()

        async def one(i: int) -> None:
            nonlocal failed
            began = trio.current_time()
            try:
                await client.request("work", b"%d" % i)
            except patterns.PatternError:
                failed += 1
            waits.append(trio.current_time() - began)

        async def killer() -> None:
            await trio.sleep(1.0)
            procs[0].send_signal(signal.SIGKILL)

        with trio.fail_after(600):
            async with trio.open_nursery() as nursery:
                if kill:
                    nursery.start_soon(killer)
                for i in range(requests):
                    nursery.start_soon(one, i)
        elapsed = trio.current_time() - start
    started: Counter[str] = Counter()
    done: Counter[str] = Counter()
    for log in logs:
        for line in log.read_text().splitlines():
            event = json.loads(line)
            (started if "start" in event else done)[next(iter(event.values()))] += 1
    return {
        "scenario": f"{requests} requests, 3 workers, {handler} s handlers"
        + (", one worker SIGKILLed at 1 s" if kill else ""),
        "answered": requests - failed,
        "handler_runs_started": sum(started.values()),
        "handler_runs_finished": sum(done.values()),
        "ran_twice": sum(1 for n in done.values() if n > 1),
        "started_twice": sum(1 for n in started.values() if n > 1),
        "longest_wait_s": round(max(waits), 2),
        "elapsed_s": round(elapsed, 2),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--handler", type=float, default=0.3)
    parser.add_argument("--kill", action="store_true", help="SIGKILL one worker at 1 s")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    result = trio.run(run, args.requests, args.handler, args.kill)
    print(json.dumps(result))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0 if result["ran_twice"] == 0 and result["answered"] == args.requests else 1


if __name__ == "__main__":
    raise SystemExit(main())
