"""``trizre chat GROUP``: a line-based chat over a ZRE group.

Joins GROUP, prints what its members SHOUT to it (``<name> text``) and who
joins, leaves or goes, and SHOUTs each line typed.  End of input (Ctrl-D)
leaves the group and exits 0; Ctrl-C and SIGTERM exit as every command.
Peers' names and text are printed with control characters escaped.  It
talks with zyre's and pyre's chat examples too (any ZRE peer SHOUTing
text to the group).
"""

from __future__ import annotations

import argparse
import getpass
import sys

import trio

from ..sansio._events import Event, Exit, Join, Leave, Shout
from ._common import CommandError, add_node_options, open_command_node, printable, run


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The command's options (see the module docstring)."""
    parser.add_argument("group", metavar="GROUP", help="the ZRE group to chat in")
    add_node_options(parser)


def show(event: Event, group: str) -> str | None:
    """The line printed for an event, or ``None`` for events a chat ignores."""
    if isinstance(event, Shout) and event.group == group:
        text = b" ".join(event.frames).decode("utf-8", "replace")
        return f"<{printable(event.name)}> {printable(text)}"
    if isinstance(event, Join) and event.group == group:
        return f"* {printable(event.name)} joined"
    if isinstance(event, Leave) and event.group == group:
        return f"* {printable(event.name)} left"
    if isinstance(event, Exit):
        return f"* {printable(event.name)} is gone"
    return None


async def _chat(args: argparse.Namespace) -> int:
    group: str = args.group
    if not group or len(group.encode()) > 255:
        raise CommandError(f"a group name has 1 to 255 UTF-8 bytes: {group!r}")
    name = args.name or getpass.getuser()
    async with open_command_node(args, name=name) as node:
        events = node.events()
        await node.join(group)
        print(f"* chatting in {printable(group)} as {printable(node.name)}", flush=True)
        # Peers met before we subscribed joined without an event we could
        # see: say who is here, and not again when their JOIN comes through.
        here = set(node.peers_by_group(group))
        for peer in here:
            print(f"* {printable(node.peer_name(peer))} is here", flush=True)

        async def print_events() -> None:
            async for event in events:
                if isinstance(event, Join) and event.peer in here:
                    here.discard(event.peer)  # announced already
                    continue
                if isinstance(event, Leave | Exit):
                    here.discard(event.peer)
                if (line := show(event, group)) is not None:
                    print(line, flush=True)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(print_events)
            while True:
                # A thread per line, abandoned on Ctrl-C: a blocking read of
                # a terminal cannot be cancelled, and must not hold up exit.
                line = await trio.to_thread.run_sync(sys.stdin.readline, abandon_on_cancel=True)
                if not line:
                    break  # end of input
                if text := line.rstrip("\n"):
                    await node.shout(group, text.encode())
            await node.leave(group)
            nursery.cancel_scope.cancel()
    return 0


def main(args: argparse.Namespace) -> int:
    """Run ``trizre chat``; the exit code."""
    return run(_chat, args)
