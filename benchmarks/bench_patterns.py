"""Request/reply patterns beside a raw pyzmq DEALER/ROUTER echo, in one run.

All on loopback, workers in their own processes, 100-byte requests:

* sequential: one request at a time (trizre service client / raw echo);
* pipelined: 100 requests in flight, with 1 and with 4 workers
  (raw: one ROUTER echo process per worker, DEALER round robin);
* Binary Star failover: a client sending requests every 10 ms while the
  primary's process is killed (SIGKILL); the longest wait any request saw,
  with the default 1 s heartbeat and with a 250 ms one.

Each figure is the median (min-max) of REPEAT runs.

    python benchmarks/bench_patterns.py [--repeat 3] [--quick] [--failover-only] [--json PATH]
        [--cases sequential,pipelined-1,pipelined-4]   # these cases only, no Binary Star
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import trio
import zmq

import trizre
from trizre import patterns
from trizre.patterns import RetryPolicy, State
from trizre.transport._zsock import ZSocket, context

HERE = Path(__file__).resolve()
PAYLOAD = b"x" * 100
WINDOW = 100


def _port() -> int:
    import socket  # noqa: PLC0415 - only the orchestrator needs it

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _spawn(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(HERE), *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )


def _stop(procs: list[subprocess.Popen[str]]) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


# ------------------------------------------------------------------- workers


async def _trizre_worker(name: str, port: int) -> None:
    async def echo(request: patterns.IncomingRequest) -> tuple[bytes, ...]:
        return request.body

    async with (
        trizre.open_node(name, interface="lo", beacon_port=port, beacon_interval=0.1) as node,
        patterns.open_server(node, echo, service="echo", max_concurrency=WINDOW),
    ):
        print("ready", flush=True)
        await trio.to_thread.run_sync(sys.stdin.read, abandon_on_cancel=True)


async def _bstar_worker(role: str, port: int, heartbeat: float) -> None:
    async def echo(request: patterns.IncomingRequest) -> tuple[bytes, ...]:
        return request.body

    primary = role == "primary"
    name, partner = ("bp", "bb") if primary else ("bb", "bp")
    async with (
        trizre.open_node(name, interface="lo", beacon_port=port, beacon_interval=0.1) as node,
        patterns.open_binary_star_server(
            node, echo, primary=primary, partner=partner, heartbeat=heartbeat
        ) as star,
    ):
        await star.state.wait_value(lambda s: s in (State.ACTIVE, State.PASSIVE))
        print("ready", flush=True)
        await trio.to_thread.run_sync(sys.stdin.read, abandon_on_cancel=True)


def _raw_worker() -> None:
    router = context().socket(zmq.ROUTER)
    router.setsockopt(zmq.LINGER, 0)
    router.bind("tcp://127.0.0.1:*")
    print(router.getsockopt_string(zmq.LAST_ENDPOINT), flush=True)
    poller = zmq.Poller()
    poller.register(router, zmq.POLLIN)
    poller.register(sys.stdin, zmq.POLLIN)
    while True:
        ready = dict(poller.poll())
        if sys.stdin.fileno() in ready or sys.stdin in ready:
            return
        while True:
            try:
                router.send_multipart(router.recv_multipart(zmq.NOBLOCK))
            except zmq.Again:
                break


# -------------------------------------------------------------------- trizre


async def _trizre_run(port: int, workers: int, count: int, window: int) -> float:
    async with (
        trizre.open_node("bench-client", interface="lo", beacon_port=port) as node,
        patterns.open_service_client(node, RetryPolicy(10, 3)) as client,
    ):
        with trio.fail_after(30):
            await client.wait_for_service("echo", workers)
        start = time.perf_counter()
        await pipeline(client, count, window)
        return count / (time.perf_counter() - start)


async def pipeline(client: patterns.ServiceClient, count: int, window: int) -> None:
    """``count`` requests to the "echo" service, ``window`` of them in flight at once."""
    left = count

    async def loop() -> None:
        nonlocal left
        while left > 0:
            left -= 1
            await client.request("echo", PAYLOAD)

    async with trio.open_nursery() as nursery:
        for _ in range(window):
            nursery.start_soon(loop)


def trizre_rate(workers: int, count: int, window: int) -> float:
    port = _port()
    procs = [_spawn("--worker", f"w{i}", str(port)) for i in range(workers)]
    try:
        for proc in procs:
            assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        return trio.run(_trizre_run, port, workers, count, window)
    finally:
        _stop(procs)


# ----------------------------------------------------------------------- raw


async def _raw_run(endpoints: list[str], count: int, window: int) -> float:
    dealer = ZSocket(context().socket(zmq.DEALER))
    try:
        for endpoint in endpoints:
            dealer.zmq_socket.connect(endpoint)
        sent = received = 0
        start = time.perf_counter()
        while received < count:
            while sent < count and sent - received < window:
                await dealer.send([PAYLOAD])
                sent += 1
            received += len(await dealer.receive_batch())
        return count / (time.perf_counter() - start)
    finally:
        dealer.close()


def raw_rate(workers: int, count: int, window: int) -> float:
    procs = [_spawn("--raw-worker") for _ in range(workers)]
    try:
        endpoints = []
        for proc in procs:
            assert proc.stdout is not None
            endpoints.append(proc.stdout.readline().strip())
        return trio.run(_raw_run, endpoints, count, window)
    finally:
        _stop(procs)


# --------------------------------------------------------------- Binary Star


# Two settings: the defaults (1 s heartbeat, so failover after 2 s; 2.5 s
# attempts) and a fast pair (250 ms heartbeat, failover after 0.5 s). The
# client's attempt must outlast the failover: a request that reaches the
# backup before it may take over is refused, and goes back to the dead
# primary for another whole attempt.
FAILOVER_SETTINGS = {"default": (1.0, 2.5), "fast": (0.25, 0.75)}


async def _failover_run(
    port: int, primary: subprocess.Popen[str], seconds: float, attempt: float
) -> dict[str, float]:
    async with (
        trizre.open_node("bench-client", interface="lo", beacon_port=port) as node,
        patterns.open_binary_star_client(node, "bp", "bb", RetryPolicy(attempt, 10)) as client,
    ):
        with trio.fail_after(30):
            await node.wait_for_peer("bp")
            await node.wait_for_peer("bb")
        longest = 0.0
        killed = False
        sent = answered = 0
        start = trio.current_time()
        while trio.current_time() - start < seconds:
            if not killed and trio.current_time() - start > 0.5:
                os.kill(primary.pid, signal.SIGKILL)  # no goodbye: a real crash
                killed = True
            began = trio.current_time()
            sent += 1
            # An abandoned request raises RequestAbandoned: the run fails.
            await client.request(PAYLOAD)
            answered += 1
            longest = max(longest, trio.current_time() - began)
            await trio.sleep(0.01)
        assert client.current == "bb"
        return {"longest": longest, "sent": sent, "answered": answered}


def failover_outage(setting: str) -> dict[str, float]:
    heartbeat, attempt = FAILOVER_SETTINGS[setting]
    port = _port()
    primary = _spawn("--bstar", "primary", str(port), str(heartbeat))
    backup = _spawn("--bstar", "backup", str(port), str(heartbeat))
    try:
        for proc in (primary, backup):
            assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        return trio.run(_failover_run, port, primary, 6.0, attempt)
    finally:
        _stop([primary, backup])


# -------------------------------------------------------------- orchestration


def summary(values: list[float], digits: int = 0) -> str:
    fmt = f"{{:,.{digits}f}}"
    med, low, high = statistics.median(values), min(values), max(values)
    return f"{fmt.format(med)} ({fmt.format(low)}-{fmt.format(high)})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="tiny sizes, one run")
    parser.add_argument("--json", help="also write the results to this file")
    parser.add_argument("--worker", nargs=2, metavar=("NAME", "PORT"))
    parser.add_argument("--bstar", nargs=3, metavar=("ROLE", "PORT", "HEARTBEAT"))
    parser.add_argument("--raw-worker", action="store_true")
    parser.add_argument(
        "--failover-only", action="store_true", help="only the Binary Star failover runs"
    )
    parser.add_argument(
        "--cases",
        help="comma-separated service cases (sequential, pipelined-1, pipelined-4); "
        "only these, and no Binary Star runs",
    )
    args = parser.parse_args()
    if args.worker:
        trio.run(_trizre_worker, args.worker[0], int(args.worker[1]))
        return
    if args.bstar:
        trio.run(_bstar_worker, args.bstar[0], int(args.bstar[1]), float(args.bstar[2]))
        return
    if args.raw_worker:
        _raw_worker()
        return

    repeat = 1 if args.quick else args.repeat
    sequential, pipelined = (50, 500) if args.quick else (2_000, 20_000)
    load = os.getloadavg()[0]
    if load > 0.5:
        print(f"warning: load average {load:.2f}; figures will be noisy", file=sys.stderr)
    rows: dict[str, dict[str, list[float]]] = {}
    cases = {
        "sequential": ("sequential, 1 worker", 1, sequential, 1),
        "pipelined-1": ("pipelined (100 in flight), 1 worker", 1, pipelined, WINDOW),
        "pipelined-4": ("pipelined (100 in flight), 4 workers", 4, pipelined, WINDOW),
    }
    chosen = list(cases.values())
    if args.cases:
        chosen = [cases[name] for name in args.cases.split(",")]
    for _ in range(0 if args.failover_only else repeat):
        for label, workers, count, window in chosen:
            row = rows.setdefault(label, {"trizre": [], "raw": []})
            row["trizre"].append(trizre_rate(workers, count, window))
            row["raw"].append(raw_rate(workers, count, window))
    outages = {
        setting: [failover_outage(setting) for _ in range(1 if args.quick else 2)]
        for setting in FAILOVER_SETTINGS
        if not args.cases
    }

    print(
        f"\nrequest/reply on loopback, 100 B, {os.cpu_count()} cores, load {load:.2f}, "
        f"median (min-max) of {repeat}\n"
    )
    print("| case | trizre service requests/s | raw pyzmq echo/s | trizre/raw |")
    print("|---|---|---|---|")
    for label, row in rows.items():
        ratio = statistics.median(row["trizre"]) / statistics.median(row["raw"])
        print(f"| {label} | {summary(row['trizre'])} | {summary(row['raw'])} | {ratio:.2f}x |")
    if args.cases:  # the service cases alone: no Binary Star table
        if args.json:
            Path(args.json).parent.mkdir(parents=True, exist_ok=True)
            Path(args.json).write_text(json.dumps({"load": load, "rates": rows}, indent=2))
        return
    print("\nBinary Star, primary killed with SIGKILL while a client sends a request every 10 ms\n")
    print(
        "| heartbeat | failover after | client attempt | longest wait, s"
        " | requests sent / answered |"
    )
    print("|---|---|---|---|---|")
    for setting, runs in outages.items():
        heartbeat, attempt = FAILOVER_SETTINGS[setting]
        longest = summary([run["longest"] for run in runs], 2)
        counts = ", ".join(f"{run['sent']:.0f} / {run['answered']:.0f}" for run in runs)
        print(f"| {heartbeat:g} s | {2 * heartbeat:g} s | {attempt:g} s | {longest} | {counts} |")
    fast = max(run["longest"] for run in outages["fast"])
    verdict = "met" if fast <= 1.0 else "MISSED"
    print(f"\ntarget: longest wait <= 1 s, 250 ms heartbeat, 0 lost: {verdict} ({fast:.2f} s)")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        with open(args.json, "w") as out:
            json.dump({"load": load, "rates": rows, "failover_outage_s": outages}, out, indent=2)


if __name__ == "__main__":
    main()
