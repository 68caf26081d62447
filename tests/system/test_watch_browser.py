"""The monitoring page in headless Chromium: a peer appears, a Binary Star failover shows.

It also checks the page is rendered as its stylesheet says (computed
styles), and saves a screenshot of it (the docs show one made this way:
``docs/img/watch-page.png``).

The scenario (``tests/support/browser_watch.py``) runs whole inside a network
namespace made for it, so neither the browser nor the nodes can send
anything beyond it.  ``make test`` installs Chromium and chromedriver
(Debian's ``chromium`` and ``chromium-driver``) the way it installs Java;
without them, or without namespaces, this test skips, saying why.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from pathlib import Path

import pytest

from tests.support import netns
from tests.support.netns import NetnsPair

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("CHROMEDRIVER", "/usr/bin/chromedriver")


def _missing() -> str | None:
    if (reason := netns.netns_available()) is not None:
        return f"no network namespaces: {reason}"
    for path in (CHROMIUM, CHROMEDRIVER):
        if not (Path(path).exists() or shutil.which(path)):
            return f"{path} is missing (make chromium installs it as root with apt)"
    if importlib.util.find_spec("selenium") is None:
        return "selenium is not installed (the test extra)"
    return None


_reason = _missing()
pytestmark = [
    pytest.mark.netns,
    pytest.mark.skipif(_reason is not None, reason=f"browser test: {_reason}"),
]

netns_pair = netns.netns_pair  # the fixture


def test_the_page_shows_a_peer_appear_and_a_failover(netns_pair: NetnsPair, tmp_path: Path) -> None:
    inside, _ = netns_pair
    screenshot = tmp_path / "watch-page.png"
    result = inside.run(
        sys.executable,
        str(ROOT / "tests" / "support" / "browser_watch.py"),
        "--screenshot",
        str(screenshot),
        timeout=400,
        check=False,
    )
    report = result.stdout + result.stderr
    assert result.returncode == 0, report
    for seen in (
        "saw the page live",
        "saw the newcomer appear",
        "saw primary ACTIVE, backup PASSIVE, the pair ok",
        "saw the backup ACTIVE and the failover to it",
        "saw the dead primary shown down and the pair degraded",
        "saw one server ACTIVE",
        "saw the page styled",  # computed styles: the stylesheet was applied
    ):
        assert seen in result.stdout, report
    assert screenshot.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
