"""A hostile peer floods a node with valid ZRE messages; a second peer's round trip is measured.

Two nodes on ``lo`` (TCP links), "target" and "friend" (which echoes every
WHISPER), measure their round trip; then a child process (the attacker,
with its own CPU and GIL) connects a DEALER to the target, says HELLO and
sends random valid messages in sequence (60 % WHISPER, SHOUT, JOIN/LEAVE
with changing status, PING, PING-OK) at ``--rate`` a second for
``--seconds``.  The target's application reads every event.  Printed: the
friend's round trip p50/p99 before and during, the attacker's WHISPERs
sent and received in order, and a verdict against issue 11's targets
(round trip within 2x, nothing lost, the node still serving both).

    .venv/bin/python benchmarks/bench_hostile_peer.py --rate 10000 --seconds 60
"""

from __future__ import annotations

import argparse
import random
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

WHISPER_SHARE = 0.6


def attack(endpoint: str, rate: int, seconds: float) -> int:
    """The child: HELLO, then valid messages at ``rate``; returns the WHISPERs sent."""
    import zmq  # noqa: PLC0415

    ctx = zmq.Context()
    inbox = ctx.socket(zmq.ROUTER)  # where the target's DEALER says HELLO and PINGs us
    port = inbox.bind_to_random_port("tcp://127.0.0.1", 49152, 65000)
    out = ctx.socket(zmq.DEALER)
    out.setsockopt(zmq.IDENTITY, b"\x01" + uuid.uuid4().bytes)
    out.setsockopt(zmq.SNDHWM, 0)  # the attacker does not care about its own memory
    out.connect(endpoint)
    seq = 1
    out.send_multipart(wire.encode(wire.Hello(seq, f"tcp://127.0.0.1:{port}", (), 0, "hostile")))
    rng = random.Random(7)
    whispers = status = sent = 0
    start = time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds:
        due = int(elapsed * rate) + 1
        while sent < due:
            seq = (seq + 1) & 0xFFFF
            roll = rng.random()
            if roll < WHISPER_SHARE:
                message: wire.Message = wire.Whisper(seq, (whispers.to_bytes(4, "big"),))
                whispers += 1
            elif roll < 0.75:
                message = wire.Shout(seq, f"g{rng.randrange(8)}", (rng.randbytes(16),))
            elif roll < 0.9:
                status = (status + 1) % 256
                kind = wire.Join if rng.random() < 0.5 else wire.Leave
                message = kind(seq, f"g{rng.randrange(8)}", status)
            elif roll < 0.95:
                message = wire.Ping(seq)
            else:
                message = wire.PingOk(seq)
            out.send_multipart(wire.encode(message))
            sent += 1
        while inbox.poll(0):
            inbox.recv_multipart()
        time.sleep(0.001)
    seq = (seq + 1) & 0xFFFF
    out.send_multipart(wire.encode(wire.Whisper(seq, (b"last",))))
    time.sleep(0.5)  # let libzmq hand the tail over before closing
    out.close(linger=2000)
    inbox.close(linger=0)
    ctx.term()
    return whispers


async def round_trips(
    node: trizre.Node,
    friend: uuid.UUID,
    replies: trio.MemoryReceiveChannel[bytes],
    until: float,
    times: Latencies | None = None,
) -> Latencies:
    times = Latencies() if times is None else times
    while trio.current_time() < until:
        start = time.perf_counter()
        token = uuid.uuid4().bytes
        await node.whisper(friend, token)
        while await replies.receive() != token:
            pass
        times.append((time.perf_counter() - start) * 1e6)
    return times


def p(values: Latencies, q: float) -> float:
    return values.quantile(q)


async def main(args: argparse.Namespace) -> dict[str, Any]:
    port = free_udp_port()
    opts: dict[str, Any] = {"interface": "lo", "beacon_port": port, "local_links": False}
    result: dict[str, Any] = {"rate": args.rate, "seconds": args.seconds}
    hostile: dict[str, Any] = {"received": 0, "in_order": True}
    last = trio.Event()
    send_reply, replies = trio.open_memory_channel[bytes](1000)
    async with (
        trizre.open_node("target", **opts) as target,
        trizre.open_node("friend", **opts) as friend,
        trio.open_nursery() as nursery,
    ):

        async def echo() -> None:
            async for event in friend.events():
                if isinstance(event, trizre.Whisper):
                    await friend.whisper(event.peer, *event.frames)

        async def application() -> None:
            """The target's reader: every event, as an application would."""
            async for event in target.events(max_buffer=10_000):
                if not isinstance(event, trizre.Whisper):
                    continue
                if event.name == "friend":
                    await send_reply.send(event.frames[0])
                elif event.frames == (b"last",):
                    # Judged now: the attacker closes its sockets next, and a
                    # closed link rightly ends its peer at once.
                    result["target_still_has_both"] = {"friend", "hostile"} <= {
                        target.peer_name(u) for u in target.peers()
                    }
                    last.set()
                else:
                    expected = hostile["received"].to_bytes(4, "big")
                    hostile["in_order"] &= event.frames == (expected,)
                    hostile["received"] += 1

        nursery.start_soon(echo)
        nursery.start_soon(application)
        friend_id = await target.wait_for_peer("friend")
        await friend.wait_for_peer("target")
        await round_trips(target, friend_id, replies, trio.current_time() + 0.5)  # warm up
        base = await round_trips(target, friend_id, replies, trio.current_time() + args.probe)
        result["rtt_before_us"] = {"p50": round(p(base, 0.5)), "p99": round(p(base, 0.99))}
        during = Latencies()
        flood_end = trio.current_time() + args.seconds

        async def probe() -> None:
            with trio.fail_after(args.seconds + 60):  # a lost reply must not hang the bench
                await round_trips(target, friend_id, replies, flood_end, during)

        async with trio.open_nursery() as flood:
            flood.start_soon(probe)
            argv = [
                sys.executable,
                __file__,
                "--attack",
                target.endpoint,
                str(args.rate),
                str(args.seconds),
            ]
            done = await trio.run_process(argv, capture_stdout=True)
            sent = int(done.stdout.decode().strip())
        with trio.fail_after(30):
            await last.wait()
        result["rtt_during_us"] = {"p50": round(p(during, 0.5)), "p99": round(p(during, 0.99))}
        result["friend_round_trips_during"] = len(during)
        result["hostile_whispers"] = {"sent": sent, **hostile}
        nursery.cancel_scope.cancel()
    result["verdict"] = {
        "rtt_p50_within_2x": result["rtt_during_us"]["p50"] <= 2 * result["rtt_before_us"]["p50"],
        "nothing_lost": hostile["received"] == sent and hostile["in_order"] and len(during) > 0,
        "node_serves_both": result["target_still_has_both"],
    }
    return result


def cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=int, default=10_000, help="hostile messages a second")
    parser.add_argument("--seconds", type=float, default=10.0, help="how long the flood lasts")
    parser.add_argument("--probe", type=float, default=2.0, help="baseline round trips, seconds")
    parser.add_argument("--json", type=Path, help="also write the result here")
    parser.add_argument("--quick", action="store_true", help="a tiny run (smoke test)")
    parser.add_argument("--attack", nargs=3, metavar=("ENDPOINT", "RATE", "SECONDS"))
    args = parser.parse_args()
    if args.attack:
        endpoint, rate, seconds = args.attack
        print(attack(endpoint, int(rate), float(seconds)))
        return
    if args.quick:
        args.rate, args.seconds, args.probe = 2000, 1.0, 0.3
    report(trio.run(main, args), args.json)


if __name__ == "__main__":
    cli()
