"""Interop agents: standalone scripts that drive one ZRE node over JSON lines.

An agent is started inside a network namespace the test created (see
``tests/support/netns.py``), reads commands on stdin and writes events on stdout, one
JSON object per line.  The protocol, shared by every agent script:

Commands (stdin)::

    {"cmd": "join", "group": G}
    {"cmd": "leave", "group": G}
    {"cmd": "whisper", "peer": UUID_HEX, "frames": [BASE64, ...]}
    {"cmd": "shout", "group": G, "frames": [BASE64, ...]}
    {"cmd": "peers"}            -> {"event": "peers", "peers": [UUID_HEX, ...]}
    {"cmd": "stop"}             (stdin EOF means the same)

Events (stdout)::

    {"event": "started", "uuid": HEX, "name": NAME, "endpoint": ...}
    {"event": "ENTER", "peer": HEX, "name": ..., "headers": {...}, "endpoint": ...}
    {"event": "EXIT" | "EVASIVE" | "SILENT", "peer": HEX, "name": ...}
    {"event": "JOIN" | "LEAVE", "peer": HEX, "name": ..., "group": G}
    {"event": "WHISPER", "peer": HEX, "name": ..., "frames": [BASE64, ...]}
    {"event": "SHOUT", "peer": HEX, "name": ..., "group": G, "frames": [...]}
    {"event": "STOP", "peer": HEX, "name": ...}   (our own node stopped)
    {"event": "error", "error": TEXT}             (bad command; the agent goes on)
    {"event": "timeout"}                          (--max-seconds ran out)
    {"event": "exiting"}                          (last line before exit)

This module is imported by the agent scripts themselves (they put the
repository root on ``sys.path``), so it must stay free of pytest and of any
ZRE implementation.
"""

from __future__ import annotations

import base64
import contextlib
import ipaddress
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

INTEROP_DIR = Path(__file__).resolve().parent
PYRE_AGENT = INTEROP_DIR / "pyre_agent.py"

#: The harness puts its own network namespace here (``readlink /proc/self/ns/net``).
OUTER_NETNS_VAR = "TRIZRE_OUTER_NETNS"

#: Every namespace the harness creates numbers its addresses inside this net.
TEST_NETWORK = ipaddress.ip_network("10.231.0.0/16")  # netns: only inside our namespaces


class NotInTestNamespaceError(RuntimeError):
    """An agent was started where its beacons could leave the machine."""


def _ip_binary() -> str:
    return shutil.which("ip") or "/usr/sbin/ip"


def ensure_in_test_namespace() -> None:
    """Refuse to go on unless we run inside a namespace the harness built.

    * our network namespace must differ from PID 1's (when we may read it;
      in a container we may not) and from the one named by the
      ``TRIZRE_OUTER_NETNS`` variable, which the harness sets to its own;
    * every IPv4 address must be loopback or inside :data:`TEST_NETWORK`,
      and every IPv6 address loopback or link-local, so whatever interface
      a ZRE library picks for its beacons, they stay on a veth pair
      between test namespaces.  (This alone refuses the machine's own
      namespace, whose eth0 has an address outside the test network.)
    """
    own = os.readlink("/proc/self/ns/net")
    outer = [os.environ.get(OUTER_NETNS_VAR)]
    with contextlib.suppress(OSError):
        outer.append(os.readlink("/proc/1/ns/net"))
    if own in outer:
        raise NotInTestNamespaceError(
            "refusing to run in the machine's own network namespace; "
            "start agents with `ip netns exec` in a namespace the test created"
        )
    out = subprocess.run(
        [_ip_binary(), "-j", "addr", "show"],
        check=True,
        capture_output=True,
        text=True,
        timeout=10,
    ).stdout
    for link in json.loads(out or "[]"):
        for info in link.get("addr_info", []):
            addr = ipaddress.ip_address(info["local"])
            allowed = addr.is_loopback or (
                addr in TEST_NETWORK if addr.version == 4 else addr.is_link_local
            )
            if not allowed:
                raise NotInTestNamespaceError(
                    f"interface {link.get('ifname')} has {addr}, outside the test network "
                    f"{TEST_NETWORK}; refusing to start a node that could beacon there"
                )


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def unb64(text: str) -> bytes:
    return base64.b64decode(text.encode("ascii"), validate=True)


def frames_to_json(frames: Iterable[bytes]) -> list[str]:
    return [b64(f) for f in frames]


def frames_from_json(frames: Iterable[str]) -> list[bytes]:
    return [unb64(f) for f in frames]


def repo_root() -> Path:
    return INTEROP_DIR.parent.parent


def pyre_agent_command(
    name: str,
    groups: Iterable[str] = (),
    headers: dict[str, str] | None = None,
    *,
    max_seconds: float = 60.0,
    python: str | None = None,
) -> list[str]:
    """The argv that runs the pyre agent (prefix it with a namespace's ``exec``)."""
    argv = [python or sys.executable, "-u", str(PYRE_AGENT), "--name", name]
    for group in groups:
        argv += ["--group", group]
    for key, value in (headers or {}).items():
        argv += ["--header", f"{key}={value}"]
    argv += ["--max-seconds", str(max_seconds)]
    return argv


TRIZRE_AGENT = INTEROP_DIR / "trizre_agent.py"


def trizre_agent_command(
    name: str,
    groups: Iterable[str] = (),
    headers: dict[str, str] | None = None,
    *,
    max_seconds: float = 60.0,
    extra: Iterable[str] = (),
) -> list[str]:
    """The argv that runs the trizre agent (prefix it with a namespace's ``exec``)."""
    argv = [sys.executable, "-u", str(TRIZRE_AGENT), "--name", name]
    for group in groups:
        argv += ["--group", group]
    for key, value in (headers or {}).items():
        argv += ["--header", f"{key}={value}"]
    argv += ["--max-seconds", str(max_seconds), *extra]
    return argv


def zyre_cache() -> Path:
    """Where scripts/build-zyre.sh keeps zyre (``$ZYRE_CACHE``, else ~/.cache/trizre/zyre)."""
    default = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "trizre" / "zyre"
    return Path(os.environ.get("ZYRE_CACHE", default))


def zyre_unavailable() -> str | None:
    """None when zyre's zpinger and our zyre_agent are built; else why not (a skip reason)."""
    for tool in ("zpinger", "zyre_agent"):
        if not (zyre_cache() / "bin" / tool).is_file():
            return (
                f"zyre's {tool} is not built in {zyre_cache()}: run scripts/build-zyre.sh "
                "(make test does; it needs root and apt for libczmq-dev)"
            )
    return None


def zyre_gossip_curve_unavailable() -> str | None:
    """None when zyre's czmq can gossip over CURVE; else why not (a skip reason).

    zyre hands its certificate and the hub's key to czmq's zgossip, whose
    CURVE lives in czmq's DRAFT API: a czmq built without it (Debian's)
    answers "unknown zgossip method" and gossips in the clear.
    scripts/build-zyre.sh builds czmq with drafts into the cache when it
    has czmq's source; the command names are in the library then.
    """
    missing = zyre_unavailable()
    if missing is not None:
        return missing
    lib = zyre_cache() / "lib" / "libczmq.so.4"
    if not lib.is_file() or b"SET PUBLICKEY" not in lib.read_bytes():
        return (
            f"zyre in {zyre_cache()} runs on a czmq without its DRAFT API, where zyre's "
            "gossip ignores CURVE: rebuild with CZMQ_TARBALL=czmq-4.2.1.tar.gz "
            "scripts/build-zyre.sh"
        )
    return None


def zyre_agent_command(
    name: str,
    interface: str,
    groups: Iterable[str] = (),
    headers: dict[str, str] | None = None,
    *,
    max_seconds: float = 60.0,
    extra: Iterable[str] = (),
) -> list[str]:
    """The argv that runs tests/interop/zyre_agent.c (its stderr joined to stdout).

    zauth's and zyre's own log lines then arrive as ``_raw`` events.
    """
    argv = [str(zyre_cache() / "bin" / "zyre_agent"), "--name", name, "--interface", interface]
    for group in groups:
        argv += ["--group", group]
    for key, value in (headers or {}).items():
        argv += ["--header", f"{key}={value}"]
    argv += ["--max-seconds", str(max_seconds), *extra]
    return ["sh", "-c", 'exec "$@" 2>&1', "zyre_agent", *argv]


def zpinger_command(interface: str, *flags: str) -> list[str]:
    """zyre's own zpinger, verbose, on ``interface``, its log on stdout (``_raw`` events)."""
    zpinger = str(zyre_cache() / "bin" / "zpinger")
    # zyre's cmake gives its test programs no run path to the installed library.
    libs = f"LD_LIBRARY_PATH={zyre_cache() / 'lib'}"
    argv = ["env", libs, zpinger, "-v", "-i", interface, *flags]
    return ["sh", "-c", 'exec "$@" 2>&1', "zpinger", *argv]


def cli_ping_and_peers(ns: Any, name: str) -> dict[str, Any]:
    """Run ``trizre ping NAME`` (3 pings) and ``trizre peers --json`` in ``ns``.

    Asserts every ping was answered; returns the one peer ``peers`` listed.
    """
    cli = [sys.executable, "-m", "trizre"]
    where = ["--interface", ns.interface]
    ping = ns.run(*cli, "ping", name, *where, "-c", "3", "-i", "0.2", "-W", "5", timeout=60)
    assert "3 sent, 3 answered, 0.0% lost" in ping.stdout, ping.stdout + ping.stderr
    peers = ns.run(*cli, "peers", *where, "--wait", "3", "--json", timeout=60)
    (seen,) = json.loads(peers.stdout)["peers"]
    assert isinstance(seen, dict)
    return seen
