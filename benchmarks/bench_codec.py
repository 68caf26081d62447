"""Micro-benchmark of the sans-I/O wire codec (no sockets, no network).

Run: ``.venv/bin/python benchmarks/bench_codec.py [--repeat N]``

For each case it times ``encode``/``decode`` (or ``encode_beacon``/
``decode_beacon``) with :mod:`timeit`, takes the best of ``--repeat`` runs
(the least disturbed by other load on a shared machine) and prints a
Markdown table of the cost per message in microseconds and messages/s.
"""

from __future__ import annotations

import argparse
import datetime
import platform
import sys
import timeit
import uuid
from collections.abc import Callable
from typing import Any

from trizre.wire import (
    Beacon,
    Hello,
    Ping,
    Shout,
    Whisper,
    decode,
    decode_beacon,
    encode,
    encode_beacon,
)

PAYLOAD = bytes(range(100))

MESSAGES: list[tuple[str, Any]] = [
    (
        "HELLO (2 groups, 2 headers)",
        Hello(
            1,
            "tcp://192.168.1.20:49152",  # ok-net: a string inside a HELLO, never connected to
            ("GLOBAL", "chat"),
            2,
            "node-Zoë",
            {"X-TYPE": "worker", "X-CITY": "Zürich"},
        ),
    ),
    ("WHISPER (1 frame, 100 B)", Whisper(42, (PAYLOAD,))),
    ("SHOUT (1 frame, 100 B)", Shout(42, "GLOBAL", (PAYLOAD,))),
    ("PING", Ping(42)),
]

BEACONS: list[tuple[str, Beacon]] = [
    ("beacon v1 (22 octets)", Beacon(uuid.UUID(int=0x0123456789ABCDEF), 49152)),
    (
        "beacon v3 + CURVE key (54 octets)",
        Beacon(uuid.UUID(int=0x0123456789ABCDEF), 49152, version=3, public_key=bytes(32)),
    ),
]


def best_cost(func: Callable[[Any], Any], arg: Any, repeat: int) -> float:
    """Return the best per-call cost of ``func(arg)`` in seconds."""
    timer = timeit.Timer("func(arg)", globals={"func": func, "arg": arg})
    number, _ = timer.autorange()
    number = max(number, 10_000)
    return min(timer.repeat(repeat=repeat, number=number)) / number


def row(name: str, encode_cost: float, decode_cost: float) -> str:
    return (
        f"| {name} | {encode_cost * 1e6:.2f} | {1 / encode_cost:,.0f} "
        f"| {decode_cost * 1e6:.2f} | {1 / decode_cost:,.0f} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7, help="timeit repeats (best is kept)")
    args = parser.parse_args()

    rows = []
    for name, msg in MESSAGES:
        frames = encode(msg)
        assert decode(frames) == msg
        rows.append(
            row(name, best_cost(encode, msg, args.repeat), best_cost(decode, frames, args.repeat))
        )
    for name, beacon in BEACONS:
        data = encode_beacon(beacon)
        assert decode_beacon(data) == beacon
        rows.append(
            row(
                name,
                best_cost(encode_beacon, beacon, args.repeat),
                best_cost(decode_beacon, data, args.repeat),
            )
        )

    print(
        f"trizre.wire codec, Python {platform.python_version()} "
        f"({sys.implementation.name}), {platform.machine()}, "
        f"{datetime.date.today().isoformat()}; best of {args.repeat} timeit runs"
    )
    print()
    print("| case | encode µs | encode msg/s | decode µs | decode msg/s |")
    print("|---|---:|---:|---:|---:|")
    for line in rows:
        print(line)


if __name__ == "__main__":
    main()
