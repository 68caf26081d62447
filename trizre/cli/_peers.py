"""``trizre peers``: who is on the network, once.

Starts a node, listens for ``--wait`` seconds (beacons come every second,
so the default of 3 hears every peer at least twice), prints each peer
with its UUID, endpoint, groups, headers and presence, and exits.
``--json`` prints one JSON document instead of a table, for scripts.
Peers that entered and left while it listened are named on stderr: an
empty listing then does not read as "nobody was there".
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any
from uuid import UUID

import trio

from ..node._node import Node
from ..sansio._events import Enter, Exit
from ._common import add_node_options, open_command_node, positive_seconds, printable, run


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The command's options (see the module docstring)."""
    parser.add_argument(
        "--wait",
        type=positive_seconds,
        default=3.0,
        metavar="S",
        help="how long to listen before printing (default 3)",
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    add_node_options(parser)


def describe(node: Node, peer: UUID) -> dict[str, Any]:
    """One peer as the command prints it (and as ``--json`` gives it)."""
    groups = [g for g in node.peer_groups() if peer in node.peers_by_group(g)]
    return {
        "name": node.peer_name(peer),
        "uuid": str(peer),
        "endpoint": node.peer_address(peer),
        "groups": groups,
        "headers": node.peer_headers(peer),
        "presence": "alive" if node.peer_is_responsive(peer) else "evasive",
    }


async def _peers(args: argparse.Namespace) -> int:
    async with open_command_node(args, name="trizre-peers") as node:
        # Those that came and left while we listened: a listing that ends
        # up empty must not read as "nobody was there".
        left: dict[UUID, str] = {}
        with trio.move_on_after(args.wait):
            async for event in node.events():
                if isinstance(event, Exit):
                    left[event.peer] = event.name
                elif isinstance(event, Enter):
                    left.pop(event.peer, None)
        peers = sorted((describe(node, p) for p in node.peers()), key=lambda p: p["name"])
    if left:
        names = ", ".join(sorted(printable(name) for name in left.values()))
        print(f"{len(left)} peer(s) left before the listing: {names}", file=sys.stderr)
    if args.json:
        print(json.dumps({"peers": peers}, indent=2))
        return 0
    if not peers:
        print(f"no peers present after {args.wait:g} s", file=sys.stderr)
        return 0
    from rich.console import Console  # noqa: PLC0415 - only for the table
    from rich.table import Table  # noqa: PLC0415
    from rich.text import Text  # noqa: PLC0415 - cells as Text: peers' names are not markup

    table = Table(box=None, header_style="bold")
    for column in ("name", "uuid", "endpoint", "groups", "headers", "presence"):
        table.add_column(column, overflow="fold")
    for peer in peers:
        cells = (
            peer["name"],
            peer["uuid"],
            peer["endpoint"],
            ", ".join(peer["groups"]),
            ", ".join(f"{k}={v}" for k, v in peer["headers"].items()),
            peer["presence"],
        )
        table.add_row(*(Text(printable(cell)) for cell in cells))
    # Piped (grep, less): one line per peer, whatever the width.
    width = None if sys.stdout.isatty() else 1000
    Console(highlight=False, width=width).print(table)
    return 0


def main(args: argparse.Namespace) -> int:
    """Run ``trizre peers``; the exit code."""
    return run(_peers, args)
