"""Micro-benchmark of the peer protocol's inbound fast path (no sockets, no Trio).

Run: ``.venv/bin/python benchmarks/bench_peer_run.py [--repeat N] [--batch N]``

``PeerProtocol.receive_run`` over a batch of data messages from one ready
peer, as the node's reader hands it a ROUTER's batch: WHISPERs, SHOUTs to
one group, and SHOUTs alternating between two groups (each switch goes
through ``wire.shout_header`` once).  Each figure is the best of
``--repeat`` timeit runs (the least disturbed by other load), per message;
the events made (a ``Whisper`` or ``Shout`` each) are part of the cost.
"""

from __future__ import annotations

import argparse
import datetime
import platform
import sys
import timeit
import uuid

from trizre import wire
from trizre.sansio._peer import PeerProtocol

IDENTITY = b"\x01" + uuid.UUID(int=1).bytes
PAYLOAD = bytes(range(100))


def ready_peer() -> PeerProtocol:
    """A peer protocol that has taken its peer's HELLO (numbered 1)."""
    ours = wire.Hello(1, "tcp://127.0.0.1:49152", (), 1, "us", ())
    peer = PeerProtocol(
        uuid.UUID(int=1), "tcp://127.0.0.1:49153", ours, now=0.0, evasive=5.0, expired=30.0
    )
    theirs = wire.Hello(1, "tcp://127.0.0.1:49153", ("a", "b"), 1, "them", ())
    peer.receive([IDENTITY, *wire.encode(theirs)], 0.0)
    assert peer.ready
    return peer


def batch_of(kind: str, size: int) -> list[list[bytes]]:
    """``size`` messages numbered from 2 (the first after the HELLO)."""
    batch = []
    for i, seq in enumerate(range(2, 2 + size)):
        message: wire.Message
        if kind == "whisper":
            message = wire.Whisper(seq, (PAYLOAD,))
        else:
            group = "b" if kind == "shout, two groups" and i % 2 else "a"
            message = wire.Shout(seq, group, (PAYLOAD,))
        batch.append([IDENTITY, *wire.encode(message)])
    return batch


def cost(kind: str, size: int, repeat: int) -> float:
    """Best seconds a message through ``receive_run``, over batches of ``size``."""
    peer = ready_peer()
    batch = batch_of(kind, size)

    def run() -> None:
        peer.in_seq = 1  # the same batch again, in sequence
        _events, taken = peer.receive_run(batch, 0, 1.0)
        if taken != size:
            raise AssertionError(f"{kind}: the run took {taken} of {size}")

    run()
    timer = timeit.Timer(run)
    number, _ = timer.autorange()
    return min(timer.repeat(repeat=repeat, number=number)) / number / size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7, help="timeit repeats (best is kept)")
    parser.add_argument("--batch", type=int, default=100, help="messages a batch (default 100)")
    args = parser.parse_args()
    if args.repeat < 1 or args.batch < 1:
        parser.error("--repeat and --batch must be at least 1")
    print(
        f"PeerProtocol.receive_run, Python {platform.python_version()} "
        f"({sys.implementation.name}), {platform.machine()}, "
        f"{datetime.date.today().isoformat()}; batches of {args.batch}, "
        f"best of {args.repeat} timeit runs"
    )
    print()
    print("| batch of | ns a message | messages/s |")
    print("|---|---:|---:|")
    for kind in ("whisper", "shout, one group", "shout, two groups"):
        seconds = cost(kind, args.batch, args.repeat)
        print(f"| {kind} | {seconds * 1e9:,.0f} | {1 / seconds:,.0f} |")


if __name__ == "__main__":
    main()
