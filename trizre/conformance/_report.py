"""The suite's reports: a terminal table, JSON, and a self-contained HTML page."""

from __future__ import annotations

import html
import json
import textwrap
from collections.abc import Sequence
from typing import Any

from ._run import Report

_MARK = {"pass": "PASS", "fail": "FAIL", "n/a": "n/a", "error": "ERROR"}


def table(report: Report, width: int = 100) -> str:
    """The results as a plain-text table, with the details of each failure below it."""
    lines = [
        f"ZRE conformance: {report.target} on {report.interface}, beacon port "
        f"{report.beacon_port}, target {report.target_uuid}",
        "",
        f"{'result':6}  {'case':22}  clause",
        f"{'-' * 6}  {'-' * 22}  {'-' * 40}",
    ]
    for r in report.results:
        lines.append(f"{_MARK[r.status]:6}  {r.id:22}  {r.clause}"[:width])
    details = [r for r in report.results if r.status in ("fail", "error", "n/a")]
    if details:
        lines.append("")
    for r in details:
        lines.append(f"{_MARK[r.status]} {r.id}: {r.title}")
        if r.status == "fail":
            for label, text in (("sent", r.sent), ("expected", r.expected), ("got", r.got)):
                lines += textwrap.wrap(
                    text,
                    width,
                    initial_indent=f"    {label + ':':10}",
                    subsequent_indent=" " * 14,
                ) or [f"    {label}:"]
        else:
            lines.append(f"    {r.reason}")
    if report.restarts:
        lines += ["", "the target died and was started again after: " + ", ".join(report.restarts)]
    counts = report.counts()
    lines += [
        "",
        f"{counts['pass']} passed, {counts['fail']} failed, {counts['n/a']} not applicable, "
        f"{counts['error']} errors in {report.seconds:.1f} s",
    ]
    return "\n".join(lines)


def as_json(report: Report) -> str:
    """The report as one JSON document (see ``docs/conformance.md`` for its fields)."""
    return json.dumps(report.as_json(), indent=2, ensure_ascii=False)


_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em; }
table { border-collapse: collapse; }
td, th { border: 1px solid #ccc; padding: 0.3em 0.6em; text-align: left; vertical-align: top; }
.pass { background: #dfd; } .fail { background: #fdd; } .error { background: #fcb; }
.na { background: #eee; color: #555; }
code { font-size: 90%; }
"""


def as_html(report: Report) -> str:
    """A self-contained HTML page: one row per case, failures with what was sent and got."""
    e = html.escape
    rows = []
    for r in report.results:
        css = "na" if r.status == "n/a" else r.status
        if r.status == "fail":
            detail = (
                f"<b>sent</b> {e(r.sent)}<br><b>expected</b> {e(r.expected)}"
                f"<br><b>got</b> {e(r.got)}"
            )
        else:
            detail = e(r.reason)
        rows.append(
            f'<tr class="{css}"><td>{e(_MARK[r.status])}</td><td><code>{e(r.id)}</code></td>'
            f"<td>{e(r.title)}</td><td>{e(r.clause)}</td><td>{detail}</td></tr>"
        )
    counts = report.counts()
    return (
        "<!doctype html>\n<html><head><meta charset='utf-8'>"
        f"<title>ZRE conformance: {e(report.target)}</title><style>{_STYLE}</style></head><body>"
        f"<h1>ZRE conformance: {e(report.target)}</h1>"
        f"<p>Interface {e(report.interface)}, beacon port {report.beacon_port}, target UUID "
        f"<code>{e(report.target_uuid)}</code>. {counts['pass']} passed, {counts['fail']} failed, "
        f"{counts['n/a']} not applicable, {counts['error']} errors in {report.seconds:.1f} s.</p>"
        + (
            f"<p>The target died and was started again after: {e(', '.join(report.restarts))}.</p>"
            if report.restarts
            else ""
        )
        + "<table><tr><th>result</th><th>case</th><th>checks</th><th>clause</th>"
        + "<th>details</th></tr>"
        + "\n".join(rows)
        + "</table></body></html>\n"
    )


def matrix(reports: Sequence[dict[str, Any]]) -> str:
    """A Markdown table: one row per case, one column per ``--json`` report (named by target).

    Raises ``KeyError`` for a document that is not such a report.
    """
    names = [str(r["target"]) for r in reports]
    cases: dict[str, str] = {}
    cells: dict[tuple[str, int], str] = {}
    for column, report in enumerate(reports):
        for result in report["results"]:
            cases.setdefault(result["id"], result["clause"])
            cells[result["id"], column] = _MARK[result["status"]]
    lines = [
        "| case | " + " | ".join(names) + " | clause |",
        "|---|" + "---|" * len(names) + "---|",
    ]
    for case_id, clause in cases.items():
        row = [cells.get((case_id, column), "") for column in range(len(names))]
        lines.append(f"| `{case_id}` | " + " | ".join(row) + f" | {clause} |")
    return "\n".join(lines)
