"""Services over groups: worker choice, failover, stuck workers, MMI, idempotency."""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
import trio
import trio.testing

import trizre
from tests.support.nodes import FAST, free_udp_port, outlive_node
from tests.support.workers import Worker, run_worker
from trizre import patterns
from trizre.patterns import IncomingRequest, RetryPolicy, _server


def labelled(label: str, delay: float = 0.0) -> patterns.Handler:
    async def handler(request: IncomingRequest) -> list[bytes]:
        if delay:
            await trio.sleep(delay)
        return [label.encode(), *request.body]

    return handler


@asynccontextmanager
async def workers(
    port: int, count: int, service: str = "echo", delay: float = 0.0
) -> AsyncIterator[list[Worker]]:
    """``count`` worker nodes named w0, w1, ...; each can be killed alone."""
    async with trio.open_nursery() as nursery:
        pool = [
            await nursery.start(run_worker, port, f"w{i}", labelled(f"w{i}", delay), service)
            for i in range(count)
        ]
        yield pool
        nursery.cancel_scope.cancel()


async def wait_for_workers(client: patterns.ServiceClient, service: str, count: int) -> None:
    await client.wait_for_service(service, count)


async def test_requests_spread_over_workers_least_recently_used() -> None:
    port = free_udp_port()
    with trio.fail_after(10):
        async with (
            workers(port, 2) as pool,
            trizre.open_node("cli", beacon_port=port, **FAST) as cli,
            patterns.open_service_client(cli) as client,
        ):
            await wait_for_workers(client, "echo", 2)
            labels = [(await client.request("echo", b"x"))[0] for _ in range(10)]
            assert Counter(labels) == {b"w0": 5, b"w1": 5}
            assert all(a != b for a, b in itertools.pairwise(labels))  # LRU
            assert [worker.server.executed for worker in pool] == [5, 5]


async def test_pipelined_requests_all_answered_once() -> None:
    port = free_udp_port()
    n = 300
    with trio.fail_after(20):
        async with (
            workers(port, 3, delay=0.001),
            trizre.open_node("cli", beacon_port=port, **FAST) as cli,
            patterns.open_service_client(cli) as client,
        ):
            await wait_for_workers(client, "echo", 3)
            replies: dict[int, tuple[bytes, ...]] = {}

            async def one(i: int) -> None:
                replies[i] = await client.request("echo", str(i).encode())

            async with trio.open_nursery() as nursery:
                for i in range(n):
                    nursery.start_soon(one, i)
            assert sorted(replies) == list(range(n))
            assert all(reply[1] == str(i).encode() for i, reply in replies.items())
            used = Counter(reply[0] for reply in replies.values())
            assert set(used) == {b"w0", b"w1", b"w2"}  # least-loaded spreads them


async def test_worker_killed_under_load_requests_move_on_at_once() -> None:
    """In-flight requests of a dead worker are resent immediately, not after a timeout."""
    port = free_udp_port()
    n = 60
    with trio.fail_after(20):
        async with (
            workers(port, 3, delay=0.05) as pool,
            trizre.open_node("cli", beacon_port=port, **FAST) as cli,
            patterns.open_service_client(cli, RetryPolicy(30, 2)) as client,
        ):
            await wait_for_workers(client, "echo", 3)
            done: dict[int, bytes] = {}
            errors: list[BaseException] = []
            victim = pool[0].node.uuid

            async def one(i: int) -> None:
                try:
                    done[i] = (await client.request("echo", str(i).encode()))[1]
                except patterns.RequestAbandoned as exc:  # allowed, never silent
                    errors.append(exc)

            start = trio.current_time()
            async with trio.open_nursery() as nursery:
                for i in range(n):
                    nursery.start_soon(one, i)
                # Kill the first worker while requests are in flight to it.
                await pool[0].busy.wait()
                await pool[0].kill()
            elapsed = trio.current_time() - start
            # The victim died holding requests it never answered...
            assert pool[0].server.executed > pool[0].server.replied
            # ...and still every request got exactly one answer.
            assert errors == []
            assert done == {i: str(i).encode() for i in range(n)}
            assert elapsed < 10  # far below the 30 s attempt timeout
            assert victim not in client.workers("echo")


async def test_a_stuck_worker_costs_one_attempt_timeout() -> None:
    port = free_udp_port()
    stuck_calls = 0

    async def stuck(request: IncomingRequest) -> bytes:
        nonlocal stuck_calls
        stuck_calls += 1
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    with trio.fail_after(20):
        async with (
            trizre.open_node("w0", beacon_port=port, **FAST) as w0,
            patterns.open_server(w0, stuck, service="echo"),
            trizre.open_node("w1", beacon_port=port, **FAST) as w1,
            patterns.open_server(w1, labelled("w1"), service="echo"),
            trizre.open_node("cli", beacon_port=port, **FAST) as cli,
            # hold_timeout: a handler that hangs is only ever retried with it.
            patterns.open_service_client(cli, RetryPolicy(0.3, 3, hold_timeout=0.3)) as client,
        ):
            await wait_for_workers(client, "echo", 2)
            for _ in range(4):
                assert (await client.request("echo", b"x"))[0] == b"w1"
            # The stuck worker got at most one request: once it was tried and
            # had one outstanding, the ranking kept it last.
            assert stuck_calls == 1


async def test_a_restarted_worker_is_picked_up() -> None:
    port = free_udp_port()
    with trio.fail_after(15):
        async with (
            trizre.open_node("cli", beacon_port=port, **FAST) as cli,
            patterns.open_service_client(cli, RetryPolicy(5, 2)) as client,
        ):
            async with workers(port, 1):
                await wait_for_workers(client, "echo", 1)
                assert (await client.request("echo"))[0] == b"w0"
            async with workers(port, 1):  # a new process, a new UUID
                assert (await client.request("echo"))[0] == b"w0"


async def test_no_worker_means_abandoned() -> None:
    port = free_udp_port()
    with trio.fail_after(10):
        async with (
            trizre.open_node("cli", beacon_port=port, **FAST) as cli,
            patterns.open_service_client(cli, RetryPolicy(0.1, 2)) as client,
        ):
            with pytest.raises(patterns.RequestAbandoned, match="'nothing'"):
                await client.request("nothing", b"x")


async def test_mmi_answers_locally_from_group_membership() -> None:
    port = free_udp_port()
    with trio.fail_after(10):
        async with (
            workers(port, 1),
            trizre.open_node("cli", beacon_port=port, **FAST) as cli,
            patterns.open_service_client(cli) as client,
        ):
            await wait_for_workers(client, "echo", 1)
            assert client.mmi("mmi.service", b"echo") == 200
            assert client.mmi("mmi.service", b"nope") == 404
            assert client.mmi("mmi.bogus") == 501
            assert await client.request("mmi.service", b"echo") == (b"200",)
            assert await client.request("mmi.service", b"nope") == (b"404",)
            assert await client.request("mmi.whatever") == (b"501",)
            with pytest.raises(ValueError, match="exactly one"):
                client.mmi("mmi.service")
            with pytest.raises(ValueError, match="reserved"):
                async with patterns.open_server(cli, labelled("x"), service="mmi.service"):
                    pass
            with pytest.raises(ValueError):
                async with patterns.open_server(cli, labelled("x"), service=""):
                    pass


@pytest.mark.parametrize("cached", [True, False], ids=["reply-cache", "no-cache"])
async def test_reply_cache_runs_a_retried_request_once(
    cached: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first two replies, and the ACCEPTEDs before them, are lost; the client retries.

    (ZRE loses nothing while a peer is present; this stands for a worker
    that restarted under the same name, say.)
    """
    port = free_udp_port()
    executions = 0
    lost = 0
    real_reply = _server._reply_nowait  # every reply and ACCEPTED goes through it

    def lossy_reply(node: trizre.Node, peer: object, reply: object) -> bool | None:
        nonlocal lost
        if lost < 2:
            lost += isinstance(reply, patterns.Reply)
            return True  # "sent", but the network ate it
        return real_reply(node, peer, reply)  # type: ignore[arg-type]

    monkeypatch.setattr(_server, "_reply_nowait", lossy_reply)

    async def transfer(request: IncomingRequest) -> bytes:
        nonlocal executions
        executions += 1
        return b"done %d" % executions

    cache = patterns.ReplyCache(max_entries=100, max_age=60) if cached else None
    with trio.fail_after(10):
        async with (
            trizre.open_node("bank", beacon_port=port, **FAST) as bank,
            patterns.open_server(bank, transfer, service="transfer", reply_cache=cache),
            trizre.open_node("cli", beacon_port=port, **FAST) as cli,
            patterns.open_service_client(cli, RetryPolicy(0.2, 5)) as client,
        ):
            await client.wait_for_service("transfer")
            reply = await client.request("transfer", b"100 EUR")
    if cached:
        assert executions == 1
        assert reply == (b"done 1",)
        assert cache is not None and cache.hits == 2
    else:
        assert executions == 3  # without the cache the retry runs it again
        assert reply == (b"done 3",)


async def test_a_server_whose_node_stopped_first_ends_cleanly() -> None:
    """A server task that outlives its node: leaving the group is moot, not an error."""
    port = free_udp_port()
    ended: list[patterns.Server] = []

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            async with trizre.open_node("w", beacon_port=port, **FAST) as node:
                block = patterns.open_server(node, labelled("w"), service="echo")
                await nursery.start(outlive_node, block, ended)
                assert node.own_groups() == ["echo"]
            nursery.cancel_scope.cancel()  # the node stopped first; the server ends now
    assert len(ended) == 1


async def test_a_reply_owed_when_the_node_stops_is_dropped_and_the_server_ends_cleanly() -> None:
    """A handler that finishes after its node stopped: nobody to reply through, not an error."""
    port = free_udp_port()
    started, release = trio.Event(), trio.Event()
    ended: list[patterns.Server] = []

    async def slow(request: IncomingRequest) -> bytes:
        started.set()
        await release.wait()
        return b"too late"

    async def ask(client: patterns.ServiceClient) -> None:
        with pytest.raises(patterns.RequestAbandoned):
            await client.request("slow", b"x")

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            async with (
                trizre.open_node("c", beacon_port=port, **FAST) as cli,
                patterns.open_service_client(cli, RetryPolicy(1.0, 1)) as client,
                trio.open_nursery() as asking,
            ):
                async with trizre.open_node("w", beacon_port=port, **FAST) as node:
                    server = await nursery.start(
                        outlive_node, patterns.open_server(node, slow, service="slow"), ended
                    )
                    await client.wait_for_service("slow")
                    asking.start_soon(ask, client)
                    await started.wait()
                # The worker's node stopped with the handler still running.
                release.set()
                await trio.testing.wait_all_tasks_blocked()
                assert (server.executed, server.replied) == (1, 0)
                asking.cancel_scope.cancel()
                with pytest.raises(trio.ClosedResourceError):  # joining: too late now
                    async with patterns.open_server(node, slow, service="again"):
                        pass
            nursery.cancel_scope.cancel()
    assert ended == [server]


async def test_clients_whose_node_stopped_raise_closed_resource_error() -> None:
    """A client that outlives its node: waiting ends, and requests fail at once, not by timeout."""
    port = free_udp_port()
    done = trio.Event()

    async def use(node: trizre.Node, task_status: trio.TaskStatus[None]) -> None:
        async with (
            patterns.open_service_client(node) as client,
            patterns.open_lazy_pirate_client(node, "w") as pirate,
        ):
            task_status.started()
            with pytest.raises(trio.ClosedResourceError):
                await client.wait_for_service("echo")  # the node stops while this waits
            with trio.fail_after(1):  # less than one attempt (2.5 s)
                with pytest.raises(trio.ClosedResourceError):
                    await client.request("echo", b"x")
                with pytest.raises(trio.ClosedResourceError):
                    await pirate.request(b"x")
        done.set()

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            async with trizre.open_node("c", beacon_port=port, **FAST) as node:
                await nursery.start(use, node)
                await trio.testing.wait_all_tasks_blocked()  # waiting for a worker
            await done.wait()
