"""The ``trizre`` command.

    trizre audit TRACE_DIR [--master URL] [--out REPORT_DIR] ...
    trizre version

Subcommands import what they need only when run, so ``trizre version``
works without the ``spark`` extra.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from . import __version__

USAGE = """usage: trizre COMMAND [ARGS]

commands:
  audit TRACE_DIR [options]   audit node traces with PySpark (see trizre audit --help)
  version                     print the version
"""


def main(argv: Sequence[str] | None = None) -> int:
    """Run a subcommand; returns its exit code (2 for usage errors)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(USAGE, end="")
        return 0 if args else 2
    command, rest = args[0], args[1:]
    if command == "version":
        print(__version__)
        return 0
    if command == "audit":
        from .audit.cli import main as audit_main  # noqa: PLC0415 - optional extra

        return audit_main(rest)
    print(f"trizre: unknown command {command!r}\n\n{USAGE}", end="", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
