"""Plots for docs/benchmarks.md, drawn from make bench's JSON results.

    python benchmarks/plots.py [--results benchmarks/results] [--out docs/img]

``make bench`` runs it last, so the plots always show the run whose tables
the page holds; the docs build only reads the SVG files it writes (it never
runs a benchmark).  Each plot says under it which command measured what,
when, on which machine.  A result file that is missing skips its plot,
saying so.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

import matplotlib
import matplotlib.pyplot as plt

matplotlib.use("svg")  # no display needed
# Text stays text (smaller, searchable), and a file changes only when its plot does.
matplotlib.rcParams.update({"svg.fonttype": "none", "svg.hashsalt": "trizre"})

IMPLEMENTATIONS = ("trizre", "zyre", "pyre", "raw")
COLOURS = {"trizre": "#3f51b5", "zyre": "#e07b39", "pyre": "#7cb342", "raw": "#9e9e9e"}
LABELS = {"trizre": "trizre", "zyre": "zyre (C)", "pyre": "pyre", "raw": "raw pyzmq"}

# (scenario, measure, short label) of bench_zre.py's rows, in the plot's order.
THROUGHPUT = [
    ("flood 100,000", "received msg/s", "WHISPER flood"),
    ("SHOUT to 2 (processes)", "deliveries/s", "SHOUT to 2\nprocesses"),
    ("SHOUT to 5 (processes)", "deliveries/s", "SHOUT to 5\nprocesses"),
    ("SHOUT to 10 (processes)", "deliveries/s", "SHOUT to 10\nprocesses"),
    ("SHOUT to 2 (nodes in 1 process)", "deliveries/s", "SHOUT to 2\nnodes, 1 process"),
    ("SHOUT to 10 (nodes in 1 process)", "deliveries/s", "SHOUT to 10\nnodes, 1 process"),
]


def _caption(result: dict[str, Any], what: str) -> str:
    """Which command measured it, when and where (as far as the result file says)."""
    when = str(result.get("date") or "").replace("T", " ")
    where = ", ".join(
        part
        for part in (
            f"{when} UTC" if when else "",
            f"{result['cores']} cores" if result.get("cores") else "",
            f"Python {result['python']}" if result.get("python") else "",
        )
        if part
    )
    return f"{what}\n{result.get('command', '')}" + (f"; {where}" if where else "")


def zre_throughput(result: dict[str, Any], out: Path) -> None:
    """Grouped bars: messages a second per scenario, each implementation beside trizre."""
    rows = {(r["scenario"], r["measure"]): r["values"] for r in result["rows"]}
    present = [t for t in THROUGHPUT if t[:2] in rows]
    fig, ax = plt.subplots(figsize=(9, 4.2))
    width = 0.8 / len(IMPLEMENTATIONS)
    for i, name in enumerate(IMPLEMENTATIONS):
        xs, medians, low, high = [], [], [], []
        for x, (scenario, measure, _) in enumerate(present):
            runs = [v for v in rows[(scenario, measure)].get(name, []) if v is not None]
            if not runs:
                continue
            median = statistics.median(runs)
            xs.append(x + (i - (len(IMPLEMENTATIONS) - 1) / 2) * width)
            medians.append(median / 1000)
            low.append((median - min(runs)) / 1000)
            high.append((max(runs) - median) / 1000)
        if xs:
            ax.bar(
                xs,
                medians,
                width,
                yerr=[low, high],
                capsize=2,
                label=LABELS[name],
                color=COLOURS[name],
            )
    ax.set_xticks(range(len(present)), [label for _, _, label in present], fontsize=8)
    ax.set_ylabel("thousand messages/s (higher is better)")
    ax.legend(fontsize=8, ncols=4, loc="upper right")
    ax.set_title("ZRE throughput, veth between namespaces, 100 B messages", fontsize=10)
    what = "median of the runs, bars: min to max"
    fig.text(0.01, 0.01, _caption(result, what), fontsize=6.5, color="#555")
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    fig.savefig(out, metadata={"Date": None})
    plt.close(fig)


def trio_floor(result: dict[str, Any], out: Path) -> None:
    """Round trips and pipelined requests: raw pyzmq, the least Trio program, trizre."""
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.4))
    names = ("raw", "trio floor", "trizre")
    colours = (COLOURS["raw"], "#26a69a", COLOURS["trizre"])
    for ax, key, title in zip(
        axes,
        ("pingpong", "services"),
        ("WHISPER round trips/s", "services, pipelined, req/s"),
        strict=True,
    ):
        figures = result[key]
        rates = [figures[n]["rate"] / 1000 for n in names]
        bars = ax.bar(names, rates, color=colours)
        for bar, name in zip(bars, names, strict=True):
            ratio = figures[name]["vs_raw"]
            ax.annotate(
                f"{ratio:.2f}x raw",
                (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                ha="center",
                va="bottom",
                fontsize=8,
            )
        ax.set_title(title, fontsize=10)
        ax.set_ylabel("thousand/s")
    info = {"command": "benchmarks/trio_floor.py", **result}
    what = f"loopback, median of {result.get('repeat')} runs, ratios to raw pyzmq"
    fig.text(0.01, 0.01, _caption(info, what), fontsize=6.5, color="#555")
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    fig.savefig(out, metadata={"Date": None})
    plt.close(fig)


SCALE_SERIES = (
    ("trizre", "trizre", COLOURS["trizre"], "-"),
    ("trizre-unwatched", "trizre, watch_links=False", COLOURS["trizre"], "--"),
    ("zyre", "zyre (C), a node a process", COLOURS["zyre"], "-"),
)


def scale_curve(result: dict[str, Any], out: Path) -> None:
    """The cost of a full mesh as it grows: memory per link, idle CPU, time to mesh."""
    fig, axes = plt.subplots(1, 3, figsize=(10, 3.4))
    panels = (
        ("rss_kb_per_added_link", "RSS per link, kB"),
        ("idle_cpu_percent", "idle CPU, % of a core"),
        ("time_to_mesh_s", "time to a full mesh, s"),
    )
    for ax, (key, title) in zip(axes, panels, strict=True):
        for impl, label, colour, style in SCALE_SERIES:
            points = [
                (row["nodes"], row[impl][key])
                for row in result["curve"]
                if isinstance(row.get(impl), dict) and row[impl].get(key) is not None
            ]
            if points:
                xs, ys = zip(*points, strict=True)
                ax.plot(xs, ys, style, marker="o", color=colour, label=label)
        ax.set_xscale("log")
        ax.minorticks_off()
        sizes = sorted({row["nodes"] for row in result["curve"]})
        ax.set_xticks(sizes, [str(n) for n in sizes])
        ax.set_xlabel("nodes")
        ax.set_title(title, fontsize=10)
    axes[0].legend(fontsize=7)
    info = {"command": "benchmarks/scale_curve.py", **result}
    what = "every node linked to every other, trizre's nodes spread over processes"
    fig.text(0.01, 0.01, _caption(info, what), fontsize=6.5, color="#555")
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    fig.savefig(out, metadata={"Date": None})
    plt.close(fig)


PLOTS = {
    "zre.json": ("bench-zre-throughput.svg", zre_throughput),
    "trio_floor.json": ("bench-trio-floor.svg", trio_floor),
    "scale_curve.json": ("bench-scale-curve.svg", scale_curve),
    # The same curve once the link watch moved to each node's inbox (issue 28).
    "scale_curve_inboxwatch.json": ("bench-scale-curve-inboxwatch.svg", scale_curve),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=Path("benchmarks/results"))
    parser.add_argument("--out", type=Path, default=Path("docs/img"))
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for source, (target, draw) in PLOTS.items():
        path = args.results / source
        if not path.exists():
            print(f"plots: no {path}: {target} not drawn", file=sys.stderr)
            continue
        draw(json.loads(path.read_text()), args.out / target)
        print(f"plots: {args.out / target} from {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
