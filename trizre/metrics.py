"""Prometheus metrics of a process's own clients: what only the requesting side knows.

``trizre watch --metrics`` exports what servers announce; a client's
retries, the requests it abandoned and the time its requests took are
known only in the client's process.  Register a :class:`ClientCollector`
in that process's prometheus_client registry and serve it as you serve
your other metrics::

    from prometheus_client import REGISTRY, start_http_server
    from trizre.metrics import ClientCollector

    collector = ClientCollector()
    REGISTRY.register(collector)
    start_http_server(9465, addr="127.0.0.1")
    async with patterns.open_service_client(node) as client:
        collector.add("orders", client)
        ...

Each scrape reads every client's ``statistics()``; nothing runs between
scrapes.  ``docs/operations.md`` lists the metrics.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Final, Protocol

from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from .cli._metrics import _histogram

__all__ = ["ClientCollector", "HasStatistics"]

MAX_CLIENTS: Final = 256
"""Clients one collector reads; adding more raises ``ValueError`` (bounded memory)."""


class HasStatistics(Protocol):
    """Anything with a trizre client's ``statistics()``: every client of :mod:`trizre.patterns`."""

    def statistics(self) -> dict[str, dict[str, Any]]: ...


_COUNTERS: Final = (
    ("requests", "Requests the client made."),
    ("retries", "Attempts after a request's first (a timeout, a lost server, a 503)."),
    ("refused", "503 answers the client got (a passive Binary Star server, a full worker)."),
    ("errors", "Requests answered with an error status (500, or the application's own)."),
    ("abandoned", "Requests given up after every attempt went unanswered."),
)


class ClientCollector(Collector):
    """A prometheus_client collector of the clients :meth:`add`-ed to it, each under a name.

    Metrics carry the labels ``client`` (the name given) and ``service``
    (``""`` for Lazy Pirate and Binary Star clients, which name a server).
    """

    def __init__(self) -> None:
        self._clients: dict[str, HasStatistics] = {}

    def add(self, name: str, client: HasStatistics) -> None:
        """Export ``client`` under ``name`` from now on (a name given again: replaced).

        Bad input: a name that is not a non-empty ``str``, or more than
        :data:`MAX_CLIENTS` clients, raise ``ValueError``.
        """
        if not isinstance(name, str) or not name:
            raise ValueError(f"a client's name is a non-empty str, got {name!r}")
        if name not in self._clients and len(self._clients) >= MAX_CLIENTS:
            raise ValueError(f"a ClientCollector reads at most {MAX_CLIENTS} clients")
        self._clients[name] = client

    def remove(self, name: str) -> None:
        """Stop exporting the client named ``name`` (absent: nothing happens)."""
        self._clients.pop(name, None)

    def collect(self) -> Iterator[Metric]:
        """Every client's counters and request-time histogram."""
        labels = ["client", "service"]
        counters = {
            field: CounterMetricFamily(f"trizre_client_{field}", doc, labels=labels)
            for field, doc in _COUNTERS
        }
        seconds = HistogramMetricFamily(
            "trizre_client_request_seconds",
            "Time from a request to its answer (OK or error), retries included.",
            labels=labels,
        )
        for name, client in sorted(self._clients.items()):
            for service, stats in sorted(client.statistics().items()):
                for field, counter in counters.items():
                    counter.add_metric([name, service], float(stats[field]))
                if (buckets := _histogram(stats.get("latency"))) is not None:
                    seconds.add_metric([name, service], buckets[0], buckets[1])
        yield from counters.values()
        yield seconds
