"""The trace recorder and what nodes and patterns write with it (docs/traces.md)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
import trio

import trizre
from tests.support.nodes import FAST, free_udp_port, next_event
from trizre import patterns
from trizre.trace._writer import Tracer

COMMON = {"v", "t", "m", "node", "name", "kind"}
KINDS = {
    "node-start",
    "node-stop",
    "enter",
    "exit",
    "join",
    "leave",
    "evasive",
    "silent",
    "whisper-sent",
    "whisper-received",
    "shout-sent",
    "shout-received",
    "request-sent",
    "request-retried",
    "worker-chosen",
    "request-answered",
    "request-abandoned",
    "request-received",
    "request-executed",
    "reply-sent",
    "dedupe-hit",
    "request-refused",
    "bstar-state",
}


def read_traces(directory: Path) -> list[dict[str, Any]]:
    lines = []
    for path in sorted(directory.glob("*.jsonl")):
        for line in path.read_text().splitlines():
            record = json.loads(line)
            assert set(record) >= COMMON, record
            assert record["v"] == 1
            assert record["kind"] in KINDS, record["kind"]
            lines.append(record)
    return lines


def test_tracer_lines_rotation_and_close(tmp_path: Path) -> None:
    node = uuid.uuid4()
    tracer = Tracer(tmp_path, node, 'we"ird/näme', max_bytes=4096, flush_lines=10)
    for i in range(500):
        tracer.message("whisper-sent", "ab" * 16, i)
    tracer.record("join", peer=node, peer_name="x", group="g")
    tracer.close()
    tracer.close()  # idempotent
    tracer.record("leave", group="ignored after close")
    files = sorted(tmp_path.glob("*.jsonl"))
    assert len(files) > 2  # rotated
    assert all(f.name.startswith("we_ird_näme-") for f in files)
    records = read_traces(tmp_path)
    assert len(records) == 501
    seqs = sorted(r["seq"] for r in records if r["kind"] == "whisper-sent")
    assert seqs == list(range(500))
    join = next(r for r in records if r["kind"] == "join")
    assert join["peer"] == node.hex and join["name"] == 'we"ird/näme'
    with pytest.raises(ValueError):
        Tracer(tmp_path, node, "x", max_bytes=10)


async def test_nodes_trace_presence_and_messages(tmp_path: Path, links_mode: str) -> None:
    port = free_udp_port()
    with trio.fail_after(10):
        async with trizre.open_node("a", beacon_port=port, trace_dir=tmp_path, **FAST) as a:
            async with trizre.open_node("b", beacon_port=port, trace_dir=tmp_path, **FAST) as b:
                assert a.tracer is not None and b.tracer is not None
                events = b.events()
                await a.wait_for_peer(b.uuid)
                await b.wait_for_peer(a.uuid)
                await a.join("g")
                await next_event(events, trizre.Join)
                for i in range(5):
                    await a.whisper(b.uuid, bytes([i]))
                await a.shout("g", b"all")  # b is not in g: nobody gets it
                a_events = a.events()
                await b.join("g")
                while b.uuid not in a.peers_by_group("g"):
                    await next_event(a_events, trizre.Join)
                await a.shout("g", b"all")
                await next_event(events, trizre.Shout)
                a_exits = a.events()
            b_uuid = b.uuid
            a_uuid = a.uuid
            await next_event(a_exits, trizre.Exit)  # a sees b go before it stops
    records = read_traces(tmp_path)
    mine = {r["node"] for r in records}
    assert mine == {a_uuid.hex, b_uuid.hex}
    by_a = [r for r in records if r["node"] == a_uuid.hex]
    by_b = [r for r in records if r["node"] == b_uuid.hex]
    assert by_a[0]["kind"] == "node-start" and by_a[-1]["kind"] == "node-stop"
    sent = [r["seq"] for r in by_a if r["kind"] == "whisper-sent"]
    received = [r["seq"] for r in by_b if r["kind"] == "whisper-received"]
    assert sent == received and len(sent) == 5
    assert [r["group"] for r in by_b if r["kind"] == "shout-received"] == ["g"]
    assert any(r["kind"] == "enter" and r["peer"] == b_uuid.hex for r in by_a)
    assert any(r["kind"] == "join" and r["group"] == "g" for r in by_a)
    exits = [r for r in by_a if r["kind"] == "exit"]
    # A local peer says GOODBYE over its link; a TCP peer's closed connection
    # ends it at once (its port-0 beacon is only a hint a PING must confirm).
    reason = "goodbye" if links_mode == "local" else "link"
    assert exits and exits[0]["reason"] == reason and exits[0]["peer_name"] == "b"


async def test_patterns_trace_both_ends_of_a_request(tmp_path: Path) -> None:
    port = free_udp_port()
    calls = 0

    async def slow(request: patterns.IncomingRequest) -> bytes:
        nonlocal calls
        calls += 1
        await trio.sleep(0.5)  # longer than the client's attempt timeout
        return b"ok"

    with trio.fail_after(10):
        async with (
            trizre.open_node("w", beacon_port=port, trace_dir=tmp_path, **FAST) as w,
            patterns.open_server(w, slow, service="svc", reply_cache=patterns.ReplyCache()),
            trizre.open_node("c", beacon_port=port, trace_dir=tmp_path, **FAST) as c,
            # hold_timeout: a held request is retried only with it.
            patterns.open_service_client(c, patterns.RetryPolicy(0.3, 3, 0.3)) as client,
        ):
            await client.wait_for_service("svc")
            assert await client.request("svc", b"x") == (b"ok",)
            client_hex, worker_hex = c.uuid.hex, w.uuid.hex
    records = read_traces(tmp_path)
    client_side = [r for r in records if r["node"] == client_hex and "rid" in r]
    server_side = [r for r in records if r["node"] == worker_hex and "rid" in r]
    rids = {r["rid"] for r in client_side}
    assert len(rids) == 1
    (rid,) = rids
    assert len(rid) == 16
    kinds = [r["kind"] for r in client_side]
    assert kinds[:2] == ["worker-chosen", "request-sent"]
    assert "request-retried" in kinds
    assert kinds[-1] == "request-answered"
    answered = client_side[-1]
    assert answered["status"] == 200 and answered["peer"] == worker_hex
    assert answered["pattern"] == "service" and answered["attempt"] == 2
    assert answered["latency"] >= 0.3
    assert all(r["client"] == client_hex and r["rid"] == rid for r in server_side)
    server_kinds = [r["kind"] for r in server_side]
    # The retry arrived while the first run was still going: the cache
    # ignored it, and the first run's reply answered the retried request.
    assert server_kinds.count("request-received") == 2
    assert server_kinds.count("request-executed") == 1 == calls
    assert server_kinds.count("reply-sent") == 1
    assert all(r["idempotent"] for r in server_side if r["kind"] == "request-executed")
