"""``trio.lowlevel`` is used in two places only: the socket layer and trizre._concurrency.

Everything else waits, wakes and queues through trizre._concurrency's
primitives, which are tested by themselves (tests/node/test_concurrency.py).
Read from the source, without importing it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

TRIZRE = Path(__file__).resolve().parents[2] / "trizre"

ALLOWED = {
    "_concurrency.py": "the primitives themselves",
    "transport/_zsock.py": "the socket layer: waits on libzmq's file descriptor",
    "conformance/_agent.py": "an agent process with its pipes (trio.lowlevel.open_process)",
}
# Still on trio.lowlevel until they are switched to trizre._concurrency
# (issue 27 section 5); remove each once it no longer needs it.
PENDING: set[str] = set()


def uses_lowlevel(source: str) -> bool:
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Attribute)
            and node.attr == "lowlevel"
            and isinstance(node.value, ast.Name)
            and node.value.id == "trio"
        ):
            return True
        if isinstance(node, ast.Import) and any(
            alias.name == "trio.lowlevel" for alias in node.names
        ):
            return True
        if isinstance(node, ast.ImportFrom) and (
            node.module == "trio.lowlevel"
            or (node.module == "trio" and any(alias.name == "lowlevel" for alias in node.names))
        ):
            return True
    return False


def modules() -> list[str]:
    return sorted(str(path.relative_to(TRIZRE)) for path in TRIZRE.rglob("*.py"))


@pytest.mark.parametrize("module", modules())
def test_trio_lowlevel_only_where_allowed(module: str) -> None:
    used = uses_lowlevel((TRIZRE / module).read_text())
    if module in PENDING:
        assert used, f"{module} no longer uses trio.lowlevel: remove it from PENDING"
    elif module not in ALLOWED:
        assert not used, f"{module} uses trio.lowlevel: use trizre._concurrency instead"


@pytest.mark.parametrize(
    "source",
    [
        "import trio\nawait trio.lowlevel.checkpoint()",
        "import trio.lowlevel",
        "from trio.lowlevel import ParkingLot",
        "from trio import lowlevel",
    ],
)
def test_the_check_sees_each_way_of_reaching_trio_lowlevel(source: str) -> None:
    assert uses_lowlevel(source)


def test_the_check_passes_code_without_it() -> None:
    assert not uses_lowlevel("import trio\nawait trio.sleep(0)\nlowlevel = 1\n")
