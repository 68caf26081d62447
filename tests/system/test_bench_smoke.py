"""The ZRE benchmark (benchmarks/bench_zre.py) runs end to end at tiny sizes.

Not a speed test (shared/DESIGN.md section 7): each scenario runs once with
``--quick`` so that the benchmark cannot rot unnoticed.  The benchmark
makes its own pair of network namespaces (pyre may only run inside one), so
the test is marked ``netns`` and skipped where namespaces cannot be made.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.bench_zre import zyre_worker_unavailable
from tests.support import netns

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks" / "bench_zre.py"
TIMEOUT = 60  # seconds per scenario; all of them together take ~20 s here

# "flood" runs in the same processes as "pingpong", so is run with it.
SCENARIOS = {
    "discovery": ("discovery",),
    "pingpong+flood": ("pingpong", "flood"),
    "burst": ("burst",),
    "fanout": ("fanout",),
    "death": ("death",),
    "footprint": ("footprint",),
}

_reason = netns.netns_available()
pytestmark = [
    pytest.mark.netns,
    pytest.mark.skipif(
        _reason is not None, reason=f"bench_zre.py needs network namespaces: {_reason}"
    ),
]


def _run_bench(args: list[str]) -> tuple[int, str]:
    """Run the benchmark; on timeout interrupt it, so it deletes its namespaces."""
    proc = subprocess.Popen(
        [sys.executable, str(BENCH), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=ROOT,
    )
    try:
        out, _ = proc.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGINT)
        try:
            out, _ = proc.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
        pytest.fail(f"bench_zre.py {' '.join(args)} ran over {TIMEOUT} s:\n{out}")
    return proc.returncode, out


@pytest.mark.parametrize("scenarios", SCENARIOS.values(), ids=SCENARIOS.keys())
def test_scenario_runs_quick(scenarios: tuple[str, ...], tmp_path: Path) -> None:
    result = tmp_path / "zre.json"
    docs = tmp_path / "benchmarks.md"
    begin = "<!-- bench_zre: latest run, written by --update-docs -->"
    end = "<!-- bench_zre: end of latest run -->"
    docs.write_text(f"# kept above\n\n{begin}\nstale figures\n{end}\n\n## kept below\n")
    args = ["--quick", "--json", str(result), "--update-docs", str(docs)]
    for scenario in scenarios:
        args += ["--scenario", scenario]
    if "fanout" in scenarios:
        args.append("--detail")  # the kernel's and the workers' counts, per side
    zyre_reason = zyre_worker_unavailable()
    code, out = _run_bench(args)
    assert code == 0, out
    data = json.loads(result.read_text())
    assert data["errors"] == [], out
    assert data["netns"] is True
    rows = data["rows"]
    assert rows, out
    # The machine's speed before every experiment, and its spread in the report.
    probes = data["speed_probes_ms"]
    assert probes and all(probe > 0 for probe in probes), out
    assert "a fixed Python loop took" in out, out
    # Every scenario measured trizre, and pyre beside it (pyre's peer death
    # has only notes at --quick's bound); zyre too, with figures and their
    # trizre/zyre ratios, where scripts/build-zyre.sh built its worker from
    # this checkout's source (make test builds it).
    measured = ["trizre"]
    if zyre_reason is None:
        measured.append("zyre")
    else:
        assert "zyre skipped" in out, out
    for impl in measured:
        assert any(row["values"].get(impl) for row in rows), f"no {impl} figure:\n{out}"
    assert any(row["values"].get("pyre") or row["notes"].get("pyre") for row in rows), out
    if "fanout" in scenarios:
        # raw pyzmq's SHOUT frames: the ceiling beside every fan-out, all delivered.
        fanout = [row for row in rows if row["scenario"].startswith("SHOUT to ")]
        ceiling = ("deliveries/s", "CPU per delivery, all processes, µs")
        assert all(row["values"].get("raw") for row in fanout if row["measure"] in ceiling), out
        lost = [row["values"].get("raw") for row in fanout if row["measure"] == "lost"]
        assert lost and all(runs and not any(runs) for runs in lost), out
        detail = {row["measure"]: row["values"] for row in fanout}
        for side in ("sender", "sender main thread", "receivers"):
            assert detail[f"{side}: CPU per delivery, µs"].get("trizre"), out
            moves = detail[f"{side}: moves between CPUs per 1000 deliveries"]
            assert all(run >= 0 for run in moves["trizre"]), out
        for side in ("sender", "receivers"):  # the collector's, counted inside each worker
            share = detail[f"{side}: share of the run in garbage collection"]["trizre"]
            assert share and all(0 <= run < 1 for run in share), out
            assert f"{side}: gc_full_collections per 1000 deliveries" in detail, out
    header = (
        "| scenario | measure | trizre | zyre (C) | pyre | raw pyzmq "
        "| trizre/zyre | trizre/pyre | trizre/raw | target |"
    )
    assert header in out
    trizre_over_zyre = [  # the table's trizre/zyre column
        line.split(" | ")[6]
        for line in out.splitlines()
        if line.startswith("| ") and line.count(" | ") >= 9 and line != header
    ]
    has_ratio = any(ratio.endswith("\N{MULTIPLICATION SIGN}") for ratio in trizre_over_zyre)
    assert has_ratio == (zyre_reason is None), out
    assert "Targets" in out
    # make bench's record: the latest run replaces the last one, nothing else moves.
    text = docs.read_text()
    assert text.startswith("# kept above\n") and text.endswith("## kept below\n")
    assert "stale figures" not in text
    inside = text.split(begin, 1)[1].split(end, 1)[0]
    assert header in inside
    assert "cores, load" in inside and "bench_zre.py --quick" in inside
