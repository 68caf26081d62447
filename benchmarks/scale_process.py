"""One process of the scale run (``benchmarks/scale.py``): many nodes, maybe a pattern role.

    python benchmarks/scale_process.py INDEX --nodes K --port P --run DIR [--role ROLE]

Opens ``K`` nodes named ``nINDEX-k`` on ``lo`` of the run's namespace (in
memory between themselves, TCP to the other processes), writes
``DIR/status/INDEX.json`` every second (the fewest and most peers any of
its nodes sees), and serves or sends according to ``--role``:

* ``clients``: four client nodes, one per pattern, wait for SIGUSR1,
  send ``--rate`` requests/s in all until SIGTERM, then finish what is in
  flight and write their tallies to ``DIR/counts/NAME.json``
  (``chaos_role.Tally``);
* ``bstar-primary``, ``bstar-backup``, ``titanic``: that server on node 0;
* ``servers``: an ``echo`` worker on node 0 and a Freelance server
  ``fINDEX`` on node 1.

``--unwatched`` opens the nodes with ``watch_links=False`` (no socket
monitor on TCP links: 3 descriptors a pair of nodes in different processes,
not 5).  SIGTERM stops the process cleanly; SIGKILL is a fault the run injects.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import time
import traceback
from contextlib import AsyncExitStack
from dataclasses import asdict
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import trio

import trizre
from benchmarks.chaos_role import POLICIES, SERVICE, Tally, _client_loop, _write, echo
from trizre import patterns
from trizre.patterns import RetryPolicy

NODE_OPTIONS: dict[str, Any] = {
    "interface": "lo",
    "beacon_interval": 2.0,
    "evasive_timeout": 15.0,
    "expired_timeout": 45.0,
    "beacons_refresh": True,  # an idle mesh then sends no PINGs at all
}
"""A big mesh: slower beacons (500 nodes beaconing every 2 s is 125,000
beacons/s delivered in all), and presence proven by beacons, not PINGs."""

PAIR = ("n01-0", "n02-0")
BSTAR_HEARTBEAT = 1.0


def freelance_servers(processes: int) -> list[str]:
    return [f"n{i:02d}-1" for i in range(4, processes)]


async def until_terminated() -> None:
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async for _ in signals:
            return


async def report(index: int, nodes: list[trizre.Node], run: Path) -> None:
    """Every second: the fewest and most peers a node here knows, and the loop's worst stall.

    ``stall_max`` is how late this task's one-second sleep ever woke: a
    process whose loop stalls past a Binary Star failover timeout can go
    ACTIVE beside its partner, and the verdict should say so.
    """
    stall_max = 0.0
    while True:
        counts = [len(node.peers()) for node in nodes]
        _write(
            run / "status" / f"{index}.json",
            json.dumps(
                {"t": time.time(), "min": min(counts), "max": max(counts), "stall_max": stall_max}
            ),
        )
        woken = trio.current_time() + 1.0
        await trio.sleep(1.0)
        stall_max = max(stall_max, trio.current_time() - woken)


async def clients(args: argparse.Namespace, nodes: list[trizre.Node]) -> None:
    """Ready once every client found its servers; load from SIGUSR1 to SIGTERM."""
    stop, go = trio.Event(), trio.Event()
    found = 0
    drain_until = [float("inf")]
    roles = ("client-service", "client-bstar", "client-titanic", "client-freelance")

    async def one(node: trizre.Node, role: str) -> None:
        tally = Tally(node=node.uuid.hex, name=node.name, role=role)
        options = SimpleNamespace(
            name=node.name,
            role=role,
            primary_name=PAIR[0],
            backup_name=PAIR[1],
            servers=freelance_servers(args.processes),
            drain=60.0,
        )
        async with _client_loop(options, node, POLICIES[role], tally, stop, drain_until) as send:
            nonlocal found
            found += 1
            if found == len(roles):
                _write(args.run / "ready" / str(args.index), str(os.getpid()))
            await go.wait()

            async def lane(number: int) -> None:
                seq = 0
                rate = args.rate / len(roles) / 4
                while not stop.is_set():
                    seq += 1
                    await send(f"{node.name}:{number}:{seq}".encode())
                    with trio.move_on_after(random.expovariate(rate)):
                        await stop.wait()

            async with trio.open_nursery() as lanes:
                for number in range(4):
                    lanes.start_soon(lane, number)
        _write(args.run / "counts" / f"{node.name}.json", json.dumps(asdict(tally)))

    with trio.open_signal_receiver(signal.SIGUSR1) as go_signal:
        async with trio.open_nursery() as nursery:
            for node, role in zip(nodes, roles, strict=False):
                nursery.start_soon(one, node, role)
            async for _ in go_signal:
                go.set()
                break
            await until_terminated()
            drain_until[0] = trio.current_time() + 60.0
            stop.set()


async def main(args: argparse.Namespace) -> None:
    async with AsyncExitStack() as stack:
        nodes = []
        for k in range(args.nodes):
            traced = args.role != "none" and k < 4
            nodes.append(
                await stack.enter_async_context(
                    trizre.open_node(
                        f"n{args.index:02d}-{k}",
                        beacon_port=args.port,
                        trace_dir=args.run / "traces" if traced else None,
                        watch_links=not args.unwatched,
                        **NODE_OPTIONS,
                    )
                )
            )
        nursery = await stack.enter_async_context(trio.open_nursery())
        nursery.start_soon(report, args.index, nodes, args.run)
        role = args.role
        if role == "clients":
            await clients(args, nodes)
        else:
            if role in ("bstar-primary", "bstar-backup"):
                primary = role == "bstar-primary"
                await stack.enter_async_context(
                    patterns.open_binary_star_server(
                        nodes[0],
                        echo,
                        primary=primary,
                        partner=PAIR[1] if primary else PAIR[0],
                        heartbeat=BSTAR_HEARTBEAT,
                        reply_cache=patterns.ReplyCache(),
                    )
                )
            elif role == "titanic":
                await stack.enter_async_context(
                    patterns.open_titanic(
                        nodes[0],
                        args.run / "titanic.db",
                        policy=RetryPolicy(attempt_timeout=2.0, attempts=3),
                    )
                )
            elif role == "servers":
                await stack.enter_async_context(
                    patterns.open_server(
                        nodes[0],
                        echo,
                        service=SERVICE,
                        reply_cache=patterns.ReplyCache(per_client=False),
                    )
                )
                await stack.enter_async_context(
                    patterns.open_server(nodes[1], echo, reply_cache=patterns.ReplyCache())
                )
            _write(args.run / "ready" / str(args.index), str(os.getpid()))
            await until_terminated()
        nursery.cancel_scope.cancel()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("index", type=int)
    parser.add_argument("--nodes", type=int, required=True)
    parser.add_argument("--processes", type=int, required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--run", type=Path, required=True)
    parser.add_argument("--rate", type=float, default=100.0, help="clients: requests/s in all")
    parser.add_argument(
        "--role",
        choices=("none", "clients", "bstar-primary", "bstar-backup", "titanic", "servers"),
        default="none",
    )
    parser.add_argument("--unwatched", action="store_true", help="nodes with watch_links=False")
    try:
        trio.run(main, parser.parse_args())
    except BaseExceptionGroup as group:
        # One nursery a node nests the group past Python's printing depth
        # (10): print what actually failed, then fail as before.
        def leaves(error: BaseException) -> list[BaseException]:
            if isinstance(error, BaseExceptionGroup):
                return [leaf for inner in error.exceptions for leaf in leaves(inner)]
            return [error]

        for leaf in leaves(group):
            traceback.print_exception(leaf, limit=-12)
        raise
