"""The examples run and say what they claim (so they cannot rot)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_hello_loopback_runs() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "hello_loopback.py")],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    assert "got Hello" in result.stdout
    assert "content=(b'hello,', b'Zo\\xc3\\xab')" in result.stdout


def test_readme_code_blocks_run() -> None:
    """Every ```python block in the README runs as written."""
    text = (ROOT / "README.md").read_text()
    blocks = [part.split("```", 1)[0] for part in text.split("```python\n")[1:]]
    assert blocks, "the README lost its example"
    for block in blocks:
        exec(compile(block, "README.md", "exec"), {})
