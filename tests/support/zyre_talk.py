"""Driving zyre and trizre agents in namespaces: the interop tests' shared vocabulary.

Agents, talking both ways, waiting for a log line, CURVE key files and
allow-lists, used by ``tests/interop/test_interop_zyre*.py``.
"""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import trizre
from tests.interop import (
    b64,
    trizre_agent_command,
    unb64,
    zpinger_command,
    zyre_agent_command,
)
from tests.support import netns
from tests.support.netns import Agent

__all__ = [
    "Zpinger",
    "ZyreAgent",
    "allow_dir",
    "assert_no_event",
    "expect_log",
    "expect_raw",
    "frames_of",
    "make_certs",
    "talk_both_ways",
    "trizre_agent",
    "zyre_agent",
]


class ZyreAgent(Agent):
    """zyre_agent: JSON events out, plain-text commands in."""

    def send(self, cmd: dict[str, Any]) -> None:
        what = cmd["cmd"]
        if what in ("join", "leave"):
            line = f"{what} {cmd['group']}"
        elif what == "whisper":
            line = " ".join(["whisper", cmd["peer"], *cmd["frames"]])
        elif what == "shout":
            line = " ".join(["shout", cmd["group"], *cmd["frames"]])
        else:
            line = what
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()


class Zpinger(Agent):
    """zyre's zpinger: it reads no stdin, so it is stopped as a user would, with Ctrl-C."""

    def __init__(self, ns: netns.Namespace, *flags: str) -> None:
        super().__init__(
            zpinger_command(ns.interface, *flags), namespace=ns, label=f"zpinger {flags}"
        )

    def stop(self, timeout: float = 15.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        return super().stop(timeout)


def zyre_agent(
    ns: netns.Namespace, name: str, *extra: str, groups: tuple[str, ...] = ()
) -> ZyreAgent:
    argv = zyre_agent_command(
        name, ns.interface, groups, {"X-Impl": "zyre"}, max_seconds=60, extra=extra
    )
    return ZyreAgent(argv, namespace=ns, label=f"zyre {name} in {ns.name}")


def trizre_agent(
    ns: netns.Namespace, name: str, *extra: str, groups: tuple[str, ...] = ()
) -> Agent:
    argv = trizre_agent_command(
        name, groups, {"X-Impl": "trizre"}, max_seconds=60, extra=("--log", *extra)
    )
    return Agent(argv, namespace=ns, label=f"trizre {name} in {ns.name}")


def frames_of(event: dict[str, object]) -> list[bytes]:
    frames = event["frames"]
    assert isinstance(frames, list)
    return [unb64(f) for f in frames]


def expect_log(agent: Agent, text: str, timeout: float = 10.0) -> dict[str, Any]:
    """Wait for a trizre log record containing ``text``."""
    return agent.expect(
        lambda e: e.get("event") == "log" and text in str(e.get("message")), timeout
    )


def expect_raw(agent: Agent, text: str, timeout: float = 10.0) -> dict[str, Any]:
    """Wait for a line of zyre's own output containing ``text``."""
    return agent.expect(lambda e: e.get("event") == "_raw" and text in e["line"], timeout)


def assert_no_event(agent: Agent, kind: str) -> None:
    seen = [e for e in agent.history if e.get("event") == kind]
    assert not seen, f"{agent.label} saw {kind}: {seen}\n{agent.describe()}"


def make_certs(folder: Path) -> dict[str, Path]:
    """Key files in czmq's zcert format: trizre's, zyre's, and a stranger's."""
    paths = {}
    for who in ("trizre", "zyre", "stranger"):
        path = folder / f"{who}.key"
        trizre.Certificate.generate().save(path)
        paths[who] = path
    return paths


def allow_dir(tmp_path: Path, name: str, *certs: Path) -> Path:
    """A directory of public certificates, as zauth and trizre read it."""
    folder = tmp_path / name
    folder.mkdir()
    for cert in certs:
        trizre.Certificate.load(cert).public_only().save(folder / cert.name)
    return folder


def talk_both_ways(tri: Agent, zyre: Agent) -> None:
    t_id, z_id = tri.uuid, zyre.uuid
    tri.expect_event("ENTER", peer=z_id, timeout=15)
    seen_by_zyre = zyre.expect_event("ENTER", peer=t_id, timeout=15)
    assert seen_by_zyre["headers"]["X-Impl"] == "trizre"
    tri.expect_event("JOIN", peer=z_id, group="chat")
    zyre.expect_event("JOIN", peer=t_id, group="chat")
    tri.send({"cmd": "whisper", "peer": z_id, "frames": [b64(b"one"), b64(b"two")]})
    assert frames_of(zyre.expect_event("WHISPER", peer=t_id)) == [b"one", b"two"]
    zyre.send({"cmd": "whisper", "peer": t_id, "frames": [b64(b"back")]})
    assert frames_of(tri.expect_event("WHISPER", peer=z_id)) == [b"back"]
    tri.send({"cmd": "shout", "group": "chat", "frames": [b64(b"from trizre")]})
    assert frames_of(zyre.expect_event("SHOUT", peer=t_id, group="chat")) == [b"from trizre"]
    zyre.send({"cmd": "shout", "group": "chat", "frames": [b64(b"from zyre")]})
    assert frames_of(tri.expect_event("SHOUT", peer=z_id, group="chat")) == [b"from zyre"]
