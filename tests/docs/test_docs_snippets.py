"""Every ```python block in README.md, docs/ and patterns/ runs, on loopback, under the guard.

Blocks are collected by ``tests/support/doc_snippets.py``; each is a whole program,
run as a reader would paste it into a file, in a child process in a fresh
directory, and must exit 0 within its time.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import trizre
from tests.support.doc_snippets import HARNESS_COMMENT, ROOT, SOURCES, Snippet, snippets

SNIPPETS = snippets()
GUARDED = [sys.executable, str(ROOT / "tests" / "support" / "guarded_snippet.py")]


def test_the_docs_have_snippets_and_name_loopback() -> None:
    assert len(SNIPPETS) >= 10
    for snippet in SNIPPETS:
        if "open_node(" in snippet.code:
            assert 'interface="lo"' in snippet.code or 'discovery="gossip"' in snippet.code, (
                f'{snippet.name}: a node in the docs must say interface="lo" (or explain)'
            )


def test_every_snippet_is_a_whole_program() -> None:
    """No harness and no top-level await: what is shown runs when pasted into a file."""
    for pattern in SOURCES:
        for path in sorted(ROOT.glob(pattern)):
            assert not HARNESS_COMMENT.search(path.read_text()), f"{path}: a snippet harness"
    for snippet in SNIPPETS:
        compile(snippet.code, snippet.name, "exec")  # a top-level await is a SyntaxError


# Fence labels the docs use; a new one is a decision (is it Python? then it runs).
NOT_PYTHON = {"sh", "text", "json", "mermaid", ""}


def test_no_python_escapes_the_collector() -> None:
    """A block labelled py, python3 or pycon, or indented in a list, would not run: refused."""
    collected: dict[str, int] = {}
    for snippet in SNIPPETS:
        collected[snippet.path] = collected.get(snippet.path, 0) + 1
    for pattern in SOURCES:
        for path in sorted(ROOT.glob(pattern)):
            name = str(path.relative_to(ROOT))
            fences = re.findall(r"^([ \t]*)```(.*)$", path.read_text(), re.M)
            openings = fences[::2]  # fences alternate: opening, closing
            labels = {label.strip() for _, label in openings}
            assert labels <= NOT_PYTHON | {"python"}, f"{name}: fence labels {labels}"
            python = [indent for indent, label in openings if label.strip() == "python"]
            assert not any(python), f"{name}: an indented python block is not collected"
            assert len(python) == collected.get(name, 0), name


@pytest.mark.parametrize("snippet", SNIPPETS, ids=[s.name for s in SNIPPETS])
def test_snippet_runs(snippet: Snippet, tmp_path: Path) -> None:
    # Keys for the recipes that load them (docs/discovery.md).
    cert = trizre.Certificate.generate()
    (tmp_path / "keys" / "allowed").mkdir(parents=True)
    cert.save(tmp_path / "keys" / "node.key")
    cert.public_only().save(tmp_path / "keys" / "allowed" / "node.key")
    trizre.Certificate.generate().public_only().save(tmp_path / "keys" / "hub.key")
    program = tmp_path / "snippet.py"
    program.write_text(snippet.program())
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        # The container recipe in docs/discovery.md reads its setting from here.
        "NODE_NAME": "pod-1",
        "POD_IP": "127.0.0.1",
        "GOSSIP_HUBS": f"ipc://{tmp_path}/hub-0 ipc://{tmp_path}/hub-1",
        "KEYS": str(tmp_path / "keys"),
    }
    result = subprocess.run(
        [*GUARDED, str(program)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, f"{snippet.name}:\n{result.stdout}\n{result.stderr}"
