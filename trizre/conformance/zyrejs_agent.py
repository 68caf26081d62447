"""The conformance agent for zyre.js (npm's Node.js ZRE implementation).

    python -m trizre.conformance.zyrejs_agent [--modules DIR]

Runs ``zyrejs_agent.js`` (beside this file) under ``node``, with zyre.js
found in ``DIR`` (a ``node_modules`` directory; default ``$ZYREJS_MODULES``,
else ``~/.cache/trizre/zyrejs/node_modules``, where
``npm install --prefix ~/.cache/trizre/zyrejs zyre.js@1.3.0`` puts it).  The
script speaks the agent contract itself.  Runs only inside a network
namespace (``trizre conformance --netns``): zyre.js may beacon on an
interface other than the one it is told.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

from ._adapter import emit, refuse_outside_namespace

SCRIPT = Path(__file__).with_name("zyrejs_agent.js")


def default_modules() -> Path:
    """Where the docs' ``npm install --prefix`` puts zyre.js."""
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    return Path(os.environ.get("ZYREJS_MODULES", cache / "trizre" / "zyrejs" / "node_modules"))


def main() -> int:
    """Become ``node zyrejs_agent.js``; return 2 (after an ``error`` event) if it cannot."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--modules", type=Path, default=default_modules())
    args = parser.parse_args()
    refuse_outside_namespace("zyre.js")
    node = shutil.which("node")
    if node is None:
        emit({"event": "error", "error": "node (Node.js) is not installed"})
        return 2
    if not (args.modules / "zyre.js").is_dir():
        emit(
            {
                "event": "error",
                "error": f"zyre.js is not in {args.modules}: npm install --prefix "
                f"{args.modules.parent} zyre.js@1.3.0",
            }
        )
        return 2
    env = {**os.environ, "NODE_PATH": str(args.modules)}
    sys.stdout.flush()
    os.execve(node, [node, str(SCRIPT)], env)
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())
