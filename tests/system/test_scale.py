"""make scale (benchmarks/scale.py): the file-descriptor arithmetic, the refusal, a small run.

The real run (500 nodes over 10 processes, 5 minutes of load) is not a
test; these keep its harness from rotting: a run of 20 nodes over 5
processes goes through every phase (mesh, idle, load with kill -9 of a
server process, verdict) in about a minute.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import scale
from benchmarks.scale import files_needed, fitting_processes, spread
from tests.support.spark import spark_missing

ROOT = Path(__file__).resolve().parents[2]
SCALE = ROOT / "benchmarks" / "scale.py"


def test_files_needed_counts_three_per_pair_across_processes() -> None:
    # 50 local nodes, each linked to 450 in other processes: a DEALER (TCP
    # and its mailbox) and, at the far end, an accepted TCP connection;
    # watching links adds the monitor on each node's inbox and its reader.
    assert files_needed(500, 10) == 3 * 50 * 450 + 2 * 50 + 500 == 68_100
    assert files_needed(250, 10) == 3 * 25 * 225 + 2 * 25 + 500 == 17_425
    assert files_needed(20, 5) == 3 * 4 * 16 + 2 * 4 + 500
    assert files_needed(20, 5, unwatched=True) == 3 * 4 * 16 + 500


def test_nodes_are_spread_as_evenly_as_can_be() -> None:
    assert spread(500, 39) == [13] * 32 + [12] * 7
    assert spread(20, 5) == [4] * 5
    # The fullest process is the one that must fit.
    assert files_needed(500, 39) == 3 * 13 * 487 + 2 * 13 + 500 == 19_519


def test_the_fewest_processes_that_fit_the_limit_are_found() -> None:
    # Issue 28: 500 nodes under a hard limit of 20,000 descriptors.
    assert fitting_processes(500, 20_000, least=2) == 39
    assert files_needed(500, 38) > 20_000
    assert fitting_processes(500, 20_000) == 1  # all in memory: no TCP at all
    assert fitting_processes(250, 20_000, least=5) == 9
    assert fitting_processes(20, 20_000, least=5) == 5
    assert fitting_processes(500, 400, least=2) is None  # not even one node a process
    # watch_links=False: 26 descriptors fewer in the fullest process.
    assert files_needed(500, 39, unwatched=True) == 3 * 13 * 487 + 500 == 19_493
    assert fitting_processes(500, 20_000, least=5, unwatched=True) == 39


def _root_on_linux() -> str | None:
    if sys.platform != "linux" or os.geteuid() != 0:
        return "make scale needs root on Linux (a network namespace)"
    return None


def test_a_mesh_the_file_limit_cannot_hold_is_refused_saying_why(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The limit, the need and what to do, before any namespace or process exists."""

    def refuse(_which: int, _limits: tuple[int, int]) -> None:
        raise ValueError("not allowed")  # no CAP_SYS_RESOURCE, as on the CI machine

    monkeypatch.setattr(scale.resource, "getrlimit", lambda _which: (1024, 4096))
    monkeypatch.setattr(scale.resource, "setrlimit", refuse)
    with pytest.raises(SystemExit) as info:
        scale._raise_file_limit(files_needed(500, 10))
    message = str(info.value.code)
    assert "each process needs about 68100 file descriptors" in message
    assert "the hard limit is 4096" in message
    assert "fewer nodes or more processes" in message


def test_the_refusal_names_the_layout_that_would_fit(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 28: not EMFILE deep inside a run, but the limit and what fits, before starting."""

    def refuse(_which: int, _limits: tuple[int, int]) -> None:
        raise ValueError("not allowed")

    monkeypatch.setattr(scale.resource, "getrlimit", lambda _which: (20_000, 20_000))
    monkeypatch.setattr(scale.resource, "setrlimit", refuse)
    with pytest.raises(SystemExit) as info:
        scale._raise_file_limit(files_needed(500, 30), 500, least=5)
    message = str(info.value.code)
    assert "each process needs about 25167 file descriptors" in message
    assert "the hard limit is 20000" in message
    assert "--processes 39 fits (13 nodes in the fullest process, about 19519" in message


def test_a_mesh_within_the_hard_limit_raises_the_soft_one(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[int, int]] = []

    def setrlimit(_which: int, limits: tuple[int, int]) -> None:
        calls.append(limits)
        if limits[1] > 4096:
            raise ValueError("not allowed")

    monkeypatch.setattr(scale.resource, "getrlimit", lambda _which: (1024, 4096))
    monkeypatch.setattr(scale.resource, "setrlimit", setrlimit)
    scale._raise_file_limit(3000)
    assert calls == [(3000, 4096)]


def _cannot_run() -> str | None:
    if (why := _root_on_linux()) is not None:
        return why
    return spark_missing()


@pytest.mark.netns
@pytest.mark.spark
@pytest.mark.skipif(_cannot_run() is not None, reason=str(_cannot_run()))
def test_a_small_scale_run_passes(tmp_path: Path) -> None:
    out = tmp_path / "figures.json"
    result = subprocess.run(
        [sys.executable, str(SCALE), "--nodes", "20", "--processes", "5",
         "--idle-seconds", "2", "--load-seconds", "20", "--fault-every", "8",
         "--rate", "20", "--seed", "3", "--out", str(tmp_path / "run"), "--json", str(out)],
        capture_output=True, text=True, timeout=600, check=False, cwd=ROOT,
    )  # fmt: skip
    print(result.stdout)
    assert result.returncode == 0, result.stdout + result.stderr
    figures = json.loads(out.read_text())
    assert figures["failures"] == []
    assert figures["time_to_mesh_s"] is not None
    assert figures["audit_exit_code"] == 0
    assert figures["dual_active"] == 0
    assert len(figures["faults"]) >= 1  # a server process was killed and came back
    assert set(figures["requests"]) == {
        "client-service",
        "client-bstar",
        "client-titanic",
        "client-freelance",
    }
    assert all(tally["requests"] > 0 for tally in figures["requests"].values())
    assert len(figures["idle_rss_mb"]) == 5
