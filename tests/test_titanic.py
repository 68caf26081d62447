"""Titanic: requests on disk, dispatched until a worker answers, across restarts and kills."""

from __future__ import annotations

import json
import os
import signal
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import trio

import trizre
from tests.nodes import FAST, free_udp_port
from trizre import patterns
from trizre.patterns import IncomingRequest, RetryPolicy
from trizre.patterns._titanic import _Store, wire_id

ROOT = Path(__file__).resolve().parent.parent
QUICK = RetryPolicy(0.5, 2)


def counting(ran: Counter[bytes]) -> patterns.Handler:
    async def work(request: IncomingRequest) -> bytes:
        ran[request.body[0]] += 1
        return b"done " + request.body[0]

    return work


def test_the_store_keeps_requests_and_replies_across_reopening(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    store = _Store(path)
    first = store.accept("echo", [b"a", b"", b"\x00\xff"])
    second = store.accept("echo", [])
    store.finish(second, 200, [b"ok"])
    store.shut()
    store = _Store(path)
    assert store.pending() == [(first, "echo", (b"a", b"", b"\x00\xff"))]
    assert store.lookup(first) == (patterns._titanic.PENDING, ())
    assert store.lookup(second) == (200, (b"ok",))
    store.finish(second, 500, [b"late"])  # a finished request keeps its first answer
    assert store.lookup(second) == (200, (b"ok",))
    store.close(second)
    assert store.lookup(second) == (patterns._titanic.UNKNOWN, ())
    assert wire_id(first) == wire_id(first) and 0 <= wire_id(first) < 2**64
    store.shut()


async def test_submit_waits_for_a_worker_then_reply_and_close(tmp_path: Path) -> None:
    port = free_udp_port()
    ran: Counter[bytes] = Counter()
    with trio.fail_after(30):
        async with (
            trizre.open_node("titanic", beacon_port=port, **FAST) as tnode,
            patterns.open_titanic(tnode, tmp_path / "t.db", policy=QUICK) as titanic,
            trizre.open_node("cli", beacon_port=port, **FAST) as cli,
            patterns.open_titanic_client(cli) as client,
        ):
            # No waiting for Titanic: a request waits for a member of its service.
            ids = [await client.submit("echo", b"%d" % i) for i in range(5)]
            assert len(set(ids)) == 5 and titanic.accepted == 5
            assert await client.reply(ids[0]) is None  # no worker yet: pending
            async with (
                trizre.open_node("worker", beacon_port=port, **FAST) as wnode,
                patterns.open_server(wnode, counting(ran), service="echo"),
            ):
                for i, titanic_id in enumerate(ids):
                    assert await client.result(titanic_id) == (b"done %d" % i,)
            await client.close(ids[0])
            await client.close(ids[0])  # idempotent
            with pytest.raises(patterns.TitanicUnknown):
                await client.reply(ids[0])
            with pytest.raises(patterns.TitanicUnknown):
                await client.reply("0" * 32)
            with pytest.raises(ValueError):
                await client.submit("mmi.service")
    assert set(ran.values()) == {1} and len(ran) == 5


async def test_a_worker_error_is_stored_and_returned(tmp_path: Path) -> None:
    port = free_udp_port()

    async def broken(request: IncomingRequest) -> bytes:
        raise KeyError("no such account")

    with trio.fail_after(30):
        async with (
            trizre.open_node("titanic", beacon_port=port, **FAST) as tnode,
            patterns.open_titanic(tnode, tmp_path / "t.db", policy=QUICK),
            trizre.open_node("worker", beacon_port=port, **FAST) as wnode,
            patterns.open_server(wnode, broken, service="bank"),
            trizre.open_node("cli", beacon_port=port, **FAST) as cli,
            patterns.open_titanic_client(cli) as client,
        ):
            titanic_id = await client.submit("bank", b"pay")
            with pytest.raises(patterns.RemoteError) as caught:
                await client.result(titanic_id)
            assert (caught.value.status, caught.value.error_type) == (500, "KeyError")


async def test_requests_stored_before_a_restart_are_dispatched_after_it(tmp_path: Path) -> None:
    port = free_udp_port()
    ran: Counter[bytes] = Counter()
    path = tmp_path / "t.db"
    with trio.fail_after(30):
        async with (
            trizre.open_node("cli", beacon_port=port, **FAST) as cli,
            patterns.open_titanic_client(cli) as client,
        ):
            async with (
                trizre.open_node("titanic", beacon_port=port, **FAST) as tnode,
                patterns.open_titanic(tnode, path, policy=QUICK),
            ):
                ids = [await client.submit("echo", b"%d" % i) for i in range(3)]
            # Titanic is gone; a new one on the same file, and a worker at last.
            async with (
                trizre.open_node("titanic", beacon_port=port, **FAST) as tnode,
                patterns.open_titanic(tnode, path, policy=QUICK) as titanic,
                trizre.open_node("worker", beacon_port=port, **FAST) as wnode,
                patterns.open_server(wnode, counting(ran), service="echo"),
            ):
                for i, titanic_id in enumerate(ids):
                    assert await client.result(titanic_id) == (b"done %d" % i,)
                assert titanic.completed == 3
    assert set(ran.values()) == {1}


TITANIC = """
import sys
import trio, trizre
from trizre import patterns
from trizre.patterns import RetryPolicy

port, path = int(sys.argv[1]), sys.argv[2]

async def main():
    async with trizre.open_node("titanic", interface="lo", beacon_port=port,
                                beacon_interval=0.05, local_links=False) as node:
        async with patterns.open_titanic(node, path, policy=RetryPolicy(0.5, 2)):
            print("ready", flush=True)
            await trio.sleep_forever()

trio.run(main)
"""


async def test_kill_9_loses_nothing_accepted_and_an_idempotent_worker_runs_each_once(
    tmp_path: Path,
) -> None:
    """Titanic is SIGKILLed while requests flow, then restarted on the same file.

    Every request it acknowledged is answered in the end; the worker, with
    a reply cache keyed by request id (Titanic dispatches a request under
    the same id after a restart), runs each once.
    """
    port = free_udp_port()
    script = tmp_path / "titanic.py"
    script.write_text(TITANIC)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    argv = [sys.executable, str(script), str(port), str(tmp_path / "t.db")]
    ran: Counter[bytes] = Counter()
    cache = patterns.ReplyCache(per_client=False)

    async def slow(request: IncomingRequest) -> bytes:
        ran[request.body[0]] += 1
        await trio.sleep(0.05)
        return b"done " + request.body[0]

    ids: list[str] = []
    with trio.fail_after(90):
        async with (
            trizre.open_node(
                "cli", beacon_port=port, evasive_timeout=0.5, expired_timeout=2, **FAST
            ) as cli,
            patterns.open_titanic_client(cli, RetryPolicy(0.5, 20)) as client,
            trizre.open_node("worker", beacon_port=port, **FAST) as wnode,
            patterns.open_server(wnode, slow, service="work", reply_cache=cache),
        ):
            first = await trio.lowlevel.open_process(argv, env=env)
            try:
                for i in range(40):
                    ids.append(await client.submit("work", b"%d" % i))
                    if i == 25:
                        first.send_signal(signal.SIGKILL)
                        await first.wait()
                        second = await trio.lowlevel.open_process(argv, env=env)
                for i, titanic_id in enumerate(ids):
                    assert await client.result(titanic_id) == (b"done %d" % i,)
                assert first.returncode == -signal.SIGKILL
            finally:
                for proc in (first, second):
                    if proc.returncode is None:
                        proc.terminate()
                    await proc.wait()
    assert len(ids) == 40 and len(ran) == 40
    assert set(ran.values()) == {1}, ran.most_common(3)


VECTORS = json.loads((ROOT / "patterns" / "vectors" / "titanic.json").read_text())


@pytest.mark.parametrize("vector", VECTORS["wire_ids"], ids=lambda v: v["id"][:8])
def test_a_titanic_id_is_dispatched_under_the_contracts_request_id(vector: dict[str, Any]) -> None:
    assert wire_id(vector["id"]) == vector["request_id"]


async def test_the_contracts_session_against_a_titanic_with_no_worker(tmp_path: Path) -> None:
    """patterns/vectors/titanic.json's session, step by step ("$id": the id step 8 gave)."""
    port = free_udp_port()
    with trio.fail_after(30):
        async with (
            trizre.open_node("titanic", beacon_port=port, **FAST) as tnode,
            patterns.open_titanic(tnode, tmp_path / "t.db", policy=QUICK),
            trizre.open_node("cli", beacon_port=port, **FAST) as cli,
            patterns.open_service_client(cli, RetryPolicy(5, 1)) as client,
        ):
            given: bytes | None = None
            for step in VECTORS["session"]:
                body = [given if f == "$id" else bytes.fromhex(f) for f in step["body"]]
                assert None not in body
                try:
                    reply = await client.request(step["send"], *body)  # type: ignore[arg-type]
                    status = 200
                except patterns.RemoteError as exc:
                    status, reply = exc.status, exc.body
                assert status == step["status"], step
                if "reply" in step and step["reply"] == ["$id"]:
                    (given,) = reply
                    assert len(given) == 32 and set(given) <= set(b"0123456789abcdef")
                elif "reply" in step:
                    assert list(reply) == [bytes.fromhex(f) for f in step["reply"]], step


async def test_stable_ids_and_a_cache_keyed_by_id_run_a_request_once_across_clients() -> None:
    """What Titanic relies on: the same request id from a new client node gets the stored reply."""
    port = free_udp_port()
    ran: Counter[int] = Counter()

    async def work(request: IncomingRequest) -> bytes:
        ran[request.request_id] += 1
        return b"paid"

    cache = patterns.ReplyCache(per_client=False)
    with trio.fail_after(30):
        async with (
            trizre.open_node("w", beacon_port=port, **FAST) as w,
            patterns.open_server(w, work, service="pay", reply_cache=cache),
        ):
            for name in ("before", "after"):  # a client, then another node in its place
                async with (
                    trizre.open_node(name, beacon_port=port, **FAST) as node,
                    patterns.open_service_client(node) as client,
                ):
                    assert await client.request("pay", request_id=12345) == (b"paid",)
            async with (
                trizre.open_node("c", beacon_port=port, **FAST) as node,
                patterns.open_service_client(node) as client,
            ):
                with pytest.raises(ValueError):
                    await client.request("pay", request_id=2**64)
    assert ran == {12345: 1} and cache.hits == 1


async def test_a_handler_answers_its_own_status_with_reply_with(
    caplog: pytest.LogCaptureFixture,
) -> None:
    port = free_udp_port()

    async def lookup(request: IncomingRequest) -> bytes:
        raise patterns.ReplyWith(404, b"no account", request.body[0])

    with trio.fail_after(30):
        async with (
            trizre.open_node("w", beacon_port=port, **FAST) as w,
            patterns.open_server(w, lookup, service="accounts"),
            trizre.open_node("c", beacon_port=port, **FAST) as node,
            patterns.open_service_client(node) as client,
        ):
            with pytest.raises(patterns.RemoteError) as caught:
                await client.request("accounts", b"42")
    assert (caught.value.status, caught.value.body) == (404, (b"no account", b"42"))
    assert "handler failed" not in caplog.text  # an answer, not a failure
    with pytest.raises(ValueError):
        patterns.ReplyWith(70000)
    with pytest.raises(TypeError):
        patterns.ReplyWith(404, "text")  # type: ignore[arg-type]


async def test_titanic_takes_requests_while_no_worker_exists_beyond_its_dispatch_slots(
    tmp_path: Path,
) -> None:
    """The disk is the queue: 30 requests with 2 dispatch slots and no worker, then a worker."""
    port = free_udp_port()
    ran: Counter[bytes] = Counter()
    with trio.fail_after(60):
        async with (
            trizre.open_node("titanic", beacon_port=port, **FAST) as tnode,
            patterns.open_titanic(tnode, tmp_path / "t.db", max_dispatch=2, policy=QUICK) as t,
            trizre.open_node("cli", beacon_port=port, **FAST) as cli,
            patterns.open_titanic_client(cli) as client,
        ):
            ids = [await client.submit("echo", b"%d" % i) for i in range(30)]
            assert t.accepted == 30 and t.in_flight == 2
            async with (
                trizre.open_node("worker", beacon_port=port, **FAST) as wnode,
                patterns.open_server(wnode, counting(ran), service="echo"),
            ):
                for i, titanic_id in enumerate(ids):
                    assert await client.result(titanic_id) == (b"done %d" % i,)
    assert len(ran) == 30 and set(ran.values()) == {1}


async def test_a_request_still_running_for_a_client_that_died_reaches_its_successor() -> None:
    """per_client=False: a new node asks under the same id while the first run goes on."""
    port = free_udp_port()
    started = trio.Event()
    ran = 0

    async def slow(request: IncomingRequest) -> bytes:
        nonlocal ran
        ran += 1
        started.set()
        await trio.sleep(0.5)
        return b"paid"

    with trio.fail_after(30):
        async with (
            trizre.open_node("w", beacon_port=port, **FAST) as w,
            patterns.open_server(
                w, slow, service="pay", reply_cache=patterns.ReplyCache(per_client=False)
            ),
        ):
            async with (
                trizre.open_node("first", beacon_port=port, **FAST) as node,
                patterns.open_service_client(node) as client,
                trio.open_nursery() as nursery,
            ):
                nursery.start_soon(lambda: client.request("pay", request_id=7))
                await started.wait()
                nursery.cancel_scope.cancel()  # the first client dies mid-request
            async with (
                trizre.open_node("second", beacon_port=port, **FAST) as node,
                patterns.open_service_client(node, RetryPolicy(0.3, 10)) as client,
            ):
                assert await client.request("pay", request_id=7) == (b"paid",)
    assert ran == 1
