"""Two network namespaces joined by a veth pair: where the suite runs other implementations.

A copy, cut to what the tool needs, of the test harness in ``tests/support/netns.py``
(the tool ships; the tests do not).  The suite runs in namespace *a*, the
target in *b*; their addresses (10.231.N.1 and .2) exist only inside the
two namespaces, and both are deleted at the end, with every process left in
them (all started by the suite).  Needs Linux, root and iproute2.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence

import attrs

PREFIX = "trizre-conf-"
SUBNET_BASE = "10.231"  # netns: addresses exist only inside our namespaces


def ip_binary() -> str:
    """Path of iproute2's ``ip``."""
    return shutil.which("ip") or "/usr/sbin/ip"


def run_ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """``ip ARGS``, its output captured (``check``: raise on failure)."""
    return subprocess.run(
        [ip_binary(), *args], check=check, capture_output=True, text=True, timeout=30
    )


def unavailable() -> str | None:
    """``None`` when namespaces can be made here, else why not."""
    if sys.platform != "linux":
        return f"network namespaces need Linux, not {sys.platform}"
    if os.geteuid() != 0:
        return "network namespaces need root"
    if not os.path.exists(ip_binary()):
        return "iproute2 `ip` not found"
    return None


@attrs.frozen
class Side:
    """One namespace of the pair: its name, its veth end and that end's address."""

    name: str
    interface: str
    address: str

    def prefix(self) -> list[str]:
        """``ip netns exec NAME``: prepend it to a command to run it inside."""
        return [ip_binary(), "netns", "exec", self.name]


def namespace_inode(name: str) -> str | None:
    """``net:[inode]`` of a named namespace, as /proc/PID/ns/net shows it."""
    try:
        return f"net:[{os.stat(f'/run/netns/{name}').st_ino}]"
    except OSError:
        return None


def pids_in(ns_ids: set[str]) -> list[int]:
    """The processes inside the namespaces with these inodes."""
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if os.readlink(f"/proc/{entry.name}/ns/net") in ns_ids:
                    found.append(int(entry.name))
    return found


def kill(pids: Sequence[int]) -> None:
    """SIGKILL each, ignoring those already gone."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def destroy(names: Sequence[str]) -> None:
    """Kill what is left inside the namespaces, then delete them.

    Every process in them was started by whoever made them.  The
    namespaces are followed by inode, not by name, so a process still on
    its way in (``ip netns exec`` between opening the namespace and
    entering it) is caught by the sweeps after the names are gone;
    otherwise it would keep an orphaned namespace alive.
    """
    ns_ids = {i for i in map(namespace_inode, names) if i is not None}
    kill(pids_in(ns_ids))
    for name in names:
        run_ip("netns", "del", name, check=False)
    quiet = 0
    for _ in range(40):
        pids = pids_in(ns_ids)
        kill(pids)
        quiet = 0 if pids else quiet + 1
        if quiet >= 3:
            break
        time.sleep(0.02)


def join_by_veth(
    a: Side, b: Side, *, prefixlen: int, broadcast: str, made: list[str], limit: float = 5.0
) -> None:
    """Make namespaces ``a`` and ``b``, joined by a veth pair, addressed and up.

    Each namespace's name is appended to ``made`` as soon as it exists, so
    the caller can :func:`destroy` them whatever fails.  Raises
    ``subprocess.CalledProcessError`` when ``ip`` refuses a step, and
    ``RuntimeError`` when a veth end has no carrier within ``limit`` seconds.
    """
    for side in (a, b):
        run_ip("netns", "add", side.name)
        made.append(side.name)
    # Each end is born inside its namespace: nothing shows up in ours.
    run_ip(
        "link", "add", a.interface, "netns", a.name,
        "type", "veth", "peer", "name", b.interface, "netns", b.name,
    )  # fmt: skip
    for side in (a, b):
        run_ip("-n", side.name, "link", "set", "lo", "up")
        run_ip(
            "-n", side.name, "addr", "add", f"{side.address}/{prefixlen}",
            "broadcast", broadcast, "dev", side.interface,
        )  # fmt: skip
        run_ip("-n", side.name, "link", "set", side.interface, "up")
    deadline = time.monotonic() + limit
    for side in (a, b):
        while True:
            out = run_ip("-n", side.name, "-j", "link", "show", side.interface).stdout
            if "LOWER_UP" in json.loads(out)[0].get("flags", []):
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"{side.interface} in {side.name} never came up")
            time.sleep(0.02)


@contextlib.contextmanager
def namespace_pair() -> Iterator[tuple[Side, Side]]:
    """Two fresh namespaces (suite, target) joined by a veth pair; deleted on the way out.

    Raises ``RuntimeError`` saying why when namespaces cannot be made.
    """
    reason = unavailable()
    if reason is not None:
        raise RuntimeError(f"network namespaces unavailable: {reason}")
    pid = os.getpid()
    n = 1 + (pid * 13) % 250
    base = f"{PREFIX}{pid}"
    a = Side(f"{base}-a", f"tc{n}a", f"{SUBNET_BASE}.{n}.1")  # netns
    b = Side(f"{base}-b", f"tc{n}b", f"{SUBNET_BASE}.{n}.2")  # netns
    made: list[str] = []
    try:
        join_by_veth(a, b, prefixlen=24, broadcast=f"{SUBNET_BASE}.{n}.255", made=made)
        yield a, b
    finally:
        destroy(made)
