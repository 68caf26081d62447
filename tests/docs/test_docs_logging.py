"""The logging table of docs/operations.md names every logger and every level the code uses.

The code is read, not run: each module's ``name = logging.getLogger("...")``
and the calls on it (``.debug`` to ``.exception``, which logs at ERROR), and
the ``logging.LEVEL`` constants a module hands to a helper that logs for it
(the node's rate-limited ``log.log(level, ...)``). A logger or a level
added without a line in the table fails here.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LEVELS = {
    "debug": "DEBUG",
    "info": "INFO",
    "warning": "WARNING",
    "error": "ERROR",
    "exception": "ERROR",
    "critical": "CRITICAL",
}


def logged_in_code() -> dict[str, set[str]]:
    """Every logger name in trizre/, with the levels its module logs at."""
    found: dict[str, set[str]] = {}
    for path in sorted((ROOT / "trizre").rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        loggers: dict[str, str] = {}  # variable -> logger name
        for node in tree.body:
            if (
                isinstance(node, ast.Assign)
                and isinstance(node.value, ast.Call)
                and ast.unparse(node.value.func) == "logging.getLogger"
            ):
                (target,) = node.targets
                assert isinstance(target, ast.Name), path
                (arg,) = node.value.args
                assert isinstance(arg, ast.Constant) and isinstance(arg.value, str), path
                loggers[target.id] = arg.value
                found.setdefault(arg.value, set())
        if not loggers:
            continue
        assert len(set(loggers.values())) == 1, f"{path}: one logger per module"
        name = next(iter(loggers.values()))
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id in loggers
                and node.func.attr in LEVELS
            ):
                found[name].add(LEVELS[node.func.attr])
            # logging.WARNING and the like, passed to whatever logs (log.log, a helper).
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id == "logging"
                and node.attr in LEVELS.values()
            ):
                found[name].add(node.attr)
    return found


def documented() -> dict[str, set[str]]:
    """The rows of the table under "## Logging" in docs/operations.md."""
    text = (ROOT / "docs" / "operations.md").read_text()
    section = text.split("\n## Logging\n", 1)[1].split("\n## ", 1)[0]
    table: dict[str, set[str]] = {}
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) < 3 or not cells[0].startswith("`"):
            continue
        levels = set(re.findall(r"\b[A-Z]{4,}\b", cells[1]))
        assert levels <= set(LEVELS.values()), line
        for name in re.findall(r"`([\w.]+)`", cells[0]):
            table.setdefault(name, set()).update(levels)
    return table


def test_every_logger_and_level_in_the_code_is_in_the_table() -> None:
    code, docs = logged_in_code(), documented()
    assert "trizre.node" in code and "DEBUG" in code["trizre.node"]  # the reading works
    missing = {
        name: sorted(levels - docs.get(name, set()))
        for name, levels in code.items()
        if name not in docs or levels - docs[name]
    }
    assert not missing, f"docs/operations.md does not say what these log: {missing}"


def test_the_table_says_nothing_the_code_does_not_log() -> None:
    code, docs = logged_in_code(), documented()
    assert set(docs) <= set(code), set(docs) - set(code)
    # hypercorn logs through trizre.cli.web: its levels are hypercorn's, not in our code.
    stale = {
        name: sorted(levels - code[name])
        for name, levels in docs.items()
        if name != "trizre.cli.web" and levels - code[name]
    }
    assert not stale, f"docs/operations.md says these log at levels they never use: {stale}"
