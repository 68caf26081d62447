"""benchmarks/spark_cluster.py's wait for the master: a page that is not yet
JSON means "no worker yet", not a crash (a CI chaos run once died on an
empty page from a master still starting)."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator

import pytest

from benchmarks.spark_cluster import _alive_workers, _free_port


class _Page(http.server.BaseHTTPRequestHandler):
    body = b""

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def ui() -> Iterator[tuple[type[_Page], int]]:
    """A master's web UI on loopback: the page class (set its ``body``) and the port."""

    class Page(_Page):
        pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Page)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield Page, server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("body", [b"", b'{"aliveworkers": ', b"[]", b"<html>starting</html>"])
def test_a_page_that_is_not_the_state_yet_counts_no_worker(
    ui: tuple[type[_Page], int], body: bytes
) -> None:
    page, port = ui
    page.body = body
    assert _alive_workers(port) == 0


def test_the_workers_the_master_counts(ui: tuple[type[_Page], int]) -> None:
    page, port = ui
    page.body = b'{"aliveworkers": 1, "status": "ALIVE"}'
    assert _alive_workers(port) == 1


def test_nothing_listening_counts_no_worker() -> None:
    assert _alive_workers(_free_port()) == 0
