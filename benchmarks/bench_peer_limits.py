"""One peer's JOIN flood, or one huge HELLO: what a second peer and the node feel (issue 25).

Two nodes on ``lo`` over TCP, "target" and "friend" (which echoes every
WHISPER), measure the friend's round trip; a child process (the attacker,
its own CPU) connects a DEALER to the target and says HELLO, then:

* ``--scenario join-flood``: ``--joins`` JOINs of new groups, as fast as
  libzmq takes them (issue 25: 80,000; before the fix a real peer's round
  trip went from 0.3 ms to a median of 375 ms, worst 1.1 s);
* ``--scenario huge-hello``: its HELLO lists ``--groups`` groups
  (1,000,000: 12 MB; before the fix the node froze 3.5 s and its RSS went
  from 34 to 299 MB).

Printed (JSON): the friend's round trip p50/max before and during, the
longest the target's Trio loop went without running a 1 ms ticker
(its freeze), the target process's RSS before, peak (VmHWM) and after,
whether the attacker was dropped, and how many Join events the
application saw.

    .venv/bin/python benchmarks/bench_peer_limits.py --scenario join-flood --joins 80000
    .venv/bin/python benchmarks/bench_peer_limits.py --scenario huge-hello --groups 1000000
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import trizre
from benchmarks.bench_forged_beacons import Latencies, free_udp_port, report
from trizre import wire


def attack(endpoint: str, scenario: str, count: int, hold: float) -> None:
    """The child: HELLO (``count`` groups for huge-hello), then ``count`` JOINs (join-flood)."""
    import zmq  # noqa: PLC0415

    ctx = zmq.Context()
    inbox = ctx.socket(zmq.ROUTER)  # where the target's DEALER says HELLO
    port = inbox.bind_to_random_port("tcp://127.0.0.1", 49152, 65000)
    out = ctx.socket(zmq.DEALER)
    out.setsockopt(zmq.IDENTITY, b"\x01" + uuid.uuid4().bytes)
    out.setsockopt(zmq.SNDHWM, 0)
    out.connect(endpoint)
    endpoint_ = f"tcp://127.0.0.1:{port}"
    groups = tuple(f"g{i:07}" for i in range(count)) if scenario == "huge-hello" else ()
    out.send_multipart(wire.encode(wire.Hello(1, endpoint_, groups, 0, "hostile")))
    if scenario == "join-flood":
        for i in range(count):
            seq = (i + 2) & 0xFFFF
            out.send_multipart(wire.encode(wire.Join(seq, f"g{i:07}", (i + 1) % 256)))
    # Stay: a peer whose inbox closes is dropped (its link broke), which
    # would end the measure early.
    time.sleep(float(hold))
    out.close(linger=5000)
    inbox.close(linger=0)
    ctx.term()


def rss_kib(field: str = "VmRSS") -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


async def main(args: argparse.Namespace) -> dict[str, Any]:
    port = free_udp_port()
    opts: dict[str, Any] = {"interface": "lo", "beacon_port": port, "local_links": False}
    count = args.joins if args.scenario == "join-flood" else args.groups
    result: dict[str, Any] = {"scenario": args.scenario, "count": count}
    if args.max_peer_groups is not None:
        result["max_peer_groups"] = args.max_peer_groups
    target_opts = dict(opts)
    if args.max_peer_groups is not None:
        target_opts["max_peer_groups"] = args.max_peer_groups
    seen = {"joins": 0, "hostile_exit": False, "hostile_enter": False}
    rejected = trio.Event()

    class Refusals(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if "refused a HELLO" in record.getMessage():
                rejected.set()

    logging.getLogger("trizre").addHandler(Refusals())
    freeze = {"max_s": 0.0}
    send_reply, replies = trio.open_memory_channel[bytes](1000)
    async with (
        trizre.open_node("target", **target_opts) as target,
        trizre.open_node("friend", **opts) as friend,
        trio.open_nursery() as nursery,
    ):

        async def echo() -> None:
            async for event in friend.events():
                if isinstance(event, trizre.Whisper):
                    await friend.whisper(event.peer, *event.frames)

        async def application() -> None:
            async for event in target.events(max_buffer=10_000):
                if isinstance(event, trizre.Whisper) and event.name == "friend":
                    await send_reply.send(event.frames[0])
                elif isinstance(event, trizre.Join) and event.name == "hostile":
                    seen["joins"] += 1
                elif isinstance(event, trizre.Enter) and event.name == "hostile":
                    seen["hostile_enter"] = True
                elif isinstance(event, trizre.Exit) and event.name == "hostile":
                    seen["hostile_exit"] = True

        async def ticker() -> None:
            last = time.perf_counter()
            while True:
                await trio.sleep(0.001)
                now = time.perf_counter()
                freeze["max_s"] = max(freeze["max_s"], now - last)
                last = now

        def flood_over() -> bool:
            if seen["hostile_exit"] or seen["joins"] >= count:
                return True
            return args.scenario == "huge-hello" and rejected.is_set()

        async def round_trips(until: float, times: Latencies, worst: list[float]) -> None:
            while trio.current_time() < until and not (times is during and flood_over()):
                start = time.perf_counter()
                token = uuid.uuid4().bytes
                await target.whisper(friend_id, token)
                while await replies.receive() != token:
                    pass
                rtt = (time.perf_counter() - start) * 1e6
                times.append(rtt)
                worst[0] = max(worst[0], rtt)

        nursery.start_soon(echo)
        nursery.start_soon(application)
        friend_id = await target.wait_for_peer("friend")
        await friend.wait_for_peer("target")
        during, worst_during = Latencies(), [0.0]
        before, worst_before = Latencies(), [0.0]
        await round_trips(trio.current_time() + 1.0, before, worst_before)
        result["rss_before_mib"] = round(rss_kib() / 1024, 1)
        nursery.start_soon(ticker)
        hold = str(args.seconds + 5)
        argv = [sys.executable, __file__, "--attack", target.endpoint, args.scenario, str(count)]
        start = time.perf_counter()
        async with trio.open_nursery() as attack_scope:
            attack_scope.start_soon(trio.run_process, [*argv, hold])
            await round_trips(trio.current_time() + args.seconds, during, worst_during)
            result["flood_handled_s"] = round(time.perf_counter() - start, 2)
            attack_scope.cancel_scope.cancel()
        result["friend_rtt_before_us"] = {
            "p50": round(before.quantile(0.5)),
            "max": round(worst_before[0]),
        }
        result["friend_rtt_during_us"] = {
            "p50": round(during.quantile(0.5)),
            "max": round(worst_during[0]),
            "count": len(during),
        }
        result["longest_freeze_ms"] = round(freeze["max_s"] * 1000, 1)
        result["rss_peak_mib"] = round(rss_kib("VmHWM") / 1024, 1)
        result["hostile"] = {**seen, "hello_refused": rejected.is_set()}
        result["target_peers"] = sorted(target.peer_name(u) for u in target.peers())
        nursery.cancel_scope.cancel()
    result["rss_after_mib"] = round(rss_kib() / 1024, 1)
    return result


def cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenario", choices=["join-flood", "huge-hello"], default="join-flood")
    parser.add_argument("--joins", type=int, default=80_000)
    parser.add_argument("--groups", type=int, default=1_000_000)
    parser.add_argument("--max-peer-groups", type=int, default=None, help="the target's option")
    parser.add_argument(
        "--seconds", type=float, default=120.0, help="probe until the flood is handled, or this"
    )
    parser.add_argument("--json", type=Path, help="also write the result here")
    parser.add_argument("--attack", nargs=4, metavar=("ENDPOINT", "SCENARIO", "COUNT", "HOLD"))
    args = parser.parse_args()
    if args.attack:
        endpoint, scenario, count, hold = args.attack
        attack(endpoint, scenario, int(count), float(hold))
        return
    report(trio.run(main, args), args.json)


if __name__ == "__main__":
    cli()
