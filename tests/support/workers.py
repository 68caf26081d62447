"""Service workers in tasks of their own, so that a test can kill one.

Shared by the services tests and the audit's end-to-end test.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs
import trio

import trizre
from tests.support.nodes import FAST
from trizre import patterns
from trizre.patterns import IncomingRequest


@attrs.define
class Worker:
    """A worker node running in its own task, so that a test can kill it."""

    node: trizre.Node
    server: patterns.Server
    scope: trio.CancelScope
    stopped: trio.Event
    busy: trio.Event  # set when its first request arrives

    async def kill(self) -> None:
        self.scope.cancel()
        await self.stopped.wait()


async def run_worker(
    port: int,
    name: str,
    handler: patterns.Handler,
    service: str,
    task_status: Any,
    *,
    trace_dir: Path | None = None,
    cache: bool = False,
) -> None:
    stopped, busy = trio.Event(), trio.Event()

    async def noting(request: IncomingRequest) -> bytes | Sequence[bytes]:
        busy.set()
        return await handler(request)

    try:
        with trio.CancelScope() as scope:
            async with (
                trizre.open_node(name, beacon_port=port, trace_dir=trace_dir, **FAST) as node,
                patterns.open_server(
                    node,
                    noting,
                    service=service,
                    reply_cache=patterns.ReplyCache() if cache else None,
                ) as server,
            ):
                task_status.started(Worker(node, server, scope, stopped, busy))
                await trio.sleep_forever()
    finally:
        stopped.set()
