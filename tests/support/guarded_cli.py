"""Run the ``trizre`` command under the loopback guard: ``tests/support/guarded_cli.py ARGS``.

CLI tests run the command in a child process, where the suite's guard
(``tests/support/_netguard.py``) is not installed.  This installs and arms it
first, so a command that would send anywhere but loopback fails; any
violation, even one the command caught and reported, exits 99 and names
it on stderr.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.support import _netguard

VIOLATION_EXIT = 99

if __name__ == "__main__":
    _netguard.install()
    _netguard.state.armed = True
    from trizre.cli import main

    code = main(sys.argv[1:])
    if _netguard.state.violations:
        print(f"network guard violations: {_netguard.state.violations}", file=sys.stderr)
        code = VIOLATION_EXIT
    sys.exit(code)
