"""The conformance agent for trizre: one node driven by the suite over JSON lines.

    python -m trizre.conformance.trizre_agent

It waits for ``start`` on stdin (see :mod:`trizre.conformance._agent` for the
contract) and opens the node on the interface the suite names, so it beacons
nowhere else.
"""

from __future__ import annotations

import json
import sys
import uuid
from typing import Any

import trio

import trizre

from ..transport._interfaces import select_interface
from ._agent import b64, free_tcp_port, unb64


def _emit(**event: Any) -> None:
    print(json.dumps(event), flush=True)


def _describe(event: trizre.Event) -> dict[str, Any] | None:
    if isinstance(event, trizre.Stop):
        return None
    out: dict[str, Any] = {"event": type(event).__name__.upper(), "peer": event.peer.hex}
    if isinstance(event, trizre.Enter):
        out["name"] = event.name
        out["headers"] = dict(event.headers)
    if isinstance(event, trizre.Join | trizre.Leave | trizre.Shout | trizre.Leader):
        out["group"] = event.group
    if isinstance(event, trizre.Whisper | trizre.Shout):
        out["frames"] = [b64(f) for f in event.frames]
    return out


async def _read_line() -> str:
    return await trio.to_thread.run_sync(sys.stdin.readline, abandon_on_cancel=True)


async def _obey(node: trizre.Node) -> None:
    while line := await _read_line():
        try:
            cmd = json.loads(line)
            what = cmd["cmd"]
            if what == "stop":
                return
            if what == "join":
                await node.join(cmd["group"])
            elif what == "leave":
                await node.leave(cmd["group"])
            elif what == "whisper":
                frames = [unb64(f) for f in cmd["frames"]]
                await node.whisper(uuid.UUID(hex=cmd["peer"]), *frames)
            elif what == "shout":
                await node.shout(cmd["group"], *[unb64(f) for f in cmd["frames"]])
            else:
                _emit(event="error", error=f"unknown command {what!r}")
        except Exception as exc:  # a bad command must not stop the agent
            _emit(event="error", error=repr(exc))


async def run() -> int:
    """Serve one ``start`` and the commands after it; 0 on a clean stop, 2 on a bad start."""
    line = await _read_line()
    try:
        start = json.loads(line)
        if start.get("cmd") != "start":
            raise ValueError("the first command must be 'start'")
    except ValueError as exc:
        _emit(event="error", error=str(exc))
        return 2
    curve: dict[str, Any] = {}
    if start.get("curve"):
        curve = {"curve": trizre.Certificate.generate(), "curve_allow": trizre.CURVE_ALLOW_ANY}
    gossip: dict[str, Any] = {}
    if start.get("gossip"):
        # Gossip discovery: no beacons; our mailbox and a hub of our own on
        # the interface we were told, the suite's hub as our remote.
        address = select_interface(start["interface"]).address
        gossip = {
            "discovery": "gossip",
            "endpoint": f"tcp://{address}:*",
            "gossip_bind": f"tcp://{address}:{free_tcp_port(str(address))}",
            "gossip_connect": [start["gossip"]],
        }
    async with trizre.open_node(
        start.get("name"),
        headers=start.get("headers") or {},
        interface=start["interface"],
        beacon_port=int(start["port"]),
        beacon_interval=float(start.get("beacon_interval", 1.0)),
        evasive_timeout=float(start.get("evasive", 5.0)),
        expired_timeout=float(start.get("expired", 30.0)),
        local_links=False,
        **curve,
        **gossip,
    ) as node:
        events = node.events()
        contest = list(start.get("contest", []))
        for group in contest:
            await node.contest(group)
        for group in start.get("groups", []):
            await node.join(group)
        _emit(
            event="started",
            uuid=node.uuid.hex,
            name=node.name,
            endpoint=node.endpoint,
            evasive=node.config.evasive_timeout,
            expired=node.config.expired_timeout,
            public_key=curve["curve"].public_z85 if curve else None,
            contest=contest,
            gossip_endpoint=gossip.get("gossip_bind"),
        )

        async def pump() -> None:
            async for event in events:
                described = _describe(event)
                if described is not None:
                    _emit(**described)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(pump)
            await _obey(node)
            nursery.cancel_scope.cancel()
    return 0


def main() -> int:
    return trio.run(run)


if __name__ == "__main__":
    sys.exit(main())
