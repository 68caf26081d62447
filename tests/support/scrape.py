"""Reading a Prometheus scrape in tests, with the client library's own parser; the docs' table."""

from __future__ import annotations

import re
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]
ROOT = Path(__file__).resolve().parents[2]
SUFFIXES = re.compile(r"_(total|bucket|count|sum)$")


def documented(heading: str = "### Metrics") -> set[str]:
    """The metrics in the table under ``heading`` in docs/operations.md, without _total."""
    text = (ROOT / "docs" / "operations.md").read_text()
    section = text.split(heading, 1)[1].split("\n### ", 1)[0]
    return {SUFFIXES.sub("", name) for name in re.findall(r"^\| `(trizre_\w+)`", section, re.M)}


def parse(text: str) -> Samples:
    """Every sample of a scrape, by (name, labels), as the client library parses it."""
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float | None:
    """The one sample named ``name`` whose labels include ``labels`` (None: none)."""
    found = [v for (n, ls), v in samples.items() if n == name and set(labels.items()) <= ls]
    assert len(found) <= 1, (name, labels, found)
    return found[0] if found else None
