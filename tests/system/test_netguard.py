"""The loopback guard must trip; these tests prove it does.

Every socket that tries to leave loopback here is also pinned to the ``lo``
device (SO_BINDTODEVICE / ZMQ_BINDTODEVICE), so even a broken guard could
not put a packet on the shared network.  198.51.100.0/24 is TEST-NET-2.
"""

from __future__ import annotations

import socket
import textwrap
from pathlib import Path

import pytest
import trio
import zmq

from tests.support import _netguard

OUTSIDE = "198.51.100.1"  # ok-net: TEST-NET-2, never reached (socket pinned to lo, guard trips)


def _pinned_udp() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, b"lo")
    return sock


def _take_violations() -> list[str]:
    found = list(_netguard.state.violations)
    _netguard.state.violations.clear()
    return found


def test_udp_sendto_outside_loopback_trips() -> None:
    with _pinned_udp() as sock, pytest.raises(_netguard.NetworkGuardError):
        sock.sendto(b"x", (OUTSIDE, 9))
    assert _take_violations() == [f"socket.sendto to ('{OUTSIDE}', 9)"]


@pytest.mark.parametrize("target", ["<broadcast>", "255.255.255.255"])  # ok-net: guard trips
def test_broadcast_outside_loopback_trips(target: str) -> None:
    with _pinned_udp() as sock, pytest.raises(_netguard.NetworkGuardError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
        sock.sendto(b"x", (target, 9))
    assert len(_take_violations()) == 1


def test_ipv6_multicast_beacon_trips() -> None:
    """What an ipv6=True node sends (ff02::1 on an interface): only ever inside a namespace."""
    with socket.socket(socket.AF_INET6, socket.SOCK_DGRAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, b"lo")
        with pytest.raises(_netguard.NetworkGuardError):
            sock.sendto(b"x", ("ff02::1", 9, 0, socket.if_nametoindex("lo")))  # ok-net: trips
    assert len(_take_violations()) == 1


def test_tcp_connect_outside_loopback_trips() -> None:
    with socket.socket() as sock, pytest.raises(_netguard.NetworkGuardError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, b"lo")
        sock.connect((OUTSIDE, 9))
    assert len(_take_violations()) == 1


def test_name_lookup_is_refused() -> None:
    """Resolving a name may send DNS queries off the machine: refused."""
    with pytest.raises(_netguard.NetworkGuardError):
        socket.getaddrinfo("example.invalid", 9)
    assert _take_violations() == ["socket.getaddrinfo of 'example.invalid'"]
    socket.getaddrinfo("localhost", 9)
    socket.getaddrinfo("127.0.0.1", 9)
    socket.getaddrinfo(None, 9, flags=socket.AI_PASSIVE)
    assert _take_violations() == []


def test_names_are_not_loopback_addresses() -> None:
    assert not _netguard.address_is_allowed(socket.AF_INET, ("example.invalid", 9))
    assert not _netguard.address_is_allowed(socket.AF_INET, ("", 9))
    assert _netguard.address_is_allowed(socket.AF_INET6, ("::1", 9, 0, 0))
    assert _netguard.address_is_allowed(socket.AF_UNIX, "/tmp/sock")


async def test_trio_socket_outside_loopback_trips() -> None:
    with trio.fail_after(5):
        sock = trio.socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        with sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, b"lo")
            with pytest.raises(_netguard.NetworkGuardError):
                await sock.sendto(b"x", (OUTSIDE, 9))
    assert len(_take_violations()) == 1


def test_zmq_connect_outside_loopback_trips() -> None:
    ctx = zmq.Context.instance()
    with ctx.socket(zmq.DEALER) as sock:
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.BINDTODEVICE, b"lo")
        with pytest.raises(_netguard.NetworkGuardError):
            sock.connect(f"tcp://{OUTSIDE}:9")
    assert _take_violations() == [f"zmq connect to 'tcp://{OUTSIDE}:9'"]


@pytest.mark.parametrize("host", ["0.0.0.0", "", OUTSIDE])  # ok-net: servers for others
def test_a_tcp_server_outside_loopback_trips(host: str) -> None:
    with (
        socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock,
        pytest.raises(_netguard.NetworkGuardError),
    ):
        sock.bind((host, 0))
    assert _take_violations() == [f"TCP bind to {(host, 0)!r}"]


def test_a_zmq_server_outside_loopback_trips() -> None:
    with zmq.Context.instance().socket(zmq.ROUTER) as sock:
        sock.setsockopt(zmq.LINGER, 0)
        with pytest.raises(_netguard.NetworkGuardError):
            sock.bind("tcp://*:0")
    assert _take_violations() == ["zmq bind to 'tcp://*:0'"]


def test_loopback_servers_and_udp_listeners_pass() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as tcp:
        tcp.bind(("127.0.0.1", 0))
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
        udp.bind(("", 0))  # listening for beacons sends nothing
    with zmq.Context.instance().socket(zmq.ROUTER) as sock:
        sock.setsockopt(zmq.LINGER, 0)
        sock.bind("tcp://127.0.0.1:*")
        sock.bind("ipc:///tmp/trizre-guard-bind-test")
    assert _take_violations() == []


def test_loopback_traffic_passes() -> None:
    """127.255.255.255 is a working broadcast on loopback: allowed."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as rx, _pinned_udp() as tx:
        rx.bind(("127.0.0.1", 0))
        rx.settimeout(5)
        port = rx.getsockname()[1]
        tx.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
        tx.sendto(b"one", ("127.0.0.1", port))
        tx.sendto(b"two", ("127.255.255.255", port))
        assert rx.recv(10) == b"one"
    ctx = zmq.Context.instance()
    with ctx.socket(zmq.DEALER) as sock:
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect("tcp://127.0.0.1:9")
        sock.connect("tcp://[::1]:9")
        sock.connect("ipc:///tmp/trizre-guard-test")
        sock.connect("inproc://guard-test")
    assert _take_violations() == []


@pytest.mark.parametrize(
    ("endpoint", "allowed"),
    [
        ("tcp://127.0.0.1:5670", True),
        ("tcp://127.3.2.1:1", True),
        ("tcp://localhost:1", True),
        ("tcp://[::1]:1", True),
        ("ipc:///tmp/x", True),
        ("inproc://x", True),
        ("tcp://127.0.0.1;198.51.100.1:1", False),  # ok-net: source;dest form, dest is outside
        ("tcp://198.51.100.1;127.0.0.1:1", True),  # ok-net: source iface outside, dest loopback
        (f"tcp://{OUTSIDE}:1", False),
        ("tcp://*:1", False),
        ("tcp://eth0:1", False),
        ("udp://239.0.0.1:5670", False),  # ok-net: multicast, never allowed
        ("tcp://fe80::1%eth0:5670", False),  # ok-net: IPv6 link-local (ipv6=True peers)
        ("tcp://[fe80::1%eth0]:5670", False),  # ok-net: the same, bracketed
    ],
)
def test_endpoint_classification(endpoint: str, allowed: bool) -> None:
    assert _netguard.endpoint_is_allowed(endpoint) is allowed


def test_swallowed_violation_still_fails_the_test(pytester: pytest.Pytester) -> None:
    """A test that catches the guard's error is still reported as failed."""
    root = Path(__file__).resolve().parents[2]
    pytester.makeconftest(
        f"import sys\nsys.path.insert(0, {str(root)!r})\nfrom tests.conftest import *  # noqa\n"
    )
    pytester.makepyfile(
        textwrap.dedent(
            f"""
            import socket

            def test_sneaky():
                s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                s.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, b"lo")
                try:
                    s.sendto(b"x", ("{OUTSIDE}", 9))
                except OSError:
                    pass
                s.close()
            """
        )
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, errors=1)
    assert result.ret != 0
    result.stdout.fnmatch_lines(["*network guard: this test tried to send outside loopback*"])


def test_loopback_tests_keep_to_one_xdist_worker(pytester: pytest.Pytester) -> None:
    """``make test``'s two workers never run two loopback tests at once (fixed ports).

    xdist groups by a suffix on the node id, which pytest 9.2 no longer takes
    (pytest-xdist issue 1386): ungrouped, the six tests spread over both
    workers and this fails.  Hence the pin on pytest in pyproject.toml.
    """
    root = Path(__file__).resolve().parents[2]
    pytester.makeconftest(
        f"import sys\nsys.path.insert(0, {str(root)!r})\nfrom tests.conftest import *  # noqa\n"
    )
    pytester.makeini("[pytest]\nmarkers =\n    netns: in a namespace of its own\n")
    lo_tests = "".join(f"def test_lo_{i}():\n    pass\n\n" for i in range(6))
    netns_tests = "".join(f"@pytest.mark.netns\ndef test_ns_{i}():\n    pass\n\n" for i in range(4))
    pytester.makepyfile(f"import pytest\n\n{lo_tests}{netns_tests}")
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-n", "2", "--dist", "loadgroup", "-v"
    )
    result.assert_outcomes(passed=10)
    # "[gw0] [ 10%] PASSED test_x.py::test_lo_0@loopback"
    ran_on = {
        line.split("::")[-1].split("@")[0].strip(): line.split("]")[0].lstrip("[")
        for line in result.outlines
        if line.startswith("[gw") and " PASSED " in line
    }
    assert len(ran_on) == 10, result.outlines
    assert len({ran_on[f"test_lo_{i}"] for i in range(6)}) == 1, ran_on
