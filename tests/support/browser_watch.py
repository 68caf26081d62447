"""The monitoring page in a real browser: run inside a network namespace by test_watch_browser.

    ip netns exec NS python tests/support/browser_watch.py [--screenshot PATH]

Everything runs in the namespace (only its ``lo`` is used): ``trizre watch
--web``, a newcomer node, a Binary Star pair and its client, and headless
Chromium driven by selenium through chromedriver.  Chromium cannot reach
anything beyond the namespace whatever it tries.  The scenario: the page
goes live; a node started afterwards appears; the pair shows the primary
ACTIVE and the backup PASSIVE; the primary is killed (SIGKILL) while the
client sends requests; the page shows the backup ACTIVE and a failover to
it, the pair degraded (no standby) and the dead primary down, never two
servers ACTIVE.  Then it checks the page is styled as the stylesheet says
(computed styles: colours, borders, fonts, tables; the browser's console
has no Content-Security-Policy complaint) and saves a screenshot
(``--screenshot``; ``docs/img/watch-page.png`` is one).  Prints each step;
exits 0 when all were seen, 1 (with the page's text) when one was not
within its time or a style was not applied.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from selenium import webdriver
from selenium.common.exceptions import WebDriverException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By

ROOT = Path(__file__).resolve().parents[2]
PORT = "5670"  # the namespace is ours alone
STEP_TIMEOUT = 60.0  # generous: a loaded CI machine starts Chromium slowly

CHROMIUM_FLAGS = [
    "--headless=new",
    "--no-sandbox",  # root, in a namespace
    "--disable-dev-shm-usage",
    "--disable-gpu",
    # Nothing but the page: no updates, sync, metrics or name lookups.
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-default-apps",
    "--no-first-run",
    "--no-default-browser-check",
    "--metrics-recording-only",
    "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1",
    "--window-size=1100,820",  # the screenshot's size
    "--hide-scrollbars",
]

# What the stylesheet (trizre/cli/watch.css) asks for, as the browser computes it.
GREEN = "rgb(23, 128, 47)"
YELLOW = "rgb(184, 134, 11)"
RED = "rgb(178, 34, 34)"


class StyleError(AssertionError):
    """The page is not rendered as its stylesheet says."""


def step(text: str) -> None:
    print(f"{time.monotonic():.2f} {text}", flush=True)


def python(*args: str, **kwargs: object) -> subprocess.Popen[str]:
    return subprocess.Popen(  # type: ignore[call-overload, no-any-return]
        [sys.executable, "-u", *args], text=True, cwd=ROOT, **kwargs
    )


def check_styles(driver: webdriver.Chrome) -> None:
    """Computed styles that exist only when watch.css was applied; raise StyleError if not."""

    def style(selector: str, prop: str) -> str:
        element = driver.find_element(By.CSS_SELECTOR, selector)
        return str(
            driver.execute_script(
                "return getComputedStyle(arguments[0]).getPropertyValue(arguments[1]);",
                element,
                prop,
            )
        )

    def expect(selector: str, prop: str, wanted: str) -> None:
        got = style(selector, prop)
        if got != wanted:
            raise StyleError(f"{selector} {prop} is {got!r}, not {wanted!r}")

    expect('#pairs [data-server="bstar-backup"][data-state="ACTIVE"]', "color", GREEN)
    expect('#pairs [data-server="bstar-backup"][data-state="ACTIVE"]', "font-weight", "600")
    expect('#pairs [data-server="bstar-primary"][data-state="down"]', "color", RED)
    expect('[data-health="degraded"]', "color", YELLOW)
    expect('[data-peer="newcomer"] .alive', "color", GREEN)
    expect("#peers th", "border-bottom-style", "solid")
    expect("#peers th", "border-bottom-width", "1px")
    expect("#peers", "border-collapse", "collapse")
    expect("#pairs", "display", "table")  # the pairs are a table, not loose lines
    expect("#log", "border-top-style", "solid")
    font = style("body", "font-family")
    if "sans-serif" not in font:
        raise StyleError(f"body font-family is {font!r}: the stylesheet's was not applied")
    complaints = [
        entry["message"]
        for entry in driver.get_log("browser")
        if "Content Security Policy" in entry["message"]
    ]
    if complaints:
        raise StyleError("the browser refused part of the page: " + "; ".join(complaints))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--screenshot", help="save a PNG of the page after the failover here")
    args = parser.parse_args()
    processes: list[subprocess.Popen[str]] = []
    driver = None
    try:
        watch = python(
            "-m",
            "trizre",
            "watch",
            "--interface",
            "lo",
            "--beacon-port",
            PORT,
            "--web",
            "127.0.0.1:0",
            stdout=subprocess.PIPE,
        )
        processes.append(watch)
        assert watch.stdout is not None
        line = watch.stdout.readline()
        if not line.startswith("serving http://127.0.0.1:"):
            step(f"watch did not serve: {line!r}")
            return 1
        url = line.split()[1]
        step(f"watch serves {url}")

        options = webdriver.ChromeOptions()
        options.binary_location = os.environ.get("CHROMIUM", "/usr/bin/chromium")
        for flag in CHROMIUM_FLAGS:
            options.add_argument(flag)
        options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
        service = Service(os.environ.get("CHROMEDRIVER", "/usr/bin/chromedriver"))
        driver = webdriver.Chrome(options=options, service=service)
        driver.get(url)

        def wait(what: str, found: Callable[[], bool]) -> None:
            deadline = time.monotonic() + STEP_TIMEOUT
            while True:
                try:
                    if found():
                        step(f"saw {what}")
                        return
                except WebDriverException:
                    pass  # the page redrew under us: look again
                if time.monotonic() > deadline:
                    raise TimeoutError(f"never saw {what}")
                time.sleep(0.1)  # polling a browser: it cannot wake us

        def has(selector: str) -> bool:
            return bool(driver.find_elements(By.CSS_SELECTOR, selector))

        wait("the page live", lambda: has('#status[data-live="1"]'))
        newcomer = python(
            "-c",
            "import trio, trizre\n"
            "async def main():\n"
            f"    async with trizre.open_node('newcomer', interface='lo', beacon_port={PORT}):\n"
            "        await trio.sleep_forever()\n"
            "trio.run(main)\n",
        )
        processes.append(newcomer)
        wait("the newcomer appear", lambda: has('[data-peer="newcomer"][data-presence="alive"]'))

        pair = [str(ROOT / "examples" / "bstar_pair.py"), "--port", PORT]
        primary = python(*pair, "--role", "primary", stdout=subprocess.DEVNULL)
        backup = python(*pair, "--role", "backup", stdout=subprocess.DEVNULL)
        processes += [primary, backup]
        wait(
            "primary ACTIVE, backup PASSIVE, the pair ok",
            lambda: (
                has('[data-server="bstar-primary"][data-state="ACTIVE"]')
                and has('[data-server="bstar-backup"][data-state="PASSIVE"]')
                and has('[data-health="ok"]')
            ),
        )
        client = python(
            *pair,
            "--role",
            "client",
            "--requests",
            "100000",
            "--pace",
            "0.05",
            stdout=subprocess.DEVNULL,
        )
        processes.append(client)
        primary.send_signal(signal.SIGKILL)
        step("killed the primary")
        wait(
            "the backup ACTIVE and the failover to it",
            lambda: (
                has('[data-server="bstar-backup"][data-state="ACTIVE"]')
                and has('[data-last-failover="bstar-backup"]')
                and has('[data-transition="bstar-backup:ACTIVE"]')
            ),
        )
        wait(
            "the dead primary shown down and the pair degraded",
            lambda: (
                has('[data-server="bstar-primary"][data-state="down"]')
                and has('[data-health="degraded"]')
            ),
        )
        actives = driver.find_elements(By.CSS_SELECTOR, '#pairs [data-state="ACTIVE"]')
        if len(actives) != 1:
            step(f"{len(actives)} servers shown ACTIVE in the pair, not one")
            return 1
        step("saw one server ACTIVE")
        try:
            for attempt in range(50):
                try:
                    check_styles(driver)
                    break
                except WebDriverException:
                    # The page redrew under us (a stale element): look again.
                    if attempt == 49:
                        raise
                    time.sleep(0.1)
        except StyleError as exc:
            step(f"the page is not styled: {exc}")
            print(driver.find_element(By.TAG_NAME, "body").text, flush=True)
            return 1
        step("saw the page styled")
        if args.screenshot:
            driver.save_screenshot(args.screenshot)
            step(f"saved {args.screenshot}")
        step("OK")
        return 0
    except TimeoutError as exc:
        step(str(exc))
        if driver is not None:
            print(driver.find_element(By.TAG_NAME, "body").text, flush=True)
        return 1
    finally:
        if driver is not None:
            driver.quit()
        for process in processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in processes:
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


if __name__ == "__main__":
    sys.exit(main())
