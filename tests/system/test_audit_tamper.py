"""The audit catches tampered traces: each change to a clean trace set, one by one.

A clean set (a client, an idempotent server, a Binary Star pair) passes
with exit 0; then its files are edited as a damaged disk, a bug or a
tamperer would, and each edit must be caught with a clear message and the
exit code the command documents (1: the verdict failed; 2: nothing to
judge).  One local SparkSession serves every case (the command reuses it).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.audit_traces import Traces, rid
from tests.support.spark import require_java
from tests.system import test_audit

pytest.importorskip("pyspark")

from trizre.audit import cli

require_java()

from pyspark.sql import SparkSession  # noqa: E402

pytestmark = pytest.mark.spark

Edit = Callable[[Path], None]


spark = test_audit.spark  # the fixture: one local session for the module


def clean_traces(directory: Path) -> Path:
    """A client's requests served by the active server of a Binary Star pair (idempotent)."""
    tr = Traces()
    client = tr.node("client", start=0.0)
    primary, backup = tr.node("primary", start=0.0), tr.node("backup", start=0.0)
    tr.bstar(primary, 0.5, "PRIMARY", "ACTIVE", "PEER_BACKUP")
    tr.bstar(backup, 0.6, "BACKUP", "PASSIVE", "PEER_ACTIVE")
    for n in range(1, 6):
        tr.request(client, primary, n, float(n), idempotent=True)
    tr.line(client, "node-stop", 6.0)  # it stopped cleanly: what it lacks, it lost
    return tr.write(directory)


def _file(directory: Path, name: str) -> Path:
    (path,) = directory.glob(f"{name}-*.jsonl")
    return path


def _edit_lines(directory: Path, name: str, change: Callable[[list[str]], list[str]]) -> None:
    path = _file(directory, name)
    path.write_text("".join(change(path.read_text().splitlines(keepends=True))))


def _matching(lines: list[str], kind: str, n: int) -> int:
    return next(
        i
        for i, line in enumerate(lines)
        if json.loads(line)["kind"] == kind and json.loads(line).get("rid") == rid(n)
    )


def delete_a_reply(directory: Path) -> None:
    def change(lines: list[str]) -> list[str]:
        del lines[_matching(lines, "request-answered", 3)]
        return lines

    _edit_lines(directory, "client", change)


def duplicate_an_execution(directory: Path) -> None:
    def change(lines: list[str]) -> list[str]:
        i = _matching(lines, "request-executed", 2)
        return [*lines[: i + 1], lines[i], *lines[i + 1 :]]

    _edit_lines(directory, "primary", change)


def swap_two_events(directory: Path) -> None:
    """The client's send and answer of one request trade their times."""

    def change(lines: list[str]) -> list[str]:
        i, j = _matching(lines, "request-sent", 4), _matching(lines, "request-answered", 4)
        a, b = json.loads(lines[i]), json.loads(lines[j])
        for key in ("m", "t"):
            a[key], b[key] = b[key], a[key]
        lines[i], lines[j] = json.dumps(a) + "\n", json.dumps(b) + "\n"
        return lines

    _edit_lines(directory, "client", change)


def two_actives(directory: Path) -> None:
    """The backup is ACTIVE from 2 s to 4 s, while the primary still serves."""
    backup = json.loads(_file(directory, "backup").read_text().splitlines()[-1])
    backup.update(m=2.0, t=backup["t"] + 1.4, old_state="PASSIVE", state="ACTIVE")
    alive = {k: v for k, v in backup.items() if k in ("v", "node", "name")}
    alive.update(m=4.0, t=backup["t"] + 2.0, kind="node-stop")
    with _file(directory, "backup").open("a") as file:
        file.write(json.dumps(backup) + "\n" + json.dumps(alive) + "\n")


def cut_mid_line(directory: Path) -> None:
    path = _file(directory, "primary")
    text = path.read_text()
    path.write_text(text[: len(text) - 25])  # the last line loses its end


def unknown_schema_version(directory: Path) -> None:
    def change(lines: list[str]) -> list[str]:
        entry = json.loads(lines[-1])
        entry["v"] = 99
        return [*lines[:-1], json.dumps(entry) + "\n"]

    _edit_lines(directory, "primary", change)


def invalid_json(directory: Path) -> None:
    def change(lines: list[str]) -> list[str]:
        return [lines[0], "{this is not json\n", *lines[1:]]

    _edit_lines(directory, "client", change)


def audit(
    spark: SparkSession, directory: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> tuple[int, str]:
    assert spark is not None  # the command finds this session active and reuses it
    code = cli.main([str(directory), "--out", str(tmp_path / "report")])
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def test_the_clean_set_passes(
    spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, said = audit(spark, clean_traces(tmp_path / "traces"), tmp_path, capsys)
    assert code == 0, said
    assert "flags: none" in said and "0 with two" in said


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (delete_a_reply, "lost: 1"),
        (duplicate_an_execution, "duplicate execution: 1"),
        (swap_two_events, "out of order: 1"),
        (two_actives, "1 with two"),
        (cut_mid_line, "1 line(s) could not be judged (1 not JSON or cut short"),
        (unknown_schema_version, "(0 not JSON or cut short, 1 of another schema version"),
        (invalid_json, "1 line(s) could not be judged (1 not JSON or cut short"),
    ],
    ids=lambda value: getattr(value, "__name__", ""),
)
def test_each_tampering_fails_the_audit_with_a_message(
    spark: SparkSession,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    edit: Edit,
    message: str,
) -> None:
    directory = clean_traces(tmp_path / "traces")
    edit(directory)
    code, said = audit(spark, directory, tmp_path, capsys)
    assert code == cli.EXIT_FLAGGED, said
    assert message in said, said


@pytest.mark.parametrize(
    ("edit", "name", "line", "why"),
    [
        (cut_mid_line, "primary", -1, "not JSON or cut short"),
        (unknown_schema_version, "primary", -1, "of another schema version"),
        (invalid_json, "client", 2, "not JSON or cut short"),
    ],
    ids=lambda value: getattr(value, "__name__", ""),
)
def test_a_line_that_cannot_be_judged_is_named_by_file_and_line(
    spark: SparkSession,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    edit: Edit,
    name: str,
    line: int,
    why: str,
) -> None:
    """The operator is told where to look, and the page's headline says why it failed."""
    directory = clean_traces(tmp_path / "traces")
    edit(directory)
    path = _file(directory, name)
    number = line if line > 0 else len(path.read_text().splitlines())
    code, said = audit(spark, directory, tmp_path, capsys)
    assert code == cli.EXIT_FLAGGED, said
    where = f"{path.resolve()} line {number}: {why}"
    assert where in said, said
    html = (tmp_path / "report" / "report.html").read_text()
    assert "see the flags below" not in html
    assert "1 line(s) could not be judged (first: " in html and f"line {number}: {why}" in html


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda path: path.mkdir(), "no *.jsonl trace file"),
        (lambda path: None, "not a directory"),
    ],
    ids=["empty directory", "missing directory"],
)
def test_nothing_to_judge_exits_2(
    spark: SparkSession,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    make: Callable[[Path], None],
    message: str,
) -> None:
    make(tmp_path / "traces")
    code, said = audit(spark, tmp_path / "traces", tmp_path, capsys)
    assert code == cli.EXIT_USAGE
    assert message in said, said
