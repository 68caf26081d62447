"""The examples run and say what they claim (so they cannot rot)."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path
from typing import IO

from tests.nodes import free_udp_port

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


def test_chat_demo_runs() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "chat.py"), "--demo"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    assert "bob hears <Zoë> grüß euch" in result.stdout
    assert "alice hears * bob left" in result.stdout


def test_chat_between_two_processes() -> None:
    port = str(free_udp_port())
    chat = [sys.executable, "-u", str(ROOT / "examples" / "chat.py")]
    procs = {
        name: subprocess.Popen(
            [*chat, name, "--port", port],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for name in ("alice", "bob")
    }
    try:
        alice, bob = procs["alice"], procs["bob"]
        assert alice.stdout is not None and alice.stdin is not None
        assert bob.stdout is not None and bob.stdin is not None
        assert _read_until(alice.stdout, "* bob joined")
        alice.stdin.write("hello from alice\n")
        alice.stdin.flush()
        assert _read_until(bob.stdout, "<alice> hello from alice")
        alice.stdin.close()  # Ctrl-D: alice leaves
        assert alice.wait(timeout=10) == 0
        assert _read_until(bob.stdout, "* alice is gone")
    finally:
        for proc in procs.values():
            proc.kill()
            proc.wait()


def _read_until(stream: IO[str], wanted: str, timeout: float = 10.0) -> bool:
    """Read lines until one contains ``wanted``; False if the deadline passes."""
    found = threading.Event()

    def reader() -> None:
        for line in stream:
            if wanted in line:
                found.set()
                return

    threading.Thread(target=reader, daemon=True).start()
    return found.wait(timeout)
