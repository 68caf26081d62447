"""``trizre watch --metrics``: what the watcher sees, in Prometheus's exposition format.

prometheus_client writes the format (a well-kept library that Prometheus's
own project maintains), from a collector that reads the
:class:`~trizre.cli._monitor.Monitor` at each scrape: nothing is counted twice
and nothing runs between scrapes.  The numbers come from two places:

* the watching node's own view: peers by presence;
* the status announcements of pattern servers (:mod:`trizre.patterns._status`):
  each server's counters and handler-time histogram (its status's
  ``stats``, sent at most every ``STATS_INTERVAL`` seconds while they
  change), each Binary Star server's state and failovers with its pair's
  health (:mod:`trizre.patterns._pair_health`), Titanic's queue.

``docs/operations.md`` lists every metric.  Served by the same small ASGI
server as the page (hypercorn, in the Trio loop), on loopback unless
``--metrics-allow-remote``: ``GET /metrics``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, Final

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector, CollectorRegistry

from ..metrics import _histogram, _number
from ._monitor import Monitor
from ._web import Receive, Scope, Send, respond

__all__ = ["MetricsApp", "MonitorCollector", "registry_for"]

PRESENCES: Final = ("alive", "evasive", "silent")
BSTAR_STATES: Final = ("PRIMARY", "BACKUP", "ACTIVE", "PASSIVE", "down")
HEALTHS: Final = ("ok", "degraded", "split brain", "down")

# A server's stats field -> (metric suffix, help).  Counters, per service and worker.
_SERVER_COUNTERS: Final = (
    ("received", "requests", "Requests the worker received for the service."),
    ("executed", "executed", "Requests the worker's handler ran."),
    ("replied", "replies", "Replies the worker sent (cached resends included)."),
    (
        "retried",
        "retries",
        "Requests asked again while held or after they were answered (the client retried).",
    ),
    ("accepted", "accepted", "ACCEPTED answers sent: requests held past accept_after."),
    (
        "unsent",
        "answers_unsent",
        "Answers that ran nothing (503, ACCEPTED again, a cached reply) dropped: the outbox "
        "was full of answers waiting for slow clients, who retry.",
    ),
)


def _label(value: object) -> str:
    return "" if value is None else str(value)


class MonitorCollector(Collector):
    """A prometheus_client collector that reads a :class:`Monitor` at each scrape.

    Announced values that are missing or not numbers (an older server, a
    peer's junk) are left out, never guessed.
    """

    def __init__(self, monitor: Monitor) -> None:
        self.monitor = monitor

    def collect(self) -> Iterator[Metric]:
        """Every metric, from one snapshot of the monitor."""
        snapshot = self.monitor.snapshot()
        yield from self._peers(snapshot)
        yield from self._services(snapshot)
        yield from self._pairs(snapshot)

    def _peers(self, snapshot: dict[str, Any]) -> Iterable[Metric]:
        peers = GaugeMetricFamily(
            "trizre_peers", "Peers the watching node sees, by presence.", labels=["presence"]
        )
        for presence in PRESENCES:
            count = sum(1 for p in snapshot["peers"] if p["presence"] == presence)
            peers.add_metric([presence], count)
        yield peers

    def _services(self, snapshot: dict[str, Any]) -> Iterable[Metric]:
        workers = GaugeMetricFamily(
            "trizre_service_workers",
            "Workers serving each service (members of its group that announced it).",
            labels=["service"],
        )
        for service in snapshot["services"]:
            workers.add_metric([service["service"]], len(service["workers"]))
        yield workers

        labels = ["service", "worker", "peer"]
        counters = {
            field: CounterMetricFamily(f"trizre_service_{name}", doc, labels=labels)
            for field, name, doc in _SERVER_COUNTERS
        }
        unavailable = CounterMetricFamily(
            "trizre_service_unavailable",
            "Requests answered 503: reason=passive (a passive Binary Star server), "
            "reason=full (max_queued already waiting).",
            labels=[*labels, "reason"],
        )
        held = GaugeMetricFamily(
            "trizre_service_held",
            "Requests the worker holds now, running or waiting.",
            labels=labels,
        )
        latency = HistogramMetricFamily(
            "trizre_service_handler_seconds",
            "How long the worker's handler took per request.",
            labels=labels,
        )
        pending = GaugeMetricFamily(
            "trizre_titanic_requests_pending",
            "Requests Titanic stored and no worker answered yet.",
            labels=["peer", "node"],
        )
        titanic_counters = {
            field: CounterMetricFamily(
                f"trizre_titanic_requests_{field}", doc, labels=["peer", "node"]
            )
            for field, doc in (
                ("accepted", "Requests Titanic stored since it started."),
                ("completed", "Requests a worker answered through Titanic since it started."),
            )
        }
        for peer, name, status in self.monitor.statuses():
            stats = status.get("stats")
            if not isinstance(stats, dict):
                continue
            service = status.get("service") if status["kind"] == "service" else None
            values = [_label(service or status["kind"]), name, str(peer)]
            for field, counter in counters.items():
                if (value := _number(stats.get(field))) is not None:
                    counter.add_metric(values, value)
            for field, reason in (("refused", "passive"), ("shed", "full")):
                if (value := _number(stats.get(field))) is not None:
                    unavailable.add_metric([*values, reason], value)
            if (value := _number(stats.get("held"))) is not None:
                held.add_metric(values, value)
            if (buckets := _histogram(stats.get("latency"))) is not None:
                latency.add_metric(values, buckets[0], buckets[1])
            titanic = stats.get("titanic")
            if isinstance(titanic, dict):
                if (value := _number(titanic.get("pending"))) is not None:
                    pending.add_metric([str(peer), name], value)
                for field, counter in titanic_counters.items():
                    if (value := _number(titanic.get(field))) is not None:
                        counter.add_metric([str(peer), name], value)
        yield from counters.values()
        yield from (unavailable, held, latency, pending, *titanic_counters.values())

    def _pairs(self, snapshot: dict[str, Any]) -> Iterable[Metric]:
        health = GaugeMetricFamily(
            "trizre_bstar_pair_health",
            "1 for a Binary Star pair's health (ok, degraded, split brain, down), "
            "0 for the others.",
            labels=["pair", "health"],
        )
        since = GaugeMetricFamily(
            "trizre_bstar_pair_unhealthy_since_timestamp_seconds",
            "Since when a pair that is not ok has been so (no standby, nobody serving...).",
            labels=["pair"],
        )
        last = GaugeMetricFamily(
            "trizre_bstar_last_failover_timestamp_seconds",
            "When a standby of the pair last became ACTIVE.",
            labels=["pair", "server"],
        )
        state = GaugeMetricFamily(
            "trizre_bstar_server_state",
            "1 for the state a Binary Star server is shown in (down: not serving), "
            "0 for the others.",
            labels=["pair", "server", "role", "state"],
        )
        heard = GaugeMetricFamily(
            "trizre_bstar_server_last_heard_timestamp_seconds",
            "When the watcher last heard a Binary Star server that is down.",
            labels=["pair", "server", "role"],
        )
        failovers = CounterMetricFamily(
            "trizre_bstar_failovers",
            "Times a server of the pair went from PASSIVE to ACTIVE.",
            labels=["pair"],
        )
        for pair in snapshot["pairs"]:
            name = pair["pair"]
            status = pair["health"]["status"]
            for kind in HEALTHS:
                health.add_metric([name, kind], 1.0 if kind == status else 0.0)
            if pair["health"]["since"] is not None and status != "ok":
                since.add_metric([name], pair["health"]["since"])
            if (failover := pair["last_failover"]) is not None:
                last.add_metric([name, failover["server"]], failover["time"])
            failovers.add_metric([name], pair["failovers"])
            for server in pair["servers"]:
                for kind in BSTAR_STATES:
                    state.add_metric(
                        [name, server["name"], server["role"], kind],
                        1.0 if server["state"] == kind else 0.0,
                    )
                if server["last_heard"] is not None:
                    heard.add_metric([name, server["name"], server["role"]], server["last_heard"])
        yield from (health, since, last, state, heard, failovers)


def registry_for(monitor: Monitor) -> CollectorRegistry:
    """A registry of its own (not the process's global one) holding ``monitor``'s collector."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(MonitorCollector(monitor))
    return registry


class MetricsApp:
    """The ASGI application: ``GET /metrics`` in the Prometheus text format; 404 elsewhere."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] != "http":
            return
        path, method = scope["path"], scope["method"]
        if method not in ("GET", "HEAD"):
            await respond(send, 405, b"text/plain", b"method not allowed\n")
        elif path == "/metrics":
            body = generate_latest(self.registry)
            await respond(send, 200, CONTENT_TYPE_LATEST.encode(), body, head=method == "HEAD")
        else:
            await respond(send, 404, b"text/plain", b"not found: the metrics are at /metrics\n")
