"""``trizre conformance TARGET``: run the ZRE conformance suite against an implementation."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import trio


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "target",
        nargs="?",
        metavar="TARGET",
        help="'trizre', 'zyre', 'pyre' or 'zyre.js' (the agents shipped with trizre; all but "
        "trizre need --netns), 'beacons' (a node already beaconing on --port, no agent), or "
        "the command line of an agent (one argument, quoted)",
    )
    parser.add_argument(
        "--interface",
        default="lo",
        help="the interface the suite and the target use (default: lo; the suite sends "
        "nowhere else)",
    )
    parser.add_argument(
        "--port", type=int, default=None, help="UDP beacon port (default: a free one)"
    )
    parser.add_argument(
        "--case", action="append", default=None, metavar="ID", help="run only this case (repeat)"
    )
    parser.add_argument(
        "--passive-only", action="store_true", help="mark the active cases not applicable"
    )
    parser.add_argument(
        "--netns",
        action="store_true",
        help="run the target in a network namespace of its own and the suite in another, "
        "joined by a veth pair (needs root; required for zyre and pyre)",
    )
    parser.add_argument("--target-interface", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--target-netns", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--list", action="store_true", help="list the cases and exit")
    parser.add_argument(
        "--matrix",
        nargs="+",
        type=Path,
        metavar="REPORT",
        help="print a Markdown matrix of these --json reports (one column each) and exit",
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--html", type=Path, default=None, help="also write an HTML report here")


def main(args: argparse.Namespace) -> int:
    """0 when no case failed, 1 when one did (or the target could not be run)."""
    from ..conformance import CASES, SetupError, run_suite  # noqa: PLC0415
    from ..conformance._report import as_html, as_json, table  # noqa: PLC0415

    if args.list:
        for case in CASES:
            print(f"{case.id:22} {case.kind:8} {case.clause}")
        return 0
    if args.matrix:
        from ..conformance._report import matrix  # noqa: PLC0415

        try:
            print(matrix([json.loads(p.read_text(encoding="utf-8")) for p in args.matrix]))
        except (OSError, ValueError, KeyError) as exc:
            print(f"trizre conformance: cannot read the reports: {exc}", file=sys.stderr)
            return 1
        return 0
    if args.target is None:
        print("trizre conformance: TARGET is required (or --list)", file=sys.stderr)
        return 2
    if args.netns:
        return _in_namespaces(args)
    prefix = [] if args.target_netns is None else ["ip", "netns", "exec", args.target_netns]
    try:
        report = trio.run(
            lambda: run_suite(
                args.target,
                interface=args.interface,
                beacon_port=args.port,
                cases=args.case,
                passive_only=args.passive_only,
                target_interface=args.target_interface,
                target_prefix=prefix,
            )
        )
    except (SetupError, ValueError, OSError) as exc:
        print(f"trizre conformance: {exc}", file=sys.stderr)
        return 1
    print(as_json(report) if args.json else table(report))
    if args.html is not None:
        args.html.write_text(as_html(report), encoding="utf-8")
    return 0 if report.ok else 1


def _in_namespaces(args: argparse.Namespace) -> int:
    """Make two namespaces, run this command again inside the suite's, relay its exit code."""
    from ..conformance._netns import namespace_pair  # noqa: PLC0415

    try:
        with namespace_pair() as (suite, target):
            argv = [sys.executable, "-m", "trizre", "conformance", args.target]
            argv += ["--interface", suite.interface, "--target-interface", target.interface]
            argv += ["--target-netns", target.name]
            if args.port is not None:
                argv += ["--port", str(args.port)]
            for case in args.case or ():
                argv += ["--case", case]
            if args.passive_only:
                argv.append("--passive-only")
            if args.json:
                argv.append("--json")
            if args.html is not None:
                argv += ["--html", str(args.html.resolve())]
            return subprocess.run([*suite.prefix(), *argv], check=False).returncode
    except RuntimeError as exc:
        print(f"trizre conformance: {exc}", file=sys.stderr)
        return 1
