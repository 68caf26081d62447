"""Python scripts run as their own processes for a benchmark (workers, servers), then stopped."""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
from collections.abc import AsyncIterator, Sequence
from contextlib import ExitStack, asynccontextmanager
from pathlib import Path

import trio

ROOT = Path(__file__).resolve().parent.parent

ECHO_SERVER = """
import sys
import trio, trizre
from trizre import patterns

port, name = int(sys.argv[1]), sys.argv[2]
service = sys.argv[3] if len(sys.argv) > 3 else None

async def main():
    async def echo(request):
        return request.body
    async with trizre.open_node(name, interface="lo", beacon_port=port, local_links=False) as node:
        async with patterns.open_server(node, echo, service=service):
            await trio.sleep_forever()

trio.run(main)
"""
"""An echo server: ``port name [service]`` (no service: it answers requests to it by name)."""


@asynccontextmanager
async def python_processes(
    script: str, argvs: Sequence[Sequence[str]], logs: Sequence[Path] = ()
) -> AsyncIterator[list[trio.Process]]:
    """Run ``script`` once per argument list, with this tree importable; terminate them at the end.

    ``logs``, if given (one per process), receive each process's stdout.
    """
    folder = Path(tempfile.mkdtemp(prefix="trizre-bench-"))
    path = folder / "script.py"
    path.write_text(script)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs: list[trio.Process] = []
    with ExitStack() as files:
        try:
            for i, argv in enumerate(argvs):
                out = files.enter_context(logs[i].open("w")) if logs else None
                command = [sys.executable, str(path), *argv]
                procs.append(await trio.lowlevel.open_process(command, env=env, stdout=out))
            yield procs
        finally:
            for proc in procs:
                if proc.returncode is None:
                    proc.terminate()
            with trio.CancelScope(shield=True):
                for proc in procs:
                    await proc.wait()


def summary(values: Sequence[float], digits: int = 0) -> str:
    """``median (min-max)``, with thousands separators and ``digits`` decimals."""
    fmt = f"{{:,.{digits}f}}"
    low, high = fmt.format(min(values)), fmt.format(max(values))
    return f"{fmt.format(statistics.median(values))} ({low}-{high})"
