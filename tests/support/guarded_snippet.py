"""Run a Python file under the loopback guard: ``python tests/support/guarded_snippet.py FILE``.

As ``tests/support/guarded_cli.py`` for commands: documentation snippets run in a
child process (each its own Trio run and nodes), with the suite's guard
installed and armed; a violation, even one the snippet caught, exits 99.
"""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.support import _netguard

VIOLATION_EXIT = 99

if __name__ == "__main__":
    _netguard.install()
    _netguard.state.armed = True
    code = 0
    try:
        runpy.run_path(sys.argv[1], run_name="__main__")
    finally:
        if _netguard.state.violations:
            print(f"network guard violations: {_netguard.state.violations}", file=sys.stderr)
            code = VIOLATION_EXIT
    sys.exit(code)
