"""The profiling helpers and small benchmarks in benchmarks/ run at tiny sizes, so they cannot rot.

They stay on loopback (``interface="lo"``); figures are not checked.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from tests.nodes import free_udp_port

ROOT = Path(__file__).resolve().parent.parent


def _run(script: str, *args: str) -> str:
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / script), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def test_peer_memory_reports_bytes_a_peer() -> None:
    out = _run("peer_memory.py", "--nodes", "3", "--port", str(free_udp_port()))
    assert re.search(r"^3 nodes, 6 peers: [\d.]+ MB traced, [\d,]+ B a peer$", out, re.M), out


def test_profile_flood_reports_both_sides() -> None:
    out = _run("profile_flood.py", "--messages", "2000", "--port", str(free_udp_port()))
    assert re.search(r"^rx: [\d,]+ msg/s, [\d.]+ us CPU a message$", out, re.M), out
    assert re.search(r"^tx: [\d,]+ msg/s sent, [\d.]+ us CPU a message$", out, re.M), out


def test_forged_beacons_bench_runs_and_the_real_peer_survives() -> None:
    out = _run("bench_forged_beacons.py", "--quick")
    result = json.loads(out[out.index("{") :])
    assert result["forged"] > 0 and result["round_trips_during"] > 0
    assert {"before", "peak", "after_6s", "rtt_before_us", "rtt_during_us"} <= result.keys()
    assert result["still_peers"] is True
