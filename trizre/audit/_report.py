"""Write the audit's outputs: ``summary.json`` and a self-contained ``report.html``.

The HTML page carries its CSS and its two plots (latency histogram, Binary
Star failover timeline) inline, as SVG drawn here: no JavaScript, no
plotting library, no network.  No pyspark import here either.
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Final

from ._summary import (
    REQUEST_COUNTS,
    BstarSummary,
    Flag,
    HistogramBin,
    LatencyStats,
    LatencySummary,
    Summary,
    failure_reasons,
    where_line,
)

SUMMARY_FILE: Final = "summary.json"
HTML_FILE: Final = "report.html"
REQUESTS_DIR: Final = "requests.parquet"

HISTOGRAM_BINS_PER_DECADE: Final = 10
"""As in :func:`trizre.audit._requests.latency_histogram`."""

_STATE_COLOURS: Final = {
    "ACTIVE": "#2e9d4e",
    "PASSIVE": "#9aa5b1",
    "PRIMARY": "#7fb2e5",
    "BACKUP": "#c6a8e8",
}
_OTHER_COLOUR: Final = "#e0c060"


def _finite(value: Any) -> Any:
    """*value* with every non-finite float replaced by None (JSON has no inf/NaN)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def write_summary(summary: Summary, out_dir: Path) -> Path:
    """Write ``summary.json`` (indented, keys in insertion order)."""
    path = out_dir / SUMMARY_FILE
    path.write_text(json.dumps(_finite(summary), indent=2, allow_nan=False) + "\n", "utf-8")
    return path


# --------------------------------------------------------------------------
# Formatting helpers


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _secs(value: float | None) -> str:
    """A duration, with a unit a human reads at a glance."""
    if value is None:
        return "-"
    a = abs(value)
    if a == 0:
        return "0 s"
    if a < 1e-3:
        return f"{value * 1e6:.0f} µs"
    if a < 1:
        return f"{value * 1e3:.3g} ms"
    return f"{value:.3f} s"


def _short(node: object) -> str:
    return str(node)[:8] if node is not None else "-"


def _table(headers: Sequence[str], rows: Iterable[Sequence[object]], cls: str = "") -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    klass = f' class="{cls}"' if cls else ""
    return f"<table{klass}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _nice_step(span: float, ticks: int) -> float:
    if span <= 0:
        return 1.0
    raw = span / ticks
    base = 10 ** math.floor(math.log10(raw))
    for mult in (1, 2, 5, 10):
        if base * mult >= raw:
            return float(base * mult)
    return float(base * 10)


# --------------------------------------------------------------------------
# SVG plots


def _decade(exponent: int) -> str:
    """A round power of ten of seconds: ``1 µs`` ... ``100 ms``, ``1 s``, ``10 s``."""
    units = ((0, "s"), (-3, "ms"), (-6, "µs"), (-9, "ns"))
    for shift, unit in units:
        if exponent >= shift:
            return f"{10 ** (exponent - shift):,} {unit}"
    return f"1e{exponent} s"


def latency_svg(histogram: Sequence[HistogramBin], latency: LatencySummary) -> str:
    """Bars of answered requests per log-spaced latency bin, with p50/p90/p99 marks.

    Both axes are logarithmic, so that a tail of a few slow requests shows.
    """
    counts = {b["bin"]: b["count"] for b in histogram if b["bin"] is not None}
    if not counts:
        return '<p class="muted">No answered request carries a latency.</p>'
    width, height, left, bottom, top = 760, 270, 72, 42, 18
    lo_bin, hi_bin = min(counts), max(counts)
    n = hi_bin - lo_bin + 1
    plot_w = width - left - 16
    plot_h = height - top - bottom
    bar_w = plot_w / n
    top_decade = max(1, math.ceil(math.log10(max(counts.values()) + 1)))

    def y_of(count: float) -> float:
        return top + plot_h - plot_h * math.log10(count + 1) / top_decade

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" '
        f'width="{width}" height="{height}" role="img" aria-label="latency histogram">',
    ]
    for k in range(top_decade + 1):  # horizontal grid: 1, 10, 100...
        y = y_of(10**k - 1) if k else y_of(0)
        label = f"{10**k:,}" if k else "0"
        parts.append(
            f'<line x1="{left}" y1="{y:.1f}" x2="{left + plot_w}" y2="{y:.1f}" stroke="#eee"/>'
            f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end" font-size="11">'
            f"{label}</text>"
        )
    for i in range(n):
        count = counts.get(lo_bin + i, 0)
        if not count:
            continue
        y = y_of(count)
        x = left + i * bar_w
        b = lo_bin + i
        parts.append(
            f'<rect x="{x + 0.5:.1f}" y="{y:.1f}" width="{max(bar_w - 1, 1):.1f}" '
            f'height="{top + plot_h - y:.1f}" fill="#4a78c2"><title>'
            f"{_e(_secs(10 ** (b / 10)))} - {_e(_secs(10 ** ((b + 1) / 10)))}: {count:,}"
            "</title></rect>"
        )
    parts.append(
        f'<line x1="{left}" y1="{top + plot_h}" x2="{left + plot_w}" y2="{top + plot_h}" '
        'stroke="#333"/>'
        f'<line x1="{left}" y1="{top}" x2="{left}" y2="{top + plot_h}" stroke="#333"/>'
    )
    for b in range(lo_bin, hi_bin + 2):  # decade ticks
        if b % HISTOGRAM_BINS_PER_DECADE == 0:
            x = left + (b - lo_bin) * bar_w
            parts.append(
                f'<line x1="{x:.1f}" y1="{top + plot_h}" x2="{x:.1f}" y2="{top + plot_h + 5}" '
                'stroke="#333"/>'
                f'<text x="{x:.1f}" y="{top + plot_h + 18}" text-anchor="middle" '
                f'font-size="11">{_e(_decade(b // HISTOGRAM_BINS_PER_DECADE))}</text>'
            )
    overall = latency["overall"]
    marks = (("p50", overall["p50"], "#2e9d4e"), ("p90", overall["p90"], "#e08a1e"))
    for row, (key, value, colour) in enumerate((*marks, ("p99", overall["p99"], "#c0392b"))):
        if value is None or value <= 0:
            continue
        pos = (math.log10(value) * HISTOGRAM_BINS_PER_DECADE - lo_bin) / n
        x = left + min(max(pos, 0.0), 1.0) * plot_w
        parts.append(
            f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{top + plot_h}" stroke="{colour}" '
            f'stroke-dasharray="4 3"/><text x="{x + 3:.1f}" y="{top + 10 + 12 * row}" '
            f'font-size="11" fill="{colour}">{key} {_e(_secs(value))}</text>'
        )
    parts.append(
        f'<text x="{left + plot_w / 2:.1f}" y="{height - 4}" text-anchor="middle" '
        'font-size="11">latency of the first answer (log scale, 10 bins per decade); '
        "requests (log scale)</text></svg>"
    )
    return "".join(parts)


def timeline_svg(bstar: BstarSummary, origin: float) -> str:
    """One row per Binary Star server, coloured by state; no-ACTIVE and
    dual-ACTIVE intervals shaded across all rows; failovers as dashed lines."""
    servers = bstar.get("servers") or []
    if not servers:
        return '<p class="muted">No Binary Star server in these traces.</p>'
    starts = [seg["start"] for s in servers for seg in s["segments"]]
    ends = [seg["end"] for s in servers for seg in s["segments"]]
    if (trace_end := bstar["trace_end"]) is not None:
        ends.append(trace_end)
    if not starts:
        return '<p class="muted">No Binary Star state recorded.</p>'
    t0, t1 = min(starts), max(ends)
    span = max(t1 - t0, 1e-9)
    row_h, left, right, top = 28, 210, 16, 18
    width = 960
    plot_w = width - left - right
    height = top + row_h * len(servers) + 54

    def x(ts: float) -> float:
        return float(left + (ts - t0) / span * plot_w)

    plot_bottom = top + row_h * len(servers)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" '
        f'width="{width}" height="{height}" role="img" aria-label="failover timeline">'
    ]
    for gap in bstar.get("no_active") or []:
        mid = (x(gap["start"]) + x(gap["end"])) / 2
        parts.append(  # a marker, so that a short gap on a long trace still shows
            f'<path d="M{mid - 5:.1f},{top - 14} L{mid + 5:.1f},{top - 14} L{mid:.1f},{top - 5} Z" '
            f'fill="#e74c3c"><title>no ACTIVE server for {_e(_secs(gap["duration"]))}</title>'
            "</path>"
        )
        parts.append(
            f'<rect x="{x(gap["start"]):.1f}" y="{top - 4}" '
            f'width="{max(x(gap["end"]) - x(gap["start"]), 1.5):.1f}" '
            f'height="{plot_bottom - top + 8}" fill="#e74c3c" opacity="0.25">'
            f"<title>no ACTIVE server for {_e(_secs(gap['duration']))}</title></rect>"
        )
    for dual in bstar.get("dual_active") or []:
        parts.append(
            f'<rect x="{x(dual["start"]):.1f}" y="{top - 4}" '
            f'width="{max(x(dual["end"]) - x(dual["start"]), 1.5):.1f}" '
            f'height="{plot_bottom - top + 8}" fill="#f39c12" opacity="0.35">'
            f"<title>two ACTIVE servers for {_e(_secs(dual['duration']))}</title></rect>"
        )
    for i, server in enumerate(servers):
        y = top + i * row_h
        label = server.get("name") or _short(server["node"])
        parts.append(
            f'<text x="{left - 8}" y="{y + row_h / 2 + 4:.1f}" text-anchor="end" '
            f'font-size="12">{_e(label)} ({_e(_short(server["node"]))})</text>'
        )
        for seg in server["segments"]:
            colour = _STATE_COLOURS.get(str(seg["state"]).upper(), _OTHER_COLOUR)
            w = max(x(seg["end"]) - x(seg["start"]), 1.0)
            parts.append(
                f'<rect x="{x(seg["start"]):.1f}" y="{y + 4}" width="{w:.1f}" '
                f'height="{row_h - 8}" fill="{colour}"><title>{_e(seg["state"])} '
                f"{_e(_secs(seg['start'] - origin))} → {_e(_secs(seg['end'] - origin))} "
                f"(ended by {_e(seg['end_reason'])})</title></rect>"
            )
    for fo in bstar.get("failovers") or []:
        fx = x(fo["at"])
        parts.append(
            f'<line x1="{fx:.1f}" y1="{top - 6}" x2="{fx:.1f}" y2="{plot_bottom + 4}" '
            f'stroke="#111" stroke-dasharray="5 3"><title>failover to '
            f"{_e(_short(fo['new']))}</title></line>"
        )
    step = _nice_step(span, 8)
    tick = math.ceil((t0 - origin) / step) * step
    while tick + origin <= t1 + 1e-12:
        tx = x(tick + origin)
        parts.append(
            f'<line x1="{tx:.1f}" y1="{plot_bottom + 4}" x2="{tx:.1f}" y2="{plot_bottom + 9}" '
            f'stroke="#333"/><text x="{tx:.1f}" y="{plot_bottom + 22}" text-anchor="middle" '
            f'font-size="11">{tick:g} s</text>'
        )
        tick += step
    legend_y = plot_bottom + 40
    lx = left
    for name, colour in (
        *_STATE_COLOURS.items(),
        ("no ACTIVE", "#f5b7b1"),
        ("2 ACTIVE", "#f8c471"),
    ):
        parts.append(
            f'<rect x="{lx}" y="{legend_y - 9}" width="12" height="10" fill="{colour}"/>'
            f'<text x="{lx + 16}" y="{legend_y}" font-size="11">{_e(name)}</text>'
        )
        lx += 95
    parts.append("</svg>")
    return "".join(parts)


# --------------------------------------------------------------------------
# The page

_CSS: Final = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 980px; color: #222; }
h1 { font-size: 1.6em; } h2 { margin-top: 1.8em; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; margin: .6em 0; }
th, td { border: 1px solid #ddd; padding: 3px 8px; text-align: left; vertical-align: top; }
th { background: #f4f4f4; } td.num, th.num { text-align: right; }
.ok { color: #1e7e34; font-weight: bold; } .bad { color: #b0281a; font-weight: bold; }
.muted { color: #777; } code { font-size: 12px; }
"""


def _flag_rows(flags: dict[str, Flag]) -> list[list[str]]:
    rows = []
    for name, flag in flags.items():
        count = int(flag["count"])
        cls = "bad" if count and flag["fails_audit"] else ("" if count else "muted")
        sample = ", ".join(
            f"<code>{_e(_short(r['client']))}/{_e(r['rid'])}</code>" for r in flag["requests"][:10]
        )
        if count > 10:
            sample += " …"
        verdict = "fails the audit" if flag["fails_audit"] else "allowed"
        rows.append(
            [f'<span class="{cls}">{_e(name)}</span>', f"{count:,}", verdict, sample or "-"]
        )
    return rows


def _latency_rows(stats: LatencyStats, label: str) -> list[str]:
    return [
        _e(label),
        f"{int(stats['count']):,}",
        _secs(stats.get("p50")),
        _secs(stats.get("p90")),
        _secs(stats.get("p99")),
        _secs(stats.get("max")),
    ]


def render_html(summary: Summary, exit_code: int) -> str:
    """The whole report page."""
    inp = summary["input"]
    origin = float(inp.get("start") or 0.0)
    req = summary.get("requests", {})
    counts = req.get("counts", {})
    verdict = (
        '<span class="ok">PASS</span> — nothing lost, duplicated, double-replied or out of order'
        if exit_code == 0
        else '<span class="bad">FAIL</span> — ' + _e("; ".join(failure_reasons(summary)))
    )
    out = [
        "<!DOCTYPE html><html lang=en><head><meta charset=utf-8>",
        "<title>trizre audit</title>",
        f"<style>{_CSS}</style></head><body>",
        "<h1>trizre audit</h1>",
        f"<p>{verdict} (exit code {exit_code}).</p>",
        "<h2>Input</h2>",
        _table(
            ["", ""],
            [
                ["traces", f"<code>{_e(inp['trace_path'])}</code>"],
                ["lines", f"{inp['lines']:,} ({inp['valid_lines']:,} valid)"],
                [
                    "skipped",
                    f"{inp['malformed_lines']:,} malformed, {inp['other_version_lines']:,} "
                    f"other schema version, {inp['incomplete_lines']:,} incomplete"
                    + "".join(
                        f"<br><code>{_e(where_line(line))}</code>"
                        for line in inp.get("unjudged") or []
                    ),
                ],
                ["nodes", f"{inp['nodes']:,}"],
                [
                    "clock",
                    f"<code>{_e(inp['clock'])}</code>; times below are seconds since the "
                    "first line",
                ],
                [
                    "span",
                    _secs(
                        inp["end"] - inp["start"]
                        if inp["end"] is not None and inp["start"] is not None
                        else None
                    ),
                ],
            ],
        ),
    ]
    if counts:
        out += [
            "<h2>Requests</h2>",
            _table(
                list(REQUEST_COUNTS.values()),
                [[f"{counts[key]:,}" for key in REQUEST_COUNTS]],
            ),
            _table(
                ["flag", "requests", "verdict", "first offenders (client/rid)"],
                _flag_rows(req["flags"]),
            ),
            "<h3>Retries per request</h3>",
            _table(
                ["retries", "requests"],
                [[_e(k), f"{v:,}"] for k, v in req.get("retries", {}).items()],
            ),
        ]
    lat = summary.get("latency")
    if lat:
        rows = [_latency_rows(lat["overall"], "all")]
        rows += [_latency_rows(s, f"pattern {k}") for k, s in lat["by_pattern"].items()]
        rows += [
            _latency_rows(s, f"service {k!r}" if k else "service '' (direct)")
            for k, s in lat["by_service"].items()
        ]
        out += [
            "<h2>Latency (first answer of each request)</h2>",
            _table(["", "answered", "p50", "p90", "p99", "max"], rows),
            latency_svg(lat.get("histogram", []), lat),
        ]
    bstar = summary.get("bstar")
    if bstar is not None:
        out += ["<h2>Binary Star</h2>", timeline_svg(bstar, origin)]
        if bstar.get("servers"):
            out.append(
                _table(
                    ["interval", "from", "to", "duration", "detail"],
                    [
                        [
                            '<span class="bad">no ACTIVE server</span>',
                            _secs(g["start"] - origin),
                            _secs(g["end"] - origin),
                            _secs(g["duration"]),
                            _e(
                                f"after {_short(g['after'])} ended ({g['cause']})"
                                + (
                                    "; runs to the end of the trace"
                                    if g["ends_at_trace_end"]
                                    else ""
                                )
                            ),
                        ]
                        for g in bstar["no_active"]
                    ]
                    + [
                        [
                            '<span class="bad">two ACTIVE servers</span>',
                            _secs(d["start"] - origin),
                            _secs(d["end"] - origin),
                            _secs(d["duration"]),
                            _e(", ".join(_short(s) for s in d["servers"])),
                        ]
                        for d in bstar["dual_active"]
                    ],
                )
            )
            out.append("<h3>Failovers: client-visible outage</h3>")
            out.append(
                _table(
                    [
                        "at",
                        "old → new",
                        "clients",
                        "p50 gap",
                        "p90 gap",
                        "max gap",
                        "first answer from new: p50 / max latency",
                    ],
                    [
                        [
                            _secs(f["at"] - origin),
                            f"{_e(_short(f['old']))} → {_e(_short(f['new']))}",
                            f"{f['clients_measured']:,}",
                            _secs(f["p50_gap"]),
                            _secs(f["p90_gap"]),
                            _secs(f["max_gap"]),
                            f"{_secs(f['p50_first_new_latency'])} / "
                            f"{_secs(f['max_first_new_latency'])}",
                        ]
                        for f in bstar["failovers"]
                    ],
                )
                if bstar["failovers"]
                else '<p class="muted">No failover.</p>'
            )
    pres = summary.get("presence")
    if pres is not None:
        out += [
            "<h2>Presence</h2>",
            f"<p>{pres['enters']:,} enters, {pres['exits']:,} exits.</p>",
            _table(
                ["observer", "enters", "exits"],
                [
                    [
                        f"{_e(o['name'] or '')} <code>{_e(_short(o['node']))}</code>",
                        f"{o['enters']:,}",
                        f"{o['exits']:,}",
                    ]
                    for o in pres["observers"][:50]
                ],
            ),
        ]
        if pres["silence_by_reason"]:
            out += [
                "<h3>Silence before exit (last line heard from the peer → exit)</h3>",
                _table(
                    ["reason", "exits", "measured", "p50", "p90", "max"],
                    [
                        [
                            _e(k),
                            f"{v['exits']:,}",
                            f"{v['measured']:,}",
                            _secs(v["p50"]),
                            _secs(v["p90"]),
                            _secs(v["max"]),
                        ]
                        for k, v in pres["silence_by_reason"].items()
                    ],
                ),
                _table(
                    ["observer", "peer", "reason", "exit at", "silence"],
                    [
                        [
                            f"{_e(e['observer_name'] or '')} "
                            f"<code>{_e(_short(e['observer']))}</code>",
                            f"{_e(e['peer_name'] or '')} <code>{_e(_short(e['peer']))}</code>",
                            _e(e["reason"]),
                            _secs(e["exit_ts"] - origin if e["exit_ts"] is not None else None),
                            _secs(e["silence"]),
                        ]
                        for e in pres["exits_listed"][:20]
                    ],
                ),
            ]
    out.append(
        '<p class="muted">Generated by <code>python -m trizre.audit</code>; '
        "machine-readable figures in summary.json, one row per request in "
        "requests.parquet/.</p></body></html>"
    )
    return "\n".join(out)


def write_html(summary: Summary, out_dir: Path, exit_code: int) -> Path:
    """Write ``report.html``."""
    path = out_dir / HTML_FILE
    path.write_text(render_html(_finite(summary), exit_code), "utf-8")
    return path
