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
)
from .._concurrency import unwrap_single_exception_group
from ..node._config import options
from ..node._node import Node
from ..node._options import CliFlag, Option, show_default
from ..transport._curve import _Z85_SIZE as _KEY_LENGTH  # a CURVE key as Z85 text
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


# How a flag's text becomes the option's value, by the option's unit: the
# parsers above, so a bad value is a usage error (exit 2) naming the flag.
_PARSERS: Final[dict[str, Callable[[str], Any]]] = {"s": positive_seconds, "port": _port}

# Options whose flags mean more than "this value" (a file to read, "any",
# gossip mode, the interface guessed and printed): node_kwargs reads them.
# Every other flag the declaration gives is passed to open_node as parsed.
_SPECIAL: Final = frozenset(
    {
        "name",
        "interface",
        "endpoint",
        "gossip_bind",
        "gossip_connect",
        "gossip_server_key",
        "curve",
        "curve_allow",
    }
)


def node_flags() -> list[tuple[str, Any, Option, CliFlag]]:
    """The node options the command line offers, as :class:`~trizre.NodeConfig` declares them.

    Each is ``(option name, its default, its Option, its CliFlag)``, in the
    declaration's order.
    """
    return [(name, default, opt, opt.flag) for name, default, opt in options() if opt.flag]


def _flag(option: str) -> str:
    """The flag of a node option, as declared (for messages that name it)."""
    return next(flag.name for name, _, _, flag in node_flags() if name == option)


def attach_keys(args: list[str]) -> list[str]:
    """``FLAG KEY`` as ``FLAG=KEY`` for a node flag that takes a key (``CliFlag.key``)
    when KEY begins with '-': argparse would take it for an option and stop
    with "expected one argument".  A key is 40 characters, as :func:`_server_key`
    reads it; any other word after the flag is left to argparse."""
    keyed = {flag.name for _, _, _, flag in node_flags() if flag.key}
    out: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        value = args[i + 1] if i + 1 < len(args) else ""
        if arg in keyed and value.startswith("-") and len(value) == _KEY_LENGTH:
            out.append(f"{arg}={value}")
            i += 2
        else:
            out.append(arg)
            i += 1
    return out


def add_node_options(parser: argparse.ArgumentParser) -> None:
    """The options of the node a command starts (documented in ``--help``).

    Made from the declaration of :class:`~trizre.NodeConfig`: each option
    with a :class:`~trizre.node._config.CliFlag` gets that flag, with its
    parsed value under the option's own name (``args.gossip_connect`` for
    ``--gossip``).
    """
    group = parser.add_argument_group("node")
    for name, default, opt, flag in node_flags():
        parse = _PARSERS.get(opt.unit)
        if parse is None and type(default) in (int, float):
            parse = type(default)  # a number without a unit: argparse says if it is not one
        kwargs: dict[str, Any] = {
            "dest": name,
            "metavar": flag.metavar,
            "help": flag.help.format(default=show_default(default, opt.unit, markdown=False)),
        }
        if flag.repeat:
            kwargs.update(action="append", default=[])
        elif parse is not None:
            # A value the node would take as it is: the default is the node's.
            kwargs.update(type=parse, default=default)
        group.add_argument(flag.name, **kwargs)


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
        option: getattr(args, option) for option, *_ in node_flags() if option not in _SPECIAL
    }
    kwargs["name"] = args.name if args.name is not None else name
    if args.expired_timeout <= args.evasive_timeout:
        raise CommandError(
            f"{_flag('expired_timeout')} must be greater than {_flag('evasive_timeout')}"
        )
    if args.gossip_connect or args.gossip_bind:
        kwargs.update(
            discovery="gossip",
            gossip_connect=tuple(args.gossip_connect),
            gossip_bind=args.gossip_bind,
            endpoint=args.endpoint,
        )
        if args.endpoint is None:
            raise CommandError(f"gossip needs {_flag('endpoint')} (for example tcp://127.0.0.1:*)")
    elif args.endpoint is not None:
        kwargs["endpoint"] = args.endpoint
    if args.curve is not None:
        try:
            kwargs["curve"] = Certificate.load(args.curve)
        except (OSError, ValueError) as exc:
            raise CommandError(f"cannot read the certificate {args.curve}: {exc}") from None
        if args.curve_allow is None:
            raise CommandError(
                f"{_flag('curve')} needs {_flag('curve_allow')} DIR (trusted certificates) or 'any'"
            )
        kwargs["curve_allow"] = CURVE_ALLOW_ANY if args.curve_allow == "any" else args.curve_allow
    elif args.curve_allow is not None:
        raise CommandError(f"{_flag('curve_allow')} needs {_flag('curve')}")
    if args.gossip_server_key is not None:
        if not args.gossip_connect or args.curve is None:
            raise CommandError(
                f"{_flag('gossip_server_key')} needs {_flag('gossip_connect')} (the hubs) "
                f"and {_flag('curve')}"
            )
        kwargs["gossip_server_key"] = _server_key(args.gossip_server_key)
    if "discovery" not in kwargs:
        kwargs["interface"] = _interface(args.interface)
    return kwargs


def _server_key(text: str) -> Certificate | str:
    """A hub's key: 40 characters of Z85, else a (public) certificate file."""
    if len(text) == _KEY_LENGTH and not os.path.exists(text):
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
