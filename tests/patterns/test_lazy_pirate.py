"""Lazy Pirate over ZRE: retries, giving up, following a restarted server."""

from __future__ import annotations

import pytest
import trio
import trio.testing

import trizre
from tests.support.nodes import FAST, free_udp_port
from trizre import patterns
from trizre.patterns import IncomingRequest, RetryPolicy


async def echo(request: IncomingRequest) -> bytes:
    return b"echo:" + b"".join(request.body)


async def test_request_and_reply() -> None:
    port = free_udp_port()
    with trio.fail_after(10):
        async with (
            trizre.open_node("srv", beacon_port=port, **FAST) as srv,
            trizre.open_node("cli", beacon_port=port, **FAST) as cli,
            patterns.open_server(srv, echo) as server,
            patterns.open_lazy_pirate_client(cli, "srv") as client,
        ):
            assert await client.request(b"a", b"b") == (b"echo:ab",)
            assert await client.request() == (b"echo:",)  # zero frames both ways
            # By UUID as well as by name.
            async with patterns.open_lazy_pirate_client(cli, srv.uuid) as by_uuid:
                assert await by_uuid.request(b"x") == (b"echo:x",)
            assert server.executed == server.replied == 3


async def test_no_server_means_abandoned_after_exact_attempts(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """3 attempts of 2.5 s (the Guide's defaults) and not a moment more."""
    port = free_udp_port()
    with trio.fail_after(60):
        async with (
            trizre.open_node("lonely", beacon_port=port, **FAST) as cli,
            patterns.open_lazy_pirate_client(cli, "nobody") as client,
        ):
            assert client.policy == RetryPolicy(2.5, 3)
            start = trio.current_time()
            with pytest.raises(patterns.RequestAbandoned) as caught:
                await client.request(b"hello?")
            assert trio.current_time() - start == pytest.approx(7.5)
            assert caught.value.attempts == 3
            # It says nothing was sent, rather than blaming a silent server.
            assert caught.value.sent == 0 and caught.value.waited == pytest.approx(7.5)
            assert "server nobody never appeared within 7.5 s: nothing was sent" in str(
                caught.value
            )


async def test_a_service_with_no_worker_says_nobody_joined(
    autojump_clock: trio.testing.MockClock,
) -> None:
    port = free_udp_port()
    with trio.fail_after(60):
        async with (
            trizre.open_node("lonely", beacon_port=port, **FAST) as cli,
            patterns.open_service_client(cli) as client,
        ):
            with pytest.raises(patterns.RequestAbandoned) as caught:
                await client.request("nosuch", b"hello?")
            assert caught.value.sent == 0
            message = str(caught.value)
            assert "no worker joined service 'nosuch' within 7.5 s" in message
            assert "3 attempts found nobody" in message


async def test_a_hung_handler_is_retried_with_the_same_id_but_not_run_twice() -> None:
    """hold_timeout resends a request whose handler hangs; the server, holding it, says ACCEPTED.

    With one server nothing can answer it, so the request is abandoned
    after its attempts, having run once.
    """
    port = free_udp_port()
    seen: list[int] = []

    async def hung(request: IncomingRequest) -> bytes:
        seen.append(request.request_id)
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    with trio.fail_after(10):
        async with (
            trizre.open_node("srv", beacon_port=port, **FAST) as srv,
            trizre.open_node("cli", beacon_port=port, **FAST) as cli,
            patterns.open_server(srv, hung) as server,
            patterns.open_lazy_pirate_client(
                cli, "srv", RetryPolicy(0.3, 3, hold_timeout=0.3)
            ) as client,
        ):
            with pytest.raises(patterns.RequestAbandoned):
                await client.request(b"q")
            assert len(seen) == 1 and server.executed == 1


async def test_handler_errors_are_reported_not_retried(caplog: pytest.LogCaptureFixture) -> None:
    port = free_udp_port()
    calls = 0

    async def broken(request: IncomingRequest) -> bytes:
        nonlocal calls
        calls += 1
        raise KeyError("missing")

    with trio.fail_after(10):
        async with (
            trizre.open_node("srv", beacon_port=port, **FAST) as srv,
            trizre.open_node("cli", beacon_port=port, **FAST) as cli,
            patterns.open_server(srv, broken),
            patterns.open_lazy_pirate_client(cli, "srv", RetryPolicy(1, 3)) as client,
        ):
            with pytest.raises(patterns.RemoteError) as caught:
                await client.request(b"q")
            assert caught.value.status == 500
            assert caught.value.body == (b"KeyError", b"'missing'")
            error = caught.value
            assert (error.error_type, error.error_message) == ("KeyError", "'missing'")
            assert str(caught.value) == "status 500: KeyError: 'missing'"
            assert calls == 1
            # The server logged the traceback, on the documented logger.
            (record,) = [r for r in caplog.records if r.name == "trizre.patterns"]
            assert record.levelname == "ERROR" and record.exc_info is not None
            assert "raise KeyError" in caplog.text
            with pytest.raises(TypeError):
                await client.request("not bytes")  # type: ignore[arg-type]


async def test_server_restart_under_the_same_name_is_followed() -> None:
    """The request in flight when the server dies is answered by its successor."""
    port = free_udp_port()
    reached_old = trio.Event()
    answered = trio.Event()
    result: list[tuple[bytes, ...]] = []

    async def old_handler(request: IncomingRequest) -> bytes:
        reached_old.set()
        await trio.sleep_forever()  # dies with its node, never answering
        raise AssertionError("unreachable")

    async def new_handler(request: IncomingRequest) -> bytes:
        return b"new"

    with trio.fail_after(15):
        async with (
            trizre.open_node("cli", beacon_port=port, **FAST) as cli,
            patterns.open_lazy_pirate_client(cli, "srv", RetryPolicy(5, 2)) as client,
            trio.open_nursery() as nursery,
        ):

            async def ask() -> None:
                result.append(await client.request(b"q"))
                answered.set()

            async with (
                trizre.open_node("srv", beacon_port=port, **FAST) as old,
                patterns.open_server(old, old_handler),
            ):
                old_uuid = old.uuid
                await cli.wait_for_peer(old.uuid)
                nursery.start_soon(ask)
                await reached_old.wait()
            # The old server is gone with the request unanswered.
            async with (
                trizre.open_node("srv", beacon_port=port, **FAST) as new,
                patterns.open_server(new, new_handler),
            ):
                assert new.uuid != old_uuid
                await answered.wait()
            assert result == [(b"new",)]


async def test_retry_policy_validation() -> None:
    with pytest.raises(ValueError):
        RetryPolicy(0, 3)
    with pytest.raises(ValueError):
        RetryPolicy(1, 0)
    with pytest.raises(ValueError):
        RetryPolicy(float("inf"), 1)
    port = free_udp_port()
    async with trizre.open_node("n", beacon_port=port, **FAST) as node:
        with pytest.raises(TypeError):
            async with patterns.open_lazy_pirate_client(node, 42):  # type: ignore[arg-type]
                pass
