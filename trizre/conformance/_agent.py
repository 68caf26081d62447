"""The agent contract: a ZRE implementation driven over JSON lines.

An *agent* is a program that runs one node of the implementation under test.
The suite starts it, writes commands on its stdin and reads events on its
stdout, one JSON object per line.  The first command is always ``start``;
everything else may come in any order.

Commands (stdin)::

    {"cmd": "start", "name": NAME, "interface": IFACE, "port": UDP_PORT,
     "beacon_interval": S, "evasive": S, "expired": S,
     "headers": {K: V}, "groups": [G, ...], "contest": [G, ...],
     "curve": true}                      ("contest": stand in these groups'
                                          elections, zyre's; "curve" only
                                          for the CURVE cases: a fresh key
                                          pair, any client key allowed)
    {"cmd": "start", ..., "gossip": "tcp://HOST:PORT"}
                                         (only for the gossip cases: discover
                                          by czmq's zgossip, not beacons; connect
                                          to the suite's hub there, and bind the
                                          mailbox and a hub of its own on IFACE,
                                          any free ports)
    {"cmd": "join", "group": G}
    {"cmd": "leave", "group": G}
    {"cmd": "whisper", "peer": UUID_HEX, "frames": [BASE64, ...]}
    {"cmd": "shout", "group": G, "frames": [BASE64, ...]}
    {"cmd": "stop"}                       (EOF on stdin means the same)

Events (stdout)::

    {"event": "started", "uuid": HEX, "name": NAME, "endpoint": ENDPOINT,
     "evasive": S, "expired": S,          (the timeouts it really uses; omit
     "public_key": Z85 | null,            one that cannot be set: the
     "contest": [G, ...],                 presence cases are then skipped;
     "gossip_endpoint": ENDPOINT | null}  the key when started with CURVE;
                                          the groups it really contests; its
                                          own hub when started with "gossip":
                                          none means no gossip, and the gossip
                                          cases are not applicable)
    {"event": "ENTER", "peer": HEX, "name": ..., "headers": {...}}
    {"event": "EXIT" | "EVASIVE", "peer": HEX}
    {"event": "JOIN" | "LEAVE", "peer": HEX, "group": G}
    {"event": "WHISPER", "peer": HEX, "frames": [BASE64, ...]}
    {"event": "SHOUT", "peer": HEX, "group": G, "frames": [BASE64, ...]}
    {"event": "LEADER", "peer": HEX, "group": G}   (HEX: the leader, maybe itself)
    {"event": "error", "error": TEXT}     (a command it could not do)

Any other line is kept (for the report) and otherwise ignored.  An agent
must use only the interface it is told, and should exit within a few
seconds of ``stop``.
"""

from __future__ import annotations

import base64
import contextlib
import json
import math
import os
import signal
import socket
import subprocess
from collections.abc import Callable, Sequence
from typing import Any

import trio

from ._errors import ConformanceError

Event = dict[str, Any]


def free_tcp_port(address: str) -> int:
    """A TCP port nobody listens on at ``address`` right now (for an agent's gossip hub)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((address, 0))
        port: int = probe.getsockname()[1]
        return port


def b64(data: bytes) -> str:
    """Base64 text of ``data`` (how frames travel in the contract)."""
    return base64.b64encode(data).decode("ascii")


def unb64(text: str) -> bytes:
    """The bytes of base64 ``text``; raises ``ValueError`` on bad input."""
    return base64.b64decode(text.encode("ascii"), validate=True)


class AgentError(ConformanceError, RuntimeError):
    """The agent did not start, or broke the contract."""


class AgentProcess:
    """One running agent.  Made by :func:`start_agent`.

    ``events`` holds every event read so far, in order, each with ``_t``
    (``trio.current_time()`` when it was read).
    """

    def __init__(self, proc: trio.Process, argv: Sequence[str]) -> None:
        self.proc = proc
        self.argv = list(argv)
        self.events: list[Event] = []
        self.info: Event = {}
        self._changed = trio.Event()
        self.eof = False

    async def _read(self) -> None:
        assert self.proc.stdout is not None
        # A bytearray and a scan position: an agent may write a line of
        # tens of megabytes (a big WHISPER), which must not cost quadratic time.
        buffer = bytearray()
        scanned = 0
        async for chunk in self.proc.stdout:
            buffer += chunk
            while (end := buffer.find(b"\n", scanned)) >= 0:
                self._add(bytes(buffer[:end]))
                del buffer[: end + 1]
                scanned = 0
            scanned = len(buffer)
        if buffer:
            self._add(bytes(buffer))
        self.eof = True
        self._wake()

    def _add(self, line: bytes) -> None:
        text = line.decode("utf-8", "replace").rstrip("\r")
        try:
            event = json.loads(text)
            if not isinstance(event, dict):
                raise ValueError
        except ValueError:
            event = {"event": "_raw", "line": text}
        event["_t"] = trio.current_time()
        self.events.append(event)
        self._wake()

    def _wake(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    async def send(self, cmd: Event) -> None:
        """Write one command.  Raises :class:`AgentError` if the agent is gone."""
        assert self.proc.stdin is not None
        try:
            await self.proc.stdin.send_all((json.dumps(cmd) + "\n").encode())
        except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            raise AgentError(f"the agent closed its stdin ({self.argv[0]})") from exc

    async def wait_for(
        self, predicate: Callable[[Event], bool], within: float, start: int = 0
    ) -> Event | None:
        """The first event from index ``start`` on that matches, or ``None`` after ``within`` s.

        Cancellation: just stops waiting.
        """
        index = start
        with trio.move_on_after(within):
            while True:
                while index < len(self.events):
                    event = self.events[index]
                    index += 1
                    if predicate(event):
                        return event
                if self.eof:
                    return None
                await self._changed.wait()
        return None

    def mark(self) -> int:
        """An index for :meth:`wait_for`: only events after now."""
        return len(self.events)

    def transcript(self, last: int = 40) -> list[str]:
        """The last events as compact text lines (for failure reports)."""
        out = []
        for event in self.events[-last:]:
            shown = {k: v for k, v in event.items() if k != "_t"}
            out.append(json.dumps(shown, ensure_ascii=False)[:300])
        return out


async def start_agent(
    argv: Sequence[str],
    config: Event,
    nursery: trio.Nursery,
    *,
    startup: float = 30.0,
) -> AgentProcess:
    """Start ``argv``, send it ``start`` with ``config``, wait for ``started``.

    The reader runs in ``nursery``; stop the agent with :func:`stop_agent`.
    Raises :class:`AgentError` when ``started`` does not come in ``startup``
    seconds (the process is then stopped).
    """
    proc = await trio.lowlevel.open_process(
        list(argv),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        start_new_session=True,
    )
    agent = AgentProcess(proc, argv)
    nursery.start_soon(agent._read)
    try:
        await agent.send({"cmd": "start", **config})
        started = await agent.wait_for(lambda e: e.get("event") == "started", startup)
    except BaseException:
        await stop_agent(agent)
        raise
    if started is None:
        await stop_agent(agent)
        tail = "\n".join(agent.transcript(20))
        raise AgentError(f"the agent {argv[0]} did not report 'started' in {startup} s:\n{tail}")
    agent.info = started
    return agent


async def stop_agent(agent: AgentProcess, grace: float = 5.0) -> int:
    """Ask the agent to stop (``stop``, then EOF), then SIGTERM, then SIGKILL its group.

    Always reaps it; shielded from cancellation so no process is left behind.
    Returns the exit code.
    """
    with trio.CancelScope(shield=True):
        try:
            await agent.send({"cmd": "stop"})
            assert agent.proc.stdin is not None
            await agent.proc.stdin.aclose()
        except (AgentError, OSError, trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        for sig in (None, signal.SIGTERM, signal.SIGKILL):
            if sig is not None and agent.proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(agent.proc.pid, sig)
            with trio.move_on_after(grace if sig != signal.SIGKILL else math.inf):
                await agent.proc.wait()
            if agent.proc.returncode is not None:
                break
        return agent.proc.returncode if agent.proc.returncode is not None else -1
    return -1  # not reached: the shielded block always returns
