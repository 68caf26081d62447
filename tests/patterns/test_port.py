"""One port per node: each envelope decoded once, routed to the pattern it is for.

Several patterns on one node share the node's
:class:`~trizre.patterns._port.PatternPort`; these tests count decodes,
stall one service while another answers, and move the port's reading task
from one user to another.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from uuid import UUID, uuid4

import pytest
import trio
import trio.testing

import trizre
from tests.support.nodes import FAST, MEMORY, free_udp_port
from trizre import patterns
from trizre.patterns import IncomingRequest, RetryPolicy, _port
from trizre.patterns import _protocol as proto
from trizre.patterns._admission import new_incoming

_decode = proto.decode  # the real one, even while a test counts the patterns' calls


def answering(label: bytes) -> patterns.Handler:
    async def handler(request: IncomingRequest) -> list[bytes]:
        return [label, *request.body]

    return handler


async def _requests_and_replies(
    client: trizre.Node, server: trizre.Node, service: str, count: int
) -> list[proto.Reply]:
    """Send ``count`` requests for ``service`` by hand and read their replies by hand."""
    replies: list[proto.Reply] = []
    async with client.events() as events:
        for request_id in range(1, count + 1):
            request = proto.Request(request_id, service, (b"x",))
            await client.whisper(server.uuid, *proto.encode(request))
        async for event in events:
            if isinstance(event, trizre.Whisper):
                message = _decode(event.frames)  # not counted
                if isinstance(message, proto.Reply):
                    replies.append(message)
                    if len(replies) == count:
                        break
    return replies


async def test_three_patterns_on_one_node_decode_each_envelope_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two servers and a client router on one node: one decode per envelope, not three."""
    calls = 0
    real = proto.decode
    real_head = proto.request_head

    def counting(frames: Sequence[bytes]) -> proto.PatternMessage | None:
        nonlocal calls
        calls += 1
        return real(frames)

    # A version-2 request is decoded by request_head alone (issue 28): it counts as the decode.
    def counting_head(head: bytes) -> tuple[int, str] | None:
        nonlocal calls
        found = real_head(head)
        calls += found is not None
        return found

    port = free_udp_port()
    with trio.fail_after(20):
        async with (
            trizre.open_node("w", beacon_port=port, **FAST) as w,
            patterns.open_server(w, answering(b"a"), service="a"),
            patterns.open_server(w, answering(b"b"), service="b"),
            patterns.open_service_client(w),
            trizre.open_node("c", beacon_port=port, **FAST) as c,
        ):
            await c.wait_for_peer("w")
            await w.wait_for_peer("c")
            monkeypatch.setattr(proto, "decode", counting)
            monkeypatch.setattr(proto, "request_head", counting_head)
            replies = await _requests_and_replies(c, w, "a", 10)
            assert sorted(reply.request_id for reply in replies) == list(range(1, 11))
            assert all(reply.body == (b"a", b"x") for reply in replies)
            # The client node "c" decodes nothing through the patterns (no
            # pattern runs there); node "w" decoded each request once.
            assert calls == 10


async def test_a_server_answers_each_request_in_the_envelope_version_it_came_in() -> None:
    """README §4: version 2 is one frame less a message; a version-1 client is still served."""
    port = free_udp_port()
    with trio.fail_after(20):
        async with (
            trizre.open_node("w", beacon_port=port, **FAST) as w,
            patterns.open_server(w, answering(b"a"), service="a"),
            trizre.open_node("c", beacon_port=port, **FAST) as c,
        ):
            await c.wait_for_peer("w")
            await w.wait_for_peer("c")
            async with c.events() as events:
                for request_id, version in ((1, 2), (2, 1), (3, 2), (4, 1)):
                    request = proto.Request(request_id, "a", (b"x",), version=version)
                    frames = proto.encode(request)
                    assert len(frames) == (2 if version == 2 else 3)
                    await c.whisper(w.uuid, *frames)
                answers: dict[int, tuple[bytes, ...]] = {}
                async for event in events:
                    if isinstance(event, trizre.Whisper):
                        reply = _decode(event.frames)
                        assert isinstance(reply, proto.Reply)
                        answers[reply.request_id] = event.frames
                        if len(answers) == 4:
                            break
    for request_id, version in ((1, 2), (2, 1), (3, 2), (4, 1)):
        frames = answers[request_id]
        assert frames[0][4] == version
        reply = _decode(frames)
        assert reply == proto.Reply(request_id, 200, (b"a", b"x"))
        assert reply is not None and reply.version == version
        assert len(frames) == (3 if version == 2 else 4)  # header (+ status), two body frames


async def test_a_stalled_service_does_not_stop_another_service_on_the_same_node() -> None:
    release, started = trio.Event(), trio.Event()
    stalled: list[int] = []

    async def stuck(request: IncomingRequest) -> bytes:
        stalled.append(request.request_id)
        started.set()
        await release.wait()
        return b"late"

    port = free_udp_port()
    policy = RetryPolicy(attempt_timeout=5.0, attempts=1)
    with trio.fail_after(20):
        async with (
            trizre.open_node("w", beacon_port=port, **FAST) as w,
            patterns.open_server(w, stuck, service="slow", max_concurrency=1, max_queued=2),
            patterns.open_server(w, answering(b"fast"), service="fast"),
            trizre.open_node("c", beacon_port=port, **FAST) as c,
            patterns.open_service_client(c, policy) as client,
            trio.open_nursery() as nursery,
        ):
            await client.wait_for_service("slow")
            await client.wait_for_service("fast")

            async def ask_slow() -> None:
                # Held (ACCEPTED), or refused once the slow server is full.
                with trio.move_on_after(10), pytest.raises(patterns.PatternError):
                    await client.request("slow", b"x")

            for _ in range(6):
                nursery.start_soon(ask_slow)
            await started.wait()
            for i in range(20):
                assert await client.request("fast", str(i).encode()) == (b"fast", str(i).encode())
            assert stalled == stalled[:1]  # one handler, still stuck
            release.set()
            nursery.cancel_scope.cancel()


async def test_patterns_on_one_node_share_one_port_that_outlives_its_first_user() -> None:
    """The port's reader runs in the first user's nursery; it moves when that user leaves."""
    port = free_udp_port()
    with trio.fail_after(20):
        async with (
            trizre.open_node("w", beacon_port=port, **FAST) as w,
            patterns.open_server(w, answering(b"w"), service="echo"),
            trizre.open_node("c", beacon_port=port, **FAST) as c,
        ):
            first_done = trio.Event()
            stop_first = trio.Event()
            ports: list[_port.PatternPort] = []

            async def first_user() -> None:
                async with _port.open_port(c) as shared:
                    ports.append(shared)
                    first_done.set()
                    await stop_first.wait()

            async with trio.open_nursery() as nursery:
                nursery.start_soon(first_user)
                await first_done.wait()
                async with patterns.open_service_client(c) as client:
                    async with _port.open_port(c) as mine:
                        assert mine is ports[0]  # one port per node
                        assert mine.statistics()["users"] == 3
                    await client.wait_for_service("echo")
                    assert await client.request("echo", b"1") == (b"w", b"1")
                    stop_first.set()  # the reader's host leaves; the client goes on
                    await trio.testing.wait_all_tasks_blocked()
                    assert ports[0].statistics()["users"] == 1
                    for i in range(5):
                        body = str(i).encode()
                        assert await client.request("echo", body) == (b"w", body)
                    assert ports[0].statistics()["decoded"] == 6
            # The last user left: a new port subscribes afresh.
            async with _port.open_port(c) as fresh:
                assert fresh is not ports[0]


async def test_a_port_for_a_stopped_node_reads_only_stop() -> None:
    async with trizre.open_node("gone", beacon_port=free_udp_port(), **FAST) as node:
        pass
    with trio.fail_after(5):
        async with _port.open_port(node) as port:
            await trio.testing.wait_all_tasks_blocked()  # its reader read Stop and ended
            assert port.closed
            stats: dict[str, Any] = port.statistics()
            assert stats["decoded"] == 0


async def test_the_port_takes_a_burst_of_events_in_bounded_batches_in_order(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One read (one cancellation check) per batch, not per event (issue 28); each
    batch at most 64, so the pump lets other tasks run between them."""
    sizes: list[int] = []
    real = trizre.EventStream.receive_batch

    async def counted(stream: trizre.EventStream, max_events: int = 256) -> list[trizre.Event]:
        batch = await real(stream, max_events)
        sizes.append(len(batch))
        return batch

    monkeypatch.setattr(trizre.EventStream, "receive_batch", counted)
    seen: list[object] = []

    class Router:
        def on_message(self, peer: UUID, message: proto.Reply | proto.Accepted) -> None:
            raise AssertionError("no reply was sent")

        def on_event(self, event: object) -> None:
            seen.append(event)

    with trio.fail_after(10):
        async with trizre.open_node("w", **MEMORY) as w:
            port = _port.PatternPort(w)
            port.add_router(Router())
            burst = [trizre.Join(uuid4(), "x", f"g{i}") for i in range(100)]
            for event in burst:  # all buffered before the pump runs
                assert w._fanout.publish_nowait(event)
            async with trio.open_nursery() as nursery:
                port._attach(nursery)
                await trio.testing.wait_all_tasks_blocked()
                assert seen == burst
                assert sizes == [64, 36]
                port._detach(nursery)


async def test_a_request_for_a_service_nobody_here_offers_is_counted_unserved() -> None:
    port = free_udp_port()
    with trio.fail_after(20):
        async with (
            trizre.open_node("w", beacon_port=port, **FAST) as w,
            patterns.open_server(w, answering(b"a"), service="a") as server,
            trizre.open_node("c", beacon_port=port, **FAST) as c,
        ):
            await c.wait_for_peer("w")
            await c.whisper(w.uuid, *proto.encode(proto.Request(1, "elsewhere", ())))
            await c.whisper(w.uuid, b"TZRP-not-quite")  # malformed pattern traffic
            async with _port.open_port(w) as shared:
                # Answered after the two before it (one peer's messages keep their order).
                assert len(await _requests_and_replies(c, w, "a", 1)) == 1
                assert (shared.unserved, shared.malformed, server.received) == (1, 1, 1)


async def test_envelopes_in_a_version_this_node_does_not_speak_are_warned_of_at_most_every_10_s(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """An operator hears that a peer is on a newer envelope (its requests only time out here),
    once every 10 s however many come; other malformed traffic stays at debug."""
    port = free_udp_port()
    newer = proto.TAG + bytes([9, 1]) + (1).to_bytes(8, "big")
    with trio.fail_after(20):
        async with (
            trizre.open_node("w", beacon_port=port, **FAST) as w,
            patterns.open_server(w, answering(b"a"), service="a"),
            trizre.open_node("c", beacon_port=port, **FAST) as c,
        ):
            await c.wait_for_peer("w")
            caplog.set_level("WARNING", logger="trizre.patterns")
            await c.whisper(w.uuid, b"TZRP\x09")  # malformed: no whole header, no version
            for _ in range(5):
                await c.whisper(w.uuid, newer + b"a", b"x")
            assert len(await _requests_and_replies(c, w, "a", 1)) == 1  # read after them all
            logged = [r.getMessage() for r in caplog.records]
            warned = [m for m in logged if "envelope version" in m]
            assert len(warned) == 1, warned
            assert "envelope version 9" in warned[0]
            assert "this node speaks versions 1, 2" in warned[0]


# ================================================ the trace, from the cores' decisions

_PATTERN_KINDS = {
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
}


def _pattern_lines(directory: Path, names: dict[str, str]) -> dict[str, list[str]]:
    """Each node's pattern trace lines, times and the node's own fields left out, UUIDs named."""
    found: dict[str, list[str]] = {}
    for path in sorted(directory.glob("*.jsonl")):
        for line in path.read_text().splitlines():
            record = json.loads(line)
            if record["kind"] not in _PATTERN_KINDS:
                continue
            node = record["name"]
            for key in ("v", "t", "m", "node", "name", "latency"):
                record.pop(key, None)
            shown = [f"{key}={names.get(value, value)}" for key, value in record.items()]
            found.setdefault(node, []).append(" ".join(shown))
    return found


async def test_the_trace_lines_are_those_of_docs_traces(tmp_path: Path) -> None:
    """Written by observers of the cores' decisions: the same lines, fields and order as before."""

    async def echo(request: IncomingRequest) -> tuple[bytes, ...]:
        return request.body

    async def fail(request: IncomingRequest) -> bytes:
        raise RuntimeError("boom")

    port = free_udp_port()
    options: dict[str, Any] = {"beacon_port": port, "trace_dir": tmp_path, **FAST}
    with trio.fail_after(20):
        async with (
            trizre.open_node("w", **options) as w,
            patterns.open_server(w, echo, service="echo", reply_cache=patterns.ReplyCache()),
            patterns.open_server(w, fail, service="fail"),
            patterns.open_server(w, echo, service="closed", _gate=lambda request: 503),
            trizre.open_node("c", **options) as c,
            patterns.open_service_client(c, RetryPolicy(0.3, 2)) as client,
            patterns.open_lazy_pirate_client(c, "nobody", RetryPolicy(0.1, 2)) as lazy,
        ):
            for service in ("echo", "fail", "closed"):
                await client.wait_for_service(service)
            assert await client.request("echo", b"a", request_id=5) == (b"a",)
            assert await client.request("echo", b"a", request_id=5) == (b"a",)  # cached
            with pytest.raises(patterns.RemoteError):
                await client.request("fail", b"x", request_id=6)
            with pytest.raises(patterns.RequestAbandoned):
                await client.request("closed", b"x", request_id=8)  # refused twice
            with pytest.raises(patterns.RequestAbandoned):
                await lazy.request(b"x")  # nobody there
            names = {w.uuid.hex: "W", c.uuid.hex: "C"}
    lines = _pattern_lines(tmp_path, names)
    rid = "rid=" + "0" * 15
    sent = "kind=request-sent {r} pattern=service service={s} peer=W peer_name=w attempt={a}"
    chosen = "kind=worker-chosen {r} service={s} peer=W peer_name=w"
    answered = "kind=request-answered {r} pattern=service service={s} peer=W status={st} attempt=1"
    lazy_rid = next(line for line in lines["c"] if "lazy-pirate" in line).split()[1]
    assert lines["c"] == [
        chosen.format(r=rid + "5", s="echo"),
        sent.format(r=rid + "5", s="echo", a=1),
        answered.format(r=rid + "5", s="echo", st=200),
        chosen.format(r=rid + "5", s="echo"),
        sent.format(r=rid + "5", s="echo", a=1),
        answered.format(r=rid + "5", s="echo", st=200),
        chosen.format(r=rid + "6", s="fail"),
        sent.format(r=rid + "6", s="fail", a=1),
        answered.format(r=rid + "6", s="fail", st=500),
        chosen.format(r=rid + "8", s="closed"),
        sent.format(r=rid + "8", s="closed", a=1),
        f"kind=request-retried {rid}8 pattern=service service=closed attempt=2",
        chosen.format(r=rid + "8", s="closed"),
        sent.format(r=rid + "8", s="closed", a=2),
        f"kind=request-abandoned {rid}8 pattern=service service=closed attempt=2",
        f"kind=request-retried {lazy_rid} pattern=lazy-pirate service= attempt=2",
        f"kind=request-abandoned {lazy_rid} pattern=lazy-pirate service= attempt=2",
    ]
    server = "{k} {r} client=C service={s}"
    assert lines["w"] == [
        server.format(k="kind=request-received", r=rid + "5", s="echo"),
        server.format(k="kind=request-executed", r=rid + "5", s="echo") + " idempotent=True",
        server.format(k="kind=reply-sent", r=rid + "5", s="echo") + " status=200",
        server.format(k="kind=request-received", r=rid + "5", s="echo"),
        server.format(k="kind=dedupe-hit", r=rid + "5", s="echo"),
        server.format(k="kind=reply-sent", r=rid + "5", s="echo") + " status=200",
        server.format(k="kind=request-received", r=rid + "6", s="fail"),
        server.format(k="kind=request-executed", r=rid + "6", s="fail") + " idempotent=False",
        server.format(k="kind=reply-sent", r=rid + "6", s="fail") + " status=500",
        server.format(k="kind=request-received", r=rid + "8", s="closed"),
        server.format(k="kind=request-refused", r=rid + "8", s="closed") + " status=503",
        server.format(k="kind=request-received", r=rid + "8", s="closed"),
        server.format(k="kind=request-refused", r=rid + "8", s="closed") + " status=503",
    ]


# ======================================== a server's bounds, as the port hands it requests


class _FullClientNode:
    """A node whose one client never has room: every answer must wait."""

    tracer = None

    def __init__(self) -> None:
        self.stuck = 0

    def whisper_nowait(self, peer: object, *frames: bytes) -> bool:
        return False

    async def whisper(self, peer: object, *frames: bytes) -> None:
        self.stuck += 1
        await trio.sleep_forever()


async def test_answers_that_ran_nothing_beyond_the_outbox_bound_are_counted_unsent(
    autojump_clock: trio.abc.Clock,
) -> None:
    from trizre.patterns._server import Server  # noqa: PLC0415 -- the shell, by itself

    node = _FullClientNode()
    server = Server(
        node,  # type: ignore[arg-type]
        "work",
        answering(b"never"),
        max_concurrency=1,
        max_queued=1,
        gate=lambda request: 503,
    )
    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(server._send_replies)
            for request_id in range(10):
                server.deliver(UUID(int=1), "c", proto.Request(request_id, "work", ()))
            await trio.testing.wait_all_tasks_blocked()
            # Two (the server's capacity) wait for room; the rest are counted, not lost.
            assert (server.refused, server.unsent, node.stuck) == (10, 8, 1)
            assert server.stats()["unsent"] == 8  # watchers (and the metrics) are told
            nursery.cancel_scope.cancel()


async def test_a_gate_that_raises_ends_the_servers_block_with_its_error() -> None:
    def broken(request: IncomingRequest) -> int | None:
        raise KeyError("gate")

    port = free_udp_port()
    with trio.fail_after(10):
        async with (
            trizre.open_node("w", beacon_port=port, **FAST) as w,
            trizre.open_node("c", beacon_port=port, **FAST) as c,
            patterns.open_lazy_pirate_client(c, "w", RetryPolicy(0.2, 1)) as client,
        ):
            with pytest.raises(KeyError, match="gate"):
                async with patterns.open_server(w, answering(b"w"), _gate=broken):
                    await c.wait_for_peer("w")
                    await client.request(b"x")  # its arrival ends the server's block
                    pytest.fail("the server went on after its gate raised")
            # The port goes on for the other patterns on the node.
            async with patterns.open_server(w, answering(b"w")):
                assert await client.request(b"y") == (b"w", b"y")


class _Recorder:
    def __init__(self) -> None:
        self.got: list[IncomingRequest] = []

    def receive(self, request: IncomingRequest) -> None:
        self.got.append(request)

    def deliver(self, peer: UUID, name: str, message: proto.Request) -> None:
        """What the port called before issue 28's one pass (a Request, decoded)."""
        self.got.append(
            IncomingRequest(
                peer, name, message.request_id, message.service, message.body, message.version
            )
        )

    def watcher_joined(self, peer: UUID) -> None:
        pass


class _NoEvents:
    def events(self) -> object:
        return None


def _count_decodes(monkeypatch: pytest.MonkeyPatch) -> list[Sequence[bytes]]:
    """The frames proto.decode is called with from now on (it still decodes)."""
    decoded: list[Sequence[bytes]] = []

    def counting(frames: Sequence[bytes]) -> proto.PatternMessage | None:
        decoded.append(frames)
        return _decode(frames)

    monkeypatch.setattr(proto, "decode", counting)
    return decoded


def test_a_version_2_request_goes_to_its_servers_as_one_request_decoded_in_one_pass(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 28: the port reads a version-2 request's frame 0 straight into the
    IncomingRequest its servers keep (no proto.Request, no general decode), one
    object for every server of the service; other traffic still goes through decode."""
    decoded = _count_decodes(monkeypatch)
    port = _port.PatternPort(_NoEvents())  # type: ignore[arg-type]
    first, second, other = _Recorder(), _Recorder(), _Recorder()
    port.add_server("svc", first)
    port.add_server("svc", second)
    port.add_server("other", other)
    peer = UUID(int=0xE)
    frames = tuple(proto.encode(proto.Request(5, "svc", (b"x", b"y"))))
    port.dispatch(trizre.Whisper(peer, "client", frames))
    expected = IncomingRequest(peer, "client", 5, "svc", (b"x", b"y"), 2)
    assert first.got == [expected] and second.got[0] is first.got[0]
    assert first.got[0].version == 2 and other.got == []
    assert decoded == []  # one pass: no general decode, no Request made
    # Version 1 and a malformed service still go through decode, as before.
    v1 = tuple(proto.encode(proto.Request(6, "svc", (b"z",), version=1)))
    port.dispatch(trizre.Whisper(peer, "client", v1))
    assert first.got[1] == IncomingRequest(peer, "client", 6, "svc", (b"z",), 1)
    assert first.got[1].version == 1
    bad = (frames[0][:14] + b"\xff\xfe", b"x")
    port.dispatch(trizre.Whisper(peer, "client", bad))
    assert decoded == [v1, bad] and port.malformed == 1 and len(first.got) == 2
    assert port.statistics()["decoded"] == 2 and port.unserved == 0
    unserved = tuple(proto.encode(proto.Request(7, "nobody", ())))
    port.dispatch(trizre.Whisper(peer, "client", unserved))
    assert port.unserved == 1 and port.statistics()["decoded"] == 3


class _RouterRecorder:
    """A reply router's side of the port: the ids it waits for, what it was handed, and how."""

    def __init__(self, *waiting_for: int) -> None:
        self.pending = dict.fromkeys(waiting_for)
        self.got: list[tuple[str, int]] = []

    def on_message(self, peer: UUID, message: proto.Reply | proto.Accepted) -> None:
        self.got.append(("message", message.request_id))

    def on_reply(self, peer: UUID, reply: proto.Reply) -> None:
        self.got.append(("reply", reply.request_id))

    def on_event(self, event: object) -> None:
        pass


def _answers(port: _port.PatternPort, *messages: proto.PatternMessage) -> None:
    for message in messages:
        port.dispatch(trizre.Whisper(UUID(int=0xE), "worker", tuple(proto.encode(message))))


def test_a_version_2_reply_goes_to_the_routers_waiting_for_it_decoded_in_one_pass(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 28: a version-2 reply is read by proto.reply_v2 and handed to
    on_reply (no general decode) of the routers whose pending table holds its
    id, or of every router when none does (each counts it dropped); a lone
    router gets every reply (it drops those it does not wait for).  A
    version-1 reply and an ACCEPTED go through decode and on_message, to the
    same routers."""
    decoded = _count_decodes(monkeypatch)
    port = _port.PatternPort(_NoEvents())  # type: ignore[arg-type]
    alone = _RouterRecorder(5)
    port.add_router(alone)
    _answers(port, proto.Reply(5, 200, (b"x",)), proto.Reply(9, 200))
    assert alone.got == [("reply", 5), ("reply", 9)]
    assert decoded == [] and port.statistics()["decoded"] == 2
    two = _RouterRecorder(6, 7)
    alone.pending[6] = None  # two clients, one stable id
    port.add_router(two)
    assert port.statistics()["pending"] == 4
    _answers(port, proto.Reply(5, 200), proto.Reply(6, 200), proto.Reply(7, 503))
    _answers(port, proto.Reply(8, 200))  # nobody waits for it: both see it, and drop it
    assert alone.got[2:] == [("reply", 5), ("reply", 6), ("reply", 8)]
    assert two.got == [("reply", 6), ("reply", 7), ("reply", 8)]
    assert decoded == []
    _answers(port, proto.Reply(7, 200, version=1), proto.Accepted(5))
    assert len(decoded) == 2 and port.statistics()["decoded"] == 8
    assert alone.got[5:] == [("message", 5)] and two.got[3:] == [("message", 7)]
    port.remove_router(two)
    assert port.statistics()["routers"] == 1 and port.statistics()["pending"] == 2


def test_new_incoming_makes_the_same_request_as_the_class() -> None:
    peer = UUID(int=0xF)
    made = new_incoming(peer, "n", 9, "svc", body=(b"a",), version=1)
    assert made == IncomingRequest(peer, "n", 9, "svc", (b"a",), 1)
    assert made.version == 1 and type(made) is IncomingRequest
    assert hash(made) == hash(IncomingRequest(peer, "n", 9, "svc", (b"a",), 1))
    with pytest.raises(AttributeError):
        made.request_id = 10  # type: ignore[misc]  # still frozen
