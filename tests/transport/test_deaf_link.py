"""A link that libzmq leaves deaf must not keep its peer present for ever.

A node's inbox is a ROUTER with ``ROUTER_HANDOVER``: a peer's identity
goes to whichever connection libzmq identifies *last*.  When a connection
is identified after the peer's live one (in ``make chaos``: a link the
peer had closed, whose bytes TCP delivered seconds late under 20 % loss),
the live connection stays open but libzmq drops everything it carries,
for as long as it stays open (libzmq issues 2892 and 3771).  The node
hears nothing more from the peer over TCP.  With ``beacons_refresh`` its
beacons used to keep it present regardless: a Binary Star backup never
heard its primary again (finding chaos-2026-11-25).

Here an impostor DEALER with the peer's identity does the stealing, on
loopback, deterministically.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import trio
import zmq

import trizre
from tests.support.nodes import free_udp_port, next_event
from trizre import wire
from trizre.transport._zsock import ZSocket, context

TIMERS = {"evasive_timeout": 0.25, "expired_timeout": 1.0, "beacon_interval": 0.05}


def _exits(trace_dir: Path, node: trizre.Node) -> list[str]:
    """The reasons of the exit lines ``node`` traced so far."""
    reasons = []
    for path in trace_dir.glob(f"*{node.uuid.hex}*.jsonl"):
        for line in path.read_text().splitlines():
            record = json.loads(line)
            if record["kind"] == "exit":
                reasons.append(record["reason"])
    return reasons


@pytest.mark.parametrize("beacons_refresh", [False, True])
async def test_a_peer_whose_link_went_deaf_is_relinked(
    beacons_refresh: bool, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="trizre.node")
    port = free_udp_port()
    options = {
        "beacon_port": port,
        "interface": "lo",
        "local_links": False,  # the deafness is a TCP link's
        "beacons_refresh": beacons_refresh,
        "trace_dir": tmp_path,
        **TIMERS,
    }
    with trio.fail_after(20):
        async with (
            trizre.open_node("a", **options) as a,
            trizre.open_node("b", **options) as b,
        ):
            a_events, b_events = a.events(), b.events()
            await a.wait_for_peer(b.uuid)
            await b.wait_for_peer(a.uuid)

            # The impostor says the next thing a would say: once b reports
            # it, libzmq has given a's identity to the impostor's connection.
            impostor = ZSocket(context().socket(zmq.DEALER))
            impostor.zmq_socket.setsockopt(zmq.IDENTITY, b"\x01" + a.uuid.bytes)
            impostor.zmq_socket.connect(b.endpoint)
            seq = a._peers[b.uuid].protocol.next_sequence
            await impostor.send(wire.encode(wire.Whisper(seq, (b"impostor",))))
            await next_event(b_events, trizre.Whisper, lambda e: e.frames == (b"impostor",))
            impostor.close()

            # a's own link is deaf now: b must notice, drop a and link again.
            await next_event(b_events, trizre.Exit, lambda e: e.peer == a.uuid)
            await next_event(b_events, trizre.Enter, lambda e: e.peer == a.uuid)
            await next_event(a_events, trizre.Enter, lambda e: e.peer == b.uuid)
            await a.whisper(b.uuid, b"heard again")
            await next_event(b_events, trizre.Whisper, lambda e: e.frames == (b"heard again",))
    # b dropped a for its silence over TCP, not for a protocol error.
    assert _exits(tmp_path, b)[0] == "expired"
    # Only a deaf link whose peer's beacons arrive is worth a warning.
    warned = [
        r.getMessage() for r in caplog.records if "though its beacons arrive" in r.getMessage()
    ]
    assert len(warned) == int(beacons_refresh), warned
