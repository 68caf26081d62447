"""The ``trizre`` command (also ``python -m trizre``).

    trizre peers       the peers on the network, once (``--json`` for scripts)
    trizre ping NAME   round trips to one peer until Ctrl-C, like ping
    trizre chat GROUP  a line-based chat over a ZRE group
    trizre watch       a live view: peers, groups, services, Binary Star pairs
                       (``--web 127.0.0.1:8080`` serves it as a page)
    trizre mdp-bridge  a Majordomo (MDP) broker endpoint over trizre services
    trizre conformance TARGET   run the ZRE conformance suite against TARGET
    trizre audit DIR   audit node traces with PySpark (the ``spark`` extra)

Each command module is imported only when that command runs, so
``trizre --help`` and ``trizre --version`` are instant and ``trizre audit``
works without the networking commands' extras and vice versa.

Exit codes: 0 success, 1 a failure (one line on stderr), 2 a usage error,
130 stopped by Ctrl-C, 143 stopped by SIGTERM.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from .. import __version__

# command -> (module, one-line help).  The module has ``add_arguments(parser)``
# and ``main(args) -> int``.
COMMANDS: dict[str, tuple[str, str]] = {
    "peers": ("._peers", "list the peers on the network, then exit"),
    "ping": ("._ping", "measure round trips to one peer until Ctrl-C"),
    "chat": ("._chat", "chat over a ZRE group, a line at a time"),
    "watch": ("._watch", "a live view of peers, groups, services and Binary Star pairs"),
    "mdp-bridge": ("._mdp_bridge", "serve trizre services to Majordomo (MDP) clients and workers"),
    "conformance": ("._conformance", "run the ZRE conformance suite against an implementation"),
}


def build_parser(selected: str | None = None) -> argparse.ArgumentParser:
    """The parser; the *selected* command's options come from its module.

    Only that module is imported: the others are listed by name and help.
    """
    parser = argparse.ArgumentParser(
        prog="trizre",
        description="ZeroMQ Realtime Exchange (ZRE) peers, patterns and tools.",
        epilog="Run 'trizre COMMAND --help' for a command's options.",
    )
    parser.add_argument("--version", action="version", version=f"trizre {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands")
    for name, (module, help_text) in COMMANDS.items():
        sub = commands.add_parser(name, help=help_text, description=help_text)
        if name == selected:
            importlib.import_module(module, __name__).add_arguments(sub)
        sub.set_defaults(module=module)
    # The audit parses its own arguments (its module needs no network code).
    commands.add_parser(
        "audit",
        help="audit node traces with PySpark (see trizre audit --help)",
        add_help=False,
    ).set_defaults(module=None)
    version = commands.add_parser(
        "version", help="print the version", description="Print the version."
    )
    version.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="also which inbox read and sends this process uses (compiled or pure Python, "
        "and why) and the versions of Python, trio, pyzmq and libzmq",
    )
    version.set_defaults(module=None)
    return parser


def _version(*, verbose: bool) -> str:
    """``trizre version``'s answer: the version; with ``verbose``, what runs under it."""
    if not verbose:
        return __version__
    import trio  # noqa: PLC0415 - only the verbose answer loads the network code
    import zmq  # noqa: PLC0415

    from ..transport._zsock import inbox_read  # noqa: PLC0415

    read, detail = inbox_read()
    python = ".".join(map(str, sys.version_info[:3]))
    return (
        f"trizre {__version__}\n"
        f"inbox read and sends: {read} ({detail})\n"
        f"python {python}, trio {trio.__version__}, pyzmq {zmq.__version__}, "
        f"libzmq {zmq.zmq_version()}"
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Run a command; returns its exit code (2 for usage errors)."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    if args_list and args_list[0] == "audit":
        from ..audit.cli import main as audit_main  # noqa: PLC0415 - optional extra

        return audit_main(args_list[1:])
    selected = next((arg for arg in args_list if not arg.startswith("-")), None)
    parser = build_parser(selected)
    if selected in COMMANDS:  # a command that may start a node (conformance does not)
        from ._common import attach_keys  # noqa: PLC0415

        args_list = attach_keys(args_list)
    try:
        args, extras = parser.parse_known_args(args_list)
        if extras:
            # argparse would print the top-level usage for an option of the
            # command's: name the command, and where its options are.
            where = "trizre" if args.command is None else f"trizre {args.command}"
            parser.exit(
                2,
                f"{where}: error: unrecognized arguments: {' '.join(extras)}\n"
                f"Run '{where} --help' for its options.\n",
            )
    except SystemExit as exit_:  # --help, --version, usage errors
        return exit_.code if isinstance(exit_.code, int) else 2
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    if args.command == "version":
        print(_version(verbose=args.verbose))
        return 0
    code: int = importlib.import_module(args.module, __name__).main(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
