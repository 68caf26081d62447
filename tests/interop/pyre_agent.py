"""Drive one pyre node over JSON lines (the protocol is in ``tests/interop``).

Run it ONLY inside a network namespace the test created::

    ip netns exec NS python tests/interop/pyre_agent.py --name A --group chat

pyre beacons on the first non-loopback interface it finds, so the script
checks first that it is in such a namespace and refuses to start otherwise.

One thread does all the pyre calls: a zmq Poller watches pyre's inbox socket
and stdin (a raw fd), so no command and no event waits behind the other.
The process always ends: on ``{"cmd": "stop"}``, on stdin EOF, when
``--max-seconds`` runs out, or (watchdog) a few seconds after that if pyre
itself hangs.  It leaves with ``os._exit`` after flushing stdout, because
pyre's actor threads are not daemons and a dead node thread would otherwise
keep the interpreter alive forever.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import threading
import time
import traceback
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.interop import (
    NotInTestNamespaceError,
    ensure_in_test_namespace,
    frames_from_json,
    frames_to_json,
)

EXIT_OK = 0
EXIT_REFUSED = 2
EXIT_TIMEOUT = 3
EXIT_STOP_HUNG = 4
EXIT_NODE_DIED = 5
EXIT_WATCHDOG = 6

_out_lock = threading.Lock()


def emit(event: dict[str, Any]) -> None:
    line = json.dumps(event, separators=(",", ":"))
    with _out_lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def finish(code: int) -> None:
    emit({"event": "exiting", "code": code})
    with _out_lock:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def text(data: bytes) -> str:
    """Decode a wire string without dying on pyre's broken non-ASCII."""
    return data.decode("utf-8", errors="backslashreplace")


def event_from_frames(frames: list[bytes]) -> dict[str, Any]:
    """Turn one message from pyre's inbox into a protocol event.

    Parsed by hand instead of with ``PyreEvent`` so that a malformed name
    (pyre counts string lengths in characters) cannot kill the agent.
    """
    kind = text(frames[0])
    event: dict[str, Any] = {"event": kind}
    if len(frames) > 1:
        event["peer"] = uuid.UUID(bytes=frames[1]).hex if len(frames[1]) == 16 else None
    if len(frames) > 2:
        event["name"] = text(frames[2])
    rest = frames[3:]
    if kind == "ENTER":
        event["headers"] = json.loads(rest[0]) if rest else {}
        event["endpoint"] = text(rest[1]) if len(rest) > 1 else None
    elif kind in ("JOIN", "LEAVE"):
        event["group"] = text(rest[0]) if rest else None
    elif kind == "WHISPER":
        event["frames"] = frames_to_json(rest)
    elif kind == "SHOUT":
        event["group"] = text(rest[0]) if rest else None
        event["frames"] = frames_to_json(rest[1:])
    elif rest:
        event["extra"] = frames_to_json(rest)
    return event


class Agent:
    def __init__(self, node: Any) -> None:
        self.node = node
        self.stdin_buffer = b""
        self.stdin_open = True
        self.stopping = False

    def handle_line(self, line: bytes) -> None:
        line = line.strip()
        if not line:
            return
        try:
            cmd = json.loads(line)
            if not isinstance(cmd, dict):
                raise ValueError("a command is a JSON object")
            self.handle(cmd)
        except Exception as exc:
            emit({"event": "error", "error": f"{type(exc).__name__}: {exc}", "line": text(line)})

    def handle(self, cmd: dict[str, Any]) -> None:
        node = self.node
        what = cmd.get("cmd")
        if what == "join":
            node.join(cmd["group"])
        elif what == "leave":
            node.leave(cmd["group"])
        elif what == "whisper":
            peer = uuid.UUID(hex=cmd["peer"])
            node.whisper(peer, self.content(cmd))
        elif what == "shout":
            node.shout(cmd["group"], self.content(cmd))
        elif what == "peers":
            emit({"event": "peers", "peers": [p.hex for p in node.peers()]})
        elif what == "stop":
            self.stopping = True
        else:
            raise ValueError(f"unknown command {what!r}")

    @staticmethod
    def content(cmd: dict[str, Any]) -> list[bytes]:
        frames = frames_from_json(cmd.get("frames", []))
        if not frames:
            # pyre 0.3.4 cannot send zero frames: Pyre.whisper/shout send the
            # command header with SNDMORE, then send_multipart([]) raises
            # IndexError, and the dangling header glues itself to the next
            # command on the actor pipe (the next WHISPER then arrives with
            # "WHISPER" and the peer UUID as extra content frames).  Refuse
            # here so that one bad command cannot corrupt the ones after it.
            raise ValueError("pyre 0.3.4 cannot send zero content frames (refused)")
        return frames

    def read_stdin(self) -> None:
        chunk = os.read(0, 65536)
        if not chunk:
            self.stdin_open = False
            self.stopping = True
            if self.stdin_buffer:
                self.handle_line(self.stdin_buffer)
                self.stdin_buffer = b""
            return
        self.stdin_buffer += chunk
        while b"\n" in self.stdin_buffer and not self.stopping:
            line, self.stdin_buffer = self.stdin_buffer.split(b"\n", 1)
            self.handle_line(line)


def drain(node: Any, zmq: Any, wait_ms: int) -> bool:
    """Emit every message waiting in pyre's inbox; True once STOP was seen."""
    sock = node.socket()
    seen_stop = False
    while sock.poll(wait_ms, zmq.POLLIN):
        event = event_from_frames(sock.recv_multipart())
        emit(event)
        if event["event"] == "STOP":
            seen_stop = True
            wait_ms = 0
    return seen_stop


def stop_node(node: Any, zmq: Any, limit: float) -> int:
    done = threading.Event()

    def run() -> None:
        try:
            node.stop()
        except Exception as exc:
            emit({"event": "error", "error": f"node.stop() raised {type(exc).__name__}: {exc}"})
        finally:
            done.set()

    threading.Thread(target=run, name="pyre-stop", daemon=True).start()
    if not done.wait(limit):
        emit({"event": "error", "error": f"node.stop() did not return within {limit} s"})
        return EXIT_STOP_HUNG
    drain(node, zmq, wait_ms=1000)
    return EXIT_OK


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--name", required=True)
    parser.add_argument("--group", action="append", default=[])
    parser.add_argument("--header", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--max-seconds", type=float, default=60.0)
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args(argv)

    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.WARNING,
        stream=sys.stderr,
        format="%(relativeCreated)d %(name)s %(levelname)s %(message)s",
    )
    try:
        ensure_in_test_namespace()
    except NotInTestNamespaceError as exc:
        emit({"event": "error", "error": str(exc)})
        return EXIT_REFUSED

    deadline = time.monotonic() + args.max_seconds

    def watchdog() -> None:
        time.sleep(args.max_seconds + 15)
        emit({"event": "error", "error": "watchdog: agent still alive, forcing exit"})
        finish(EXIT_WATCHDOG)

    threading.Thread(target=watchdog, name="watchdog", daemon=True).start()

    crashed: list[str] = []

    def excepthook(hook_args: threading.ExceptHookArgs) -> None:
        detail = "".join(
            traceback.format_exception(
                hook_args.exc_type, hook_args.exc_value, hook_args.exc_traceback
            )
        )
        thread = hook_args.thread.name if hook_args.thread else "?"
        crashed.append(thread)
        emit({"event": "error", "error": f"thread {thread} died", "traceback": detail})

    threading.excepthook = excepthook

    # Imported only now, after the namespace check: nothing of pyre's runs before it.
    import zmq  # noqa: PLC0415
    from pyre import Pyre  # noqa: PLC0415

    node = Pyre(args.name)
    for header in args.header:
        key, _, value = header.partition("=")
        node.set_header(key, value)
    for group in args.group:
        node.join(group)
    node.start()
    emit(
        {
            "event": "started",
            "uuid": node.uuid().hex,
            "name": node.name(),
            "endpoint": node.endpoint(),
        }
    )

    agent = Agent(node)
    poller = zmq.Poller()
    poller.register(node.socket(), zmq.POLLIN)
    poller.register(0, zmq.POLLIN)
    node_thread = node.actor.thread

    while not agent.stopping:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            emit({"event": "timeout"})
            stop_node(node, zmq, limit=10.0)
            return EXIT_TIMEOUT
        ready = dict(poller.poll(min(remaining, 0.5) * 1000))
        if node.socket() in ready:
            drain(node, zmq, wait_ms=0)
        if 0 in ready and agent.stdin_open:
            agent.read_stdin()
        if not node_thread.is_alive() or crashed:
            drain(node, zmq, wait_ms=0)
            emit({"event": "error", "error": "the pyre node thread died"})
            return EXIT_NODE_DIED

    return stop_node(node, zmq, limit=10.0)


if __name__ == "__main__":
    try:
        code = main()
    except BaseException:
        emit({"event": "error", "error": "agent crashed", "traceback": traceback.format_exc()})
        code = 1
    finish(code)
