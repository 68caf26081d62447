"""What every networked ``trizre`` command shares: node options, signals, errors.

A command is an ``async def`` taking the parsed arguments and returning an
exit code.  :func:`run` runs it under Trio and turns Ctrl-C and SIGTERM
into a clean stop: the command's cancel scope is cancelled, its node sends
nothing more and closes, and the process exits with 130 (SIGINT) or 143
(SIGTERM) and a one-line message, never a traceback.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any, Final

import trio

from .. import (
    CURVE_ALLOW_ANY,
    Certificate,
    InterfaceError,
    TrizreError,
    open_node,
    select_interface,
    wire,
)
from .._concurrency import unwrap_single_exception_group
from ..node._node import Node
from ..transport._interfaces import ENV_VAR

EXIT_OK: Final = 0
EXIT_FAILED: Final = 1
EXIT_USAGE: Final = 2
EXIT_SIGINT: Final = 128 + signal.SIGINT
EXIT_SIGTERM: Final = 128 + signal.SIGTERM

Command = Callable[[argparse.Namespace], Awaitable[int]]


class CommandError(TrizreError):
    """A failure the user can act on: printed as one line, exit code 1."""


def positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds: {text!r}")
    return value


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 1 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"port out of range 1..65535: {value}")
    return value


def add_node_options(parser: argparse.ArgumentParser) -> None:
    """The options of the node a command starts (documented in ``--help``)."""
    group = parser.add_argument_group("node")
    group.add_argument(
        "--interface",
        metavar="NAME|ADDR",
        help=(
            f"interface to beacon on (default: ${ENV_VAR}, else the first up, "
            "broadcast-capable, non-loopback interface; the choice is printed). "
            "Use 'lo' to stay on this machine."
        ),
    )
    group.add_argument(
        "--beacon-port",
        type=_port,
        default=wire.DISCOVERY_PORT,
        metavar="PORT",
        help=f"UDP discovery port (default {wire.DISCOVERY_PORT}, ZRE's)",
    )
    group.add_argument("--name", help="this node's name (each command has a default)")
    group.add_argument(
        "--beacon-interval",
        type=positive_seconds,
        default=1.0,
        metavar="S",
        help="seconds between beacons (default 1)",
    )
    group.add_argument(
        "--evasive-timeout",
        type=positive_seconds,
        default=5.0,
        metavar="S",
        help="silence before a peer is pinged and shown evasive (default 5)",
    )
    group.add_argument(
        "--expired-timeout",
        type=positive_seconds,
        default=30.0,
        metavar="S",
        help="silence before a peer is removed (default 30)",
    )
    group.add_argument(
        "--gossip",
        metavar="ENDPOINT",
        action="append",
        default=[],
        help="discover by gossip through this zgossip endpoint instead of beacons (repeatable)",
    )
    group.add_argument(
        "--gossip-bind", metavar="ENDPOINT", help="also serve gossip at this endpoint"
    )
    group.add_argument(
        "--gossip-server-key",
        metavar="KEY",
        help="gossip over CURVE: the --gossip hubs' public key (Z85; write "
        "--gossip-server-key=KEY when it begins with '-'), or its certificate file; "
        "needs --curve",
    )
    group.add_argument(
        "--endpoint",
        metavar="ENDPOINT",
        help="this node's ZRE endpoint, e.g. tcp://127.0.0.1:*; needed with gossip",
    )
    group.add_argument(
        "--curve",
        metavar="CERT",
        help="CURVE: this node's certificate file (a zcert secret file); peers without one "
        "are ignored",
    )
    group.add_argument(
        "--curve-allow",
        metavar="DIR|any",
        help="CURVE (required with --curve): accept only the public keys of the "
        "certificates in DIR, or 'any' key",
    )


def printable(text: str) -> str:
    """``text`` with control characters escaped: peers' names and messages are theirs.

    A peer could otherwise move the cursor, clear the screen or retitle
    the terminal of whoever prints what it sent.
    """
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def _say(message: str) -> None:
    print(f"trizre: {message}", file=sys.stderr, flush=True)


def node_kwargs(args: argparse.Namespace, name: str | None = None) -> dict[str, Any]:
    """``open_node`` keyword arguments from the options of :func:`add_node_options`.

    When the interface is not given it is guessed as the node would, and the
    choice and the reason are printed to stderr.

    Raises:
        CommandError: the interface does not exist or cannot beacon, or a
            certificate cannot be read.
    """
    kwargs: dict[str, Any] = {
        "name": args.name if args.name is not None else name,
        "beacon_port": args.beacon_port,
        "beacon_interval": args.beacon_interval,
        "evasive_timeout": args.evasive_timeout,
        "expired_timeout": args.expired_timeout,
    }
    if args.expired_timeout <= args.evasive_timeout:
        raise CommandError("--expired-timeout must be greater than --evasive-timeout")
    if args.gossip or args.gossip_bind:
        kwargs.update(
            discovery="gossip",
            gossip_connect=tuple(args.gossip),
            gossip_bind=args.gossip_bind,
            endpoint=args.endpoint,
        )
        if args.endpoint is None:
            raise CommandError("gossip needs --endpoint (for example tcp://127.0.0.1:*)")
    elif args.endpoint is not None:
        kwargs["endpoint"] = args.endpoint
    if args.curve is not None:
        try:
            kwargs["curve"] = Certificate.load(args.curve)
        except (OSError, ValueError) as exc:
            raise CommandError(f"cannot read the certificate {args.curve}: {exc}") from None
        if args.curve_allow is None:
            raise CommandError("--curve needs --curve-allow DIR (trusted certificates) or 'any'")
        kwargs["curve_allow"] = CURVE_ALLOW_ANY if args.curve_allow == "any" else args.curve_allow
    elif args.curve_allow is not None:
        raise CommandError("--curve-allow needs --curve")
    if args.gossip_server_key is not None:
        if not args.gossip or args.curve is None:
            raise CommandError("--gossip-server-key needs --gossip (the hubs) and --curve")
        kwargs["gossip_server_key"] = _server_key(args.gossip_server_key)
    if "discovery" not in kwargs:
        kwargs["interface"] = _interface(args.interface)
    return kwargs


def _server_key(text: str) -> Certificate | str:
    """A hub's key: 40 characters of Z85, else a (public) certificate file."""
    if len(text) == 40 and not os.path.exists(text):
        return text
    try:
        return Certificate.load(text).public_only()
    except (OSError, ValueError) as exc:
        raise CommandError(
            f"--gossip-server-key {text!r} is neither a Z85 key nor a certificate: {exc}"
        ) from None


def _interface(spec: str | None) -> str:
    try:
        chosen = select_interface(spec)
    except InterfaceError as exc:
        raise CommandError(str(exc)) from None
    if spec is None:
        env = os.environ.get(ENV_VAR, "").strip()
        why = (
            f"from ${ENV_VAR}"
            if env
            else "the first up, broadcast-capable, non-loopback interface; "
            "pass --interface lo to stay on this machine"
        )
        _say(f"beaconing on {chosen.name} ({chosen.address}): {why}")
    return chosen.name


def open_command_node(
    args: argparse.Namespace, name: str | None = None, **options: Any
) -> AbstractAsyncContextManager[Node]:
    """``open_node`` with the command line's options, and the command's own ``options``."""
    return open_node(**node_kwargs(args, name), **options)


def run(
    command: Command, args: argparse.Namespace, *, on_signal: Callable[[], int] | None = None
) -> int:
    """Run *command* under Trio; Ctrl-C and SIGTERM stop it cleanly.

    The exit code is the command's, or on a signal ``on_signal()`` if
    given (for commands that Ctrl-C ends normally, like ping), else 130
    (SIGINT) or 143 (SIGTERM).
    """
    signals: list[int] = []

    async def main() -> int:
        result: list[int] = []
        with unwrap_single_exception_group():
            async with trio.open_nursery() as nursery:

                async def body() -> None:
                    result.append(await command(args))
                    nursery.cancel_scope.cancel()

                async def watch_signals(
                    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
                ) -> None:
                    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as received:
                        task_status.started()
                        async for signum in received:
                            signals.append(signum)
                            nursery.cancel_scope.cancel()
                            return

                # The receiver is in place before the command starts.
                await nursery.start(watch_signals)
                nursery.start_soon(body)
        return result[0] if result else EXIT_OK

    try:
        code = trio.run(main)
    except (CommandError, OSError, ValueError) as exc:
        # OSError: a port in use, an endpoint refused; ValueError: bad
        # input the node refused.  Both are the user's to fix: one line.
        _say(str(exc))
        return EXIT_FAILED
    except KeyboardInterrupt:
        # Ctrl-C before the receiver was installed, or after it returned.
        return EXIT_SIGINT
    if signals and on_signal is not None:
        return on_signal()
    if signals:
        return EXIT_SIGTERM if signals[0] == signal.SIGTERM else EXIT_SIGINT
    return code
