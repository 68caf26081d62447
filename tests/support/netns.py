"""Network-namespace harness: throwaway namespaces joined by a veth pair.

Everything that beacons on a real interface (pyre, zyre, trizre in LAN mode)
runs only inside namespaces made here (shared/DESIGN.md section 3).  The veth
pair is created with each end directly inside its namespace, so no interface
ever appears in the machine's own namespace, and a namespace's only links are
its ``lo`` and its veth end: whatever it sends can reach the other namespace
of the pair and nothing else.

Use::

    from tests.support import netns
    from tests.support.netns import Agent, NetnsPair

    netns_pair = netns.netns_pair  # the fixture (an import would trip ruff F811)

    @pytest.mark.netns
    def test_x(netns_pair: NetnsPair) -> None:
        a, b = netns_pair                      # a.name, a.address, a.interface, a.broadcast
        a.run("python", "-c", "...")           # = ip netns exec a.name python -c ...
        with Agent(pyre_agent_command("A"), namespace=a) as agent:
            agent.expect_event("ENTER", timeout=5)

or, outside pytest, ``with open_netns_pair() as pair: ...``.  Both namespaces
are deleted afterwards whatever happens (exception, KeyboardInterrupt), after
killing any process still inside them (all of them were started by the test).
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import json
import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import IO, Any

import pytest

from tests.interop import OUTER_NETNS_VAR

# The namespace primitives are the ones the conformance suite ships.
from trizre.conformance._netns import SUBNET_BASE, ip_binary
from trizre.conformance._netns import Side as _Side
from trizre.conformance._netns import destroy as _destroy
from trizre.conformance._netns import join_by_veth as _join_by_veth
from trizre.conformance._netns import run_ip as _run_ip
from trizre.conformance._netns import unavailable as _unavailable

PREFIX = "trizre-"

_counter = itertools.count(1)


@functools.cache
def netns_available() -> str | None:
    """None when namespaces with veth pairs can be made here, else why not."""
    reason = _unavailable()  # Linux, root, iproute2: the conformance suite's checks
    if reason is not None:
        return reason
    probe = f"{PREFIX}probe-{os.getpid()}-{next(_counter)}"
    try:
        made = _run_ip("netns", "add", probe, check=False)
        if made.returncode != 0:
            return f"`ip netns add` failed: {made.stderr.strip()}"
        try:
            veth = _run_ip(
                "-n", probe, "link", "add", "tzp0", "type", "veth", "peer", "name", "tzp1",
                check=False,
            )  # fmt: skip
            if veth.returncode != 0:
                return f"cannot create a veth pair: {veth.stderr.strip()}"
        finally:
            _run_ip("netns", "del", probe, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"cannot run `ip`: {exc}"
    return None


@dataclass(frozen=True)
class Namespace:
    """One side of a pair: a namespace with ``lo`` and one veth end, both up."""

    name: str
    address: str  # netns: 10.231.N.x, inside the namespace only
    interface: str
    broadcast: str  # netns: 10.231.N.255
    prefixlen: int = 24

    def exec_prefix(self) -> list[str]:
        """``["ip", "netns", "exec", name]``: prepend it to run a command inside."""
        return [ip_binary(), "netns", "exec", self.name]

    def cmd(self, *argv: str) -> list[str]:
        return [*self.exec_prefix(), *argv]

    def run(
        self, *argv: str, timeout: float = 30, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.cmd(*argv), check=check, capture_output=True, text=True, timeout=timeout
        )

    def pids(self) -> list[int]:
        out = _run_ip("netns", "pids", self.name, check=False).stdout
        return [int(p) for p in out.split()]


@dataclass(frozen=True)
class NetnsPair:
    a: Namespace
    b: Namespace
    subnet: int

    def __iter__(self) -> Iterator[Namespace]:
        return iter((self.a, self.b))


def _subnet_for(pid: int, serial: int) -> int:
    # Unique per pair within a run (up to 250 pairs); runs that happen to
    # pick the same N do not clash, since every pair is its own island.
    return 1 + (pid * 7 + serial) % 250


def list_namespaces() -> list[str]:
    """Names of all namespaces ``ip netns list`` shows."""
    out = _run_ip("netns", "list", check=False).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


@contextlib.contextmanager
def open_netns_pair() -> Iterator[NetnsPair]:
    """Two fresh namespaces joined by a veth pair, deleted on the way out."""
    reason = netns_available()
    if reason is not None:
        raise RuntimeError(f"network namespaces unavailable: {reason}")
    pid, serial = os.getpid(), next(_counter)
    n = _subnet_for(pid, serial)
    base = f"{PREFIX}{pid}-{serial}"
    a = Namespace(
        name=f"{base}-a",
        address=f"{SUBNET_BASE}.{n}.1",  # netns
        interface=f"tz{n}a",
        broadcast=f"{SUBNET_BASE}.{n}.255",  # netns
    )
    b = Namespace(
        name=f"{base}-b",
        address=f"{SUBNET_BASE}.{n}.2",  # netns
        interface=f"tz{n}b",
        broadcast=f"{SUBNET_BASE}.{n}.255",  # netns
    )
    created: list[str] = []
    try:
        _join_by_veth(
            _Side(a.name, a.interface, a.address),
            _Side(b.name, b.interface, b.address),
            prefixlen=a.prefixlen,
            broadcast=a.broadcast,
            made=created,
        )
        yield NetnsPair(a, b, n)
    finally:
        _destroy(created)


def destroy_namespaces(names: Sequence[str]) -> None:
    """Kill every process left inside ``names``, then delete them (missing ones too)."""
    _destroy(names)


@contextlib.contextmanager
def open_lo_namespace(name: str) -> Iterator[str]:
    """A fresh namespace ``name`` with only ``lo``, up; destroyed on the way out.

    For runs that keep all their traffic on one namespace's loopback
    (``make scale``, the cost curve): whatever is still running inside is
    killed first, whatever happened.
    """
    _run_ip("netns", "add", name)
    try:
        _run_ip("-n", name, "link", "set", "lo", "up")
        yield name
    finally:
        _destroy([name])


@pytest.fixture
def netns_pair() -> Iterator[NetnsPair]:
    """A :class:`NetnsPair`; the test is skipped when namespaces are unavailable.

    Mark the test ``@pytest.mark.netns`` so the loopback guard lets it be.
    """
    reason = netns_available()
    if reason is not None:
        pytest.skip(reason)
    with open_netns_pair() as pair:
        yield pair


# --------------------------------------------------------------------------
# UDP broadcast probes (one-liners run inside the namespaces)

_RECEIVER = r"""
import socket, sys
host, port, wait = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
s.bind((host, port))
s.settimeout(wait)
print("ready", flush=True)
try:
    data, peer = s.recvfrom(2048)
    print("got", data.decode(), peer[0], flush=True)
except socket.timeout:
    print("none", flush=True)
"""

_SENDER = r"""
import socket, sys, time
target, port, payload = sys.argv[1], int(sys.argv[2]), sys.argv[3].encode()
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
for _ in range(3):
    s.sendto(payload, (target, port))
    time.sleep(0.05)
"""


@dataclass(frozen=True)
class Heard:
    namespace: str
    bind: str
    payload: str | None
    source: str | None


def broadcast_probe(
    sender: Namespace,
    receivers: Sequence[tuple[Namespace, str]],
    *,
    port: int = 45670,
    wait: float = 3.0,
) -> list[Heard]:
    """Send a UDP broadcast to ``sender.broadcast`` from inside ``sender``.

    Each receiver is ``(namespace, bind_host)``: a separate process bound to
    ``(bind_host, port)`` with SO_REUSEADDR and SO_REUSEPORT (as pyre's
    zbeacon does), so several receivers may share a namespace and a port.
    Returns what each receiver heard (``payload`` None: nothing).
    """
    payload = f"probe-{os.getpid()}-{next(_counter)}"
    procs: list[tuple[Namespace, str, subprocess.Popen[str]]] = []
    try:
        for ns, host in receivers:
            proc = subprocess.Popen(
                ns.cmd(sys.executable, "-c", _RECEIVER, host, str(port), str(wait)),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            procs.append((ns, host, proc))
            assert proc.stdout is not None
            first = proc.stdout.readline().strip()
            if first != "ready":
                raise RuntimeError(f"receiver in {ns.name} failed: {first} {proc.stderr.read()}")
        sender.run(sys.executable, "-c", _SENDER, sender.broadcast, str(port), payload)
        heard: list[Heard] = []
        for ns, host, proc in procs:
            out, err = proc.communicate(timeout=wait + 10)
            words = out.split()
            if words[:1] == ["got"]:
                heard.append(Heard(ns.name, host, words[1], words[2]))
            elif words[:1] == ["none"]:
                heard.append(Heard(ns.name, host, None, None))
            else:
                raise RuntimeError(f"receiver in {ns.name} said {out!r} {err!r}")
        return heard
    finally:
        for _, _, proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


# --------------------------------------------------------------------------
# Agents: a process speaking the JSON-lines protocol of tests/interop


Event = dict[str, Any]


class Agent:
    """One agent process (pyre, trizre, ...) driven over JSON lines.

    ``Agent(argv, namespace=ns)`` runs ``ip netns exec ns.name *argv``.
    A reader thread timestamps every stdout line (``event["_t"]``,
    ``time.monotonic()`` in this process) and queues it; :meth:`expect`
    takes events in arrival order, keeping those that did not match for
    later calls, so nothing that arrives early is lost.  ``history`` holds
    every event ever read, matched or not.
    """

    def __init__(
        self,
        argv: Sequence[str],
        *,
        namespace: Namespace | None = None,
        label: str | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        self.label = label or (argv[0] if argv else "agent")
        self.namespace = namespace
        command = [*(namespace.exec_prefix() if namespace else []), *argv]
        env = dict(os.environ if env is None else env)
        # Lets the agent check that it is not running in our namespace.
        env[OUTER_NETNS_VAR] = os.readlink("/proc/self/ns/net")
        self.started_at = time.monotonic()
        self.proc = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            bufsize=1,
            env=env,
        )
        self.history: list[Event] = []
        self.stderr_lines: list[str] = []
        self._pending: list[Event] = []
        self._queue: queue.Queue[Event | None] = queue.Queue()
        self._eof = False
        assert self.proc.stdout is not None and self.proc.stderr is not None
        self._readers = [
            threading.Thread(target=self._read_stdout, args=(self.proc.stdout,), daemon=True),
            threading.Thread(target=self._read_stderr, args=(self.proc.stderr,), daemon=True),
        ]
        for reader in self._readers:
            reader.start()
        self.info: Event = {}

    # -- reading ----------------------------------------------------------

    def _read_stdout(self, stream: IO[str]) -> None:
        for line in stream:
            now = time.monotonic()
            try:
                event = json.loads(line)
                if not isinstance(event, dict):
                    raise ValueError
            except ValueError:
                event = {"event": "_raw", "line": line.rstrip("\n")}
            event["_t"] = now
            self._queue.put(event)
        self._queue.put(None)

    def _read_stderr(self, stream: IO[str]) -> None:
        for line in stream:
            self.stderr_lines.append(line.rstrip("\n"))

    def _take(self, timeout: float) -> Event | None:
        """Next event from the process, or None on timeout / end of output."""
        if self._eof:
            return None
        try:
            item = self._queue.get(timeout=max(timeout, 0))
        except queue.Empty:
            return None
        if item is None:
            self._eof = True
            return None
        self.history.append(item)
        return item

    def expect(self, predicate: Callable[[Event], bool], timeout: float = 10.0) -> Event:
        """The first event (oldest first) for which ``predicate`` is true.

        Raises AssertionError, listing every event seen and the stderr tail,
        when none turns up within ``timeout`` seconds or the process ends.
        """
        for i, event in enumerate(self._pending):
            if predicate(event):
                return self._pending.pop(i)
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            event = self._take(remaining)
            if event is None:
                why = "its output ended" if self._eof else f"{timeout} s passed"
                raise AssertionError(f"{self.label}: no matching event, {why}.\n{self.describe()}")
            if predicate(event):
                return event
            self._pending.append(event)

    def expect_event(self, kind: str, timeout: float = 10.0, **fields: Any) -> Event:
        """:meth:`expect` an event of type ``kind`` whose fields equal ``fields``."""

        def match(event: Event) -> bool:
            return event.get("event") == kind and all(event.get(k) == v for k, v in fields.items())

        return self.expect(match, timeout)

    def started(self, timeout: float = 20.0) -> Event:
        """Wait for ``started``; keep it in :attr:`info` (uuid, name, ...)."""
        if not self.info:
            self.info = self.expect_event("started", timeout)
        return self.info

    @property
    def uuid(self) -> str:
        return str(self.started()["uuid"])

    def describe(self) -> str:
        lines = [f"events seen by {self.label} (exit code {self.proc.poll()}):"]
        for event in self.history:
            shown = {k: v for k, v in event.items() if k != "_t"}
            lines.append(f"  +{event['_t'] - self.started_at:8.3f}s {shown}")
        if self.stderr_lines:
            lines.append("stderr (last 30 lines):")
            lines += [f"  {line}" for line in self.stderr_lines[-30:]]
        return "\n".join(lines)

    # -- writing and stopping ----------------------------------------------

    def send(self, cmd: Event) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()

    def stop(self, timeout: float = 15.0) -> int:
        """Ask politely (``stop``, then EOF), then terminate, then kill.

        Always leaves the process reaped; returns its exit code.
        """
        if self.proc.poll() is None:
            with contextlib.suppress(OSError, ValueError):
                self.send({"cmd": "stop"})
            with contextlib.suppress(OSError, ValueError):
                assert self.proc.stdin is not None
                self.proc.stdin.close()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.terminate()
                try:
                    self.proc.wait(5)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait()
        for reader in self._readers:
            reader.join(5)
        # Move whatever was still queued into history/pending.
        while (event := self._take(0)) is not None:
            self._pending.append(event)
        with contextlib.suppress(OSError, ValueError):
            assert self.proc.stdin is not None
            self.proc.stdin.close()
        return self.proc.returncode

    def __enter__(self) -> Agent:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
