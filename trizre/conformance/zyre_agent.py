"""The conformance agent for zyre: the contract on top of ``zyre_agent`` (C, libzyre).

    python -m trizre.conformance.zyre_agent [--binary PATH]

``zyre_agent`` is tests/interop/zyre_agent.c, built against zyre by
``scripts/build-zyre.sh`` into ``$ZYRE_CACHE/bin`` (default
``~/.cache/trizre/zyre/bin``).  This adapter turns the suite's ``start`` into
its options (zyre takes its timeouts in milliseconds), its JSON commands into
that program's text commands, and passes its events back unchanged (adding
to ``started`` the timeouts it was given).  Runs only inside a network
namespace (``trizre conformance --netns``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from ..transport._interfaces import select_interface
from ._adapter import emit, read_start, refuse_outside_namespace
from ._agent import free_tcp_port


def default_binary() -> Path:
    """Where scripts/build-zyre.sh puts zyre_agent."""
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "trizre" / "zyre"
    return Path(os.environ.get("ZYRE_CACHE", cache)) / "bin" / "zyre_agent"


def _argv(binary: str, start: dict[str, Any]) -> list[str]:
    argv = [binary, "--name", str(start.get("name", "zyre")), "--interface", start["interface"]]
    argv += ["--port", str(int(start["port"]))]
    argv += ["--interval", str(int(float(start.get("beacon_interval", 1.0)) * 1000))]
    argv += ["--evasive", str(int(float(start.get("evasive", 5.0)) * 1000))]
    argv += ["--expired", str(int(float(start.get("expired", 30.0)) * 1000))]
    for group in start.get("groups", []):
        argv += ["--group", group]
    for group in start.get("contest", []):
        argv += ["--contest", group]
    for key, value in (start.get("headers") or {}).items():
        argv += ["--header", f"{key}={value}"]
    if start.get("curve"):
        argv += ["--curve", "--allow-any"]
    if start.get("gossip"):
        # zyre_set_endpoint, zyre_gossip_bind, zyre_gossip_connect (as zpinger
        # -e/-g does): zyre then beacons nowhere.
        argv += ["--endpoint", start["_endpoint"], "--gossip-bind", start["_gossip_bind"]]
        argv += ["--gossip-connect", str(start["gossip"])]
    return [*argv, "--max-seconds", "3600"]


def _relay(proc: subprocess.Popen[str], start: dict[str, Any]) -> None:
    """Pass zyre_agent's events on; when it dies, say so and exit (so the suite sees it)."""
    assert proc.stdout is not None
    for line in proc.stdout:
        try:
            event = json.loads(line)
        except ValueError:
            emit({"event": "_raw", "line": line.rstrip("\n")})
            continue
        if isinstance(event, dict) and event.get("event") == "started":
            event["evasive"] = float(start.get("evasive", 5.0))
            event["expired"] = float(start.get("expired", 30.0))
            event["contest"] = list(start.get("contest", []))
            event["gossip_endpoint"] = start.get("_gossip_bind")
        emit(event)
    code = proc.wait()
    emit({"event": "error", "error": f"zyre_agent exited with code {code}"})
    sys.stdout.flush()
    os._exit(0 if code == 0 else 3)


def _command(cmd: dict[str, Any]) -> str | None:
    what = cmd.get("cmd")
    if what in ("join", "leave"):
        return f"{what} {cmd['group']}"
    if what == "whisper":
        return " ".join(["whisper", cmd["peer"], *cmd["frames"]])
    if what == "shout":
        return " ".join(["shout", cmd["group"], *cmd["frames"]])
    if what == "stop":
        return "stop"
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--binary", default=str(default_binary()))
    args = parser.parse_args()
    refuse_outside_namespace("zyre")
    start = read_start()
    if start.get("gossip"):
        # Free ports of our interface for the mailbox and our own hub: zyre
        # would publish a wildcard endpoint as it is.
        address = str(select_interface(start["interface"]).address)
        start["_endpoint"] = f"tcp://{address}:{free_tcp_port(address)}"
        start["_gossip_bind"] = f"tcp://{address}:{free_tcp_port(address)}"
    if not Path(args.binary).is_file():
        emit({"event": "error", "error": f"{args.binary} is missing: run scripts/build-zyre.sh"})
        return 2
    proc = subprocess.Popen(
        _argv(args.binary, start),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        bufsize=1,
    )
    assert proc.stdin is not None and proc.stdout is not None
    relay = threading.Thread(target=_relay, args=(proc, start), daemon=True)
    relay.start()
    try:
        for line in sys.stdin:
            cmd = json.loads(line)
            text = _command(cmd)
            if text is None:
                emit({"event": "error", "error": f"unknown command {cmd.get('cmd')!r}"})
                continue
            proc.stdin.write(text + "\n")
            proc.stdin.flush()
            if text == "stop":
                break
    except (BrokenPipeError, ValueError) as exc:
        emit({"event": "error", "error": repr(exc)})
    finally:
        try:
            proc.stdin.close()
            proc.wait(10)
        except (OSError, subprocess.TimeoutExpired):
            proc.kill()
            proc.wait()
        relay.join(5)
    return 0


if __name__ == "__main__":
    sys.exit(main())
