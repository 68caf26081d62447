"""The loopback guard: no test may send a packet anywhere but loopback.

This machine's other interface leads to a shared network, so a mistake in a
test (a beacon to the global broadcast, a connect to a LAN address) must fail the
test loudly instead of leaving the box.  Two doors are watched:

* Python sockets, through an audit hook on ``socket.connect``,
  ``socket.sendto`` and ``socket.sendmsg`` (the hook raises, so the call
  itself fails, and the violation is recorded so that a test which swallows
  the exception still fails at teardown);
* libzmq, which opens its TCP connections in C where no audit event fires:
  ``zmq.Socket.connect`` is wrapped to check the endpoint first;
* servers: a TCP socket (the monitoring page, a bridge) or a zmq socket
  bound to anything but loopback would serve other machines, so
  ``socket.bind`` of a stream socket and ``zmq.Socket.bind`` are checked too.

Audit hooks cannot be removed, so the hook is installed once and consults
:data:`state`, which the conftest fixture arms for every test.  A test that
runs inside a network namespace it created itself declares it with the
``netns`` marker and the guard stands aside for it.
"""

from __future__ import annotations

import ipaddress
import re
import socket
import sys
from typing import Any

import zmq


class NetworkGuardError(OSError):
    """A test tried to send outside loopback."""


class _State:
    def __init__(self) -> None:
        self.armed = False
        self.violations: list[str] = []


state = _State()

_LOCAL_NAMES = {"localhost", "ip6-localhost", "ip6-loopback"}


def _host_is_loopback(host: str) -> bool:
    host = host.strip("[]").split("%", 1)[0]
    if host.lower() in _LOCAL_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        # A name we would have to resolve, "<broadcast>", "" (INADDR_ANY):  # ok-net
        # none of them is provably loopback, so none is allowed.
        return False


def _host_is_numeric_or_local(host: str) -> bool:
    if host.lower() in _LOCAL_NAMES:
        return True
    try:
        ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return False
    return True


def address_is_allowed(family: int, address: object) -> bool:
    """True when a socket address names only this host's loopback."""
    if family == getattr(socket, "AF_UNIX", object()) or isinstance(address, (str, bytes)):
        return True  # Unix-domain sockets never leave the machine.
    if family == getattr(socket, "AF_NETLINK", object()):
        return True
    if isinstance(address, tuple) and address and isinstance(address[0], str):
        return _host_is_loopback(address[0])
    return False


_SENDS = frozenset({"socket.connect", "socket.sendto", "socket.sendmsg"})
_LOOKUPS = frozenset({"socket.getaddrinfo", "socket.gethostbyname", "socket.gethostbyname_ex"})


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if not state.armed:
        return
    if event in _LOOKUPS:
        # A name lookup can query a DNS server off the machine; only
        # numeric hosts, loopback names and the wildcard are resolved.
        host = args[0]
        if isinstance(host, bytes):
            host = host.decode("ascii", "replace")
        if host is not None and host != "" and not _host_is_numeric_or_local(host):
            _violate(f"{event} of {host!r}")
        return
    if event == "socket.bind":
        # A listening TCP socket (the monitoring page, a bridge) on anything
        # but loopback would serve other machines: refused as a send is.
        sock, address = args[0], args[1]
        if sock.type == socket.SOCK_STREAM and not address_is_allowed(sock.family, address):
            _violate(f"TCP bind to {address!r}")
        return
    if event not in _SENDS:
        return
    sock, address = args[0], args[1]
    if address is None:  # sendmsg on a connected socket: checked at connect
        return
    if not address_is_allowed(sock.family, address):
        _violate(f"{event} to {address!r}")


_ZMQ_ENDPOINT = re.compile(
    r"^(?:tcp|udp|ws|wss|pgm|epgm|norm)://(?:[^;]*;)?(?P<host>\[[^\]]*\]|[^:]*):"
)


def endpoint_is_allowed(endpoint: str) -> bool:
    """True when a zmq endpoint stays on this machine (loopback, ipc, inproc)."""
    if endpoint.startswith(("ipc://", "inproc://")):
        return True
    match = _ZMQ_ENDPOINT.match(endpoint)
    return match is not None and _host_is_loopback(match.group("host"))


def _violate(what: str) -> None:
    state.violations.append(what)
    raise NetworkGuardError(f"network guard: {what} would leave loopback")


_original_zmq_connect = zmq.Socket.connect


def _guarded_connect(self: zmq.Socket[Any], addr: str) -> Any:
    if state.armed and not endpoint_is_allowed(addr):
        _violate(f"zmq connect to {addr!r}")
    return _original_zmq_connect(self, addr)


_original_zmq_bind = zmq.Socket.bind


def _guarded_bind(self: zmq.Socket[Any], addr: str) -> Any:
    # Only network transports: a malformed endpoint is libzmq's to refuse.
    if state.armed and _ZMQ_ENDPOINT.match(addr) and not endpoint_is_allowed(addr):
        _violate(f"zmq bind to {addr!r}")
    return _original_zmq_bind(self, addr)


_installed = False


def install() -> None:
    """Install the audit hook and the zmq wrapper (idempotent)."""
    global _installed
    if _installed:
        return
    sys.addaudithook(_audit)
    zmq.Socket.connect = _guarded_connect  # type: ignore[method-assign]
    zmq.Socket.bind = _guarded_bind  # type: ignore[method-assign]
    _installed = True
