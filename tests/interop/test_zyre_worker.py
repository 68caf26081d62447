"""benchmarks/zyre_worker.c starts zyre only on the benchmark's own veth.

zyre broadcasts its beacons on the interface it is told, so the worker
checks where it runs before any node exists (shared/DESIGN.md section 3):
a namespace tests/support/netns.py made, a ``tz<N>a|b`` veth with an address in
10.231/16, and no address anywhere outside loopback, 10.231/16 and IPv6
link-local.  Here it is made to refuse in namespaces the tests create (and
in our own, where it stops at its first check), and to start once where
bench_zre.py runs it.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator, Sequence

import pytest

from benchmarks.bench_zre import ZYRE_WORKER, zyre_worker_unavailable
from tests.interop import OUTER_NETNS_VAR
from tests.support import netns
from tests.support.netns import Namespace, NetnsPair

netns_pair = netns.netns_pair  # the fixture

REFUSED = 3  # the worker's exit status when it refuses
STOP = '{"cmd": "stop"}\n'

_reason = zyre_worker_unavailable()
pytestmark = pytest.mark.skipif(_reason is not None, reason=f"no zyre worker: {_reason}")


def _run(
    namespace: Namespace | None, interface: str, *, outer: str | None = None
) -> subprocess.CompletedProcess[str]:
    """The worker with ``--interface``, inside ``namespace`` (None: our own)."""
    env = dict(os.environ)
    env[OUTER_NETNS_VAR] = outer if outer is not None else os.readlink("/proc/self/ns/net")
    argv = [str(ZYRE_WORKER), "--name", "W", "--interface", interface, "--port", "29999"]
    return subprocess.run(
        [*(namespace.exec_prefix() if namespace else []), *argv],
        input=STOP,
        check=False,
        capture_output=True,
        text=True,
        timeout=30,
        env=env,
    )


def _refused(result: subprocess.CompletedProcess[str], why: str) -> None:
    assert result.returncode == REFUSED, (result.stdout, result.stderr)
    assert "refusing to start" in result.stderr and why in result.stderr, result.stderr
    assert result.stdout == "", "nothing may start before the checks"


def _ip(namespace: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [netns.ip_binary(), "-n", namespace, *args],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def test_refuses_in_our_own_namespace() -> None:
    # The interface does not exist here either: a second fence.
    _refused(_run(None, "tz999a"), "the harness's own network namespace")


@pytest.mark.netns
@pytest.mark.skipif(netns.netns_available() is not None, reason="no network namespaces")
def test_refuses_a_namespace_the_benchmark_did_not_make() -> None:
    name = f"zyreworker-test-{os.getpid()}"  # not tests/support/netns.py's trizre-*
    subprocess.run([netns.ip_binary(), "netns", "add", name], check=True, timeout=30)
    try:
        _ip(name, "link", "add", "tz251a", "type", "veth", "peer", "name", "tz251b")
        _ip(name, "addr", "add", "10.231.251.1/24", "dev", "tz251a")  # netns: inside it only
        _ip(name, "link", "set", "tz251a", "up")
        outside = Namespace(name, "10.231.251.1", "tz251a", "10.231.251.255")  # netns
        _refused(_run(outside, "tz251a"), "none of the benchmark's")
    finally:
        subprocess.run([netns.ip_binary(), "netns", "del", name], check=False, timeout=30)


@contextlib.contextmanager
def _added(namespace: str, *args: Sequence[str]) -> Iterator[bool]:
    """Run each ``ip -n namespace`` command; undo by deleting the link made."""
    made = all(_ip(namespace, *argv).returncode == 0 for argv in args)
    try:
        yield made
    finally:
        _ip(namespace, "link", "del", "tz999a")


@pytest.mark.netns
def test_refuses_anything_but_the_benchmarks_veth(netns_pair: NetnsPair) -> None:
    a, b = netns_pair
    outer = os.readlink("/proc/self/ns/net")
    _refused(_run(a, "lo", outer=outer), "tz<N>a or tz<N>b")
    _refused(_run(a, "eth0", outer=outer), "tz<N>a or tz<N>b")
    _refused(_run(a, b.interface, outer=outer), "names no interface")
    # The harness's own namespace, named by the variable the harness sets.
    inside = a.run("readlink", "/proc/self/ns/net").stdout.strip()
    _refused(_run(a, a.interface, outer=inside), "the harness's own network namespace")
    # A tz-named interface that is no veth (a bridge, where the kernel has them).
    with _added(
        a.name,
        ("link", "add", "tz999a", "type", "bridge"),
        ("addr", "add", f"{netns.SUBNET_BASE}.254.1/24", "dev", "tz999a"),  # netns
    ) as made:
        if made:
            _refused(_run(a, "tz999a", outer=outer), "is not a veth")
    # An address outside the test network anywhere in the namespace.
    stray = "192.0.2.1/24"  # TEST-NET-1, never routed; and only inside namespace a
    assert _ip(a.name, "addr", "add", stray, "dev", a.interface).returncode == 0
    try:
        _refused(_run(a, a.interface, outer=outer), "outside 127/8 and 10.231/16")
    finally:
        _ip(a.name, "addr", "del", stray, "dev", a.interface)
    # Where bench_zre.py runs it, it starts (and stops at once on "stop").
    started = _run(a, a.interface, outer=outer)
    assert started.returncode == 0, started.stderr
    assert started.stdout.startswith('{"event":"started"'), started.stdout
