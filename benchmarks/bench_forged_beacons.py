"""Forged beacons against a node: descriptors, memory, and a real peer's round trip.

Two nodes on ``lo`` (TCP links between them, as between processes) measure
their WHISPER round trip; then a task sends beacons for random UUIDs that
claim closed loopback ports, at ``--rate`` per second for ``--seconds``,
to 127.255.255.255 (loopback broadcast: nothing leaves the machine).
Printed: the process's descriptors and RSS before, at their peak during the
flood and after it (once ``handshake_timeout`` has passed, and once
``expired_timeout`` has), and the round trip's p50/p99 before and during.

    .venv/bin/python benchmarks/bench_forged_beacons.py [--rate 2000] [--seconds 10]

The issue's scenario (10,000 beacons/s for a minute, the forger in its own
process as an attacker would be, with a verdict against its targets)::

    .venv/bin/python benchmarks/bench_forged_beacons.py --rate 10000 --seconds 60 --process

Spoofed sources (issue 25): ``--sources 1000`` sends each beacon from one of
1,000 loopback addresses in turn (127.1.x.y: every 127/8 address is this
host's, so nothing leaves it), which a per-source throttle alone does not
bound; ``--tarpit`` also holds the port each beacon claims at its source
with a listening socket that never accepts, so the node's connections
open and then hang in the ZMTP handshake instead of being refused::

    .venv/bin/python benchmarks/bench_forged_beacons.py --rate 10000 --seconds 20 \
        --process --sources 1000 --tarpit
"""

from __future__ import annotations

import argparse
import json
import math
import os
import socket
import sys
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any, Final

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import trizre
from trizre import wire

EVASIVE, EXPIRED = 5.0, 12.0


def free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


def rss_mb() -> float:
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


async def echo(node: trizre.Node) -> None:
    async for event in node.events():
        if isinstance(event, trizre.Whisper):
            await node.whisper(event.peer, *event.frames)


class Latencies:
    """Round-trip times in µs, as counts in 1 %-wide bins: a constant few kB.

    A minute of samples kept one by one would be megabytes of this
    process's RSS, which is what the benchmark measures.
    """

    _STEP: Final = math.log(1.01)

    def __init__(self) -> None:
        self.bins: Counter[int] = Counter()
        self.count = 0

    def append(self, us: float) -> None:
        self.bins[int(math.log(max(us, 1.0)) / self._STEP)] += 1
        self.count += 1

    def quantile(self, q: float) -> float:
        """The value below which a fraction ``q`` of the samples lie (to 1 %)."""
        seen, target = 0, q * self.count
        for index in sorted(self.bins):
            seen += self.bins[index]
            if seen >= target:
                return math.exp((index + 0.5) * self._STEP)
        return 0.0

    def __len__(self) -> int:
        return self.count


async def round_trips(
    a: trizre.Node,
    b: uuid.UUID,
    replies: trizre.EventStream,
    until: float,
    times: Latencies | None = None,
) -> Latencies:
    """Sequential round trips until ``until`` (trio time), added to ``times``."""
    times = Latencies() if times is None else times
    while trio.current_time() < until:
        start = time.perf_counter()
        await a.whisper(b, b"x" * 100)
        async for event in replies:
            if isinstance(event, trizre.Whisper):
                break
        times.append((time.perf_counter() - start) * 1e6)
    return times


async def forge_in_process(
    port: int, rate: int, seconds: float, sources: int = 1, tarpit: bool = False
) -> int:
    """Run the forger in a child process (this script, ``--forge-only``); its count."""
    argv = [sys.executable, __file__, "--forge-only", str(port), str(rate), str(seconds)]
    argv += ["--sources", str(sources)] + (["--tarpit"] if tarpit else [])
    done = await trio.run_process(argv, capture_stdout=True)
    return int(done.stdout.decode().strip())


TARPIT_PORT: Final = 9999  # the port every beacon claims with --tarpit (on 127.1.x.y)


def source_address(index: int) -> str:
    """The ``index``-th spoofed source: 127.1.x.y, never the nodes' 127.0.0.1."""
    return f"127.1.{index // 250}.{index % 250 + 1}"


def forger_sockets(sources: int) -> list[socket.socket]:
    """One UDP socket per source address (bound to it: the beacon's sender)."""
    # One source: the original benchmark's, the nodes' own 127.0.0.1.
    addresses = ["127.0.0.1"] if sources == 1 else [source_address(i) for i in range(sources)]
    socks = []
    for address in addresses:
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
        sock.setblocking(False)
        if sources > 1:
            sock.bind((address, 0))
        socks.append(sock)
    return socks


def tarpits(sources: int) -> list[socket.socket]:
    """Listen on every source's claimed port and never accept: connects hang in ZMTP."""
    pits = []
    for index in range(sources):
        pit = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        pit.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        pit.bind((source_address(index) if sources > 1 else "127.0.0.1", TARPIT_PORT))
        pit.listen(4096)
        pits.append(pit)
    return pits


async def forge(
    port: int, rate: int, seconds: float, sources: int = 1, tarpit: bool = False
) -> int:
    socks = forger_sockets(sources)
    pits = tarpits(sources) if tarpit else []
    sent = 0
    start = trio.current_time()
    try:
        while (elapsed := trio.current_time() - start) < seconds:
            due = int(elapsed * rate) + 1
            while sent < due:
                fake = uuid.uuid4()
                claimed = TARPIT_PORT if tarpit else 1 + fake.int % 1000  # closed ports
                beacon = wire.encode_beacon(wire.Beacon(fake, claimed))
                sock = socks[sent % len(socks)]
                try:
                    sock.sendto(beacon, ("127.255.255.255", port))  # loopback broadcast
                except BlockingIOError:
                    await trio.lowlevel.wait_writable(sock)
                    continue
                sent += 1
            await trio.sleep(0.01)
    finally:
        for sock in socks + pits:
            sock.close()
    return sent


def p(values: Latencies, q: float) -> float:
    return values.quantile(q)


async def main(args: argparse.Namespace) -> dict[str, Any]:
    port = free_udp_port()
    timers = {"evasive_timeout": EVASIVE, "expired_timeout": EXPIRED}
    opts: dict[str, Any] = {"interface": "lo", "beacon_port": port, "local_links": False, **timers}
    result: dict[str, Any] = {
        "rate": args.rate,
        "seconds": args.seconds,
        "sources": args.sources,
        "tarpit": args.tarpit,
    }
    async with (
        trizre.open_node("a", **opts) as a,
        trizre.open_node("b", **opts) as b,
        trio.open_nursery() as nursery,
    ):
        nursery.start_soon(echo, b)
        replies = a.events()
        peer = await a.wait_for_peer(b.uuid)
        await b.wait_for_peer(a.uuid)
        await round_trips(a, peer, replies, trio.current_time() + 0.5)  # warm up
        base = await round_trips(a, peer, replies, trio.current_time() + args.probe)
        result["round_trips_per_s_before"] = round(len(base) / args.probe)
        result["before"] = {"fds": descriptors(), "rss_mb": round(rss_mb(), 1)}
        result["rtt_before_us"] = {"p50": round(p(base, 0.5)), "p99": round(p(base, 0.99))}

        peak = {"fds": 0, "rss_mb": 0.0}
        during = Latencies()
        flood_end = trio.current_time() + args.seconds

        async def sample() -> None:
            while trio.current_time() < flood_end:
                peak["fds"] = max(peak["fds"], descriptors())
                peak["rss_mb"] = max(peak["rss_mb"], round(rss_mb(), 1))
                await trio.sleep(0.25)

        async def probe() -> None:
            with trio.fail_after(args.seconds + 30):  # a lost reply must not hang the bench
                await round_trips(a, peer, replies, flood_end, during)

        async with trio.open_nursery() as flood:
            flood.start_soon(sample)
            flood.start_soon(probe)
            forger = forge_in_process if args.process else forge
            result["forged"] = await forger(
                port, args.rate, args.seconds, args.sources, args.tarpit
            )
        result["peak"] = peak
        result["rtt_during_us"] = {"p50": round(p(during, 0.5)), "p99": round(p(during, 0.99))}
        result["round_trips_during"] = len(during)  # each completed: none lost
        result["round_trips_per_s_during"] = round(len(during) / args.seconds)
        await trio.sleep(6.0)  # past the 5 s handshake timeout
        result["after_6s"] = {"fds": descriptors(), "rss_mb": round(rss_mb(), 1)}
        if not args.quick:
            await trio.sleep(EXPIRED)
            after = f"after_{6 + EXPIRED:.0f}s"
            result[after] = {"fds": descriptors(), "rss_mb": round(rss_mb(), 1)}
        result["still_peers"] = a.peers() == [b.uuid]
        nursery.cancel_scope.cancel()
    result["verdict"] = verdict(result)
    return result


def verdict(result: dict[str, Any]) -> dict[str, bool]:
    """The issue's targets: round trip within 2x, nothing lost, back within 10 %."""
    before, last = result["before"], result[[k for k in result if k.startswith("after_")][-1]]
    return {
        "rtt_p50_within_2x": result["rtt_during_us"]["p50"] <= 2 * result["rtt_before_us"]["p50"],
        "round_trips_per_s_within_2x": (
            2 * result["round_trips_per_s_during"] >= result["round_trips_per_s_before"]
        ),
        "nothing_lost": result["round_trips_during"] > 0 and result["still_peers"],
        "fds_back_within_10pct": last["fds"] <= 1.1 * before["fds"],
        "rss_back_within_10pct": last["rss_mb"] <= 1.1 * before["rss_mb"],
    }


def cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=int, help="forged beacons a second (2000)")
    parser.add_argument("--seconds", type=float, help="how long the flood lasts (10)")
    parser.add_argument("--probe", type=float, help="baseline round trips, seconds (2)")
    parser.add_argument("--json", type=Path, help="also write the result here")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="short: 300/s for 1 s unless given, a 0.3 s baseline, no wait for expiry",
    )
    parser.add_argument(
        "--process", action="store_true", help="forge from a child process, as an attacker would"
    )
    parser.add_argument(
        "--sources",
        type=int,
        default=1,
        help="spoofed source addresses, 127.1.x.y, used in turn (1: the nodes' own, 127.0.0.1)",
    )
    parser.add_argument(
        "--tarpit",
        action="store_true",
        help="hold each claimed port with a listening socket that never accepts",
    )
    parser.add_argument("--forge-only", nargs=3, metavar=("PORT", "RATE", "SECONDS"))
    args = parser.parse_args()
    if not 1 <= args.sources <= 250 * 256:
        parser.error("--sources must be in 1..64000")
    if args.forge_only:
        port, rate, seconds = args.forge_only
        count = trio.run(forge, int(port), int(rate), float(seconds), args.sources, args.tarpit)
        print(count)
        return
    short = (300, 1.0, 0.3) if args.quick else (2000, 10.0, 2.0)
    args.rate = short[0] if args.rate is None else args.rate
    args.seconds = short[1] if args.seconds is None else args.seconds
    args.probe = short[2] if args.probe is None else args.probe
    report(trio.run(main, args), args.json)


def report(result: dict[str, Any], json_path: Path | None) -> None:
    """Print ``result`` as JSON, and write it to ``json_path`` too if given."""
    text = json.dumps(result, indent=2)
    print(text)
    if json_path is not None:
        json_path.write_text(text + "\n")


if __name__ == "__main__":
    cli()
