"""``make chaos``: every pattern under faults, in namespaces, judged by the audit.

    sudo .venv/bin/python benchmarks/chaos.py [--profile ci|default|titanic] [--duration S]
        [--netem both|loss20|reorder|clean] [--seed N] [--out DIR] [--local-spark]

Fourteen processes, each in a network namespace of its own made for the
run: four service workers, a Binary Star pair, Titanic, three Freelance
servers, and one client per pattern.  The namespaces are joined by
``benchmarks/chaos_switch.py``, a userspace switch that loses, delays and
reorders frames as ``tc netem`` would (20 % loss with 5 ± 5 ms, then 1 %
loss with reordering).  Every node traces.

While the clients send, a fault loop takes turns at: kill -9 of a worker
or a Freelance server (restarted after 0.5 to 3 s), kill -9 of Titanic
(restarted on the same store), kill -9 of the ACTIVE Binary Star server
brought back as the operator procedure says (restart it; it comes back
PASSIVE), and a link cut longer than the expiry timeout, then restored.

At the end the clients stop cleanly and write their own tallies, the
servers stop, and ``trizre audit`` judges the traces on a Spark standalone
cluster started for it on 127.0.0.1 (``--local-spark``: local mode).  The
run passes (exit 0) only if the audit passes (nothing lost, no duplicate
execution, no double reply, never two ACTIVE servers, every line
readable), each client's tally equals the audit's count of its requests,
no reply was wrong, Titanic owes nothing, no process died unasked, and
every kind of fault happened.  Exit 1 otherwise; 2 when this machine
cannot run it (not root, no ``ip``, no TAP devices, no Java).

The ``titanic`` profile (``make chaos-titanic``) runs Titanic alone, with
one worker and a client submitting on 16 lanes at once, and kills only
Titanic (kill -9 at a random instant of service, in turn plain, inside a
write transaction, and right after a request is stored but before it is
acknowledged), restarting it on the same store.  Besides the audit, its
verdict reads the worker's record of executions: every request the
client was given an id for ran exactly once; and the store, reopened
with Titanic's own checks after the run, is whole and holds no request
left over (each was collected and closed; an orphan is a retry stored
twice).

Nothing leaves the run's namespaces: the switch only writes to its TAP
devices, each moved into its namespace, and Spark binds 127.0.0.1.
"""

from __future__ import annotations

import argparse
import contextlib
import heapq
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.chaos_role import NODE_OPTIONS  # noqa: E402
from benchmarks.spark_cluster import spark_env, standalone_cluster  # noqa: E402
from tests.support.netns import destroy_namespaces  # noqa: E402
from trizre.audit import _java  # noqa: E402
from trizre.patterns import TitanicStoreDamaged  # noqa: E402
from trizre.patterns._titanic import _Store  # noqa: E402

ROLE = ROOT / "benchmarks" / "chaos_role.py"
SWITCH = ROOT / "benchmarks" / "chaos_switch.py"
INTERFACE = "chaos0"
BEACON_PORT = 5670
FAULT_KINDS = ("worker", "bstar", "freelance", "titanic", "cut")
CLIENTS = ("client-service", "client-bstar", "client-titanic", "client-freelance")
# Titanic's kills besides plain kill -9, in turn: before a COMMIT, after one.
TITANIC_KILLS = ("titanic mid-write", "titanic after commit")
KILL_WHERE = {
    "titanic mid-write": "inside its next write transaction",
    "titanic after commit": "after storing its next request, before answering it",
}

PROFILES: dict[str, dict[str, Any]] = {
    "ci": {"duration": 60.0, "fault_every": 2.5, "settle": 6.0},
    "default": {"duration": 600.0, "fault_every": 5.0, "settle": 6.0},
    # Issue 26: kill -9 of Titanic during concurrent submits, nothing else.
    "titanic": {
        "duration": 90.0,
        "fault_every": 4.0,  # Titanic serves a while between kills
        "settle": 6.0,
        "rate": 40.0,
        "faults": ("titanic",),
        "clients": ("client-titanic",),
        "lanes": 16,
    },
}

EXPIRED = float(NODE_OPTIONS["expired_timeout"])


class Unavailable(Exception):
    """This machine cannot run the chaos (exit code 2)."""


@dataclass
class Slot:
    """One namespace and the process living in it (restarted under the same name)."""

    name: str
    role: str
    extra: list[str]
    namespace: str = ""
    tap: str = ""
    process: subprocess.Popen[bytes] | None = None
    lives: int = 0
    down: bool = False  # killed by us, waiting to be restarted
    cut: bool = False
    log: IO[bytes] | None = None
    armed: str = ""  # a Titanic kill it will do itself, awaited (TITANIC_KILLS)


@dataclass
class Faults:
    """What the fault loop did, for the verdict."""

    done: Counter[str] = field(default_factory=Counter)
    titanic_kills: int = 0
    skipped: Counter[str] = field(default_factory=Counter)
    log: list[str] = field(default_factory=list)
    kinds: tuple[str, ...] = FAULT_KINDS  # what this run must have done


def slots(rate: float, profile: str = "default") -> list[Slot]:
    """The run's processes."""
    client = ["--rate", str(rate)]
    if profile == "titanic":
        # Attempts enough to outlast a restart: a submit the client gives up on
        # would leave a request it was never told the id of (an orphan).
        lanes = ["--lanes", str(PROFILES[profile]["lanes"]), "--attempts", "15"]
        return [
            Slot("w1", "worker", []),  # one worker, never killed: its record is the judge
            Slot("titanic", "titanic", []),
            Slot("client-titanic", "client-titanic", [*client, *lanes]),
        ]
    return [
        *(Slot(f"w{i}", "worker", []) for i in range(1, 5)),
        Slot("bs-primary", "bstar", ["--primary", "--partner", "bs-backup"]),
        Slot("bs-backup", "bstar", ["--partner", "bs-primary"]),
        Slot("titanic", "titanic", []),
        *(Slot(f"f{i}", "freelance", []) for i in range(1, 4)),
        Slot("client-service", "client-service", client),
        Slot(
            "client-bstar",
            "client-bstar",
            [*client, "--primary-name", "bs-primary", "--backup-name", "bs-backup"],
        ),
        Slot("client-titanic", "client-titanic", client),
        Slot("client-freelance", "client-freelance", [*client, "--servers", "f1", "f2", "f3"]),
    ]


def _ip(*args: str, check: bool = True) -> None:
    subprocess.run(["ip", *args], check=check, capture_output=True, timeout=30)


class Network:
    """The namespaces, the switch joining them, and its control line."""

    def __init__(self, tag: str, names: list[str], profile: str, seed: int, run: Path) -> None:
        self.tag = tag
        self.hub = f"{tag}-hub"
        self.names = names
        self.run = run
        self.created: list[str] = []
        self.switch: subprocess.Popen[str] | None = None
        self.profile = profile
        self.seed = seed

    def __enter__(self) -> Network:
        try:
            self._build()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def namespace(self, name: str) -> str:
        return f"{self.tag}-{name}"

    def tap(self, index: int) -> str:
        return f"{self.tag}t{index}"

    def _build(self) -> None:
        _ip("netns", "add", self.hub)
        self.created.append(self.hub)
        self.switch = subprocess.Popen(
            ["ip", "netns", "exec", self.hub, sys.executable, str(SWITCH),
             "--prefix", f"{self.tag}t", "--ports", str(len(self.names)),
             "--profile", self.profile, "--seed", str(self.seed)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=(self.run / "logs" / "switch.log").open("w"), text=True,
        )  # fmt: skip
        if self._answer() != "ready":
            raise RuntimeError("the switch did not start: see logs/switch.log")
        subnet = 1 + os.getpid() % 250
        for index, name in enumerate(self.names):
            ns = self.namespace(name)
            _ip("netns", "add", ns)
            self.created.append(ns)
            _ip("-n", self.hub, "link", "set", self.tap(index), "netns", ns)
            _ip("-n", ns, "link", "set", self.tap(index), "name", INTERFACE)
            _ip("-n", ns, "link", "set", "lo", "up")
            _ip(
                "-n", ns, "addr", "add", f"10.233.{subnet}.{10 + index}/24",  # ok-net: netns only
                "broadcast", f"10.233.{subnet}.255", "dev", INTERFACE,  # ok-net: netns only
            )  # fmt: skip
            _ip("-n", ns, "link", "set", INTERFACE, "up")

    def _answer(self) -> str:
        assert self.switch is not None and self.switch.stdout is not None
        return self.switch.stdout.readline().strip()

    def command(self, line: str) -> None:
        assert self.switch is not None and self.switch.stdin is not None
        self.switch.stdin.write(line + "\n")
        self.switch.stdin.flush()
        answer = self._answer()
        if answer != "ok":
            raise RuntimeError(f"switch: {line!r} -> {answer!r}")

    def set_cut(self, index: int, cut: bool) -> None:
        self.command(f"{'cut' if cut else 'restore'} {self.tap(index)}")

    def close(self) -> None:
        if self.switch is not None:
            with contextlib.suppress(OSError):
                if self.switch.stdin is not None:
                    self.switch.stdin.close()  # its signal to exit
            try:
                self.switch.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.switch.kill()
                self.switch.wait()
        destroy_namespaces(list(reversed(self.created)))
        self.created.clear()


class Fleet:
    """Starting, killing and stopping the run's processes."""

    def __init__(self, network: Network, all_slots: list[Slot], run: Path) -> None:
        self.network = network
        self.slots = {slot.name: slot for slot in all_slots}
        self.order = [slot.name for slot in all_slots]
        self.run = run
        self.unexpected: list[str] = []

    def start(self, slot: Slot) -> None:
        ready = self.run / "ready" / slot.name
        ready.unlink(missing_ok=True)
        (self.run / "state" / slot.name).unlink(missing_ok=True)
        slot.lives += 1
        slot.log = (self.run / "logs" / f"{slot.name}.{slot.lives}.log").open("wb")
        slot.process = subprocess.Popen(
            ["ip", "netns", "exec", self.network.namespace(slot.name), sys.executable,
             str(ROLE), slot.role, slot.name, "--interface", INTERFACE,
             "--port", str(BEACON_PORT), "--run", str(self.run), *slot.extra],
            stdout=slot.log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        slot.down = False

    def wait_ready(self, names: list[str], limit: float = 60.0) -> None:
        deadline = time.monotonic() + limit
        for name in names:
            while not (self.run / "ready" / name).exists():
                self.check_alive()
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{name} was not ready after {limit:.0f} s: see its log")
                time.sleep(0.1)  # polling files other processes write

    def kill(self, slot: Slot) -> None:
        assert slot.process is not None
        slot.down = True
        slot.process.send_signal(signal.SIGKILL)
        slot.process.wait()

    def arm(self, slot: Slot, kill: str) -> None:
        """Have Titanic kill itself at its next write (``kill`` in TITANIC_KILLS).

        "titanic mid-write": inside its next write transaction, before the
        COMMIT.  "titanic after commit": right after its next request is
        stored, before it is acknowledged.  It serves on until then: the
        fault loop sees it die (``reap_armed``) whenever its clients next
        make it write, so a turn that finds the clients cut off or waiting
        on a worker is not lost (it was, with a 5 s limit).
        """
        assert slot.process is not None and not slot.armed
        slot.armed = kill
        slot.process.send_signal(signal.SIGUSR1 if kill == TITANIC_KILLS[0] else signal.SIGUSR2)

    def reap_armed(self) -> list[Slot]:
        """The armed processes that have since killed themselves, as armed."""
        reaped = []
        for slot in self.slots.values():
            if not slot.armed or slot.process is None or slot.process.poll() is None:
                continue
            if slot.process.returncode == -signal.SIGKILL:
                slot.down = True
                reaped.append(slot)
            else:  # check_alive reports it
                slot.armed = ""
        return reaped

    def check_alive(self) -> None:
        """Note any process that ended without being asked to."""
        for slot in self.slots.values():
            if slot.armed:
                continue  # reap_armed's to judge
            if slot.process is not None and not slot.down and slot.process.poll() is not None:
                self.unexpected.append(
                    f"{slot.name} (life {slot.lives}) exited with {slot.process.returncode}"
                )
                slot.down = True

    def state(self, name: str) -> str | None:
        try:
            return (self.run / "state" / name).read_text().strip() or None
        except OSError:
            return None

    def stop(self, names: list[str], limit: float) -> None:
        """SIGTERM, in order, and wait; a process that does not stop in time is a failure."""
        running = [self.slots[n] for n in names if not self.slots[n].down]
        for slot in running:
            assert slot.process is not None
            slot.process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + limit
        for slot in running:
            assert slot.process is not None
            try:
                code = slot.process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                slot.process.kill()
                slot.process.wait()
                self.unexpected.append(f"{slot.name} did not stop within {limit:.0f} s")
                code = 0
            if code != 0:
                self.unexpected.append(f"{slot.name} stopped with exit code {code}")
            slot.down = True


def fault_loop(
    fleet: Fleet,
    network: Network,
    rng: random.Random,
    *,
    duration: float,
    fault_every: float,
    on_half: Callable[[], None],
    say: Callable[[str], None],
    kinds_to_do: tuple[str, ...] = FAULT_KINDS,
) -> Faults:
    """Inject faults for ``duration`` seconds; leave every process up and every link on."""
    faults = Faults(kinds=kinds_to_do)
    start = time.monotonic()
    end = start + duration
    later: list[tuple[float, int, str, str]] = []  # (when, order, action, slot)
    order = 0
    kinds: list[str] = []
    next_fault = start + fault_every
    halved = False

    def schedule(delay: float, action: str, name: str) -> None:
        nonlocal order
        heapq.heappush(later, (time.monotonic() + delay, order, action, name))
        order += 1

    def act(action: str, name: str) -> None:
        slot = fleet.slots[name]
        if action == "restart":
            fleet.start(slot)
        elif action == "restore":
            network.set_cut(fleet.order.index(name), False)
            slot.cut = False

    def up(role: str) -> list[Slot]:
        return [s for s in fleet.slots.values() if s.role == role and not s.down and not s.cut]

    def reaped(slot: Slot, now: float) -> None:
        """An armed Titanic has killed itself where it was told: restart it."""
        kill, slot.armed = slot.armed, ""
        faults.done[kill] += 1
        delay = rng.uniform(0.5, 2.0)
        schedule(delay, "restart", slot.name)
        faults.log.append(
            f"{now - start:6.1f} s  {slot.name} killed itself {KILL_WHERE[kill]}, "
            f"restart in {delay:.1f} s"
        )
        say(f"  {faults.log[-1]}")

    def inject(kind: str) -> str | None:
        if kind == "titanic":
            # Only a Titanic that serves: one still starting proves nothing
            # (and would die of SIGUSR1 before its handler is armed).
            candidates = [s for s in up(kind) if (fleet.run / "ready" / s.name).exists()]
            if not candidates:
                return None
            slot = candidates[0]
            if slot.armed:
                return None  # its own kill is still to come
            faults.titanic_kills += 1
            # The special kills come first, one each, then all three in turn.
            undone = [k for k in TITANIC_KILLS if not faults.done[k]]
            kill = undone[0] if undone else (*TITANIC_KILLS, "titanic")[faults.titanic_kills % 3]
            if kill in TITANIC_KILLS:
                fleet.arm(slot, kill)
                where = KILL_WHERE[kill]
                return f"arm {slot.name} to kill -9 itself {where}"
            delay = rng.uniform(0.5, 2.0)
            fleet.kill(slot)
            schedule(delay, "restart", slot.name)
            return f"kill -9 {slot.name}, restart in {delay:.1f} s"
        if kind in ("worker", "freelance"):
            candidates = up(kind)
            if not candidates:
                return None
            slot = rng.choice(candidates)
            fleet.kill(slot)
            delay = rng.uniform(0.5, 3.0)
            schedule(delay, "restart", slot.name)
            return f"kill -9 {slot.name}, restart in {delay:.1f} s"
        if kind == "bstar":
            pair = up("bstar")
            states = {s.name: fleet.state(s.name) for s in pair}
            active = [n for n, state in states.items() if state == "ACTIVE"]
            if len(pair) != 2 or sorted(map(str, states.values())) != ["ACTIVE", "PASSIVE"]:
                return None  # only a healthy pair fails over cleanly
            slot = fleet.slots[active[0]]
            fleet.kill(slot)
            delay = rng.uniform(1.0, 4.0)
            schedule(delay, "restart", slot.name)
            return f"kill -9 {slot.name} (ACTIVE), restart in {delay:.1f} s (it comes back PASSIVE)"
        # A link cut, never a Binary Star server's: see docs/reliability.md.
        candidates = [
            s for s in fleet.slots.values() if s.role != "bstar" and not s.down and not s.cut
        ]
        slot = rng.choice(candidates)
        length = EXPIRED + rng.uniform(1.0, 3.0)
        network.set_cut(fleet.order.index(slot.name), True)
        slot.cut = True
        schedule(length, "restore", slot.name)
        return f"cut {slot.name}'s link for {length:.1f} s"

    while True:
        now = time.monotonic()
        while later and later[0][0] <= now:
            _, _, action, name = heapq.heappop(later)
            act(action, name)
        for slot in fleet.reap_armed():
            reaped(slot, now)
        fleet.check_alive()
        if now >= end:
            break
        if not halved and now >= start + duration / 2:
            halved = True
            on_half()
        if now >= next_fault:
            if not kinds:
                kinds = list(kinds_to_do)
                rng.shuffle(kinds)
            kind = kinds.pop()
            what = inject(kind)
            stamp = f"{now - start:6.1f} s"
            next_fault = now + fault_every
            if what is None:
                faults.skipped[kind] += 1
                what = f"{kind}: skipped (nothing in a state to take it)"
                if not faults.done[kind]:  # a kind the run has yet to do: again soon
                    kinds.append(kind)
                    next_fault = now + min(1.0, fault_every)
            else:
                faults.done[kind] += 1
            faults.log.append(f"{stamp}  {what}")
            say(f"  {stamp}  {what}")
        time.sleep(0.05)  # the loop's tick: faults are scheduled in wall time
    # Undo what is pending: every link back, every process up, no kill armed.
    for slot in fleet.reap_armed():
        reaped(slot, time.monotonic())
    for slot in fleet.slots.values():
        if slot.armed:  # it never wrote: disarm it the blunt way
            slot.armed = ""
            fleet.kill(slot)
            schedule(0.0, "restart", slot.name)
            stamp = f"{time.monotonic() - start:6.1f} s"
            faults.log.append(f"{stamp}  kill -9 {slot.name}, still armed")
            say(f"  {faults.log[-1]}")
    while later:
        _, _, action, name = heapq.heappop(later)
        act(action, name)
    return faults


# ------------------------------------------------------------------ verdict


@dataclass
class Verdict:
    rows: list[dict[str, Any]]
    failures: list[str]

    @property
    def passed(self) -> bool:
        return not self.failures


@dataclass
class TitanicRecord:
    """What the titanic profile judges besides the audit.

    ``executions``: runs per client request (its body), from the workers'
    record; ``given``: the requests the client was given an id for;
    ``store``: what reopening the store said (``None``: whole) and
    ``left``: the requests still in it after the client closed its own.
    """

    executions: Counter[str]
    given: int
    store: str | None
    left: int

    def failures(self) -> list[str]:
        found = []
        twice = {body: n for body, n in self.executions.items() if n > 1}
        if twice:
            some = ", ".join(f"{body} x{n}" for body, n in sorted(twice.items())[:5])
            found.append(f"titanic: {len(twice)} requests ran more than once ({some})")
        if len(self.executions) < self.given:
            found.append(
                f"titanic: {self.given - len(self.executions)} of {self.given} requests never ran"
            )
        if self.store is not None:
            found.append(f"titanic: the store does not reopen: {self.store}")
        if self.left:
            found.append(f"titanic: {self.left} requests left in the store (orphans)")
        return found


def read_titanic_record(run: Path) -> TitanicRecord:
    """The workers' record, the client's tally and the store after a run."""
    executions: Counter[str] = Counter()
    for record in (run / "executed").glob("*.log"):
        for line in record.read_text(errors="replace").splitlines():
            if line.startswith("client-titanic:"):
                executions[line] += 1
    given = 0
    with contextlib.suppress(OSError, ValueError):
        tally = json.loads((run / "counts" / "client-titanic.json").read_text())
        given = int(tally["titanic_submitted"])
    problem, left = None, 0
    try:
        store = _Store(run / "titanic.db")
    except (TitanicStoreDamaged, OSError) as exc:
        problem = str(exc)
    else:
        left = len(store._db.execute("SELECT id FROM requests").fetchall())
        store.shut()
    return TitanicRecord(executions, given, problem, left)


def judge(
    summary: dict[str, Any],
    audit_code: int,
    tallies: dict[str, dict[str, Any]],
    faults: Faults,
    unexpected: list[str],
    clients: tuple[str, ...] = CLIENTS,
    titanic: TitanicRecord | None = None,
) -> Verdict:
    """The run's verdict from the audit's summary and the clients' own tallies.

    ``titanic``: the titanic profile's record (runs per request, the store).
    """
    failures: list[str] = []
    if audit_code != 0:
        failures.append(f"the audit failed (exit code {audit_code})")
    flags = summary.get("requests", {}).get("flags", {})
    for flag in ("lost", "duplicate_execution", "double_reply", "out_of_order"):
        count = flags.get(flag, {}).get("count", 0)
        if count:
            failures.append(f"audit: {count} {flag.replace('_', ' ')}")
    dual = summary.get("bstar", {}).get("dual_active", [])
    if dual:
        failures.append(f"audit: {len(dual)} interval(s) with two ACTIVE Binary Star servers")
    by_client = summary.get("requests", {}).get("by_client", {})
    rows = []
    for name in clients:
        tally = tallies.get(name)
        if tally is None:
            failures.append(f"{name}: wrote no tally (did it stop cleanly?)")
            continue
        audited = by_client.get(tally["node"])
        if audited is None:
            failures.append(f"{name}: the audit found none of its requests")
            audited = {}
        row = {"client": name, "tally": tally, "audit": audited}
        rows.append(row)
        for key in ("requests", "answered", "abandoned"):
            if tally[key] != audited.get(key):
                failures.append(
                    f"{name}: {key} {tally[key]} by its own count, {audited.get(key)} by the audit"
                )
        for key in ("lost", "interrupted"):
            if audited.get(key):
                failures.append(f"{name}: {audited[key]} {key} by the audit")
        if tally["answered"] == 0:
            failures.append(f"{name}: no request was answered")
        if tally["wrong_replies"]:
            failures.append(f"{name}: {tally['wrong_replies']} wrong replies")
    titanic_tally = tallies.get("client-titanic")
    if titanic_tally is not None:
        for key in ("titanic_pending", "titanic_unknown"):
            if titanic_tally[key]:
                failures.append(f"client-titanic: {titanic_tally[key]} {key.replace('_', ' ')}")
    if titanic is not None:
        failures.extend(titanic.failures())
    for kind in (*faults.kinds, *TITANIC_KILLS):
        if not faults.done[kind]:
            failures.append(f"no {kind} fault happened: the run proves less than it claims")
    failures.extend(f"unexpected: {what}" for what in unexpected)
    return Verdict(rows, failures)


def print_verdict(
    console: Console, verdict: Verdict, summary: dict[str, Any], faults: Faults, header: str
) -> None:
    console.print(header)
    table = Table(title="requests: the client's own count / the audit's")
    for column in ("client", "requests", "answered", "abandoned", "lost", "interrupted", "wrong"):
        table.add_column(column, justify="left" if column == "client" else "right")
    for row in verdict.rows:
        tally, audited = row["tally"], row["audit"]

        def pair(key: str, tally: dict[str, Any] = tally, audited: dict[str, Any] = audited) -> str:
            mark = "" if tally[key] == audited.get(key) else " [red]≠[/red]"
            return f"{tally[key]} / {audited.get(key, '-')}{mark}"

        table.add_row(
            row["client"],
            pair("requests"),
            pair("answered"),
            pair("abandoned"),
            str(audited.get("lost", "-")),
            str(audited.get("interrupted", "-")),
            str(tally["wrong_replies"]),
        )
    console.print(table)
    flags = summary.get("requests", {}).get("flags", {})
    bstar = summary.get("bstar", {})
    counts = summary.get("requests", {}).get("counts", {})
    console.print(
        "audit: "
        + " · ".join(
            f"{label} {flags.get(flag, {}).get('count', 0)}"
            for flag, label in (
                ("lost", "lost"),
                ("duplicate_execution", "duplicate executions"),
                ("double_reply", "double replies"),
                ("out_of_order", "out of order"),
                ("re_executed", "re-executed (allowed)"),
                ("interrupted", "interrupted by kill -9"),
            )
        )
        + f" · dual-ACTIVE intervals {len(bstar.get('dual_active', []))}"
        + f" · failovers {len(bstar.get('failovers', []))}"
        + f" · executions {counts.get('executions', 0)}"
        + f" · dedupe hits {counts.get('dedupe_hits', 0)}"
    )
    console.print(
        "faults: "
        + ", ".join(f"{kind} {faults.done[kind]}" for kind in (*faults.kinds, *TITANIC_KILLS))
        + (
            f" (skipped: {', '.join(f'{k} {n}' for k, n in faults.skipped.items())})"
            if faults.skipped
            else ""
        )
    )
    if verdict.passed:
        console.print("[bold green]verdict: PASS[/bold green]")
    else:
        console.print("[bold red]verdict: FAIL[/bold red]")
        for failure in verdict.failures:
            console.print(f"  - {failure}")


# ------------------------------------------------------------------ the run


def check_machine() -> None:
    if sys.platform != "linux":
        raise Unavailable("make chaos needs Linux network namespaces")
    if os.geteuid() != 0:
        raise Unavailable("make chaos needs root (network namespaces, TAP devices)")
    if shutil.which("ip") is None:
        raise Unavailable("iproute2's `ip` is missing")
    if not os.path.exists("/dev/net/tun"):
        raise Unavailable("no /dev/net/tun: TAP devices are unavailable")


def audit(run: Path, java: str, cluster: bool) -> tuple[int, dict[str, Any], str]:
    @contextlib.contextmanager
    def master() -> Iterator[str]:
        if cluster:
            with standalone_cluster(run / "logs" / "spark", java, cores=2) as url:
                yield url
        else:
            yield "local[*]"

    with master() as url:
        result = subprocess.run(
            [sys.executable, "-m", "trizre.audit", str(run / "traces"),
             "--out", str(run / "report"), "--master", url, "--quiet"],
            env=spark_env(java), capture_output=True, text=True, timeout=900, check=False,
        )  # fmt: skip
    (run / "logs" / "audit.log").write_text(result.stdout + result.stderr)
    try:
        summary = json.loads((run / "report" / "summary.json").read_text())
    except (OSError, ValueError):
        summary = {}
    return result.returncode, summary, url


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--profile", choices=sorted(PROFILES), default="default")
    parser.add_argument("--duration", type=float, help="seconds of faults (profile's default)")
    parser.add_argument(
        "--netem",
        choices=("both", "loss20", "reorder", "clean"),
        default="both",
        help="link impairment; both: loss20 for the first half, reorder for the second",
    )
    parser.add_argument(
        "--rate", type=float, default=None, help="requests/s per client (10; titanic: 40)"
    )
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--out", type=Path, default=Path("chaos-run"))
    parser.add_argument("--local-spark", action="store_true", help="audit in local mode")
    args = parser.parse_args()
    console = Console(highlight=False, width=None if sys.stdout.isatty() else 120)
    profile = PROFILES[args.profile]
    duration = args.duration if args.duration is not None else profile["duration"]
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    rng = random.Random(seed)
    try:
        check_machine()
        try:
            java = _java.find_java().path
        except _java.JavaError as exc:
            raise Unavailable(f"no Java for the audit: {exc}") from exc
    except Unavailable as exc:
        console.print(f"chaos: cannot run here: {exc}")
        return 2

    def interrupted(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)  # unwinds: processes killed, namespaces deleted

    signal.signal(signal.SIGTERM, interrupted)
    run = args.out.resolve()
    shutil.rmtree(run, ignore_errors=True)
    for sub in ("logs", "traces", "ready", "state", "counts"):
        (run / sub).mkdir(parents=True)
    all_slots = slots(args.rate or profile.get("rate", 10.0), args.profile)
    clients = tuple(profile.get("clients", CLIENTS))
    first, second = ("loss20", "reorder") if args.netem == "both" else (args.netem, args.netem)
    header = (
        f"chaos: profile {args.profile}, {duration:.0f} s of faults, links {first}"
        + (f" then {second}" if second != first else "")
        + f", seed {seed}, {len(all_slots)} processes, output {run}"
    )
    console.print(header)
    started = time.monotonic()
    tag = f"tzc{os.getpid() % 100000}"
    with Network(tag, [s.name for s in all_slots], first, seed, run) as network:
        fleet = Fleet(network, all_slots, run)
        try:
            servers = [s.name for s in all_slots if not s.role.startswith("client-")]
            for name in servers:
                fleet.start(fleet.slots[name])
            fleet.wait_ready(servers)
            for name in clients:
                fleet.start(fleet.slots[name])
            fleet.wait_ready(list(clients))
            console.print(
                f"all {len(all_slots)} processes up after {time.monotonic() - started:.1f} s"
            )

            def half() -> None:
                if second != first:
                    network.command(f"profile {second}")
                    console.print(f"links now {second}")

            faults = fault_loop(
                fleet,
                network,
                rng,
                duration=duration,
                fault_every=profile["fault_every"],
                on_half=half,
                say=console.print,
                kinds_to_do=tuple(profile.get("faults", FAULT_KINDS)),
            )
            fleet.wait_ready(servers)
            time.sleep(profile["settle"])  # presence heals after the last fault (expiry 5 s)
            fleet.stop(list(clients), limit=180.0)
            # The passive server first, then the active one, as the procedure says.
            pair = sorted(
                (n for n in ("bs-primary", "bs-backup") if n in fleet.slots),
                key=lambda n: fleet.state(n) == "ACTIVE",
            )
            fleet.stop([n for n in servers if n not in pair], limit=60.0)
            fleet.stop(pair, limit=60.0)
        finally:
            for slot in fleet.slots.values():
                if slot.process is not None and slot.process.poll() is None:
                    slot.process.kill()
                    slot.process.wait()
    tallies = {}
    for name in clients:
        with contextlib.suppress(OSError, ValueError):
            tallies[name] = json.loads((run / "counts" / f"{name}.json").read_text())
    console.print(f"faults over after {time.monotonic() - started:.0f} s; auditing")
    code, summary, master = audit(run, java, cluster=not args.local_spark)
    record = read_titanic_record(run) if args.profile == "titanic" else None
    if record is not None:
        console.print(
            f"titanic: {len(record.executions)} requests ran, {record.given} given an id, "
            f"{sum(record.executions.values())} runs, "
            f"{sum(1 for n in record.executions.values() if n > 1)} ran more than once; "
            f"store {'whole' if record.store is None else 'DAMAGED'}, {record.left} left"
        )
    verdict = judge(summary, code, tallies, faults, fleet.unexpected, clients, record)
    print_verdict(
        console,
        verdict,
        summary,
        faults,
        f"audit on {master}, exit code {code}; report in {run / 'report'}",
    )
    (run / "verdict.json").write_text(
        json.dumps(
            {
                "seed": seed,
                "profile": args.profile,
                "duration": duration,
                "netem": [first, second],
                "faults": dict(faults.done),
                "skipped": dict(faults.skipped),
                "tallies": tallies,
                "titanic": None
                if record is None
                else {
                    "ran": len(record.executions),
                    "runs": sum(record.executions.values()),
                    "given": record.given,
                    "ran_twice": sum(1 for n in record.executions.values() if n > 1),
                    "store": record.store,
                    "left": record.left,
                },
                "failures": verdict.failures,
                "passed": verdict.passed,
                "seconds": round(time.monotonic() - started, 1),
            },
            indent=1,
        )
    )
    console.print(f"total {time.monotonic() - started:.0f} s")
    return 0 if verdict.passed else 1


if __name__ == "__main__":
    sys.exit(main())
