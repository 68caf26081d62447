"""A trizre node driven over JSON lines (the protocol in tests/interop/__init__.py).

Run only inside a network namespace the test created:

    ip netns exec NS python tests/interop/trizre_agent.py --name NAME [--group G ...]
"""

from __future__ import annotations

import argparse
import json
import sys
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.interop import frames_from_json, frames_to_json
from tests.support.agents import emit, emit_logs, run_agent


def describe(event: Any) -> dict[str, Any]:
    import trizre  # noqa: PLC0415 - imported after the namespace check

    out: dict[str, Any] = {"event": type(event).__name__.upper()}
    if isinstance(event, trizre.Stop):
        return out
    out["peer"] = event.peer.hex
    out["name"] = event.name
    if isinstance(event, trizre.Enter):
        out["headers"] = dict(event.headers)
        out["endpoint"] = event.endpoint
    if isinstance(event, trizre.Join | trizre.Leave | trizre.Shout | trizre.Leader):
        out["group"] = event.group
    if isinstance(event, trizre.Whisper | trizre.Shout):
        out["frames"] = frames_to_json(event.frames)
    return out


def _curve_options(args: argparse.Namespace) -> dict[str, Any]:
    import trizre  # noqa: PLC0415

    if args.curve_cert is None:
        return {}
    cert = (
        trizre.Certificate.generate()
        if args.curve_cert == "new"
        else trizre.Certificate.load(args.curve_cert)
    )
    allow: Any = args.curve_allow
    if allow is None or allow == "any":
        allow = trizre.CURVE_ALLOW_ANY
    elif not Path(allow).is_dir():
        allow = allow.split(",")
    return {"curve": cert, "curve_allow": allow}


async def run(args: argparse.Namespace) -> int:
    import trio  # noqa: PLC0415

    import trizre  # noqa: PLC0415

    headers = dict(item.split("=", 1) for item in args.header)
    curve = _curve_options(args)
    gossip: dict[str, Any] = {}
    if args.endpoint or args.gossip_bind or args.gossip_connect:
        gossip = {
            "discovery": "gossip",
            "endpoint": args.endpoint,
            "gossip_bind": args.gossip_bind,
            "gossip_connect": args.gossip_connect or (),
        }
        if args.gossip_server_key:
            gossip["gossip_server_key"] = args.gossip_server_key
    if args.log:
        emit_logs()
    async with trizre.open_node(
        args.name,
        headers=headers,
        interface=args.interface,
        beacon_port=args.port,
        beacon_interval=args.beacon_interval,
        evasive_timeout=args.evasive,
        expired_timeout=args.expired,
        protocol_version=args.protocol_version,
        ipv6=args.ipv6,
        **curve,
        **gossip,
    ) as node:
        events = node.events()
        key = curve["curve"].public_z85 if curve else None
        emit(
            event="started",
            uuid=node.uuid.hex,
            name=node.name,
            endpoint=node.endpoint,
            public_key=key,
        )
        for group in args.contest:
            await node.contest(group)
        for group in args.group:
            await node.join(group)

        async def pump_events() -> None:
            async for event in events:
                emit(**describe(event))

        async def obey() -> None:
            while True:
                line = await trio.to_thread.run_sync(sys.stdin.readline, abandon_on_cancel=True)
                if not line:
                    return
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
                        peer = uuid.UUID(hex=cmd["peer"])
                        await node.whisper(peer, *frames_from_json(cmd["frames"]))
                    elif what == "shout":
                        await node.shout(cmd["group"], *frames_from_json(cmd["frames"]))
                    elif what == "peers":
                        emit(event="peers", peers=[p.hex for p in node.peers()])
                    else:
                        emit(event="error", error=f"unknown command {what!r}")
                except Exception as exc:  # a bad command must not stop the agent
                    emit(event="error", error=repr(exc))

        with trio.move_on_after(args.max_seconds) as scope:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(pump_events)
                await obey()
                nursery.cancel_scope.cancel()
        if scope.cancelled_caught:
            emit(event="timeout")
    emit(event="STOP")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--name", required=True)
    parser.add_argument("--group", action="append", default=[])
    parser.add_argument("--header", action="append", default=[], metavar="K=V")
    parser.add_argument("--interface", default=None, help="default: the first non-loopback")
    parser.add_argument("--port", type=int, default=5670)
    parser.add_argument("--beacon-interval", type=float, default=1.0)
    parser.add_argument("--evasive", type=float, default=5.0)
    parser.add_argument("--expired", type=float, default=30.0)
    parser.add_argument("--protocol-version", type=int, default=2)
    parser.add_argument("--max-seconds", type=float, default=60.0)
    parser.add_argument(
        "--curve-cert", default=None, help="a zcert file, or 'new' for a fresh key pair"
    )
    parser.add_argument(
        "--curve-allow",
        default=None,
        help="'any', a directory of certificates, or Z85 keys, ... (as --curve-allow=KEYS: "
        "a Z85 key may begin with '-')",
    )
    parser.add_argument("--log", action="store_true", help="emit trizre's log records as events")
    parser.add_argument("--contest", action="append", default=[], help="stand in elections")
    parser.add_argument("--ipv6", action="store_true", help="beacon to ff02::1 (IPv6)")
    parser.add_argument("--endpoint", default=None, help="gossip mode: the inbox endpoint")
    parser.add_argument("--gossip-bind", default=None, help="gossip mode: serve gossip here")
    parser.add_argument("--gossip-connect", action="append", default=[], help="gossip hub")
    parser.add_argument(
        "--gossip-server-key",
        default=None,
        help="the gossip hubs' Z85 public key: gossip over CURVE (as --gossip-server-key=KEY)",
    )
    return run_agent(run, parser.parse_args())


if __name__ == "__main__":
    sys.exit(main())
