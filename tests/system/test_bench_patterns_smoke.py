"""The patterns benchmark runs end to end with tiny sizes, so it cannot rot.

Figures are not checked (benchmarks are not tests); only that every
scenario runs and reports.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _bench_patterns(*args: str) -> subprocess.CompletedProcess[str]:
    """``bench_patterns.py --quick`` with *args*, which must succeed."""
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "bench_patterns.py"), "--quick", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result


def test_bench_patterns_quick(tmp_path: Path) -> None:
    out = tmp_path / "patterns.json"
    result = _bench_patterns("--json", str(out))
    assert "pipelined (100 in flight), 4 workers" in result.stdout
    assert "| 0.25 s | 0.5 s | 0.75 s |" in result.stdout
    data = json.loads(out.read_text())
    assert set(data["rates"]) == {
        "sequential, 1 worker",
        "pipelined (100 in flight), 1 worker",
        "pipelined (100 in flight), 4 workers",
    }
    assert all(
        rate > 0 for row in data["rates"].values() for rates in row.values() for rate in rates
    )
    outages = data["failover_outage_s"]
    assert set(outages) == {"default", "fast"}
    for runs in outages.values():
        assert len(runs) == 1
        # Counts, not times: every request sent through the failover was answered.
        assert runs[0]["sent"] > 0 and runs[0]["answered"] == runs[0]["sent"]


def test_bench_patterns_runs_only_the_cases_asked_for(tmp_path: Path) -> None:
    out = tmp_path / "patterns.json"
    result = _bench_patterns("--cases", "pipelined-4", "--json", str(out))
    assert "Binary Star" not in result.stdout
    rates = json.loads(out.read_text())["rates"]
    assert set(rates) == {"pipelined (100 in flight), 4 workers"}
