"""The conformance agent for pyre (the Python ZRE implementation).

    python -m trizre.conformance.pyre_agent

pyre has no setters for its presence timeouts, so the agent sets the class
constants ``PyrePeer.PEER_EVASIVE`` / ``PEER_EXPIRED`` (whole seconds) before
it starts the node (pyre reaps once a second, so its timing is that coarse).  pyre cannot
be told an interface: it beacons on the first one it finds, which is why
this agent runs only inside a network namespace (``trizre conformance
--netns``), where the only one is the suite's veth.  Exits with ``os._exit``
because pyre's threads are not daemons.
"""

from __future__ import annotations

import base64
import json
import math
import os
import sys
import threading
import uuid
from typing import Any

from ._adapter import emit, read_start, refuse_outside_namespace


def _text(frame: bytes) -> str:
    return frame.decode("utf-8", "replace")


def _frames(frames: list[bytes]) -> list[str]:
    return [base64.b64encode(f).decode("ascii") for f in frames]


def _event(frames: list[bytes]) -> dict[str, Any]:
    """One message of pyre's inbox as a contract event.

    Parsed by hand, not with ``PyreEvent``: a malformed name must not kill the agent.
    """
    kind = _text(frames[0])
    event: dict[str, Any] = {"event": kind}
    if len(frames) > 1 and len(frames[1]) == 16:
        event["peer"] = uuid.UUID(bytes=frames[1]).hex
    if len(frames) > 2:
        event["name"] = _text(frames[2])
    rest = frames[3:]
    if kind == "ENTER":
        event["headers"] = json.loads(rest[0]) if rest else {}
    elif kind in ("JOIN", "LEAVE"):
        event["group"] = _text(rest[0]) if rest else None
    elif kind == "WHISPER":
        event["frames"] = _frames(rest)
    elif kind == "SHOUT":
        event["group"] = _text(rest[0]) if rest else None
        event["frames"] = _frames(rest[1:])
    return event


def _obey(node: Any, line: bytes) -> bool:
    """Do one command; ``False`` for stop."""
    try:
        cmd = json.loads(line)
        what = cmd["cmd"]
        if what == "stop":
            return False
        if what == "join":
            node.join(cmd["group"])
        elif what == "leave":
            node.leave(cmd["group"])
        elif what == "whisper":
            frames = [base64.b64decode(f) for f in cmd["frames"]]
            node.whisper(uuid.UUID(hex=cmd["peer"]), frames)
        elif what == "shout":
            node.shout(cmd["group"], [base64.b64decode(f) for f in cmd["frames"]])
        else:
            emit({"event": "error", "error": f"unknown command {what!r}"})
    except Exception as exc:  # a bad command must not stop the agent
        emit({"event": "error", "error": repr(exc)})
    return True


def run() -> None:
    refuse_outside_namespace("pyre")
    start = read_start()
    import zmq  # noqa: PLC0415 - only after the namespace check
    from pyre import Pyre  # type: ignore[import-untyped]  # noqa: PLC0415
    from pyre.pyre_peer import PyrePeer  # type: ignore[import-untyped]  # noqa: PLC0415

    # Whole seconds: pyre also sizes its send HWM as PEER_EXPIRED * 100,
    # which must be an int.  ``started`` reports what is really used.
    evasive = math.ceil(float(start.get("evasive", 5.0)))
    expired = max(math.ceil(float(start.get("expired", 30.0))), evasive + 1)
    PyrePeer.PEER_EVASIVE = evasive
    PyrePeer.PEER_EXPIRED = expired
    node = Pyre(str(start.get("name", "pyre")))
    node.set_port(str(int(start["port"])).encode())
    node.set_interval(str(int(float(start.get("beacon_interval", 1.0)) * 1000)))
    for key, value in (start.get("headers") or {}).items():
        node.set_header(key, value)
    for group in start.get("groups", []):
        node.join(group)
    node.start()
    emit(
        {
            "event": "started",
            "uuid": node.uuid().hex,
            "name": node.name(),
            "endpoint": node.endpoint(),
            "evasive": evasive,
            "expired": expired,
        }
    )
    poller = zmq.Poller()
    poller.register(node.socket(), zmq.POLLIN)
    poller.register(0, zmq.POLLIN)
    pending = b""
    going = True
    while going:
        ready = dict(poller.poll(500))
        if node.socket() in ready:
            while node.socket().poll(0, zmq.POLLIN):
                emit(_event(node.socket().recv_multipart()))
        if 0 in ready:
            chunk = os.read(0, 65536)
            if not chunk:
                break
            pending += chunk
            while going and b"\n" in pending:
                line, pending = pending.split(b"\n", 1)
                going = _obey(node, line)
        if not node.actor.thread.is_alive():
            emit({"event": "error", "error": "the pyre node thread died"})
            break
    stopper = threading.Thread(target=node.stop, daemon=True)
    stopper.start()
    stopper.join(5)


def main() -> None:
    try:
        run()
        code = 0
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else 1
    except BaseException as exc:
        emit({"event": "error", "error": f"agent crashed: {exc!r}"})
        code = 1
    sys.stdout.flush()
    os._exit(code)


if __name__ == "__main__":
    main()
