"""The receive-idioms benchmark runs end to end with tiny sizes, so it cannot rot.

Figures are not checked (benchmarks are not tests): only that every loop
received the whole flood and reports a rate.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_bench_receive_quick(tmp_path: Path) -> None:
    out = tmp_path / "receive.json"
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "bench_receive.py"),
            "--quick",
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "| idle_timeout |" in result.stdout
    data = json.loads(out.read_text())
    assert set(data["results"]) == {
        "bench",
        "readme",
        "match",
        "move_on_after",
        "pushed",
        "idle_timeout",
        "batch",
    }
    for runs in data["results"].values():
        assert len(runs) == 1 and runs[0]["rate"] > 0 and runs[0]["cpu_us"] > 0
