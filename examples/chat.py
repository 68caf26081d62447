"""A tiny chat over a ZRE group, on loopback.

Interactive, one terminal per person (type lines; Ctrl-D leaves):

    python examples/chat.py alice
    python examples/chat.py bob

Without broadcast (containers, clouds, VPNs), by gossip, as zyre's gossip
mode: one person serves the gossip, the others join it.  Everything stays
on this machine here (ipc sockets, inboxes on 127.0.0.1); across machines,
use tcp:// endpoints of addresses the others can reach:

    python examples/chat.py alice --serve-gossip ipc:///tmp/trizre-chat
    python examples/chat.py bob --gossip ipc:///tmp/trizre-chat

Scripted, three people in one process, for a quick look:

    python examples/chat.py --demo
"""

from __future__ import annotations

import argparse
import sys

import trio

import trizre

GROUP = "chat"
PORT = 5670  # ZRE's discovery port, on loopback only (interface="lo")


def show(event: trizre.Event) -> str | None:
    """One line for the events a chat user cares about."""
    if isinstance(event, trizre.Shout) and event.group == GROUP:
        text = b" ".join(event.frames).decode("utf-8", "replace")
        return f"<{event.name}> {text}"
    if isinstance(event, trizre.Join) and event.group == GROUP:
        return f"* {event.name} joined"
    if isinstance(event, trizre.Leave) and event.group == GROUP:
        return f"* {event.name} left"
    if isinstance(event, trizre.Exit):
        return f"* {event.name} is gone"
    return None


def discovery(args: argparse.Namespace) -> dict[str, object]:
    """open_node's discovery options: beacons on lo, or gossip."""
    if args.serve_gossip or args.gossip:
        return {
            "discovery": "gossip",
            "endpoint": "tcp://127.0.0.1:*",  # loopback: this machine only
            "gossip_bind": args.serve_gossip,
            "gossip_connect": args.gossip or (),
        }
    return {"interface": "lo", "beacon_port": args.port}


async def interactive(name: str, options: dict[str, object]) -> None:
    async with trizre.open_node(name, **options) as node:  # type: ignore[arg-type]
        events = node.events()
        await node.join(GROUP)

        async def print_events() -> None:
            async for event in events:
                if (line := show(event)) is not None:
                    print(line, flush=True)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(print_events)
            while line := await read_line():
                if line.strip():
                    await node.shout(GROUP, line.rstrip("\n").encode())
            nursery.cancel_scope.cancel()


async def read_line() -> str:
    """One line of stdin ('' at its end), in a thread that Ctrl-C abandons.

    A blocking read of a terminal cannot be cancelled; abandoning its thread
    lets Ctrl-C end the program at once instead of after the next Enter.
    """
    return await trio.to_thread.run_sync(sys.stdin.readline, abandon_on_cancel=True)


async def demo() -> None:
    """Three nodes chat in one process; prints what each one hears."""
    script = [("alice", "hi all"), ("bob", "hello alice"), ("Zoë", "grüß euch")]
    port = PORT + 1000  # not the well-known port: a demo must not meet real chats
    with trio.fail_after(10):
        async with (
            trizre.open_node("alice", interface="lo", beacon_port=port) as alice,
            trizre.open_node("bob", interface="lo", beacon_port=port) as bob,
            trizre.open_node("Zoë", interface="lo", beacon_port=port) as zoe,
        ):
            nodes = {"alice": alice, "bob": bob, "Zoë": zoe}
            streams = {name: node.events() for name, node in nodes.items()}
            for node in nodes.values():
                await node.join(GROUP)
            # Wait until everyone knows everyone is in the group.
            for node in nodes.values():
                while len(node.peers_by_group(GROUP)) < 2:
                    await streams[node.name].receive()
            for speaker, text in script:
                await nodes[speaker].shout(GROUP, text.encode())
            # Each person hears the other two, in the order each spoke.
            for listener, stream in streams.items():
                heard = 0
                while heard < len(script) - 1:
                    event = await stream.receive()
                    if isinstance(event, trizre.Shout):
                        heard += 1
                        print(f"{listener:>5} hears {show(event)}")
            await bob.leave(GROUP)
            event = await streams["alice"].receive()
            while not isinstance(event, trizre.Leave):
                event = await streams["alice"].receive()
            print(f"alice hears {show(event)}")
            print(f"alice's view of {GROUP!r}: {len(alice.peers_by_group(GROUP))} other member(s)")


def main() -> None:
    parser = argparse.ArgumentParser(description="A tiny ZRE group chat on loopback.")
    parser.add_argument("name", nargs="?", help="your name in the chat")
    parser.add_argument("--demo", action="store_true", help="run a scripted three-person chat")
    parser.add_argument("--port", type=int, default=PORT, help="UDP discovery port (on lo)")
    parser.add_argument("--serve-gossip", metavar="ENDPOINT", help="serve gossip discovery here")
    parser.add_argument("--gossip", metavar="ENDPOINT", help="join the gossip served there")
    args = parser.parse_args()
    interrupted = False
    try:
        if args.demo or not args.name:
            trio.run(demo)
        else:
            trio.run(interactive, args.name, discovery(args))
    except* KeyboardInterrupt:  # Ctrl-C: the node has left cleanly; no traceback
        interrupted = True
    if interrupted:
        print("* bye", file=sys.stderr)
        sys.exit(130)


if __name__ == "__main__":
    main()
