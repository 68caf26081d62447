"""trizre and pyre (zeromq-pyre 0.3.4) on a veth pair between two namespaces.

pyre only ever runs inside namespaces this test creates (it beacons on the
first non-loopback interface).  trizre runs there too, choosing its
interface the same way (``interface=None``), so both speak over the veth.
"""

from __future__ import annotations

import time
import uuid

import pytest

from tests.interop import b64, cli_ping_and_peers, pyre_agent_command, trizre_agent_command, unb64
from tests.support import netns
from tests.support.netns import Agent, NetnsPair

_reason = netns.netns_available()
pytestmark = [
    pytest.mark.netns,
    pytest.mark.skipif(_reason is not None, reason=f"no network namespaces: {_reason}"),
]

netns_pair = netns.netns_pair  # the fixture


def _pyre(ns: netns.Namespace, name: str) -> Agent:
    argv = pyre_agent_command(name, (), {"X-Impl": "pyre"}, max_seconds=45)
    return Agent(argv, namespace=ns, label=f"pyre {name} in {ns.name}")


def _trizre(ns: netns.Namespace, name: str, *extra: str) -> Agent:
    argv = trizre_agent_command(name, (), {"X-Impl": "trizre"}, max_seconds=45, extra=extra)
    return Agent(argv, namespace=ns, label=f"trizre {name} in {ns.name}")


def _frames(event: dict[str, object]) -> list[bytes]:
    frames = event["frames"]
    assert isinstance(frames, list)
    return [unb64(f) for f in frames]


def test_trizre_and_pyre_see_and_talk_to_each_other(netns_pair: NetnsPair) -> None:
    p_ns, t_ns = netns_pair
    with _pyre(p_ns, "pyre1") as pyre, _trizre(t_ns, "tri1") as tri:
        p_id, t_id = pyre.uuid, tri.uuid
        t_info = tri.started()
        assert t_info["endpoint"].startswith(f"tcp://{t_ns.address}:")  # netns veth address

        # Enter both ways, with names, headers and endpoints.
        seen_by_tri = tri.expect_event("ENTER", peer=p_id)
        seen_by_pyre = pyre.expect_event("ENTER", peer=t_id)
        assert (seen_by_tri["name"], seen_by_tri["headers"]) == ("pyre1", {"X-Impl": "pyre"})
        assert (seen_by_pyre["name"], seen_by_pyre["headers"]) == ("tri1", {"X-Impl": "trizre"})
        assert seen_by_pyre["endpoint"] == t_info["endpoint"]

        # JOIN both ways.
        pyre.send({"cmd": "join", "group": "chat"})
        tri.expect_event("JOIN", peer=p_id, group="chat")
        tri.send({"cmd": "join", "group": "chat"})
        pyre.expect_event("JOIN", peer=t_id, group="chat")

        # WHISPER both ways, multi-frame included.
        tri.send({"cmd": "whisper", "peer": p_id, "frames": [b64(b"one"), b64(b"two")]})
        assert _frames(pyre.expect_event("WHISPER", peer=t_id)) == [b"one", b"two"]
        pyre.send({"cmd": "whisper", "peer": t_id, "frames": [b64(b"back")]})
        assert _frames(tri.expect_event("WHISPER", peer=p_id)) == [b"back"]

        # SHOUT both ways.
        tri.send({"cmd": "shout", "group": "chat", "frames": [b64(b"from trizre")]})
        assert _frames(pyre.expect_event("SHOUT", peer=t_id, group="chat")) == [b"from trizre"]
        pyre.send({"cmd": "shout", "group": "chat", "frames": [b64(b"from pyre")]})
        assert _frames(tri.expect_event("SHOUT", peer=p_id, group="chat")) == [b"from pyre"]

        # LEAVE both ways.
        pyre.send({"cmd": "leave", "group": "chat"})
        tri.expect_event("LEAVE", peer=p_id, group="chat")
        tri.send({"cmd": "leave", "group": "chat"})
        pyre.expect_event("LEAVE", peer=t_id, group="chat")

        # A clean stop of trizre: pyre sees EXIT long before any expiry.
        stopped = time.monotonic()
        assert tri.stop() == 0, tri.describe()
        exit_event = pyre.expect_event("EXIT", peer=t_id, timeout=10)
        print(f"\npyre saw trizre's EXIT {exit_event['_t'] - stopped:.3f} s after stop")


def test_a_clean_pyre_stop_gives_exit_on_trizre(netns_pair: NetnsPair) -> None:
    p_ns, t_ns = netns_pair
    with _trizre(t_ns, "tri2") as tri, _pyre(p_ns, "pyre2") as pyre:
        p_id = pyre.uuid
        tri.expect_event("ENTER", peer=p_id)
        pyre.expect_event("ENTER", peer=tri.uuid)
        stopped = time.monotonic()
        assert pyre.stop() == 0, pyre.describe()
        exit_event = tri.expect_event("EXIT", peer=p_id, timeout=10)
        print(f"\ntrizre saw pyre's EXIT {exit_event['_t'] - stopped:.3f} s after stop")


def test_trizre_survives_a_pyre_peer_that_mangles_non_ascii(netns_pair: NetnsPair) -> None:
    """pyre counts characters, not bytes: its HELLO for "Zoë" is malformed.

    (It is malformed enough to kill another pyre's node thread, so the
    well-behaved peer beside it here is a trizre node.)  trizre must neither
    crash nor accept garbage, and keeps working with its other peer.
    """
    p_ns, t_ns = netns_pair
    with (
        _trizre(t_ns, "tri3") as tri,
        _pyre(p_ns, "Zoë") as mangler,
        _trizre(p_ns, "plain") as plain,
    ):
        plain_id, mangler_id = plain.uuid, mangler.uuid
        tri.expect_event("ENTER", peer=plain_id)
        # The mangler connected and said HELLO to us: give it time to.
        mangler.expect_event("ENTER", peer=tri.uuid)
        tri.send({"cmd": "whisper", "peer": plain_id, "frames": [b64(b"still fine")]})
        assert _frames(plain.expect_event("WHISPER", peer=tri.uuid)) == [b"still fine"]
        tri.send({"cmd": "peers"})
        peers = tri.expect_event("peers")["peers"]
        assert peers == [plain_id], f"{mangler_id} must not have entered"
        assert tri.proc.poll() is None, tri.describe()


def test_two_trizre_nodes_across_the_pair(netns_pair: NetnsPair) -> None:
    """trizre on a real (veth) interface, chosen automatically."""
    a_ns, b_ns = netns_pair
    with _trizre(a_ns, "Zoë") as a, _trizre(b_ns, "b") as b:
        a_id, b_id = a.uuid, b.uuid
        assert b.expect_event("ENTER", peer=a_id)["name"] == "Zoë"
        a.expect_event("ENTER", peer=b_id)
        a.send({"cmd": "whisper", "peer": b_id, "frames": []})
        assert _frames(b.expect_event("WHISPER", peer=a_id)) == []
        assert a.stop() == 0
        b.expect_event("EXIT", peer=a_id, timeout=5)


def test_trizre_ping_and_peers_commands_with_pyre(netns_pair: NetnsPair) -> None:
    """PING answered by pyre's PING-OK; pyre listed with its headers."""
    p_ns, t_ns = netns_pair
    with _pyre(p_ns, "pyre3") as pyre:
        pyre.send({"cmd": "join", "group": "chat"})
        seen = cli_ping_and_peers(t_ns, "pyre3")
        assert (seen["name"], seen["uuid"]) == ("pyre3", str(uuid.UUID(pyre.uuid)))
        assert seen["headers"] == {"X-Impl": "pyre"} and seen["groups"] == ["chat"]
