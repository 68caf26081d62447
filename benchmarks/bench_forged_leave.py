"""Forged leaving beacons against a live peer: exits, stalls and round trips (issue 25, 1).

Node a (this process) does WHISPER round trips with node b (a child
process, echoing), over TCP on ``lo``.  Then a forger sends port-0 beacons
naming b's UUID, ``--rate`` a second for ``--seconds``, to 127.255.255.255
(loopback broadcast: nothing leaves the machine), from 127.0.0.1, b's own
host; with ``--curve`` both nodes talk CURVE and allow each other, and the
forged beacons carry a random key (``--forged-key random``) or b's real
public key, which b's own beacons show to anyone (``--forged-key peer``).
Printed: how many times b exited at a during the flood, the whole seconds
in which no round trip completed (during the flood and in ``--after``
seconds after it), the round trips a second before and during, and at the
end how long a genuine leave (b stops) took to end b at a.

    .venv/bin/python benchmarks/bench_forged_leave.py [--curve] [--seconds 20]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import socket
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import trizre
from trizre import wire


def free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def node_options(port: int, keys: Path | None, name: str) -> dict[str, Any]:
    opts: dict[str, Any] = {"interface": "lo", "beacon_port": port, "local_links": False}
    if keys is not None:
        opts["curve"] = trizre.Certificate.load(keys / f"{name}.key")
        opts["curve_allow"] = str(keys / "allowed")
    return opts


async def peer_main(port: int, keys: Path | None) -> None:
    """Node b: echo every WHISPER until one says ``stop``."""
    async with trizre.open_node("b", **node_options(port, keys, "b")) as b:
        async for event in b.events():
            if isinstance(event, trizre.Whisper):
                if event.frames == (b"stop",):
                    return
                await b.whisper(event.peer, *event.frames)


async def forge(port: int, peer: uuid.UUID, key: bytes | None, rate: float, until: float) -> int:
    """Port-0 beacons for ``peer`` at ``rate`` a second until ``until`` (trio time)."""
    sock = trio.socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
    sent = 0
    with sock:
        start = trio.current_time()
        while trio.current_time() < until:
            if key is None:
                beacon = wire.Beacon(peer, 0)
            else:
                beacon = wire.Beacon(peer, 0, 3, key if key != b"random" else os.urandom(32))
            await sock.sendto(wire.encode_beacon(beacon), ("127.255.255.255", port))
            sent += 1
            await trio.sleep_until(start + sent / rate)
    return sent


class Probe:
    """Round trips a to b, one at a time; counts completions per whole second and b's exits."""

    def __init__(self, a: trizre.Node, events: trizre.EventStream) -> None:
        self.a = a
        self.events = events
        self.done_at: list[float] = []  # trio times of completed round trips
        self.exits: list[float] = []

    async def run(self, until: float) -> None:
        while trio.current_time() < until:
            peer = self.a.peer_by_name("b")
            if peer is None:
                with trio.move_on_at(until):
                    await self.a.wait_for_peer("b")
                continue
            try:
                await self.a.whisper(peer, b"x" * 100)
            except (trizre.UnknownPeer, trizre.PeerDisconnected):
                continue
            with trio.move_on_after(1.0):
                async for event in self.events:
                    if isinstance(event, trizre.Exit) and event.name == "b":
                        self.exits.append(trio.current_time())
                        break
                    if isinstance(event, trizre.Whisper):
                        self.done_at.append(trio.current_time())
                        break

    def rate(self, start: float, end: float) -> float:
        return sum(start <= t < end for t in self.done_at) / (end - start)

    def silent_seconds(self, start: float, end: float) -> int:
        busy = {math.floor(t - start) for t in self.done_at if start <= t < end}
        return sum(second not in busy for second in range(math.ceil(end - start - 1e-9)))


async def main(args: argparse.Namespace) -> dict[str, Any]:
    port = free_udp_port()
    result: dict[str, Any] = {
        "curve": args.curve,
        "forged_key": args.forged_key if args.curve else None,
        "rate": args.rate,
        "seconds": args.seconds,
    }
    with tempfile.TemporaryDirectory() as tmp:
        keys: Path | None = None
        b_public: bytes | None = None
        if args.curve:
            keys = Path(tmp)
            (keys / "allowed").mkdir()
            for name in ("a", "b"):
                cert = trizre.Certificate.generate()
                cert.save(keys / f"{name}.key")
                cert.public_only().save(keys / "allowed" / f"{name}.key")
                if name == "b":
                    b_public = cert.public
        async with (
            trizre.open_node("a", **node_options(port, keys, "a")) as a,
            trio.open_nursery() as nursery,
        ):
            events = a.events()
            argv = [sys.executable, __file__, "--peer", str(port)]
            argv += ["--keys", str(keys)] if keys is not None else []
            child = await nursery.start(trio.run_process, argv)
            with trio.fail_after(30):
                b = await a.wait_for_peer("b")
            probe = Probe(a, events)
            await probe.run(trio.current_time() + 0.5)  # warm up
            start = trio.current_time()
            await probe.run(start + args.probe)
            result["round_trips_per_s_before"] = round(probe.rate(start, start + args.probe))
            flood_start = trio.current_time()
            flood_end = flood_start + args.seconds
            key = None
            if args.curve:
                key = b"random" if args.forged_key == "random" else b_public
            async with trio.open_nursery() as flood:
                flood.start_soon(probe.run, flood_end + args.after)
                result["forged"] = await forge(port, b, key, args.rate, flood_end)
            end = flood_end + args.after
            result["exits_during"] = sum(flood_start <= t < flood_end for t in probe.exits)
            result["silent_seconds_during"] = probe.silent_seconds(flood_start, flood_end)
            result["silent_seconds_after"] = probe.silent_seconds(flood_end, end)
            result["round_trips_per_s_during"] = round(probe.rate(flood_start, flood_end))
            # A genuine leave: b stops, sends its one leaving beacon; how long until Exit at a?
            peer = a.peer_by_name("b")
            assert peer is not None, "b is not present after the flood"
            stop = time.perf_counter()
            await a.whisper(peer, b"stop")
            with trio.fail_after(60):
                async for event in events:
                    if isinstance(event, trizre.Exit) and event.name == "b":
                        break
            result["genuine_leave_to_exit_s"] = round(time.perf_counter() - stop, 3)
            with trio.fail_after(10):
                await child.wait()
            nursery.cancel_scope.cancel()
    return result


def cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--curve", action="store_true", help="both nodes talk CURVE")
    parser.add_argument(
        "--forged-key",
        choices=("random", "peer"),
        default="random",
        help="CURVE: the key the forged beacons carry (random, or b's own public key)",
    )
    parser.add_argument("--rate", type=float, default=10.0, help="forged beacons a second (10)")
    parser.add_argument("--seconds", type=float, default=20.0, help="the flood's length (20)")
    parser.add_argument("--after", type=float, default=5.0, help="seconds watched after it (5)")
    parser.add_argument("--probe", type=float, default=3.0, help="baseline, seconds (3)")
    parser.add_argument("--json", type=Path, help="also write the result here")
    parser.add_argument("--peer", type=int, help=argparse.SUPPRESS)  # run as node b
    parser.add_argument("--keys", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.peer is not None:
        trio.run(peer_main, args.peer, args.keys)
        return
    result = trio.run(main, args)
    text = json.dumps(result, indent=2)
    print(text)
    if args.json is not None:
        args.json.write_text(text + "\n")


if __name__ == "__main__":
    cli()
