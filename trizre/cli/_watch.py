"""``trizre watch``: a live view of the network, in the terminal and as a web page.

The node joins the status group (:mod:`trizre.patterns._status`), so pattern
servers tell it what they serve and Binary Star servers their state; the
view shows peers with their presence, groups, services with their workers,
each Binary Star pair with its health (``ok``, ``degraded: no standby since
...``, ``split brain``, ``down``), its servers' states and the last
failover and why, and
the latest events.

* On a terminal: a live view (rich), redrawn on each change.
* Piped or redirected: one line per event, with its time, for logs.
* ``--web HOST:PORT``: the same view as a live page (``_web``), on
  loopback unless ``--web-allow-remote``; the URL served is printed.
* ``--metrics HOST:PORT``: Prometheus metrics at ``/metrics``
  (``_metrics``), on loopback unless ``--metrics-allow-remote``.
"""

from __future__ import annotations

import argparse
import sys
from datetime import datetime
from typing import TYPE_CHECKING, Any

import trio

from ._common import CommandError, add_node_options, open_command_node, printable, run
from ._monitor import Monitor, open_monitor
from ._web import AddressError, parse_address

if TYPE_CHECKING:
    from rich.console import RenderableType
    from rich.text import Text


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The command's options (see the module docstring)."""
    parser.add_argument(
        "--web",
        metavar="HOST:PORT",
        help="also serve a live page at this address (127.0.0.1:8080; port 0 picks one)",
    )
    parser.add_argument(
        "--web-allow-remote",
        action="store_true",
        help="let --web bind an address other machines can reach (it shows your network)",
    )
    parser.add_argument(
        "--metrics",
        metavar="HOST:PORT",
        help="also serve Prometheus metrics at http://HOST:PORT/metrics (127.0.0.1:9464)",
    )
    parser.add_argument(
        "--metrics-allow-remote",
        action="store_true",
        help="let --metrics bind an address other machines can reach (a Prometheus elsewhere)",
    )
    add_node_options(parser)


def _time(seconds: float) -> str:
    return datetime.fromtimestamp(seconds).strftime("%H:%M:%S")


HEALTH_STYLES = {"ok": "bold green", "degraded": "bold yellow", "split brain": "bold red"}


def health_summary(health: dict[str, Any]) -> str:
    """``ok``, ``degraded: no standby since 04:30:38``...: a pair's health in words."""
    words = health["status"] if not health["reason"] else f"{health['status']}: {health['reason']}"
    if health["since"] is not None and health["status"] != "ok":
        words += f" since {_time(health['since'])}"
    return words


def health_text(health: dict[str, Any]) -> Text:
    """The pair's health, coloured: green ok, yellow degraded, red otherwise."""
    from rich.text import Text  # noqa: PLC0415

    return Text(health_summary(health), style=HEALTH_STYLES.get(health["status"], "bold red"))


def render(snapshot: dict[str, Any]) -> RenderableType:
    """The terminal view of a snapshot (peers' text escaped, never markup)."""
    from rich.console import Group  # noqa: PLC0415 - rich only when drawing
    from rich.table import Table  # noqa: PLC0415
    from rich.text import Text  # noqa: PLC0415

    def text(value: object, style: str = "") -> Text:
        return Text(printable(str(value)), style=style)

    colours = {"alive": "green", "evasive": "yellow", "silent": "red", "ACTIVE": "bold green"}
    node = snapshot["node"]
    title = Text(f"trizre watch: {printable(node['name'])} {node['uuid']}", style="bold")

    peers = Table(title="peers", title_justify="left", box=None, header_style="bold")
    for column in ("name", "presence", "endpoint", "groups", "headers"):
        peers.add_column(column)
    for peer in snapshot["peers"]:
        headers = ", ".join(f"{k}={v}" for k, v in peer["headers"].items())
        presence = peer["presence"]
        peers.add_row(
            text(peer["name"]),
            text(presence, colours.get(presence, "")),
            text(peer["endpoint"]),
            text(", ".join(peer["groups"])),
            text(headers),
        )

    groups = Table(title="groups", title_justify="left", box=None, header_style="bold")
    groups.add_column("group")
    groups.add_column("members")
    for group, members in snapshot["groups"].items():
        groups.add_row(text(group), text(", ".join(members)))

    services = Table(title="services", title_justify="left", box=None, header_style="bold")
    services.add_column("service")
    services.add_column("workers")
    for service in snapshot["services"]:
        services.add_row(
            text(service["service"]), text(", ".join(w["name"] for w in service["workers"]))
        )

    pairs = Table(title="Binary Star pairs", title_justify="left", box=None, header_style="bold")
    for column in ("pair", "health", "servers", "last failover"):
        pairs.add_column(column)
    for pair in snapshot["pairs"]:
        servers = Text()
        for index, server in enumerate(pair["servers"]):
            if index:
                servers.append("\n")  # one server a line
            servers.append(printable(f"{server['name']} ({server['role']}) "))
            if server["state"] == "down":
                heard = server.get("last_heard")
                seen = f", last heard {_time(heard)}" if heard is not None else ""
                servers.append(f"down{seen}", "red")
            else:
                servers.append(printable(str(server["state"])), colours.get(server["state"], ""))
        last = pair["last_failover"]
        failover = (
            f"{_time(last['time'])} to {last['server']} ({last['event']}: {last['why']})"
            if last
            else "none"
        )
        pairs.add_row(text(pair["pair"]), health_text(pair["health"]), servers, text(failover))

    log = Table(title="events", title_justify="left", box=None, show_header=False)
    log.add_column("time")
    log.add_column("event")
    for entry in snapshot["log"][-12:]:
        log.add_row(text(_time(entry["time"])), text(entry["text"]))
    return Group(title, peers, groups, services, pairs, log)


async def _terminal(monitor: Monitor) -> None:
    from rich.live import Live  # noqa: PLC0415

    with Live(render(monitor.snapshot()), auto_refresh=False, screen=False) as live:
        while True:
            seen = monitor.version.value
            live.update(render(monitor.snapshot()), refresh=True)
            await trio.sleep(0.1)  # at most ten redraws a second
            await monitor.version.wait_value(lambda v, seen=seen: v > seen)


async def _lines(monitor: Monitor) -> None:
    """Piped: each event once, as a line with its time."""
    printed = 0
    while True:
        seen = monitor.version.value
        for entry in monitor.log(printed):
            print(f"{_time(entry['time'])} {printable(entry['text'])}", flush=True)
            printed = entry["seq"]
        await monitor.version.wait_value(lambda v, seen=seen: v > seen)


async def _watch(args: argparse.Namespace) -> int:
    address = metrics = None
    try:
        if args.web is not None:
            address = parse_address(args.web, allow_remote=args.web_allow_remote)
        if args.metrics is not None:
            metrics = parse_address(
                args.metrics, allow_remote=args.metrics_allow_remote, option="--metrics"
            )
    except AddressError as exc:
        raise CommandError(str(exc)) from None
    async with (
        # Beacons prove peers alive: an observer PINGs a quiet peer only once
        # per expired_timeout, not every evasive_timeout.  (Its log shows
        # "evasive" only for a peer that leaves a PING unanswered, either way.)
        open_command_node(args, name="trizre-watch", beacons_refresh=True) as node,
        open_monitor(node) as monitor,
        trio.open_nursery() as nursery,
    ):
        if address is not None:
            from ._web import MonitorApp, serve_page  # noqa: PLC0415

            url = await nursery.start(serve_page, MonitorApp(monitor), *address)
            print(f"serving {url}", flush=True)
        if metrics is not None:
            from ..metrics import NodeCollector  # noqa: PLC0415
            from ._metrics import MetricsApp, registry_for  # noqa: PLC0415 - only for --metrics
            from ._web import serve_page  # noqa: PLC0415

            registry = registry_for(monitor)
            registry.register(NodeCollector(node))  # the watching node's own counts
            url = await nursery.start(serve_page, MetricsApp(registry), *metrics)
            print(f"serving metrics {url}metrics", flush=True)
        await (_terminal(monitor) if sys.stdout.isatty() else _lines(monitor))
    return 0


def main(args: argparse.Namespace) -> int:
    """Run ``trizre watch``; the exit code."""
    return run(_watch, args)
