"""Run a conformance agent under the loopback guard: ``tests/support/guarded_agent.py MODULE ARGS``.

The suite's own sends are watched by the guard of the test process; the
agents it starts are children, where that guard is not installed.  This
installs and arms it first, then runs MODULE as ``python -m`` would: a send
anywhere but loopback raises in the agent (so its cases fail) and exits 99.
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
    module, sys.argv = sys.argv[1], [sys.argv[1], *sys.argv[2:]]
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    finally:
        if _netguard.state.violations:
            print(f"network guard violations: {_netguard.state.violations}", file=sys.stderr)
            sys.exit(VIOLATION_EXIT)
