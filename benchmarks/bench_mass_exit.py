"""Thousands of peers say HELLO, then all vanish at once: when does a busy node report them gone?

Issue 25, 2.  A node "target" on ``lo`` with default timeouts and buffers;
its application reads every event and spends ``--work-ms`` on each (CPU
work by default, or a sleep with ``--sleep``).  A child process (its own
CPU) opens ``--peers`` DEALERs to the target, each saying HELLO under its
own UUID (the target links back to each: a socket per peer), then exits
at once when every peer has entered: TCP connections close, nothing more
is ever said.  From that instant the target is sampled every second:
Exit events its application has read, peers still listed, its open
descriptors and RSS.  Printed as JSON: the sample at ``--at`` seconds,
the time the last peer was reported Exit (if within ``--seconds``), and
the whole series.

    .venv/bin/python benchmarks/bench_mass_exit.py                 # 3,000 peers, 1 ms/event
    .venv/bin/python benchmarks/bench_mass_exit.py --peers 300 --seconds 45 --sleep
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import trizre
from benchmarks.bench_forged_beacons import free_udp_port
from trizre import wire


def peers_child(endpoint: str, count: int) -> None:
    """The child: ``count`` DEALERs say HELLO to ``endpoint``; exit on a line from stdin."""
    import zmq  # noqa: PLC0415

    ctx = zmq.Context()
    ctx.set(zmq.MAX_SOCKETS, count + 16)
    inbox = ctx.socket(zmq.ROUTER)  # where the target links back: HELLOs, PINGs, unread
    port = inbox.bind_to_random_port("tcp://127.0.0.1", 49152, 65000)
    dealers = []
    for i in range(count):
        dealer = ctx.socket(zmq.DEALER)
        dealer.setsockopt(zmq.IDENTITY, b"\x01" + uuid.uuid4().bytes)
        dealer.setsockopt(zmq.LINGER, 0)
        dealer.connect(endpoint)
        hello = wire.Hello(1, f"tcp://127.0.0.1:{port}", (), 0, f"mass-{i}")
        dealer.send_multipart(wire.encode(hello))
        dealers.append(dealer)
    print("ready", flush=True)
    sys.stdin.readline()  # vanish: no GOODBYE, no leaving beacon
    os._exit(0)


def _rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


async def main(args: argparse.Namespace) -> dict[str, Any]:
    opts: dict[str, Any] = {"interface": "lo", "beacon_port": free_udp_port()}
    counts = {"enter": 0, "exit": 0, "evasive": 0, "silent": 0}
    entered = trio.Event()
    work = args.work_ms / 1000
    result: dict[str, Any] = {
        "peers": args.peers,
        "work_ms_per_event": args.work_ms,
        "work": "sleep" if args.sleep else "cpu",
    }
    async with trizre.open_node("target", **opts) as target, trio.open_nursery() as nursery:

        async def application() -> None:
            """Every event, ``work`` seconds each, as a busy application would."""
            async for event in target.events():  # default buffer (1000) and policy (block)
                kind = type(event).__name__.lower()
                if kind in counts:
                    counts[kind] += 1
                if counts["enter"] == args.peers:
                    entered.set()
                if args.sleep:
                    await trio.sleep(work)
                else:
                    end = time.perf_counter() + work
                    while time.perf_counter() < end:
                        pass
                    await trio.lowlevel.checkpoint()

        nursery.start_soon(application)
        result["before"] = {"fds": _fds(), "rss_mb": round(_rss_mb(), 1)}
        argv = [sys.executable, __file__, "--child", target.endpoint, str(args.peers)]
        child = await trio.lowlevel.open_process(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )
        assert child.stdin is not None and child.stdout is not None
        with trio.fail_after(120):
            line = b""
            while not line.endswith(b"\n"):
                line += await child.stdout.receive_some(64)
            await entered.wait()
        result["entered"] = {"fds": _fds(), "rss_mb": round(_rss_mb(), 1)}
        await child.stdin.send_all(b"vanish\n")
        await child.wait()
        start = trio.current_time()
        series = []
        all_gone: float | None = None
        while (elapsed := trio.current_time() - start) < args.seconds:
            listed = len(target.peers())
            series.append(
                {
                    "t": round(elapsed, 1),
                    "exits_read": counts["exit"],
                    "listed": listed,
                    "fds": _fds(),
                    "rss_mb": round(_rss_mb(), 1),
                }
            )
            if all_gone is None and counts["exit"] == args.peers:
                all_gone = elapsed
            await trio.sleep(1.0)
        at = [s for s in series if s["t"] <= args.at][-1]
        result[f"after_{args.at:g}s"] = at
        result["all_exits_read_by_s"] = None if all_gone is None else round(all_gone, 1)
        result["evasive_read"] = counts["evasive"]
        result["silent_read"] = counts["silent"]
        result["series"] = series
        nursery.cancel_scope.cancel()
    return result


def cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--peers", type=int, default=3000, help="peers that vanish together")
    parser.add_argument("--work-ms", type=float, default=1.0, help="the application's ms per event")
    parser.add_argument("--sleep", action="store_true", help="the work is a sleep, not CPU")
    parser.add_argument("--at", type=float, default=40.0, help="the sample to report, seconds")
    parser.add_argument("--seconds", type=float, default=70.0, help="how long to watch")
    parser.add_argument("--child", nargs=2, metavar=("ENDPOINT", "PEERS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        peers_child(args.child[0], int(args.child[1]))
        return
    print(json.dumps(trio.run(main, args), indent=1))


if __name__ == "__main__":
    cli()
