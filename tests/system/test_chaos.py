"""``make chaos``: its switch (no I/O, exact times), its verdict, and its CI profile run.

The switch and the verdict are checked here without a network; the last
test runs the real thing (``benchmarks/chaos.py --profile ci``: 60 s of
faults in namespaces of its own, audited on a standalone Spark cluster on
127.0.0.1) and needs root, TAP devices and Java, as CI has.
"""

from __future__ import annotations

import itertools
import os
import random
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from benchmarks.chaos import (
    CLIENTS,
    FAULT_KINDS,
    TITANIC_KILLS,
    Faults,
    Fleet,
    Slot,
    TitanicRecord,
    judge,
)
from benchmarks.chaos_switch import PROFILES, Impairment, Switch, command
from tests.support.spark import spark_missing

ROOT = Path(__file__).resolve().parents[2]

A, B, C = (bytes([0x02, 0, 0, 0, 0, n]) for n in (1, 2, 3))
BROADCAST = b"\xff" * 6


def frame(destination: bytes, source: bytes, payload: bytes = b"x") -> bytes:
    return destination + source + b"\x08\x00" + payload


# ------------------------------------------------------------------ the switch


def test_a_clean_switch_floods_then_learns() -> None:
    switch = Switch(3)
    # Unknown destination: every other port, at once.
    assert [(t, p) for t, p, _ in switch.receive(0, frame(B, A), 1.0)] == [(1.0, 1), (1.0, 2)]
    # B answers A: A was learnt on port 0, so only port 0.
    assert [(t, p) for t, p, _ in switch.receive(1, frame(A, B), 2.0)] == [(2.0, 0)]
    # Broadcast always floods, and never back to where it came from.
    assert [p for _, p, _ in switch.receive(1, frame(BROADCAST, B), 3.0)] == [0, 2]
    assert list(switch.receive(0, b"short", 4.0)) == []  # not a frame


def test_loss20_drops_a_fifth_and_delays_five_plus_minus_five_ms() -> None:
    switch = Switch(2, PROFILES["loss20"], random.Random(7))
    delays = []
    for i in range(20_000):
        for due, port, _ in switch.receive(0, frame(B, A), float(i)):
            assert port == 1
            delays.append(due - i)
    assert switch.dropped + switch.forwarded == 20_000
    assert 0.19 < switch.dropped / 20_000 < 0.21
    assert min(delays) >= 0.0 and max(delays) <= 0.010
    assert 0.0049 < sum(delays) / len(delays) < 0.0051


def test_the_reorder_profile_lets_a_quarter_overtake() -> None:
    switch = Switch(2, PROFILES["reorder"], random.Random(3))
    dues, delays = [], []
    for i in range(10_000):
        for due, _, _ in switch.receive(0, frame(B, A), i * 0.001):
            dues.append(due)
            delays.append(round(due - i * 0.001, 9))
    assert 0.008 < switch.dropped / 10_000 < 0.012
    assert set(delays) == {0.0, 0.005}
    assert 0.23 < delays.count(0.0) / len(delays) < 0.27
    overtaken = sum(1 for a, b in itertools.pairwise(dues) if b < a)
    assert overtaken > 1000  # frames sent later arrive earlier


def test_a_cut_port_neither_sends_nor_receives() -> None:
    switch = Switch(3)
    names = ["t0", "t1", "t2"]
    assert command(switch, "cut t1", names) == "ok"
    assert [p for _, p, _ in switch.receive(0, frame(BROADCAST, A), 0.0)] == [2]
    assert list(switch.receive(1, frame(BROADCAST, B), 0.0)) == []
    assert command(switch, "restore t1", names) == "ok"
    assert [p for _, p, _ in switch.receive(0, frame(BROADCAST, A), 0.0)] == [1, 2]
    assert command(switch, "profile loss20", names) == "ok"
    assert switch.impairment == PROFILES["loss20"]
    for bad in ("cut t9", "profile fast", "explode"):
        assert command(switch, bad, names).startswith("error")


def test_an_impairment_never_delays_below_zero() -> None:
    wide = Impairment(delay=0.001, jitter=0.005)
    rng = random.Random(1)
    assert min(d for d in (wide.delay_for(rng) for _ in range(1000)) if d is not None) == 0.0


# ------------------------------------------------------------------ the verdict


def _tallies() -> dict[str, dict[str, Any]]:
    return {
        name: {
            "node": f"{i:032x}",
            "requests": 10,
            "answered": 9,
            "abandoned": 1,
            "wrong_replies": 0,
            "titanic_pending": 0,
            "titanic_unknown": 0,
        }
        for i, name in enumerate(CLIENTS)
    }


def _summary(tallies: dict[str, dict[str, Any]]) -> dict[str, Any]:
    flags = ("lost", "duplicate_execution", "double_reply", "out_of_order")
    return {
        "requests": {
            "flags": {flag: {"count": 0} for flag in flags},
            "by_client": {
                t["node"]: {
                    "requests": t["requests"],
                    "sent": t["requests"],
                    "answered": t["answered"],
                    "abandoned": t["abandoned"],
                    "lost": 0,
                    "interrupted": 0,
                }
                for t in tallies.values()
            },
        },
        "bstar": {"dual_active": []},
    }


def _faults() -> Faults:
    faults = Faults()
    for kind in (*FAULT_KINDS, *TITANIC_KILLS):
        faults.done[kind] = 1
    return faults


def test_the_verdict_passes_when_everything_agrees() -> None:
    tallies = _tallies()
    verdict = judge(_summary(tallies), 0, tallies, _faults(), [])
    assert verdict.passed, verdict.failures
    assert [row["client"] for row in verdict.rows] == list(CLIENTS)


@pytest.mark.parametrize(
    ("damage", "expected"),
    [
        (lambda s, t, f, u: t["client-bstar"].update(answered=8), "client-bstar: answered 8"),
        (
            lambda s, t, f, u: s["requests"]["by_client"][t["client-service"]["node"]].update(
                lost=1
            ),
            "client-service: 1 lost by the audit",
        ),
        (lambda s, t, f, u: t.pop("client-titanic"), "client-titanic: wrote no tally"),
        (lambda s, t, f, u: t["client-titanic"].update(titanic_pending=2), "2 titanic pending"),
        (lambda s, t, f, u: t["client-freelance"].update(wrong_replies=1), "1 wrong replies"),
        (lambda s, t, f, u: s["bstar"]["dual_active"].append({}), "two ACTIVE"),
        (lambda s, t, f, u: s["requests"]["flags"]["lost"].update(count=3), "audit: 3 lost"),
        (lambda s, t, f, u: f.done.pop("cut"), "no cut fault happened"),
        (lambda s, t, f, u: f.done.pop("titanic mid-write"), "no titanic mid-write fault"),
        (lambda s, t, f, u: f.done.pop("titanic after commit"), "no titanic after commit"),
        (lambda s, t, f, u: u.append("w1 exited with 1"), "unexpected: w1 exited with 1"),
        (lambda s, t, f, u: s["requests"]["by_client"].clear(), "found none of its requests"),
    ],
)
def test_the_verdict_fails_on_each_kind_of_damage(damage: Any, expected: str) -> None:
    tallies = _tallies()
    summary, faults, unexpected = _summary(tallies), _faults(), []
    damage(summary, tallies, faults, unexpected)
    verdict = judge(summary, 0, tallies, faults, unexpected)
    assert not verdict.passed
    assert any(expected in failure for failure in verdict.failures), verdict.failures


def test_a_failed_audit_fails_the_verdict() -> None:
    tallies = _tallies()
    verdict = judge(_summary(tallies), 1, tallies, _faults(), [])
    assert verdict.failures == ["the audit failed (exit code 1)"]


def _titanic_run() -> tuple[dict[str, dict[str, Any]], Faults, TitanicRecord]:
    tallies = {"client-titanic": _tallies()["client-titanic"]}
    faults = Faults(kinds=("titanic",))
    faults.done.update({"titanic": 3, "titanic mid-write": 1, "titanic after commit": 1})
    record = TitanicRecord(Counter({f"client-titanic:0:{i}": 1 for i in range(9)}), 9, None, 0)
    return tallies, faults, record


def test_the_titanic_profile_passes_on_one_run_each() -> None:
    tallies, faults, record = _titanic_run()
    verdict = judge(_summary(tallies), 0, tallies, faults, [], ("client-titanic",), record)
    assert verdict.passed, verdict.failures


@pytest.mark.parametrize(
    ("damage", "expected"),
    [
        (lambda r: r.executions.update(["client-titanic:0:3"]), "1 requests ran more than once"),
        (lambda r: r.executions.pop("client-titanic:0:3"), "1 of 9 requests never ran"),
        (lambda r: setattr(r, "store", "torn"), "the store does not reopen: torn"),
        (lambda r: setattr(r, "left", 2), "2 requests left in the store"),
    ],
)
def test_the_titanic_profile_fails_on_a_second_run_a_loss_or_a_bad_store(
    damage: Any, expected: str
) -> None:
    tallies, faults, record = _titanic_run()
    damage(record)
    verdict = judge(_summary(tallies), 0, tallies, faults, [], ("client-titanic",), record)
    assert any(expected in failure for failure in verdict.failures), verdict.failures


# ------------------------------------------------------------------ an armed kill

# A stand-in for an armed Titanic: once SIGUSR2 arms it, it kills itself
# at its next "write" (the file appearing), or exits 1 if told to.
_ARMED_CHILD = """
import os, pathlib, signal, sys, time
run = pathlib.Path(sys.argv[1])
armed = False
def arm(*_):
    global armed
    armed = True
signal.signal(signal.SIGUSR2, arm)
(run / "ready").touch()
while True:
    if armed and (run / "write").exists():
        os.kill(os.getpid(), signal.SIGKILL)
    if (run / "fail").exists():
        sys.exit(1)
    time.sleep(0.01)
"""


def _armed_child(tmp_path: Path) -> tuple[Fleet, Slot]:
    slot = Slot("titanic", "titanic", [])
    slot.process = subprocess.Popen([sys.executable, "-c", _ARMED_CHILD, str(tmp_path)])
    fleet = Fleet(None, [slot], tmp_path)  # type: ignore[arg-type]  # no network needed
    deadline = time.monotonic() + 30
    while not (tmp_path / "ready").exists():  # its handler is armed before it writes this
        assert slot.process.poll() is None, "the stand-in died at start"
        assert time.monotonic() < deadline, "the stand-in never started"
        time.sleep(0.01)  # polling a file another process writes
    return fleet, slot


def test_an_armed_titanic_that_writes_late_still_makes_its_kill(tmp_path: Path) -> None:
    """The kill waits for the write, however late (a 5 s limit lost CI's only turn)."""
    fleet, slot = _armed_child(tmp_path)
    assert slot.process is not None
    try:
        fleet.arm(slot, "titanic after commit")
        assert fleet.reap_armed() == []
        fleet.check_alive()
        assert not slot.down and slot.armed == "titanic after commit"
        (tmp_path / "write").touch()
        slot.process.wait(timeout=30)
        assert fleet.reap_armed() == [slot]
        assert slot.down
        fleet.check_alive()
        assert fleet.unexpected == []
    finally:
        slot.process.kill()
        slot.process.wait()


def test_an_armed_titanic_that_exits_otherwise_is_reported(tmp_path: Path) -> None:
    fleet, slot = _armed_child(tmp_path)
    assert slot.process is not None
    try:
        fleet.arm(slot, "titanic after commit")
        (tmp_path / "fail").touch()
        slot.process.wait(timeout=30)
        assert fleet.reap_armed() == []
        assert not slot.armed
        fleet.check_alive()
        assert fleet.unexpected == ["titanic (life 0) exited with 1"]
    finally:
        slot.process.kill()
        slot.process.wait()


# ------------------------------------------------------------------ the run


def _cannot_run() -> str | None:
    if sys.platform != "linux" or os.geteuid() != 0:
        return "make chaos needs root on Linux"
    if not os.path.exists("/dev/net/tun"):
        return "no TAP devices (/dev/net/tun)"
    return spark_missing()


@pytest.mark.netns
@pytest.mark.spark
@pytest.mark.skipif(_cannot_run() is not None, reason=str(_cannot_run()))
def test_the_ci_chaos_profile_passes(tmp_path: Path) -> None:
    """60 s of faults on every pattern; the audit on a standalone cluster judges."""
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "chaos.py"), "--profile", "ci",
         "--out", str(tmp_path / "run")],
        capture_output=True, text=True, timeout=600, check=False, cwd=ROOT,
    )  # fmt: skip
    print(result.stdout)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "verdict: PASS" in result.stdout
