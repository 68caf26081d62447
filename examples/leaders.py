"""Leader election on loopback: three nodes contest a group; the leader leaves; two elect again.

    .venv/bin/python examples/leaders.py [--port 5670]

Everything stays on ``lo`` (``interface="lo"``). The winner is the
contester with the lowest UUID, so which name wins changes from run to
run; that all agree does not. A zyre node contesting the same group on the
same network would take part (``docs/elections.md``).
"""

from __future__ import annotations

import argparse
from contextlib import AsyncExitStack

import trio

import trizre

GROUP = "workers"


async def agreed(nodes: list[trizre.Node], streams: list[trizre.EventStream]) -> trizre.Node:
    """Wait until every node names the same leader among ``nodes``; return it."""
    while True:
        leaders = {node.leader(GROUP) for node in nodes}
        if len(leaders) == 1 and (winner := leaders.pop()) in {n.uuid for n in nodes}:
            return next(n for n in nodes if n.uuid == winner)
        # Not yet: wait for any node's next Leader event.
        async with trio.open_nursery() as nursery:

            async def next_leader(stream: trizre.EventStream) -> None:
                async for event in stream:
                    if isinstance(event, trizre.Leader):
                        nursery.cancel_scope.cancel()

            for stream in streams:
                nursery.start_soon(next_leader, stream)


async def main(port: int) -> None:
    async with AsyncExitStack() as stack:
        nodes, streams = [], []
        for name in ("ann", "bob", "cy"):
            node = await stack.enter_async_context(
                trizre.open_node(name, interface="lo", beacon_port=port, beacon_interval=0.1)
            )
            nodes.append(node)
            streams.append(node.events())
        for node in nodes:
            await node.contest(GROUP)
            await node.join(GROUP)
        with trio.fail_after(30):
            for node in nodes:
                for other in nodes:
                    if other is not node:
                        await node.wait_for_peer(other.uuid)
            leader = await agreed(nodes, streams)
        print(f"all three agree: {leader.name} leads (the lowest UUID, {leader.uuid})")

        index = nodes.index(leader)
        await leader.leave(GROUP)
        print(f"{leader.name} leaves {GROUP}")
        rest, rest_streams = (
            nodes[:index] + nodes[index + 1 :],
            streams[:index] + streams[index + 1 :],
        )
        with trio.fail_after(30):
            leader = await agreed(rest, rest_streams)
        names = " and ".join(n.name for n in rest)
        print(f"{names} agree: {leader.name} leads now")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--port", type=int, default=5670, help="UDP beacon port")
    trio.run(main, parser.parse_args().port)
