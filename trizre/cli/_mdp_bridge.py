"""``trizre mdp-bridge``: a Majordomo broker endpoint over trizre services.

Existing Majordomo clients (MDP/0.1, MDP/0.2, majortomo) connect to
``--bind`` and call trizre services; Majordomo workers connect and serve
trizre clients (see ``docs/mdp-bridge.md``).  ``--bind`` is loopback by
default and anything else needs ``--allow-remote``: the endpoint has no
authentication.  Prints the endpoint bound; Ctrl-C and SIGTERM stop it.
"""

from __future__ import annotations

import argparse
import logging
import re

from ._common import CommandError, add_node_options, open_command_node, positive_seconds, run
from ._web import AddressError, parse_address


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The command's options (see the module docstring)."""
    parser.add_argument(
        "--bind",
        default="tcp://127.0.0.1:5555",
        metavar="ENDPOINT",
        help="the broker endpoint (default tcp://127.0.0.1:5555; :* picks a port)",
    )
    parser.add_argument(
        "--allow-remote",
        action="store_true",
        help="let --bind take an address other machines can reach (MDP has no authentication)",
    )
    parser.add_argument(
        "--heartbeat",
        type=positive_seconds,
        default=2.5,
        metavar="S",
        help="seconds between heartbeats to MDP workers (default 2.5)",
    )
    parser.add_argument(
        "--busy-timeout",
        type=positive_seconds,
        default=60.0,
        metavar="S",
        help="how long a busy MDP worker may be silent before its request moves on (default 60)",
    )
    add_node_options(parser)


def check_bind(endpoint: str, *, allow_remote: bool) -> None:
    """Refuse a tcp endpoint off loopback without the flag (ipc is always local).

    Raises:
        CommandError: the endpoint is neither ipc:// nor a loopback tcp:// one.
    """
    if endpoint.startswith("ipc://"):
        return
    match = re.fullmatch(r"tcp://(.+):(\d+|\*)", endpoint)
    if match is None:
        raise CommandError(f"--bind wants tcp://HOST:PORT or ipc://PATH, not {endpoint!r}")
    port = "0" if match.group(2) == "*" else match.group(2)
    try:
        parse_address(f"{match.group(1)}:{port}", allow_remote=allow_remote)
    except AddressError as exc:
        message = (
            str(exc).replace("--web-allow-remote", "--allow-remote").replace("--web", "--bind")
        )
        raise CommandError(message.replace("the page", "the bridge")) from None


async def _bridge(args: argparse.Namespace) -> int:
    from ..mdp import open_mdp_bridge  # noqa: PLC0415 - only for this command

    check_bind(args.bind, allow_remote=args.allow_remote)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    async with (
        open_command_node(args, name="trizre-mdp-bridge") as node,
        open_mdp_bridge(
            node, args.bind, heartbeat=args.heartbeat, busy_timeout=args.busy_timeout
        ) as bridge,
    ):
        print(f"MDP bridge at {bridge.endpoint}", flush=True)
        await _forever()
    return 0


async def _forever() -> None:
    import trio  # noqa: PLC0415

    await trio.sleep_forever()


def main(args: argparse.Namespace) -> int:
    """Run ``trizre mdp-bridge``; the exit code."""
    return run(_bridge, args)
