"""Several trizre nodes in one process, all contesting one group, over JSON lines.

The election scenario of issue 32: nodes of one Trio run link in memory,
so they meet each other long before they meet any other process's nodes.
Run only inside a network namespace the test created:

    ip netns exec NS python tests/interop/trizre_nodes_agent.py --nodes 2 --contest G

Each node subscribes to its events, then contests, then joins, as a user
would.  Events are the protocol's (``tests/interop/__init__.py``), each
with ``"node": i``; ``started`` once, listing every node's UUID in
``uuids``.  Commands: ``stop`` (or stdin EOF) ends the run.
"""

from __future__ import annotations

import argparse
import json
import sys
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.support.agents import emit, emit_logs, run_agent


def _uuids_starting_with(digit: str) -> None:
    """Every node's UUID begins with ``digit``: pick which side of a group holds the lowest."""
    import trizre.node._node  # noqa: PLC0415

    def uuid4() -> uuid.UUID:
        return uuid.UUID(hex=digit + uuid.uuid4().hex[1:])

    trizre.node._node.uuid4 = uuid4  # type: ignore[attr-defined]


async def run(args: argparse.Namespace) -> int:
    import trio  # noqa: PLC0415

    import trizre  # noqa: PLC0415

    if args.log:
        emit_logs()
    if args.uuid_first_digit:
        _uuids_starting_with(args.uuid_first_digit)

    async def one(i: int, task_status: Any) -> None:
        async with trizre.open_node(
            f"{args.name}{i}",
            interface=args.interface,
            election_timeout=args.election_timeout,
        ) as node:
            events = node.events()
            task_status.started(node.uuid.hex)
            for group in args.contest:
                await node.contest(group)
            for group in args.group:
                await node.join(group)
            async for event in events:
                if isinstance(event, trizre.Leader):
                    emit(event="LEADER", node=i, peer=event.peer.hex, group=event.group)
                elif isinstance(event, trizre.Enter | trizre.Exit):
                    emit(event=type(event).__name__.upper(), node=i, peer=event.peer.hex)

    async def obey() -> None:
        while True:
            line = await trio.to_thread.run_sync(sys.stdin.readline, abandon_on_cancel=True)
            if not line or json.loads(line).get("cmd") == "stop":
                return

    with trio.move_on_after(args.max_seconds) as scope:
        async with trio.open_nursery() as nursery:
            uuids = [await nursery.start(one, i) for i in range(args.nodes)]
            emit(event="started", uuid=uuids[0], uuids=uuids, name=args.name)
            await obey()
            nursery.cancel_scope.cancel()
    if scope.cancelled_caught:
        emit(event="timeout")
    emit(event="STOP")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--name", default="t")
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--group", action="append", default=[])
    parser.add_argument("--contest", action="append", default=[])
    parser.add_argument("--interface", default=None)
    parser.add_argument("--election-timeout", type=float, default=5.0)
    parser.add_argument("--uuid-first-digit", default="", help="every node's UUID begins so")
    parser.add_argument("--max-seconds", type=float, default=60.0)
    parser.add_argument("--log", action="store_true", help="emit trizre's log records as events")
    return run_agent(run, parser.parse_args())


if __name__ == "__main__":
    sys.exit(main())
