"""Every ``trizre ...`` command line shown in the docs parses with the real command's parser.

Shell blocks are not run (they would need a network and a terminal), but a
command the docs show with an option that does not exist, or a subcommand
that was renamed, fails here: in ``sh`` blocks every line that starts
with ``trizre`` or ``python -m trizre``, in ``text`` blocks (transcripts,
diagrams) those after a ``$`` prompt. ``[...]`` in a line is an optional
part, as in a synopsis, and is left out; a ``# comment`` is dropped.
"""

from __future__ import annotations

import re
import shlex

import pytest

from tests.support.doc_snippets import ROOT, SOURCES
from trizre.audit.cli import _parser as audit_parser
from trizre.cli import build_parser

_FENCE = re.compile(r"^```(sh|text)\n(.*?)^```", re.S | re.M)


def command_lines() -> list[tuple[str, str]]:
    found = []
    for pattern in SOURCES:
        for path in sorted(ROOT.glob(pattern)):
            text = path.read_text()
            for block in _FENCE.finditer(text):
                for offset, line in enumerate(block[2].splitlines()):
                    if block[1] == "text" and not line.startswith("$ "):
                        continue
                    command = line.removeprefix("$ ").strip()
                    if command.startswith(("trizre ", "python -m trizre ")):
                        where = text.count("\n", 0, block.start(2)) + offset + 1
                        found.append((f"{path.relative_to(ROOT)}:{where}", command))
    return found


COMMANDS = command_lines()


def test_the_docs_show_commands() -> None:
    assert len(COMMANDS) >= 8
    assert any("mdp-bridge" in line for _, line in COMMANDS)


@pytest.mark.parametrize(("where", "line"), COMMANDS, ids=[where for where, _ in COMMANDS])
def test_command_line_parses(where: str, line: str) -> None:
    words = shlex.split(re.sub(r"\[[^\]]*\]", "", line), comments=True)
    words = words[3:] if words[:3] == ["python", "-m", "trizre"] else words[1:]
    if words[0] == "audit":
        audit_parser().parse_args(words[1:])
        return
    build_parser(words[0]).parse_args(words)


_MAKE = re.compile(r"(?:^|`)make ([a-z][a-z0-9-]*)", re.M)
_TARGET = re.compile(r"^([a-z][a-z0-9-]*):", re.M)


def test_every_make_target_the_docs_name_exists() -> None:
    """A stranger types what the docs say: each ``make X`` shown is a Makefile target."""
    targets = set(_TARGET.findall((ROOT / "Makefile").read_text()))
    named = {
        (f"{path.relative_to(ROOT)}", target)
        for pattern in SOURCES
        for path in sorted(ROOT.glob(pattern))
        for target in _MAKE.findall(path.read_text())
    }
    assert len(named) >= 10  # the docs do name make targets: the scan finds them
    assert sorted(where for where in named if where[1] not in targets) == []
