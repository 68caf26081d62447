"""Issue 28's targets, each as a ratio beside the figure it divides by, from make bench's results.

Reads the JSON files ``make bench`` (and ``make bench-audit``) write into
``benchmarks/results`` and prints one table: the measure, trizre's figure,
what it is divided by (the Trio floor's or zyre's figure from the same
run), the ratio, the target and whether it is met.  A result file that is
missing gives "not measured" on its rows, never a guess.  It runs no
benchmark: ``make bench`` runs it last.

    python benchmarks/targets.py [--results benchmarks/results] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

Results = dict[str, Any]
NONE = "\u2013"  # an en dash: no figure
TIMES = "\u00d7"


@dataclass(frozen=True)
class Row:
    """One target: the measure, trizre's figure, its divisor, the ratio, the verdict."""

    measure: str
    trizre: float | None
    divisor_name: str
    divisor: float | None
    target: float  # the ratio (or, with divisor_name "", the figure) to reach
    unit: str = ""
    # raw pyzmq's figure in the same run (no Trio, no ZRE state): what any
    # Python peer on pyzmq could reach at most, to read the ratio against.
    ceiling: float | None = None

    @property
    def ceiling_ratio(self) -> float | None:
        if self.ceiling is None or not self.divisor:
            return None
        return self.ceiling / self.divisor

    @property
    def ratio(self) -> float | None:
        if self.trizre is None:
            return None
        if not self.divisor_name:
            return self.trizre
        return None if not self.divisor else self.trizre / self.divisor

    @property
    def status(self) -> str:
        if self.ratio is None:
            return "not measured"
        return "met" if self.ratio >= self.target else "missed"


def _load(results: Path, name: str) -> Results | None:
    path = results / name
    return json.loads(path.read_text()) if path.is_file() else None


def _zre_value(zre: Results | None, scenario: str, measure: str, who: str) -> float | None:
    """The median of one implementation's runs of one zre.json row."""
    if zre is None:
        return None
    for row in zre.get("rows", ()):
        if row["scenario"] == scenario and row["measure"] == measure:
            runs = row["values"].get(who) or []
            return float(statistics.median(runs)) if runs else None
    return None


def _floor(floor: Results | None, scenario: str, who: str) -> float | None:
    if floor is None or scenario not in floor or who not in floor[scenario]:
        return None
    return float(floor[scenario][who]["rate"])


def _low_latency(lowlat: Results | None) -> tuple[float | None, str, float | None]:
    """The best busy-polling trizre variant's median rate, and zyre's of the same run."""
    if lowlat is None:
        return None, "zyre", None
    runs = lowlat["runs"]
    polled = [
        statistics.median(row["rate"])
        for label, row in runs.items()
        if label.startswith("trizre busy_poll=") and not label.startswith("trizre busy_poll=0 ")
    ]
    zyre = runs.get("zyre", {}).get("rate")
    return (
        max(polled) if polled else None,
        "zyre",
        statistics.median(zyre) if zyre else None,
    )


def rows(results: Path) -> Iterator[Row]:
    """Every target row of issue 28, from the result files found in ``results``."""
    zre = _load(results, "zre.json")
    floor = _load(results, "trio_floor.json")
    titanic = _load(results, "titanic.json")
    audit = _load(results, "audit.json")
    yield Row(
        "WHISPER round trips/s vs the Trio floor",
        _floor(floor, "pingpong", "trizre"),
        "the Trio floor",
        _floor(floor, "pingpong", "trio floor"),
        0.9,
    )
    yield Row(
        "WHISPER round trips/s, low-latency mode (its best busy_poll), vs zyre",
        *_low_latency(_load(results, "lowlat.json")),
        1.0,
    )
    for k in (2, 5, 10):
        for where in ("processes", "nodes in 1 process"):
            scenario = f"SHOUT to {k} ({where})"
            yield Row(
                f"{scenario}, deliveries/s vs zyre",
                _zre_value(zre, scenario, "deliveries/s", "trizre"),
                "zyre",
                _zre_value(zre, scenario, "deliveries/s", "zyre"),
                1.2,
                ceiling=_zre_value(zre, scenario, "deliveries/s", "raw"),
            )
    flood: Callable[[str], float | None] = lambda who: _zre_value(  # noqa: E731
        zre, "flood 100,000", "received msg/s", who
    )
    yield Row("WHISPER flood, received/s vs zyre", flood("trizre"), "zyre", flood("zyre"), 1.5)
    yield Row(
        "services, pipelined, 4 workers, req/s vs the Trio floor's",
        _floor(floor, "services", "trizre"),
        "the Trio floor",
        _floor(floor, "services", "trio floor"),
        0.75,
    )
    yield Row(
        "Titanic end to end, completed requests/s, synchronous=FULL",
        None if titanic is None else float(titanic["completed_per_s"]),
        "",
        None,
        1000,
        "/s",
    )
    yield Row(
        "audit, 10 M lines, local mode, lines/s",
        None if audit is None else float(audit["events_per_second"]),
        "",
        None,
        150_000,
        "/s",
    )


def _figure(value: float | None) -> str:
    return NONE if value is None else f"{value:,.0f}"


def table(found: list[Row]) -> str:
    """The rows as a Markdown table (what docs/benchmarks.md shows)."""
    lines = [
        "| measure | trizre | divided by | ratio | target | status | raw pyzmq, same run |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in found:
        if row.divisor_name:
            divisor = f"{row.divisor_name}: {_figure(row.divisor)}"
            ratio = NONE if row.ratio is None else f"{row.ratio:.2f}{TIMES}"
            target = f"≥ {row.target:g}{TIMES}"
        else:
            divisor, ratio = "(an absolute target)", NONE
            target = f"≥ {row.target:,.0f}{row.unit}"
        ceiling = NONE
        if row.ceiling is not None:
            ceiling = _figure(row.ceiling)
            if row.ceiling_ratio is not None:
                ceiling += f" ({row.ceiling_ratio:.2f}{TIMES})"
        cells = (row.measure, _figure(row.trizre), divisor, ratio, target, row.status, ceiling)
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", type=Path, default=Path("benchmarks/results"))
    parser.add_argument("--json", type=Path, default=None, help="also write the rows here")
    args = parser.parse_args(argv)
    found = list(rows(args.results))
    print(table(found))
    if args.json is not None:
        records = [asdict(row) | {"ratio": row.ratio, "status": row.status} for row in found]
        args.json.write_text(json.dumps(records, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
