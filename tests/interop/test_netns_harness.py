"""The namespace harness works, and two pyre agents talk through it.

Everything that sends here runs inside namespaces the test creates (the
``netns`` marker); the pytest process itself only runs ``ip`` and reads
pipes.  Timings printed here are observations (``-s`` shows them), never
assertions: shared machines are noisy (shared/DESIGN.md section 7).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from tests.interop import (
    NotInTestNamespaceError,
    b64,
    ensure_in_test_namespace,
    pyre_agent_command,
    repo_root,
    unb64,
)
from tests.support import netns
from tests.support.netns import Agent, NetnsPair, broadcast_probe, list_namespaces, open_netns_pair

_reason = netns.netns_available()
pytestmark = [
    pytest.mark.netns,
    pytest.mark.skipif(_reason is not None, reason=f"no network namespaces: {_reason}"),
]

netns_pair = netns.netns_pair  # the fixture


def _links(ns: netns.Namespace) -> dict[str, list[str]]:
    """Interface name -> its IPv4 addresses, inside ``ns``."""
    out = ns.run("ip", "-o", "-4", "addr", "show").stdout
    found: dict[str, list[str]] = {
        line.split(":")[1].strip().split("@")[0]: []
        for line in ns.run("ip", "-o", "link", "show").stdout.splitlines()
    }
    for line in out.splitlines():
        words = line.split()
        found[words[1]].append(words[3])
    return found


def test_pair_is_created_and_deleted() -> None:
    with open_netns_pair() as pair:
        a, b = pair
        names = {a.name, b.name}
        assert names <= set(list_namespaces())
        assert a.name.startswith("trizre-") and b.name.startswith("trizre-")
        for ns in pair:
            links = _links(ns)
            assert links["lo"] == ["127.0.0.1/8"]  # the namespace's own loopback
            assert links[ns.interface] == [f"{ns.address}/24"]  # netns: inside ns
            # Nothing else that carries an address (fallback tunnels such as
            # sit0 may exist, down and address-less).
            assert {k for k, v in links.items() if v} == {"lo", ns.interface}
            assert ns.broadcast == f"10.231.{pair.subnet}.255"  # netns: inside ns
        # No veth end ever shows up in our own namespace.
        ours = subprocess.run(
            [netns.ip_binary(), "-o", "link", "show"], check=True, capture_output=True, text=True
        )
        assert a.interface not in ours.stdout and b.interface not in ours.stdout
        # Leave processes behind: teardown must kill them, both one that
        # is settled inside and one still on its way in.
        settled = subprocess.Popen(a.cmd("sleep", "60"))
        deadline = time.monotonic() + 5
        while settled.pid not in a.pids() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert settled.pid in a.pids()
        racing = subprocess.Popen(b.cmd("sleep", "60"), stderr=subprocess.DEVNULL)
    assert settled.wait(5) != 0
    assert racing.wait(5) != 0
    assert not names & set(list_namespaces())
    assert not [n for n in list_namespaces() if n.startswith(f"trizre-{os.getpid()}-")]


def test_pair_is_deleted_on_error() -> None:
    with pytest.raises(KeyError), open_netns_pair() as pair:
        names = {pair.a.name, pair.b.name}
        raise KeyError("boom")
    assert not names & set(list_namespaces())


def test_broadcast_crosses_the_pair(netns_pair: NetnsPair) -> None:
    a, b = netns_pair
    for sender, receiver in ((a, b), (b, a)):
        heard = broadcast_probe(sender, [(receiver, receiver.broadcast), (receiver, "")])
        assert [h.source for h in heard] == [sender.address, sender.address]
        assert all(h.payload for h in heard)


def test_broadcast_reaches_other_processes_in_the_same_namespace(netns_pair: NetnsPair) -> None:
    """pyre and a trizre node side by side in one namespace will both hear beacons.

    Two receiver processes share the port (SO_REUSEADDR + SO_REUSEPORT), one
    bound to the broadcast address as pyre's zbeacon does, one to the
    wildcard; the sender is a third process in the same namespace.
    """
    a, b = netns_pair
    heard = broadcast_probe(a, [(a, a.broadcast), (a, ""), (b, b.broadcast)])
    assert [h.payload is not None for h in heard] == [True, True, True]
    assert {h.source for h in heard} == {a.address}


def test_agent_guard_refuses_our_namespace(netns_pair: NetnsPair) -> None:
    with pytest.raises(NotInTestNamespaceError):
        ensure_in_test_namespace()  # here: only runs `ip addr`, starts no node
    code = (
        f"import sys; sys.path.insert(0, {str(repo_root())!r}); "
        "from tests.interop import ensure_in_test_namespace as e; e(); print('ok')"
    )
    out = netns_pair.a.run(sys.executable, "-c", code, check=False)
    assert out.stdout.strip() == "ok", out.stderr


def _pyre(ns: netns.Namespace, name: str, *groups: str, max_seconds: float = 45) -> Agent:
    argv = pyre_agent_command(name, groups, {"X-Agent": name}, max_seconds=max_seconds)
    return Agent(argv, namespace=ns, label=f"pyre {name} in {ns.name}")


def test_two_pyre_agents_across_the_pair(netns_pair: NetnsPair) -> None:
    a_ns, b_ns = netns_pair
    a = _pyre(a_ns, "A")
    b = None
    try:
        a_info = a.started()
        b = _pyre(b_ns, "B")
        b_info = b.started()
        # ENTER both ways; B started after A, so time from B's "started".
        seen_by_b = b.expect_event("ENTER", peer=a_info["uuid"], timeout=10)
        seen_by_a = a.expect_event("ENTER", peer=b_info["uuid"], timeout=10)
        assert seen_by_b["name"] == "A" and seen_by_a["name"] == "B"
        assert seen_by_b["headers"] == {"X-Agent": "A"}
        assert seen_by_b["endpoint"].startswith(f"tcp://{a_ns.address}:")  # netns
        print(
            f"\nENTER after B started: B saw A {seen_by_b['_t'] - b_info['_t']:.4f} s, "
            f"A saw B {seen_by_a['_t'] - b_info['_t']:.4f} s"
        )

        a.send({"cmd": "join", "group": "chat"})
        joined = b.expect_event("JOIN", peer=a_info["uuid"], group="chat")
        assert joined["name"] == "A"

        a.send({"cmd": "whisper", "peer": b_info["uuid"], "frames": [b64(b"hi B"), b64(b"")]})
        whisper = b.expect_event("WHISPER", peer=a_info["uuid"])
        assert [unb64(f) for f in whisper["frames"]] == [b"hi B", b""]

        b.send({"cmd": "shout", "group": "chat", "frames": [b64(b"hello chat")]})
        shout = a.expect_event("SHOUT", peer=b_info["uuid"], group="chat")
        assert [unb64(f) for f in shout["frames"]] == [b"hello chat"]

        a.send({"cmd": "leave", "group": "chat"})
        b.expect_event("LEAVE", peer=a_info["uuid"], group="chat")
        a.send({"cmd": "peers"})
        assert a.expect_event("peers")["peers"] == [b_info["uuid"]]

        stop_sent = time.monotonic()
        assert a.stop() == 0
        a.expect_event("STOP", peer=a_info["uuid"], timeout=0)
        exited = b.expect_event("EXIT", peer=a_info["uuid"], timeout=40)
        print(f"EXIT seen by B {exited['_t'] - stop_sent:.4f} s after A was told to stop")
    finally:
        a.stop()
        if b is not None:
            assert b.stop() == 0, b.describe()


def test_two_pyre_agents_in_one_namespace(netns_pair: NetnsPair) -> None:
    """Side by side in one namespace, two pyre nodes still find each other."""
    ns = netns_pair.a
    with _pyre(ns, "P") as p, _pyre(ns, "Q") as q:
        p_id, q_id = p.uuid, q.uuid
        p.expect_event("ENTER", peer=q_id)
        q.expect_event("ENTER", peer=p_id)
        q.send({"cmd": "whisper", "peer": p_id, "frames": [b64(b"next door")]})
        got = p.expect_event("WHISPER", peer=q_id)
        assert got["frames"] == [b64(b"next door")]


def test_pyre_agent_ends_on_eof_refuses_zero_frames_and_times_out(
    netns_pair: NetnsPair,
) -> None:
    a_ns, b_ns = netns_pair
    with _pyre(a_ns, "E") as eof_agent, _pyre(b_ns, "T", max_seconds=3) as timed:
        eof_agent.started()
        # Zero content frames: refused with an error event, agent lives on.
        timed.send({"cmd": "shout", "group": "g", "frames": []})
        refused = timed.expect_event("error")
        assert "zero content frames" in refused["error"]
        timed.send({"cmd": "nonsense"})
        timed.expect_event("error")
        # stdin EOF: a clean stop.
        assert eof_agent.proc.stdin is not None
        eof_agent.proc.stdin.close()
        eof_agent.expect_event("STOP", timeout=10)
        assert eof_agent.expect_event("exiting", timeout=10)["code"] == 0
        # --max-seconds: it gives up by itself.
        timed.expect_event("timeout", timeout=10)
        timed.expect_event("STOP", timeout=10)
        assert timed.expect_event("exiting", timeout=10)["code"] == 3
