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

A :class:`NodeCollector` exports what a node itself counts
(:meth:`trizre.Node.statistics`): its messages and octets in and out, the
peers it dropped and the beacons it ignored, by reason, and its peers by
presence, and (``trizre_node_info``) its version and which inbox read
its process uses.  ``trizre watch --metrics`` registers one for its own
node.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Final, Protocol

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from . import Node, __version__
from .transport._zsock import inbox_read

__all__ = ["ClientCollector", "HasStatistics", "NodeCollector"]

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


# NodeStatistics field -> (metric name, help).
_NODE_COUNTERS: Final = (
    ("messages_in", "trizre_node_messages_in", "ZRE messages the node read from its peers."),
    (
        "bytes_in",
        "trizre_node_bytes_in",
        "Octets of those messages (every frame after the routing id).",
    ),
    (
        "messages_out",
        "trizre_node_messages_out",
        "ZRE messages the node handed to its peers' links (a SHOUT once per member).",
    ),
    ("bytes_out", "trizre_node_bytes_out", "Octets of those messages."),
)


class NodeCollector(Collector):
    """A prometheus_client collector of one node's :meth:`~trizre.Node.statistics`.

    Every metric carries the label ``node``: ``name``, or the node's own
    name.  Reasons are a fixed set (every reason is exported, 0 until it
    happens), so the series are bounded whatever peers do.  Each scrape
    calls ``statistics()`` once: cheap, and never a checkpoint.  A node
    that stopped still reports its final counts (and no peers).  Bad
    input: a ``name`` that is not a non-empty ``str`` raises
    ``ValueError``, a ``node`` that is not a :class:`trizre.Node`
    ``TypeError``.
    """

    def __init__(self, node: Node, name: str | None = None) -> None:
        if name is not None and (not isinstance(name, str) or not name):
            raise ValueError(f"a node's label is a non-empty str, got {name!r}")
        if not isinstance(node, Node):
            raise TypeError(f"a NodeCollector reads a trizre Node, got {type(node).__name__}")
        self.node = node
        self.name = node.name if name is None else name

    def collect(self) -> Iterator[Metric]:
        """The node's counters and peer gauges, from one ``statistics()``."""
        stats = self.node.statistics()
        label = [self.name]
        for field, metric, doc in _NODE_COUNTERS:
            counter = CounterMetricFamily(metric, doc, labels=["node"])
            counter.add_metric(label, float(getattr(stats, field)))
            yield counter
        yield _by_reason(
            "trizre_node_peers_dropped",
            "Peers the node removed, by reason (goodbye and beacon: they left).",
            label,
            stats.peers_dropped,
        )
        yield _by_reason(
            "trizre_node_beacons_ignored",
            "Beacons the node's rules turned away, by reason.",
            label,
            stats.beacons_ignored,
        )
        peers = GaugeMetricFamily(
            "trizre_node_peers",
            "The node's peers now: entered ones by presence, and those pending a HELLO.",
            labels=["node", "presence"],
        )
        for presence, count in stats.peers.items():
            peers.add_metric([*label, presence], float(count))
        peers.add_metric([*label, "pending"], float(stats.pending_peers))
        yield peers
        info = GaugeMetricFamily(
            "trizre_node_info",
            "Always 1: the node's trizre version, and which inbox read (and sends) its process "
            "uses (compiled, or python: see trizre version --verbose).",
            labels=["node", "version", "inbox_read"],
        )
        info.add_metric([*label, __version__, inbox_read()[0]], 1.0)
        yield info


def _by_reason(
    name: str, doc: str, label: list[str], counts: Mapping[str, int]
) -> CounterMetricFamily:
    """One counter family with a ``reason`` label: a sample per reason, zeros included."""
    family = CounterMetricFamily(name, doc, labels=["node", "reason"])
    for reason, count in counts.items():
        family.add_metric([*label, reason], float(count))
    return family


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _histogram(data: object) -> tuple[list[tuple[str, float]], float] | None:
    """Announced ``{"le": bounds, "counts": per bucket and one above, "sum"}`` as
    prometheus_client's cumulative buckets and sum; ``None`` if malformed."""
    if not isinstance(data, dict):
        return None
    bounds, counts, total = data.get("le"), data.get("counts"), _number(data.get("sum"))
    if not (isinstance(bounds, list) and isinstance(counts, list) and total is not None):
        return None
    if len(counts) != len(bounds) + 1 or len(bounds) > 64:
        return None
    numbers = [_number(x) for x in [*bounds, *counts]]
    if any(n is None for n in numbers):
        return None
    buckets: list[tuple[str, float]] = []
    running = 0.0
    for bound, count in zip([*bounds, "+Inf"], counts, strict=True):
        running += float(count)
        buckets.append((str(float(bound)) if bound != "+Inf" else "+Inf", running))
    return buckets, total
