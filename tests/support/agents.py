"""Interop agents (tests/interop/*_agent.py): their JSON-lines output, their run, their options.

An agent runs as a script inside a test's network namespace; it imports
this module before it has checked where it runs, so nothing here imports
more than the standard library until called.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

__all__ = ["EmitLogs", "curve_gossip_args", "emit", "emit_logs", "run_agent"]

A = TypeVar("A")


def emit(**event: Any) -> None:
    """One event, one JSON line on stdout, flushed at once (the test reads it live)."""
    print(json.dumps(event), flush=True)


class EmitLogs(logging.Handler):
    """trizre's log records as ``{"event": "log", ...}`` lines: tests wait on them."""

    def emit(self, record: logging.LogRecord) -> None:
        emit(event="log", level=record.levelname, logger=record.name, message=record.getMessage())


def emit_logs() -> None:
    """From now on every trizre log record, DEBUG up, is an event too."""
    logging.getLogger("trizre").addHandler(EmitLogs())
    logging.getLogger("trizre").setLevel(logging.DEBUG)


def run_agent(run: Callable[[A], Awaitable[int]], args: A) -> int:
    """Refuse to run outside a test namespace, then ``trio.run(run, args)``; say how it ended.

    Raises ``tests.interop.NotInTestNamespaceError`` outside one: no node starts.
    """
    from tests.interop import ensure_in_test_namespace  # noqa: PLC0415

    ensure_in_test_namespace()
    import trio  # noqa: PLC0415 - imported after the namespace check

    code = trio.run(run, args)
    emit(event="exiting", code=code)
    return code


def curve_gossip_args(
    cert: Path, allow: Sequence[str], endpoint: str, hub: str, *, bind: bool
) -> list[str]:
    """A CURVE agent's options: its certificate, whom it allows, its inbox, and its hub.

    ``allow`` is the agent's own spelling (``["--allow-any"]``,
    ``["--curve-allow", "any"]``, ...); with ``bind`` the agent is the hub
    at ``hub``, else it connects there.
    """
    where = "--gossip-bind" if bind else "--gossip-connect"
    return ["--curve-cert", str(cert), *allow, "--endpoint", endpoint, where, hub]
