"""Forged leaving beacons against two nodes linked over TCP on loopback (issue 25, section 1).

A forger sends port-0 beacons naming b's UUID, from b's own host (as a
forger on b's machine, or one spoofing its address, would), plain and
CURVE (with a random key, and with b's real public key, which every
beacon of b's shows).  While b's link is alive a never sees b exit; when b
really leaves, its one leaving beacon ends it at a within about a second,
not at the 30 s expiry.
"""

from __future__ import annotations

import logging
import os
import socket
import uuid
from typing import Any

import pytest
import trio

import trizre
from tests.support.nodes import free_udp_port, wait_logged
from trizre import wire


async def echo(node: trizre.Node) -> None:
    async for event in node.events():
        if isinstance(event, trizre.Whisper):
            await node.whisper(event.peer, *event.frames)


def forged_leaves(peer: uuid.UUID, key: bytes | None) -> list[bytes]:
    """Port-0 beacons for ``peer``: plain, or CURVE with a random key and with its own."""
    if key is None:
        return [wire.encode_beacon(wire.Beacon(peer, 0))]
    return [
        wire.encode_beacon(wire.Beacon(peer, 0, 3, os.urandom(32))),
        wire.encode_beacon(wire.Beacon(peer, 0, 3, key)),
    ]


@pytest.mark.parametrize("curve", [False, True], ids=["plain", "curve"])
async def test_forged_leaving_beacons_never_end_a_live_peer_and_a_real_leave_does(
    curve: bool, caplog: pytest.LogCaptureFixture
) -> None:
    port = free_udp_port()
    opts: dict[str, Any] = {
        "interface": "lo",
        "beacon_port": port,
        "local_links": False,  # TCP links, as between processes
        "beacon_interval": 0.1,
        "expired_timeout": 30.0,
    }
    a_cert, b_cert = trizre.Certificate.generate(), trizre.Certificate.generate()
    a_opts, b_opts = dict(opts), dict(opts)
    if curve:
        allow = [a_cert.public, b_cert.public]
        a_opts |= {"curve": a_cert, "curve_allow": allow}
        b_opts |= {"curve": b_cert, "curve_allow": allow}
    forger = trio.socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    forger.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
    stranger = trio.socket.socket(socket.AF_INET, socket.SOCK_DGRAM)  # another host
    stranger.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
    await stranger.bind(("127.0.0.2", 0))
    with forger, stranger, trio.fail_after(30), caplog.at_level(logging.INFO, "trizre.node"):
        async with trizre.open_node("a", **a_opts) as a:
            events = a.events()
            async with trizre.open_node("b", **b_opts) as b, trio.open_nursery() as nursery:
                nursery.start_soon(echo, b)
                peer = await a.wait_for_peer(b.uuid)
                forged = forged_leaves(b.uuid, b_cert.public if curve else None)
                start = trio.current_time()
                round_trips = 0
                # Two and a half seconds of round trips under forged leaves at
                # 20 a second: past two whole checks (a second each).
                while trio.current_time() < start + 2.5:
                    for datagram in forged:
                        await forger.sendto(datagram, ("127.255.255.255", port))
                        await stranger.sendto(datagram, ("127.255.255.255", port))
                    await a.whisper(peer, b"ping")
                    async for event in events:
                        assert not isinstance(event, trizre.Exit), "a forged beacon ended b"
                        if isinstance(event, trizre.Whisper):
                            round_trips += 1
                            break
                    await trio.sleep(0.05)
                assert a.peers() == [b.uuid] and round_trips > 0
                await wait_logged(caplog, "ignoring a leaving beacon")  # the stranger's
                nursery.cancel_scope.cancel()
            # b is gone: its link is dead, and its one leaving beacon ends it.
            async for event in events:
                if isinstance(event, trizre.Exit):
                    assert event.peer == b.uuid
                    break
            assert a.peers() == []
