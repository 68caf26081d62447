"""The monitoring page of ``trizre watch --web``: a small ASGI app served by hypercorn.

hypercorn because it runs inside our Trio loop (its ``trio`` worker), so
the page reads the :class:`~trizre.cli._monitor.Monitor` directly, with no
thread and no copy; server-sent events because the page only listens, and
an ``EventSource`` reconnects by itself.  No web framework: three routes.

* ``GET /``: the page (``watch.html``, ``watch.css`` and ``watch.js``,
  shipped with the package; no CDN, nothing fetched from elsewhere; no
  inline style or script, which the policy ``default-src 'self'`` would
  block);
* ``GET /snapshot.json``: the monitor's snapshot, once;
* ``GET /events``: the snapshot at once and again at each change (at most
  ``max_rate`` times a second), as server-sent events, with a comment every
  15 s so proxies keep the connection.

Bounded: at most ``max_clients`` event streams (more get 503); each stream
sends only the newest snapshot, so a slow or vanished browser costs one
pending write, never a queue.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import socket
from collections.abc import Awaitable, Callable
from importlib import resources
from typing import Any, Final

import trio
from trio_util import AsyncValue

from ._common import CommandError
from ._monitor import Monitor

log = logging.getLogger("trizre.cli.web")

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

KEEPALIVE: Final = 15.0
_SECURITY_HEADERS: Final = [
    # The page runs only its own script and talks only to its own origin.
    (b"content-security-policy", b"default-src 'self'; frame-ancestors 'none'"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
]
_STATIC: Final = {
    "/": ("watch.html", b"text/html; charset=utf-8"),
    "/watch.js": ("watch.js", b"text/javascript; charset=utf-8"),
    # A file, not an inline <style>: the policy above lets the browser apply
    # only what the page's own origin serves.
    "/watch.css": ("watch.css", b"text/css; charset=utf-8"),
}


class AddressError(CommandError, ValueError):
    """A ``--web`` or ``--metrics`` address that is malformed, or not loopback without the flag."""


def parse_address(
    text: str, *, allow_remote: bool = False, option: str = "--web"
) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:8080`` for IPv6; port 0 picks one) as (host, port).

    ``option`` names the option in messages (``--web``, ``--metrics``);
    its ``OPTION-allow-remote`` flag is the one that allows other hosts.

    Raises:
        AddressError: malformed, a port outside 0..65535, or a host that is
            not loopback (127.0.0.0/8, ::1, ``localhost``) unless
            ``allow_remote``.
    """
    host, sep, port_text = text.rpartition(":")
    if not sep or not host:
        raise AddressError(f"{option} wants HOST:PORT, such as 127.0.0.1:8080, not {text!r}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    try:
        port = int(port_text)
    except ValueError:
        raise AddressError(f"not a port number in {option} {text!r}") from None
    if not 0 <= port <= 65535:
        raise AddressError(f"port out of range 0..65535 in {option} {text!r}")
    if not allow_remote and not _is_loopback(host):
        raise AddressError(
            f"{option} {text}: it would be reachable from other machines and it "
            "shows your network; bind a loopback address (127.0.0.1:PORT), or pass "
            f"{option}-allow-remote if that is what you want"
        )
    return host, port


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _asset(name: str) -> bytes:
    return resources.files("trizre.cli").joinpath(name).read_bytes()


class MonitorApp:
    """The ASGI application: the page, the snapshot and the event stream.

    ``clients`` (a trio-util ``AsyncValue``) is the number of event
    streams open now.  Bad input: ``max_clients < 1`` or a non-positive
    ``max_rate`` raises ``ValueError``.
    """

    def __init__(self, monitor: Monitor, *, max_clients: int = 32, max_rate: float = 10.0) -> None:
        if max_clients < 1:
            raise ValueError(f"max_clients must be at least 1, got {max_clients}")
        if not max_rate > 0:
            raise ValueError(f"max_rate must be positive, got {max_rate!r}")
        self.monitor = monitor
        self.max_clients = max_clients
        self.clients: AsyncValue[int] = AsyncValue(0)
        self._interval = 1.0 / max_rate
        self._assets = {path: (_asset(name), kind) for path, (name, kind) in _STATIC.items()}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            return  # websockets: not served
        path, method = scope["path"], scope["method"]
        if method not in ("GET", "HEAD"):
            await respond(send, 405, b"text/plain", b"method not allowed\n")
        elif path in self._assets:
            body, kind = self._assets[path]
            await respond(send, 200, kind, body, head=method == "HEAD")
        elif path == "/snapshot.json":
            body = json.dumps(self.monitor.snapshot()).encode()
            await respond(send, 200, b"application/json", body, head=method == "HEAD")
        elif path == "/events":
            await self._events(receive, send)
        else:
            await respond(send, 404, b"text/plain", b"not found\n")

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _events(self, receive: Receive, send: Send) -> None:
        if self.clients.value >= self.max_clients:
            await respond(send, 503, b"text/plain", b"too many watchers of this page\n")
            return
        self.clients.value += 1
        try:
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [
                        (b"content-type", b"text/event-stream"),
                        (b"cache-control", b"no-store"),
                        *_SECURITY_HEADERS,
                    ],
                }
            )
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._stream, send)
                # The browser went away: the stream ends, whatever it was doing.
                while (await receive())["type"] != "http.disconnect":
                    pass
                nursery.cancel_scope.cancel()
        finally:
            self.clients.value -= 1

    async def _stream(self, send: Send) -> None:
        version = self.monitor.version
        while True:
            seen = version.value
            data = json.dumps(self.monitor.snapshot())
            await send(
                {
                    "type": "http.response.body",
                    "body": f"data: {data}\n\n".encode(),
                    "more_body": True,
                }
            )
            await trio.sleep(self._interval)  # at most max_rate snapshots a second
            with trio.move_on_after(KEEPALIVE) as idle:
                await version.wait_value(lambda v, seen=seen: v > seen)
            if idle.cancelled_caught:
                await send(
                    {"type": "http.response.body", "body": b": keepalive\n\n", "more_body": True}
                )


async def respond(send: Send, status: int, kind: bytes, body: bytes, *, head: bool = False) -> None:
    """Send one whole response, with the security headers (no body for HEAD)."""
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", kind),
                (b"content-length", str(len(body)).encode()),
                (b"cache-control", b"no-store"),
                *_SECURITY_HEADERS,
            ],
        }
    )
    await send({"type": "http.response.body", "body": b"" if head else body})


async def serve_page(
    app: Callable[[Scope, Receive, Send], Awaitable[None]],
    host: str,
    port: int,
    *,
    task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve the ASGI ``app`` (the page, the metrics) at ``host:port`` until cancelled.

    Reports the URL it serves through ``task_status``.

    Cancellation closes the listening socket and every open stream.  Raises
    ``OSError`` when the address cannot be bound (in use, not ours).
    """
    from hypercorn.config import Config  # noqa: PLC0415 - only for --web

    # Bound here, not by hypercorn: a refusal then names the address ("[Errno
    # 98] Address already in use" alone did not say which).
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    listener = socket.socket(family, socket.SOCK_STREAM)
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((host, port))
        listener.listen(128)
    except OSError as exc:
        listener.close()
        shown = f"[{host}]:{port}" if family == socket.AF_INET6 else f"{host}:{port}"
        raise OSError(exc.errno, f"cannot serve on {shown}: {exc.strerror}") from None
    config = Config()
    config.bind = [f"fd://{listener.detach()}"]  # hypercorn owns it, and closes it
    config.accesslog = None
    config.errorlog = log
    config.graceful_timeout = 0.5  # streams never end by themselves
    async with trio.open_nursery() as nursery:
        bound: list[str] = await nursery.start(_serve, app, config)
        task_status.started(bound[0].rstrip("/") + "/")


async def _serve(
    app: Callable[[Scope, Receive, Send], Awaitable[None]],
    config: Any,
    *,
    task_status: trio.TaskStatus[list[str]],
) -> None:
    from hypercorn.trio import serve  # noqa: PLC0415

    await serve(app, config, task_status=task_status)  # type: ignore[arg-type]
