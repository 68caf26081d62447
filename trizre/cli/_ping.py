"""``trizre ping NAME|UUID``: round trips to one peer until Ctrl-C, like ping.

Each round trip is a ZRE PING answered by the peer's PING-OK
(:meth:`trizre.Node.ping`), so any ZRE peer can be pinged: zyre, pyre or
trizre, with no echo server on the other side.  On Ctrl-C (or after
``--count`` pings) it prints how many were answered and the latency
percentiles, and exits 0 if any was answered, else 1.

The peer must appear within ``--wait`` seconds (default 5), else the
command fails at once, saying so and pointing to ``trizre peers``.  A name
that several present peers carry is refused, listing them: ping one by its
UUID.
"""

from __future__ import annotations

import argparse
import math
import sys
from uuid import UUID

import trio

from .._errors import NodeError
from ..node._node import Node
from ._common import (
    EXIT_FAILED,
    EXIT_OK,
    CommandError,
    add_node_options,
    open_command_node,
    positive_seconds,
    printable,
    run,
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The command's options (see the module docstring)."""
    parser.add_argument(
        "peer", metavar="NAME|UUID", help="the peer's name or UUID (as in trizre peers)"
    )
    parser.add_argument(
        "--wait",
        type=positive_seconds,
        default=5.0,
        metavar="S",
        help="seconds to wait for the peer to appear (default 5)",
    )
    parser.add_argument(
        "-c", "--count", type=_count, default=None, metavar="N", help="stop after N pings"
    )
    parser.add_argument(
        "-i",
        "--interval",
        type=positive_seconds,
        default=1.0,
        metavar="S",
        help="seconds between pings (default 1)",
    )
    parser.add_argument(
        "-W",
        "--timeout",
        type=positive_seconds,
        default=2.0,
        metavar="S",
        help="seconds to wait for each answer (default 2)",
    )
    add_node_options(parser)


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a count: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1: {value}")
    return value


def percentile(sorted_values: list[float], fraction: float) -> float:
    """The nearest-rank percentile of already sorted values (not empty)."""
    rank = max(1, math.ceil(fraction * len(sorted_values)))
    return sorted_values[rank - 1]


class Tally:
    """What was sent and answered, and the summary printed at the end."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.sent = 0
        self.rtts: list[float] = []

    def summary(self) -> str:
        """ping's closing lines: loss, then min/avg/max and percentiles in milliseconds."""
        received = len(self.rtts)
        if not self.sent:
            return f"--- {printable(self.name)} ping statistics ---\nno ping sent"
        loss = 100.0 * (self.sent - received) / self.sent if self.sent else 0.0
        lines = [
            f"--- {printable(self.name)} ping statistics ---",
            f"{self.sent} sent, {received} answered, {loss:.1f}% lost",
        ]
        if self.rtts:
            ms = sorted(rtt * 1000 for rtt in self.rtts)
            lines.append(
                f"rtt min/avg/max = {ms[0]:.3f}/{sum(ms) / len(ms):.3f}/{ms[-1]:.3f} ms, "
                f"p50 {percentile(ms, 0.5):.3f}, p90 {percentile(ms, 0.9):.3f}, "
                f"p99 {percentile(ms, 0.99):.3f} ms"
            )
        return "\n".join(lines)


def _target(text: str) -> str | UUID:
    """A UUID when the text is one (with or without dashes), else a name."""
    try:
        return UUID(text)
    except ValueError:
        return text


async def _find(node: Node, args: argparse.Namespace) -> UUID:
    """The peer to ping, within ``--wait`` seconds; CommandError if none, or several."""
    target = _target(args.peer)
    print(f"waiting for {printable(args.peer)} ...", file=sys.stderr, flush=True)
    with trio.move_on_after(args.wait):
        peer = await node.wait_for_peer(target)
        if isinstance(target, str) and len(same := node.find_peers(target)) > 1:
            listed = ", ".join(f"{uuid} at {node.peer_address(uuid)}" for uuid in same)
            raise CommandError(
                f"{len(same)} peers are named {printable(target)}: {listed}; ping one by its UUID"
            )
        return peer
    raise CommandError(
        f"no peer {printable(args.peer)} appeared within {args.wait:g} s "
        "(--wait S to wait longer; trizre peers lists the peers this node can see)"
    )


async def _ping(args: argparse.Namespace, tally: Tally) -> int:
    async with open_command_node(args, name="trizre-ping") as node:
        peer = await _find(node, args)
        try:
            endpoint = node.peer_address(peer)
            print(f"PING {printable(args.peer)} ({peer}) at {endpoint}", flush=True)
            while args.count is None or tally.sent < args.count:
                started = trio.current_time()
                tally.sent += 1
                try:
                    with trio.fail_after(args.timeout):
                        rtt = await node.ping(peer)
                except trio.TooSlowError:
                    print(f"no answer: seq={tally.sent}", flush=True)
                except NodeError:
                    print(f"{printable(args.peer)} left: seq={tally.sent}", flush=True)
                    peer = await node.wait_for_peer(_target(args.peer))
                    endpoint = node.peer_address(peer)
                else:
                    tally.rtts.append(rtt)
                    print(
                        f"answer from {endpoint}: seq={tally.sent} time={rtt * 1000:.3f} ms",
                        flush=True,
                    )
                if args.count is None or tally.sent < args.count:
                    await trio.sleep_until(started + args.interval)
        finally:
            print(tally.summary(), flush=True)
    return EXIT_OK if tally.rtts else EXIT_FAILED


def main(args: argparse.Namespace) -> int:
    """Run ``trizre ping``; the exit code (0 when any ping was answered)."""
    tally = Tally(args.peer)
    return run(
        lambda a: _ping(a, tally),
        args,
        on_signal=lambda: EXIT_OK if tally.rtts else EXIT_FAILED,
    )
