"""What the zyre and pyre agents share: the contract's I/O and the namespace check."""

from __future__ import annotations

import json
import os
import sys
import threading
from typing import Any

_lock = threading.Lock()


def emit(event: dict[str, Any]) -> None:
    """One event line on stdout (from any thread)."""
    with _lock:
        sys.stdout.write(json.dumps(event) + "\n")
        sys.stdout.flush()


def refuse_outside_namespace(implementation: str) -> None:
    """Exit (code 2, with an ``error`` event) unless we run in a network namespace of our own.

    zyre and pyre may beacon on more than the interface they are told, so
    they run only where the suite put them: a namespace whose only
    interfaces are its own veth and ``lo`` (``trizre conformance --netns``).
    """
    try:
        outside = os.readlink("/proc/self/ns/net") == os.readlink("/proc/1/ns/net")
    except OSError:
        outside = False  # cannot tell (no /proc/1 access): the caller's namespace check holds
    if outside:
        emit(
            {
                "event": "error",
                "error": f"refusing to run {implementation} in the machine's own network "
                "namespace: run the suite with --netns",
            }
        )
        sys.exit(2)


def read_start() -> dict[str, Any]:
    """The ``start`` command (exit 2 with an ``error`` event if the first line is not one)."""
    line = sys.stdin.readline()
    try:
        start = json.loads(line)
        if not isinstance(start, dict) or start.get("cmd") != "start":
            raise ValueError("the first command must be 'start'")
    except ValueError as exc:
        emit({"event": "error", "error": str(exc)})
        sys.exit(2)
    return start
