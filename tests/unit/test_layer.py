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


TESTS = HERE.parent


def imports_of_tests(path: Path) -> set[str]:
    """The test modules (``tests.<folder>.test_*``) a file imports."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [node.module]
        found.update(n for n in names if n.startswith("tests.") and ".test_" in n)
    return found


def test_no_test_module_imports_another() -> None:
    """Shared helpers live in tests/support, not in a test module others (benchmarks too) import."""
    importing = {
        str(path.relative_to(TESTS.parent)): sorted(imports_of_tests(path))
        for folder in (TESTS, TESTS.parent / "benchmarks", TESTS.parent / "examples")
        for path in sorted(folder.rglob("*.py"))
        if imports_of_tests(path)
    }
    assert importing == {}


def test_the_check_sees_a_test_module_imported(tmp_path: Path) -> None:
    bad = tmp_path / "test_bad.py"
    bad.write_text("from tests.unit.test_node_core import make\nimport tests.support.nodes\n")
    assert imports_of_tests(bad) == {"tests.unit.test_node_core"}
