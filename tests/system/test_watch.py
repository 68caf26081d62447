"""``trizre watch``: the address rule, the page's HTTP routes and stream, the views, the command."""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import trio
from rich.console import Console

import trizre
from tests.support.cli import cli, http, lo, start
from tests.support.nodes import FAST, free_udp_port
from trizre import patterns
from trizre.cli._monitor import open_monitor
from trizre.cli._watch import render
from trizre.cli._web import AddressError, MonitorApp, parse_address, serve_page

ROOT = Path(__file__).resolve().parents[2]

# ----------------------------------------------------------------- address


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("127.0.0.1:8080", ("127.0.0.1", 8080)),
        ("127.1.2.3:0", ("127.1.2.3", 0)),
        ("localhost:80", ("localhost", 80)),
        ("[::1]:9000", ("::1", 9000)),
    ],
)
def test_loopback_addresses_are_taken(text: str, expected: tuple[str, int]) -> None:
    assert parse_address(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("8080", "HOST:PORT"),
        (":8080", "HOST:PORT"),
        ("127.0.0.1:http", "not a port"),
        ("127.0.0.1:70000", "out of range"),
        ("0.0.0.0:8080", "--web-allow-remote"),  # ok-net: refused, never bound
        ("192.0.2.7:8080", "--web-allow-remote"),  # ok-net: refused
        ("[::]:8080", "--web-allow-remote"),
        ("example.org:8080", "--web-allow-remote"),
    ],
)
def test_bad_or_remote_addresses_are_refused(text: str, message: str) -> None:
    with pytest.raises(AddressError, match=message):
        parse_address(text)


def test_remote_addresses_need_the_flag() -> None:
    # ok-net: parsed only
    assert parse_address("0.0.0.0:8080", allow_remote=True) == ("0.0.0.0", 8080)


# -------------------------------------------------------------------- page


class Events:
    """A server-sent event stream, read one snapshot at a time."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.buffer = b""

    async def next(self) -> dict[str, Any]:
        while True:
            while b"\n\n" not in self.buffer:
                chunk = await self.stream.receive_some()
                assert chunk, "the stream ended"
                self.buffer += chunk
            event, self.buffer = self.buffer.split(b"\n\n", 1)
            for line in event.split(b"\n"):
                if line.startswith(b"data: "):
                    return json.loads(line[6:])  # type: ignore[no-any-return]


async def open_events(port: int) -> tuple[Events, bytes]:
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    await stream.send_all(b"GET /events HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    events = Events(stream)
    while b"\r\n\r\n" not in events.buffer:
        events.buffer += await stream.receive_some()
    head, events.buffer = events.buffer.split(b"\r\n\r\n", 1)
    return events, head


@asynccontextmanager
async def page(port: int, **options: Any) -> AsyncIterator[tuple[MonitorApp, int]]:
    """A watcher node on ``port`` serving its page on loopback: (the app, its TCP port)."""
    async with (
        trizre.open_node("watcher", beacon_port=port, **FAST) as watcher,
        open_monitor(watcher) as monitor,
        trio.open_nursery() as nursery,
    ):
        app = MonitorApp(monitor, **options)
        url = await nursery.start(serve_page, app, "127.0.0.1", 0)
        assert url.startswith("http://127.0.0.1:") and url.endswith("/")
        yield app, int(url.rsplit(":", 1)[1].rstrip("/"))
        nursery.cancel_scope.cancel()


async def test_the_page_its_snapshot_and_its_live_stream() -> None:
    port = free_udp_port()
    with trio.fail_after(30):
        async with page(port) as (app, web):
            status, headers, body = await http(web, "/")
            assert status.startswith("HTTP/1.1 200")
            assert b'<script src="/watch.js"></script>' in body
            assert headers["content-security-policy"].startswith("default-src 'self'")
            # The policy blocks inline styles and scripts: the page has none.
            assert b"<style" not in body and b" style=" not in body
            assert b"<script>" not in body and b'<link rel="stylesheet" href="/watch.css">' in body
            status, headers, body = await http(web, "/watch.css")
            assert status.startswith("HTTP/1.1 200") and b".ACTIVE" in body
            assert headers["content-type"].startswith("text/css")
            status, headers, body = await http(web, "/watch.js")
            assert status.startswith("HTTP/1.1 200") and b"textContent" in body
            assert b"innerHTML" not in body  # peers' text is never parsed as HTML
            status, _, body = await http(web, "/snapshot.json")
            assert json.loads(body)["node"]["name"] == "watcher"
            assert (await http(web, "/nothing"))[0].startswith("HTTP/1.1 404")
            assert (await http(web, "/", "POST"))[0].startswith("HTTP/1.1 405")
            status, headers, body = await http(web, "/", "HEAD")
            assert status.startswith("HTTP/1.1 200") and body == b""

            events, head = await open_events(web)
            async with events.stream:
                assert b"content-type: text/event-stream" in head.lower()
                first = await events.next()
                assert first["peers"] == []
                async with trizre.open_node("newcomer", beacon_port=port, **FAST):
                    while not any(p["name"] == "newcomer" for p in (await events.next())["peers"]):
                        pass
                assert app.clients.value == 1


async def test_event_streams_are_bounded_and_released() -> None:
    port = free_udp_port()
    with trio.fail_after(30):
        async with page(port, max_clients=1) as (app, web):
            events, _ = await open_events(web)
            await events.next()
            status, _, body = await http(web, "/events")
            assert status.startswith("HTTP/1.1 503") and b"too many" in body
            await events.stream.aclose()  # the browser goes away: its place is freed
            await app.clients.wait_value(0)  # hypercorn noticed the closed socket
            again, _ = await open_events(web)
            async with again.stream:
                await again.next()
    with pytest.raises(ValueError, match="max_clients"):
        MonitorApp(app.monitor, max_clients=0)
    with pytest.raises(ValueError, match="max_rate"):
        MonitorApp(app.monitor, max_rate=0)


# -------------------------------------------------------------------- views


def test_the_terminal_view_shows_everything_and_escapes_peers_text() -> None:
    snapshot: dict[str, Any] = {
        "node": {"name": "w", "uuid": "u"},
        "peers": [
            {
                "name": "evil\x1b[2J[bold]x[/bold]",
                "uuid": "1",
                "endpoint": "tcp://127.0.0.1:1",
                "groups": ["echo"],
                "headers": {"X-A": "b"},
                "presence": "silent",
                "watcher": False,
            }
        ],
        "groups": {"echo": ["evil"]},
        "services": [{"service": "echo", "workers": [{"uuid": "1", "name": "evil"}]}],
        "pairs": [
            {
                "pair": "p / b",
                "primary": "p",
                "backup": "b",
                "servers": [
                    {
                        "uuid": "3",
                        "name": "p",
                        "role": "primary",
                        "state": "down",
                        "claims": "ACTIVE",
                        "up": False,
                        "last_heard": 5.0,
                    },
                    {
                        "uuid": "2",
                        "name": "b",
                        "role": "backup",
                        "state": "ACTIVE",
                        "claims": "ACTIVE",
                        "up": True,
                        "last_heard": None,
                    },
                ],
                "health": {
                    "status": "degraded",
                    "reason": "no standby",
                    "since": 5.0,
                    "serving": "b",
                    "standby": None,
                },
                "history": [],
                "last_failover": {
                    "time": 6.0,
                    "server": "b",
                    "event": "CLIENT_REQUEST",
                    "why": "its partner was silent",
                },
            }
        ],
        "log": [{"seq": 1, "time": 0.0, "kind": "enter", "text": "evil entered"}],
        "version": 1,
    }
    console = Console(record=True, width=200, force_terminal=False)
    console.print(render(snapshot))
    text = console.export_text()
    assert "\x1b" not in text
    assert "evil\\x1b[2J[bold]x[/bold]" in text  # escaped, and not taken as markup
    five = datetime.fromtimestamp(5.0).strftime("%H:%M:%S")
    for wanted in (
        "silent",
        "X-A=b",
        "echo",
        "b (backup) ACTIVE",
        f"p (primary) down, last heard {five}",
        f"degraded: no standby since {five}",
        "to b (CLIENT_REQUEST: its partner was silent)",
        "evil entered",
    ):
        assert wanted in text, wanted
    assert text.count("ACTIVE") == 1  # one pair, one server shown ACTIVE


# ------------------------------------------------------------------ command


async def test_watch_piped_prints_events_and_serves_the_page() -> None:
    port = free_udp_port()
    with trio.fail_after(60):
        command = await start("watch", *lo(port), "--web", "127.0.0.1:0")
        match = await command.expect(r"^serving (http://127\.0\.0\.1:(\d+)/)$")
        web = int(match.group(2))
        async with (
            trizre.open_node("worker", beacon_port=port, **FAST) as worker,
            patterns.open_server(worker, _echo, service="echo"),
        ):
            await command.expect(r"^\d\d:\d\d:\d\d worker entered from tcp://127\.0\.0\.1:\d+$")
            await command.expect(r"^\d\d:\d\d:\d\d worker serves echo$")
            _, _, body = await http(web, "/snapshot.json")
            assert json.loads(body)["services"][0]["service"] == "echo"
        await command.expect(r"worker exited$")
        command.process.send_signal(signal.SIGTERM)
        code, _, err = await command.finish()
        assert code == 143 and "Traceback" not in err


async def _echo(request: patterns.IncomingRequest) -> bytes:
    return b"".join(request.body)


def test_watch_refuses_a_remote_address_without_the_flag() -> None:
    # ok-net: refused before anything is bound
    result = cli("watch", "--interface", "lo", "--web", "0.0.0.0:0")
    assert result.returncode == 1
    assert "--web-allow-remote" in result.stderr and "Traceback" not in result.stderr
    assert result.stdout == ""  # nothing served


@pytest.mark.parametrize("option", ["--web", "--metrics"])
def test_a_taken_port_is_named_in_one_line(option: str) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = cli("watch", *lo(free_udp_port()), option, f"127.0.0.1:{port}")
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert f"cannot serve on 127.0.0.1:{port}: Address already in use" in result.stderr


def test_the_live_terminal_view_in_a_terminal() -> None:
    """On a terminal (a pty here), watch draws the live view, and Ctrl-C ends it cleanly."""
    import pexpect  # noqa: PLC0415 - only this test drives a terminal

    port = free_udp_port()
    child = pexpect.spawn(
        sys.executable,
        [str(ROOT / "tests" / "support" / "guarded_cli.py"), "watch", *lo(port)],
        dimensions=(40, 160),
        timeout=30,
        env={**os.environ, "TERM": "xterm"},
    )
    try:
        child.expect("trizre watch: trizre-watch")
        child.expect("Binary Star pairs")

        async def newcomer() -> None:
            async with trizre.open_node("newcomer", beacon_port=port, **FAST) as node:
                await node.wait_for_peer("trizre-watch")
                with trio.fail_after(30):
                    # Wait until the view shows it; pexpect reads in a thread.
                    await trio.to_thread.run_sync(lambda: child.expect(r"newcomer[^\r\n]*alive"))

        trio.run(newcomer)
        child.sendintr()
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert child.exitstatus == 130, child.before
    assert b"Traceback" not in (child.before or b"")
