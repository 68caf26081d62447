"""Issue 25's forged-beacon benchmarks at CI sizes: spoofed sources, a tarpit, forged leaves.

They run on loopback only (127.0.0.0/8: spoofed sources are this host's own
addresses).  The figures are the full benchmarks' business (``make
bench``); here each variant must run, and the real peer must lose nothing.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def _run(script: str, *args: str) -> dict[str, Any]:
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / script), *args],
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    found: dict[str, Any] = json.loads(out[out.index("{") :])
    return found


def test_forged_beacons_from_a_thousand_tarpit_sources_cost_a_bounded_number_of_sockets() -> None:
    """The harsher variant: the claimed ports accept connections and never answer."""
    args = ["--quick", "--process", "--rate", "5000", "--seconds", "2", "--sources", "1000"]
    result = _run("bench_forged_beacons.py", *args, "--tarpit")
    assert result["forged"] >= 5000, result
    assert result["verdict"]["nothing_lost"], result
    # The total budget: 256 peers at once, then ~51 a second, each with a
    # few descriptors while libzmq connects and reaps (10,000 unbounded).
    assert result["peak"]["fds"] <= result["before"]["fds"] + 4 * (256 + 2 * 52), result
    assert result["after_6s"]["fds"] <= result["before"]["fds"] * 1.1, result


def test_forged_leaving_beacons_between_processes_end_nothing() -> None:
    """CURVE, forged with b's own public key: only the PING check can tell."""
    args = ["--seconds", "2.5", "--after", "0.5", "--probe", "0.5", "--curve", "--forged-key"]
    result = _run("bench_forged_leave.py", *args, "peer")
    assert result["forged"] >= 20, result
    assert result["exits_during"] == 0, result
    assert result["round_trips_per_s_during"] > 0, result
    assert "genuine_leave_to_exit_s" in result, result  # b's real leave ended it at a
