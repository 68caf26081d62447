"""tests/unit holds what runs with no event loop and no socket: keep it so."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
FORBIDDEN = {"trio", "trio_util", "zmq", "socket", "subprocess", "pytest_trio"}


def imported(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module.split(".")[0])
    return found


@pytest.mark.parametrize("path", sorted(HERE.glob("test_*.py")), ids=lambda p: p.name)
def test_a_unit_test_imports_no_event_loop_and_no_socket(path: Path) -> None:
    assert not imported(path) & FORBIDDEN, f"{path.name} belongs in tests/node or tests/transport"


def test_the_check_sees_a_forbidden_import(tmp_path: Path) -> None:
    bad = tmp_path / "test_bad.py"
    bad.write_text("import trio\nfrom zmq import Context\n")
    assert imported(bad) & FORBIDDEN == {"trio", "zmq"}
