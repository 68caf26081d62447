"""``trizre watch --metrics``: Prometheus metrics from what the watcher sees, scraped for real.

Every scrape here is parsed with prometheus_client's own parser, the way
Prometheus would read it.
"""

from __future__ import annotations

import json
import re
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

import trizre
from tests.support.cli import cli, http, lo, start
from tests.support.nodes import FAST, MEMORY, free_udp_port
from tests.support.scrape import SUFFIXES, Samples, documented, parse, value
from tests.support.watch import echo, start_primary, until, watching
from trizre import patterns
from trizre.cli._metrics import MetricsApp, _histogram, registry_for
from trizre.cli._monitor import Monitor
from trizre.cli._web import serve_page
from trizre.metrics import ClientCollector
from trizre.patterns import _server

ROOT = Path(__file__).resolve().parents[2]


def scrape(monitor: Monitor) -> Samples:
    return parse(generate_latest(registry_for(monitor)).decode())


async def scraped(monitor: Monitor, check: Callable[[Samples], bool]) -> Samples:
    """The first scrape that passes ``check`` (scraped again at each change the monitor sees)."""
    snap = await until(monitor, lambda _: check(scrape(monitor)))
    assert snap is not None
    return scrape(monitor)


async def test_the_metrics_of_peers_services_and_a_pair(
    autojump_clock: trio.testing.MockClock,
) -> None:
    port = free_udp_port()

    async def slow(request: patterns.IncomingRequest) -> bytes:
        await trio.sleep(0.3)  # held past accept_after: answered ACCEPTED first
        return b"".join(request.body)

    with trio.fail_after(120):
        async with (
            watching(port) as (_, monitor),
            trizre.open_node("worker", beacon_port=port, **MEMORY) as w,
            patterns.open_server(w, slow, service="echo") as server,
            trizre.open_node("p", beacon_port=port, **MEMORY) as p,
            trizre.open_node("b", beacon_port=port, **MEMORY) as b,
            patterns.open_binary_star_server(p, echo, primary=True, partner="b") as star_p,
            patterns.open_binary_star_server(b, echo, primary=False, partner="p"),
            trizre.open_node("client", beacon_port=port, **MEMORY) as c,
            patterns.open_service_client(c) as client,
        ):
            await star_p.state.wait_value(patterns.State.ACTIVE)
            await until(monitor, lambda s: bool(s["services"]) and bool(s["pairs"]))
            for i in range(3):
                assert await client.request("echo", b"%d" % i) == (b"%d" % i,)
            assert server.received == 3 and server.accepted == 3
            worker = {"service": "echo", "worker": "worker"}
            # The counters come within STATS_INTERVAL (virtual seconds here).
            samples = await scraped(
                monitor,
                lambda s: value(s, "trizre_service_requests_total", **worker) == 3.0,
            )
            assert value(samples, "trizre_peers", presence="alive") == 4.0
            assert value(samples, "trizre_peers", presence="silent") == 0.0
            assert value(samples, "trizre_service_workers", service="echo") == 1.0
            assert value(samples, "trizre_service_executed_total", **worker) == 3.0
            assert value(samples, "trizre_service_replies_total", **worker) == 3.0
            assert value(samples, "trizre_service_accepted_total", **worker) == 3.0
            assert value(samples, "trizre_service_retries_total", **worker) == 0.0
            assert value(samples, "trizre_service_answers_unsent_total", **worker) == 0.0
            assert value(samples, "trizre_service_held", **worker) == 0.0
            for reason in ("passive", "full"):
                got = value(samples, "trizre_service_unavailable_total", reason=reason, **worker)
                assert got == 0.0
            hist = "trizre_service_handler_seconds"
            assert value(samples, f"{hist}_count", **worker) == 3.0
            assert value(samples, f"{hist}_bucket", le="0.25", **worker) == 0.0
            assert value(samples, f"{hist}_bucket", le="0.5", **worker) == 3.0
            assert value(samples, f"{hist}_sum", **worker) == pytest.approx(0.9)
            pair = {"pair": "p / b"}
            assert value(samples, "trizre_bstar_pair_health", health="ok", **pair) == 1.0
            assert value(samples, "trizre_bstar_pair_health", health="degraded", **pair) == 0.0
            active = {"server": "p", "role": "primary", "state": "ACTIVE"}
            assert value(samples, "trizre_bstar_server_state", **active, **pair) == 1.0
            passive = {"server": "b", "role": "backup", "state": "PASSIVE"}
            assert value(samples, "trizre_bstar_server_state", **passive, **pair) == 1.0
            assert value(samples, "trizre_bstar_failovers_total", **pair) == 0.0
            # A passive server's refusals are its 503s.
            async with patterns.open_lazy_pirate_client(c, "b") as to_backup:
                with pytest.raises(patterns.RequestAbandoned):  # 503 each time
                    await to_backup.request(b"x")
            samples = await scraped(
                monitor,
                lambda s: (
                    (
                        value(s, "trizre_service_unavailable_total", worker="b", reason="passive")
                        or 0
                    )
                    > 0
                ),
            )
            # Every metric exported is documented, and every one documented exported.
            families = {
                family.name
                for family in text_string_to_metric_families(
                    generate_latest(registry_for(monitor)).decode()
                )
            }
            assert families == documented()


async def test_a_failover_shows_in_the_metrics(autojump_clock: trio.testing.MockClock) -> None:
    port = free_udp_port()
    with trio.fail_after(120):
        async with (
            watching(port) as (watcher, monitor),
            trizre.open_node("b", beacon_port=port, **MEMORY) as b,
            patterns.open_binary_star_server(b, echo, primary=False, partner="p"),
        ):
            async with trio.open_nursery() as nursery:
                primary_scope = start_primary(nursery, port)
                pair = {"pair": "p / b"}
                await scraped(
                    monitor, lambda s: value(s, "trizre_bstar_pair_health", health="ok", **pair)
                )
                primary_scope.cancel()
                async with patterns.open_binary_star_client(watcher, "p", "b") as client:
                    assert await client.request(b"hi") == (b"hi",)
                samples = await scraped(
                    monitor, lambda s: value(s, "trizre_bstar_failovers_total", **pair) == 1.0
                )
            assert value(samples, "trizre_bstar_pair_health", health="degraded", **pair) == 1.0
            since = value(samples, "trizre_bstar_pair_unhealthy_since_timestamp_seconds", **pair)
            failover = value(
                samples, "trizre_bstar_last_failover_timestamp_seconds", server="b", **pair
            )
            assert since is not None and failover is not None and since <= failover
            down = {"server": "p", "role": "primary", "state": "down"}
            assert value(samples, "trizre_bstar_server_state", **down, **pair) == 1.0
            assert value(
                samples, "trizre_bstar_server_last_heard_timestamp_seconds", server="p", **pair
            )


async def test_an_idle_or_unwatched_server_announces_nothing_more(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Counters go out while they change and someone watches; otherwise the task sleeps."""
    port = free_udp_port()
    with trio.fail_after(120):
        async with (
            trizre.open_node("worker", beacon_port=port, **MEMORY) as w,
            patterns.open_server(w, echo, service="echo") as server,
            trizre.open_node("client", beacon_port=port, **MEMORY) as c,
            patterns.open_service_client(c) as client,
        ):
            sent: list[dict[str, Any]] = []
            shout = w.shout

            async def counting_shout(group: str, *frames: bytes) -> None:
                sent.append({"group": group})
                await shout(group, *frames)

            w.shout = counting_shout  # type: ignore[method-assign]
            await client.request("echo", b"x")
            await trio.sleep(_server.STATS_INTERVAL * 3)
            assert sent == []  # nobody watches: nothing built, nothing sent
            async with watching(port) as (_, monitor):
                await until(monitor, lambda s: bool(s["services"]))
                await client.request("echo", b"y")
                await trio.sleep(_server.STATS_INTERVAL * 1.5)
                assert len(sent) == 1  # one announcement of the change
                await trio.sleep(_server.STATS_INTERVAL * 5)
                assert len(sent) == 1  # idle: none more
            assert server.stats()["received"] == 2


def test_malformed_histograms_are_left_out() -> None:
    good = {"le": [0.1, 1.0], "counts": [1, 2, 3], "sum": 4.5}
    assert _histogram(good) == ([("0.1", 1.0), ("1.0", 3.0), ("+Inf", 6.0)], 4.5)
    for junk in (
        None,
        [],
        {"le": [0.1], "counts": [1], "sum": 1.0},  # one count short
        {"le": ["x"], "counts": [1, 2], "sum": 1.0},
        {"le": [0.1], "counts": [1, 2]},
        {"le": [0.1] * 65, "counts": [0] * 66, "sum": 0},
    ):
        assert _histogram(junk) is None, junk


async def test_the_metrics_app_serves_only_metrics() -> None:
    port = free_udp_port()
    with trio.fail_after(30):
        async with (
            watching(port, FAST) as (_, monitor),
            trio.open_nursery() as nursery,
        ):
            app = MetricsApp(registry_for(monitor))
            url = await nursery.start(serve_page, app, "127.0.0.1", 0)
            web = int(url.rsplit(":", 1)[1].rstrip("/"))
            status, headers, body = await http(web, "/metrics")
            assert status.startswith("HTTP/1.1 200")
            assert headers["content-type"].startswith("text/plain; version=")
            assert parse(body.decode())[("trizre_peers", frozenset({("presence", "alive")}))] == 0
            assert (await http(web, "/"))[0].startswith("HTTP/1.1 404")
            assert (await http(web, "/metrics", "POST"))[0].startswith("HTTP/1.1 405")
            status, _, body = await http(web, "/metrics", "HEAD")
            assert status.startswith("HTTP/1.1 200") and body == b""
            nursery.cancel_scope.cancel()


async def test_watch_serves_metrics_a_scraper_reads(tmp_path: Path) -> None:
    """The command, scraped over HTTP: a worker's requests and Titanic's queue."""
    port = free_udp_port()
    with trio.fail_after(90):
        command = await start("watch", *lo(port), "--metrics", "127.0.0.1:0")
        match = await command.expect(r"^serving metrics (http://127\.0\.0\.1:(\d+)/metrics)$")
        web = int(match.group(2))
        async with (
            trizre.open_node("worker", beacon_port=port, **FAST) as w,
            patterns.open_server(w, echo, service="echo"),
            trizre.open_node("titanic", beacon_port=port, **FAST) as t,
            patterns.open_titanic(t, tmp_path / "t.db"),
            trizre.open_node("client", beacon_port=port, **FAST) as c,
            patterns.open_titanic_client(c) as titanic,
        ):
            await command.expect(r"worker serves echo$")
            await command.expect(r"titanic serves titanic.request$")
            ids = [await titanic.submit("echo", b"%d" % i) for i in range(2)]
            for titanic_id in ids:
                assert await titanic.result(titanic_id) == (b"%d" % ids.index(titanic_id),)
            completed = {"node": "titanic"}
            while True:  # a scraper's view: again until the announced counters arrive
                status, _, body = await http(web, "/metrics")
                assert status.startswith("HTTP/1.1 200")
                samples = parse(body.decode())
                if value(samples, "trizre_titanic_requests_completed_total", **completed) == 2:
                    break
                await trio.sleep(0.5)
            assert value(samples, "trizre_titanic_requests_pending", **completed) == 0.0
            assert value(samples, "trizre_titanic_requests_accepted_total", **completed) == 2.0
            worker = {"service": "echo", "worker": "worker"}
            assert value(samples, "trizre_service_requests_total", **worker) == 2.0
            assert (value(samples, "trizre_peers", presence="alive") or 0) >= 2
            # The watching node's own counts, from its NodeCollector.
            watcher = {"node": "trizre-watch"}
            assert (value(samples, "trizre_node_peers", presence="alive", **watcher) or 0) >= 2
            assert (value(samples, "trizre_node_messages_in_total", **watcher) or 0) > 0
            assert (
                value(samples, "trizre_node_peers_dropped_total", reason="sequence", **watcher) == 0
            )
        command.process.send_signal(signal.SIGTERM)
        code, _, err = await command.finish()
        assert code == 143 and "Traceback" not in err


def test_watch_refuses_a_remote_metrics_address_without_the_flag() -> None:
    # ok-net: refused before anything is bound
    result = cli("watch", "--interface", "lo", "--metrics", "0.0.0.0:0")
    assert result.returncode == 1
    assert "--metrics-allow-remote" in result.stderr and "Traceback" not in result.stderr
    assert result.stdout == ""


def test_the_guard_catches_a_metrics_listener_beyond_loopback() -> None:
    """With the flag the command binds 0.0.0.0, and the suite's guard stops it there."""
    from tests.support.guarded_cli import VIOLATION_EXIT  # noqa: PLC0415

    # ok-net: the guard refuses the bind, so nothing listens beyond loopback
    args = ("watch", "--interface", "lo", "--metrics", "0.0.0.0:0", "--metrics-allow-remote")
    result = cli(*args)
    assert result.returncode == VIOLATION_EXIT, result.stderr
    assert "TCP bind to ('0.0.0.0', 0)" in result.stderr  # ok-net
    assert "serving metrics" not in result.stdout


def test_the_example_dashboard_uses_only_documented_metrics() -> None:
    dashboard = json.loads((ROOT / "docs" / "grafana-trizre.json").read_text())
    exprs = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    used = {SUFFIXES.sub("", n) for e in exprs for n in re.findall(r"trizre_\w+", e)}
    known = documented() | documented("### Client metrics")
    assert used and used <= known, used - known


async def test_a_client_collector_counts_retries_refusals_abandons_and_times(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """What only the requesting side knows, exported from the client's own process."""
    port = free_udp_port()
    calls = 0

    async def flaky(request: patterns.IncomingRequest) -> bytes:
        nonlocal calls
        calls += 1
        if calls == 2:
            # Past the attempt timeout: the client sends it again, is told
            # ACCEPTED (held here), and gets the reply when it comes.
            await trio.sleep(1.5)
        if request.body == (b"bad",):
            raise ValueError("bad")
        return b"ok"

    policy = patterns.RetryPolicy(1.0, 2)
    collector = ClientCollector()
    with trio.fail_after(120):
        async with (
            trizre.open_node("worker", beacon_port=port, **MEMORY) as w,
            patterns.open_server(w, flaky, service="echo", accept_after=5.0),
            trizre.open_node("client", beacon_port=port, **MEMORY) as c,
            patterns.open_service_client(c, policy) as client,
            patterns.open_lazy_pirate_client(c, "nobody-yet", policy) as lonely,
        ):
            collector.add("orders", client)
            collector.add("lonely", lonely)
            await c.wait_for_peer("worker")
            assert await client.request("echo", b"a") == (b"ok",)  # at once
            assert await client.request("echo", b"b") == (b"ok",)  # after one retry
            with pytest.raises(patterns.RemoteError):
                await client.request("echo", b"bad")
            with pytest.raises(patterns.RequestAbandoned):
                await lonely.request(b"x")
            registry = CollectorRegistry()
            registry.register(collector)
            samples = parse(generate_latest(registry).decode())
    orders = {"client": "orders", "service": "echo"}
    assert value(samples, "trizre_client_requests_total", **orders) == 3.0
    assert value(samples, "trizre_client_retries_total", **orders) == 1.0
    assert value(samples, "trizre_client_errors_total", **orders) == 1.0
    assert value(samples, "trizre_client_abandoned_total", **orders) == 0.0
    assert value(samples, "trizre_client_request_seconds_count", **orders) == 3.0
    # The retried one took 1.5 s: the only one above 0.5 s.
    assert value(samples, "trizre_client_request_seconds_bucket", le="0.5", **orders) == 2.0
    assert value(samples, "trizre_client_request_seconds_bucket", le="2.5", **orders) == 3.0
    lonely_labels = {"client": "lonely", "service": ""}
    assert value(samples, "trizre_client_abandoned_total", **lonely_labels) == 1.0
    assert value(samples, "trizre_client_retries_total", **lonely_labels) == 1.0
    assert value(samples, "trizre_client_request_seconds_count", **lonely_labels) == 0.0
    with pytest.raises(ValueError, match="non-empty"):
        collector.add("", client)
    families = {f.name for f in text_string_to_metric_families(generate_latest(registry).decode())}
    assert families == documented("### Client metrics")
