"""Services under load: nothing runs twice while its worker lives; ACCEPTED, limits, errors.

The issue's scenario, scaled to CI: workers that run one request at a
time, many more requests pipelined from one client than they can run
within an attempt timeout.  Before ACCEPTED, every request that waited in
a busy worker's queue longer than the attempt timeout was sent again to
another worker, and ran twice.  ``benchmarks/bench_services_load.py`` runs
the full-size scenario (2,000 requests, 0.3 s handlers).
"""

from __future__ import annotations

import json
import os
import signal
import sys
from collections import Counter
from pathlib import Path

import pytest
import trio

import trizre
from tests.support.nodes import FAST, free_udp_port
from trizre import patterns
from trizre.patterns import IncomingRequest, RetryPolicy, _server
from trizre.patterns._common import ReplyRouter
from trizre.patterns._protocol import Accepted

ROOT = Path(__file__).resolve().parents[2]
REQUESTS = 300
HANDLER = 0.02  # x 100 requests queued per worker = 2 s: four attempt timeouts
POLICY = RetryPolicy(attempt_timeout=0.5, attempts=3)


async def pipeline(client: patterns.ServiceClient, n: int) -> dict[int, tuple[bytes, ...]]:
    """``n`` requests at once from one client; their replies by number."""
    replies: dict[int, tuple[bytes, ...]] = {}

    async def one(i: int) -> None:
        replies[i] = await client.request("work", b"%d" % i)

    async with trio.open_nursery() as nursery:
        for i in range(n):
            nursery.start_soon(one, i)
    return replies


async def test_a_queued_request_is_never_sent_twice(caplog: pytest.LogCaptureFixture) -> None:
    port = free_udp_port()
    ran: Counter[bytes] = Counter()

    async def work(request: IncomingRequest) -> bytes:
        ran[request.body[0]] += 1
        await trio.sleep(HANDLER)
        return request.body[0]

    with trio.fail_after(60):
        async with (
            trizre.open_node("w0", beacon_port=port, **FAST) as w0,
            trizre.open_node("w1", beacon_port=port, **FAST) as w1,
            trizre.open_node("w2", beacon_port=port, **FAST) as w2,
            patterns.open_server(w0, work, service="work", max_concurrency=1) as s0,
            patterns.open_server(w1, work, service="work", max_concurrency=1) as s1,
            patterns.open_server(w2, work, service="work", max_concurrency=1) as s2,
            trizre.open_node("cli", beacon_port=port, **FAST) as cli,
            patterns.open_service_client(cli, POLICY) as client,
        ):
            await client.wait_for_service("work", 3)
            replies = await pipeline(client, REQUESTS)
    assert all(replies[i] == (b"%d" % i,) for i in range(REQUESTS))
    assert len(ran) == REQUESTS and set(ran.values()) == {1}, ran.most_common(3)
    assert sum(s.executed for s in (s0, s1, s2)) == REQUESTS
    assert min(s.executed for s in (s0, s1, s2)) > 0  # all three took part


async def test_a_full_queue_refuses_and_the_client_goes_elsewhere() -> None:
    """max_queued: past it a worker says 503 (not run) and the request goes to another."""
    port = free_udp_port()
    ran: Counter[bytes] = Counter()

    async def work(request: IncomingRequest) -> bytes:
        ran[request.body[0]] += 1
        await trio.sleep(HANDLER)
        return b"ok"

    with trio.fail_after(60):
        async with (
            trizre.open_node("w0", beacon_port=port, **FAST) as w0,
            trizre.open_node("w1", beacon_port=port, **FAST) as w1,
            patterns.open_server(w0, work, service="work", max_concurrency=1, max_queued=5) as s0,
            patterns.open_server(w1, work, service="work", max_concurrency=4) as s1,
            trizre.open_node("cli", beacon_port=port, **FAST) as cli,
            # Attempts far longer than accept_after (0.1 s): a held request's
            # ACCEPTED must beat the attempt timeout even on a loaded machine,
            # or the client rightly tries elsewhere and it runs twice.  A 503
            # moves the client on at once whatever the attempt timeout.
            patterns.open_service_client(cli, RetryPolicy(5.0, 50)) as client,
        ):
            await client.wait_for_service("work", 2)
            replies = await pipeline(client, 100)
    assert len(replies) == 100 and set(ran.values()) == {1}
    assert s0.shed > 0  # it refused some, never running them
    assert s0.held == s1.held == 0


class Concurrency:
    """A handler taking HANDLER seconds that records how many ran at once at most."""

    def __init__(self) -> None:
        self.running = 0
        self.most = 0

    async def __call__(self, request: IncomingRequest) -> bytes:
        self.running += 1
        self.most = max(self.most, self.running)
        await trio.sleep(HANDLER)
        self.running -= 1
        return b"ok"


async def test_in_flight_requests_are_bounded_by_max_in_flight() -> None:
    port = free_udp_port()
    work = Concurrency()

    with trio.fail_after(60):
        async with (
            trizre.open_node("w0", beacon_port=port, **FAST) as w0,
            patterns.open_server(w0, work, service="work", max_concurrency=64),
            trizre.open_node("cli", beacon_port=port, **FAST) as cli,
            patterns.open_service_client(cli, POLICY, max_in_flight=7) as client,
        ):
            await client.wait_for_service("work")
            await pipeline(client, 50)
    assert work.most == 7


async def test_running_handlers_are_bounded_by_max_concurrency() -> None:
    port = free_udp_port()
    work = Concurrency()

    with trio.fail_after(60):
        async with (
            trizre.open_node("w0", beacon_port=port, **FAST) as w0,
            patterns.open_server(w0, work, service="work", max_concurrency=3) as server,
            trizre.open_node("cli", beacon_port=port, **FAST) as cli,
            patterns.open_service_client(cli, RetryPolicy(5.0, 3)) as client,
        ):
            await client.wait_for_service("work")
            replies = await pipeline(client, 30)
    assert len(replies) == 30 and work.most == 3
    assert server.executed == 30 and server.held == 0


async def test_a_stopped_server_forgets_the_requests_it_never_ran() -> None:
    """Running or still waiting for a handler when the block ends: not finished,
    so the reply cache must let a retry run them."""
    port = free_udp_port()
    cache = patterns.ReplyCache()
    release = trio.Event()

    async def work(request: IncomingRequest) -> bytes:
        await release.wait()
        return b"ok"

    with trio.fail_after(30):
        async with (
            trizre.open_node("w0", beacon_port=port, **FAST) as w0,
            trizre.open_node("cli", beacon_port=port, **FAST) as cli,
            patterns.open_service_client(cli, RetryPolicy(5.0, 1)) as client,
            trio.open_nursery() as nursery,
        ):
            async with patterns.open_server(
                w0, work, service="work", max_concurrency=1, reply_cache=cache
            ) as server:
                await client.wait_for_service("work")
                for i in range(3):
                    nursery.start_soon(client.request, "work", b"%d" % i)
                while server.held < 3:  # noqa: ASYNC110 -- a counter cannot wake us
                    await trio.sleep(0.01)
                assert server.executed == 1 and len(cache) == 3
            assert server.held == 0 and len(cache) == 0
            nursery.cancel_scope.cancel()


def test_max_in_flight_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="max_in_flight"):
        ReplyRouter(object(), 0)  # type: ignore[arg-type]


WORKER = """
import json, os, signal, sys
import trio, trizre
from trizre import patterns

port, name, die_at = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])

async def main():
    started = 0
    async def work(request):
        nonlocal started
        started += 1
        await trio.sleep(%(handler)r / 2)
        if started == die_at:
            os.kill(os.getpid(), signal.SIGKILL)  # half-way through this request
        await trio.sleep(%(handler)r / 2)
        print(json.dumps({"done": request.body[0].decode(), "by": name}), flush=True)
        return request.body[0]
    async with trizre.open_node(name, interface="lo", beacon_port=port,
                                beacon_interval=0.05, local_links=False) as node:
        async with patterns.open_server(node, work, service="work", max_concurrency=1):
            print(json.dumps({"ready": name}), flush=True)
            await trio.sleep_forever()

trio.run(main)
"""


async def test_a_worker_killed_mid_run_costs_no_completed_request_a_second_run(
    tmp_path: Path,
) -> None:
    """Three worker processes; one SIGKILLs itself half-way through its 30th request.

    Its requests are resent once the client sees it go silent (a second
    ``evasive_timeout`` after its last sign of life) and then run once
    elsewhere; the one it died in never finished there.  No request that
    finished anywhere runs again.  (A worker killed between a handler's
    return and its reply leaving would have that one run again: the
    window is the time to put a reply on the wire.)
    """
    port = free_udp_port()
    script = tmp_path / "worker.py"
    script.write_text(WORKER % {"handler": HANDLER})
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    logs = [tmp_path / f"w{i}.jsonl" for i in range(3)]
    procs = []
    for i, log in enumerate(logs):
        with log.open("w") as out:
            argv = [sys.executable, str(script), str(port), f"w{i}", "30" if i == 0 else "0"]
            procs.append(await trio.lowlevel.open_process(argv, stdout=out, env=env))
    try:
        with trio.fail_after(90):
            async with (
                trizre.open_node(
                    "cli",
                    beacon_port=port,
                    evasive_timeout=0.5,
                    expired_timeout=3.0,
                    **FAST,
                ) as cli,
                patterns.open_service_client(cli, POLICY) as client,
            ):
                await client.wait_for_service("work", 3)
                replies = await pipeline(client, REQUESTS)
        assert all(replies[i] == (b"%d" % i,) for i in range(REQUESTS))
    finally:
        for proc in procs:
            if proc.returncode is None:
                proc.terminate()
        with trio.fail_after(10):
            for proc in procs:
                await proc.wait()
    assert procs[0].returncode == -signal.SIGKILL
    done: Counter[str] = Counter()
    for log in logs:
        for line in log.read_text().splitlines():
            event = json.loads(line)
            if "done" in event:
                done[event["done"]] += 1
    assert len(done) == REQUESTS and set(done.values()) == {1}, done.most_common(3)


@pytest.mark.parametrize(
    ("accept_after", "handler", "sent"),
    [(5.0, 0.0, ["reply"]), (0.0, 0.2, ["accepted", "reply"])],
    ids=["answered-first", "held"],
)
async def test_accepted_goes_only_for_a_request_held_accept_after(
    monkeypatch: pytest.MonkeyPatch, accept_after: float, handler: float, sent: list[str]
) -> None:
    """A fast request costs no ACCEPTED; a held one gets it before its reply."""
    port = free_udp_port()
    kinds: list[str] = []
    real_reply = _server._reply_nowait  # every reply and ACCEPTED goes through it

    def noting(node: trizre.Node, peer: object, message: object) -> bool | None:
        sent = real_reply(node, peer, message)  # type: ignore[arg-type]
        if sent is not None:  # None: no room, it is tried again
            kinds.append("accepted" if isinstance(message, Accepted) else "reply")
        return sent

    monkeypatch.setattr(_server, "_reply_nowait", noting)

    async def work(request: IncomingRequest) -> bytes:
        await trio.sleep(handler)
        return b"ok"

    with trio.fail_after(20):
        async with (
            trizre.open_node("w", beacon_port=port, **FAST) as w,
            patterns.open_server(w, work, service="work", accept_after=accept_after),
            trizre.open_node("cli", beacon_port=port, **FAST) as cli,
            patterns.open_service_client(cli, RetryPolicy(10, 1)) as client,
        ):
            await client.wait_for_service("work")
            assert await client.request("work") == (b"ok",)
    assert kinds == sent


@pytest.mark.parametrize(
    ("option", "value"),
    [("max_queued", -1), ("accept_after", -0.1), ("accept_after", float("inf"))],
)
async def test_open_server_refuses_bad_queue_options(option: str, value: float) -> None:
    async def work(request: IncomingRequest) -> bytes:
        return b""

    async with trizre.open_node("w", beacon_port=free_udp_port(), **FAST) as w:
        with pytest.raises(ValueError, match=option):
            async with patterns.open_server(w, work, **{option: value}):  # type: ignore[arg-type]
                pass


async def test_a_handler_that_is_not_async_is_refused() -> None:
    def plain(request: IncomingRequest) -> bytes:
        return b""

    async with trizre.open_node("w", beacon_port=free_udp_port(), **FAST) as w:
        with pytest.raises(TypeError, match="async"):
            async with patterns.open_server(w, plain):  # type: ignore[arg-type]
                pass


async def test_hide_errors_sends_no_detail_but_logs_it(caplog: pytest.LogCaptureFixture) -> None:
    port = free_udp_port()

    async def broken(request: IncomingRequest) -> bytes:
        raise ValueError("card 4111-1111")

    with trio.fail_after(20):
        async with (
            trizre.open_node("w", beacon_port=port, **FAST) as w,
            patterns.open_server(w, broken, service="pay", hide_errors=True),
            trizre.open_node("cli", beacon_port=port, **FAST) as cli,
            patterns.open_service_client(cli) as client,
        ):
            await client.wait_for_service("pay")
            with pytest.raises(patterns.RemoteError) as caught:
                await client.request("pay")
    assert caught.value.status == 500 and caught.value.body == ()
    assert caught.value.error_type is None and "4111" not in str(caught.value)
    assert "card 4111-1111" in caplog.text  # the server's log keeps it


async def test_a_retry_of_a_held_request_is_not_run_again_even_without_a_cache() -> None:
    """ACCEPTED reached the client too late (hold_timeout here): the retry finds it held."""
    port = free_udp_port()
    ran = 0

    async def slow(request: IncomingRequest) -> bytes:
        nonlocal ran
        ran += 1
        await trio.sleep(0.6)
        return b"once"

    with trio.fail_after(20):
        async with (
            trizre.open_node("w", beacon_port=port, **FAST) as w,
            patterns.open_server(w, slow, service="work") as server,
            trizre.open_node("cli", beacon_port=port, **FAST) as cli,
            patterns.open_service_client(cli, RetryPolicy(0.2, 5, hold_timeout=0.2)) as client,
        ):
            await client.wait_for_service("work")
            assert await client.request("work") == (b"once",)
    assert ran == 1 and server.executed == 1


@pytest.mark.parametrize("hold", [0, -1.0, "1"])
def test_a_hold_timeout_that_is_not_positive_seconds_is_refused(hold: object) -> None:
    with pytest.raises(ValueError, match="hold_timeout"):
        RetryPolicy(1.0, 3, hold_timeout=hold)  # type: ignore[arg-type]


def test_no_hold_timeout_means_a_held_request_waits_for_its_server() -> None:
    assert RetryPolicy().hold_timeout is None
