"""The `trizre` command in tests: run under the loopback guard, read by line; its page by HTTP."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import trio

ROOT = Path(__file__).resolve().parents[2]
GUARDED = [sys.executable, "-u", str(ROOT / "tests" / "support" / "guarded_cli.py")]


class Cli:
    """A running command: read its output line by line, signal it, wait for it."""

    def __init__(self, process: trio.Process) -> None:
        self.process = process
        self.lines: list[str] = []
        self._buffer = b""

    async def expect(self, pattern: str) -> re.Match[str]:
        """Read stdout until a line matches ``pattern`` (bound it with fail_after)."""
        assert self.process.stdout is not None
        for line in self.lines:
            if match := re.search(pattern, line):
                return match
        while True:
            while b"\n" not in self._buffer:
                chunk = await self.process.stdout.receive_some()
                if not chunk:
                    raise AssertionError(f"no line matched {pattern!r} in {self.lines}")
                self._buffer += chunk
            raw, self._buffer = self._buffer.split(b"\n", 1)
            line = raw.decode()
            self.lines.append(line)
            if match := re.search(pattern, line):
                return match

    async def finish(self) -> tuple[int, str, str]:
        """Wait for the exit; (code, the rest of stdout, stderr)."""
        assert self.process.stdout is not None and self.process.stderr is not None
        rest = [self._buffer]
        async for chunk in self.process.stdout:
            rest.append(chunk)
        err = [chunk async for chunk in self.process.stderr]
        code = await self.process.wait()
        out = "\n".join(self.lines) + "\n" + b"".join(rest).decode()
        return code, out, b"".join(err).decode()


async def start(*args: str, stdin: int | None = subprocess.DEVNULL) -> Cli:
    process = await trio.lowlevel.open_process(
        [*GUARDED, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=stdin
    )
    return Cli(process)


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*GUARDED, *args], capture_output=True, text=True, timeout=60, env=env, check=False
    )


def lo(port: int) -> list[str]:
    return ["--interface", "lo", "--beacon-port", str(port)]


async def http(port: int, path: str, method: str = "GET") -> tuple[str, dict[str, str], bytes]:
    """One request on a fresh connection: (status line, headers, body)."""
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        request = f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
        await stream.send_all(request.encode())
        data = b""
        async for chunk in stream:
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    status, *lines = head.decode().split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines)}
    return status, headers, body
