"""What the ``*_instructions.py`` meters share: count a run under valgrind, twice, and divide.

A meter script runs its load for ``--run N`` requests when asked;
:func:`main` runs it under ``valgrind --tool=callgrind`` for ``--requests``
and for ``--requests`` plus ``--more``, and prints the difference per
request: start-up cancels out.  The meter must make nothing in its run
depend on time (seeded choices, no timers that fire), so that two counts
of one tree agree within a few hundredths of a per cent.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable

import trio


def instructions(script: str, requests: int, least: bool) -> int:
    """The instructions one ``--run`` of ``script`` executes, counted by callgrind."""
    argv = [sys.executable, script, "--run", str(requests)] + (["--least"] if least else [])
    with tempfile.TemporaryDirectory() as tmp:
        done = subprocess.run(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={tmp}/out", *argv],
            # The same hashes in every run: dict layouts, and so the work
            # of a lookup, do not vary between the two.
            env=dict(os.environ, PYTHONHASHSEED="0"),
            capture_output=True,
            text=True,
            check=True,
        )
    found = re.search(r"Collected : ([\d,]+)", done.stderr)
    if found is None:
        raise SystemExit(f"valgrind counted nothing:\n{done.stderr[-2000:]}")
    return int(found.group(1).replace(",", ""))


def main(
    script: str, description: str, who: str, least_who: str, run: Callable[[int, bool], None]
) -> None:
    """The meter's command line: ``--run`` runs the load (``run(requests, least)``), else count."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument(
        "--requests", type=int, default=1000, help="the first counted run's (default 1000)"
    )
    parser.add_argument(
        "--more",
        type=int,
        default=5000,
        help="the second run's requests beyond those, the count's divisor (default 5000)",
    )
    parser.add_argument("--least", action="store_true", help=f"{least_who} instead")
    parser.add_argument("--run", type=int, help=argparse.SUPPRESS)  # one counted run
    args = parser.parse_args()
    if args.run is not None:
        # The same choices in every run: Trio's order of a turn's tasks (it
        # reverses half of them at random) and the random module's.
        trio._core._run._r.seed(0)
        random.seed(0)
        run(args.run, args.least)
        return
    if args.requests < 1 or args.more < 1:
        parser.error("--requests and --more must be at least 1")
    if shutil.which("valgrind") is None:
        raise SystemExit("this count needs valgrind (apt install valgrind)")
    fewer = instructions(script, args.requests, args.least)
    more = instructions(script, args.requests + args.more, args.least)
    name = least_who if args.least else who
    print(f"{name}: {(more - fewer) / args.more:,.0f} instructions/request")
