"""CURVE (43/ZRE as zyre does it): certificates, ZAP, and CURVE nodes on loopback.

The interop half (trizre against zyre's zpinger and libzyre) is in
tests/interop/test_interop_zyre.py; here trizre nodes and hand-driven DEALERs.
"""

from __future__ import annotations

import logging
import os
import stat
import uuid
from pathlib import Path

import pytest
import trio
import trio.testing
import zmq
import zmq.utils.z85
from zmq.utils.monitor import parse_monitor_message

import trizre
from tests.support.nodes import (
    FAST,
    exit_reasons,
    free_udp_port,
    next_event,
    raw_peer,
    wait_logged,
)
from trizre import wire
from trizre.sansio._peer import PUBLIC_KEY_HEADER, hello_from_stranger, route
from trizre.transport._curve import CurvePolicy, allowed_keys, curve_key, load_public_keys, z85
from trizre.transport._zsock import ZSocket, context

_HANDSHAKE_FAILED = {
    zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL,
    zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL,
    zmq.EVENT_HANDSHAKE_FAILED_AUTH,
    zmq.EVENT_DISCONNECTED,
}

# ------------------------------------------------------------ certificates


def test_a_certificate_survives_save_and_load(tmp_path: Path) -> None:
    cert = trizre.Certificate.generate()
    path = tmp_path / "alice.key"
    cert.save(path)
    assert trizre.Certificate.load(path) == cert  # the secret file is preferred
    secret = path.with_name("alice.key_secret")
    assert stat.S_IMODE(os.stat(secret).st_mode) == 0o600
    assert cert.secret is not None and z85(cert.secret) not in path.read_text()
    secret.unlink()
    public = trizre.Certificate.load(path)
    assert public.secret is None and public.public == cert.public


def test_a_czmq_certificate_loads(tmp_path: Path) -> None:
    """czmq's zcert_save writes this (ZPL); its secret file holds both keys."""
    cert = trizre.Certificate.generate()
    assert cert.secret is not None
    (tmp_path / "node_secret").write_text(
        "#   ****  Generated on 2026-11-23 10:00:00 by CZMQ  ****\n"
        "#   ZeroMQ CURVE **Secret** Certificate\n"
        "#   DO NOT PROVIDE THIS FILE TO OTHER USERS nor change its permissions.\n"
        "\n"
        "metadata\n"
        '    name = "node"\n'
        "curve\n"
        f'    public-key = "{cert.public_z85}"\n'
        f'    secret-key = "{z85(cert.secret)}"\n'
    )
    assert trizre.Certificate.load(tmp_path / "node") == cert


def test_certificate_errors_are_clear(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no CURVE certificate"):
        trizre.Certificate.load(tmp_path / "missing")
    (tmp_path / "junk").write_text("hello\n")
    with pytest.raises(ValueError, match="not a CURVE certificate"):
        trizre.Certificate.load(tmp_path / "junk")
    (tmp_path / "short").write_text('curve\n    public-key = "abc"\n')
    with pytest.raises(ValueError, match="not a Z85 CURVE key"):
        trizre.Certificate.load(tmp_path / "short")
    a, b = trizre.Certificate.generate(), trizre.Certificate.generate()
    assert b.secret is not None
    with pytest.raises(ValueError, match="does not belong"):
        trizre.Certificate.from_keys(a.public, b.secret)
    assert "secret" not in repr(a).lower() or z85(a.secret or b"") not in repr(a)
    assert a.public_z85 in repr(a)


def test_keys_in_every_form() -> None:
    cert = trizre.Certificate.generate()
    assert curve_key(cert) == curve_key(cert.public) == curve_key(cert.public_z85)
    with pytest.raises(ValueError, match="32 bytes"):
        curve_key(b"short")
    with pytest.raises(ValueError, match="40 characters"):
        curve_key("short")
    with pytest.raises(ValueError, match="not a Z85"):
        curve_key("~" * 40)
    with pytest.raises(TypeError, match="CURVE key"):
        curve_key(42)  # type: ignore[arg-type]


def test_an_allow_list_directory_reads_public_certificates(tmp_path: Path) -> None:
    a, b = trizre.Certificate.generate(), trizre.Certificate.generate()
    a.save(tmp_path / "a.key")  # a key pair: its _secret file is skipped
    b.public_only().save(tmp_path / "b.key")
    (tmp_path / ".hidden").write_text("not a certificate")
    assert load_public_keys(tmp_path) == {a.public, b.public}
    assert allowed_keys(str(tmp_path)) == {a.public, b.public}
    assert allowed_keys(trizre.CURVE_ALLOW_ANY) is None
    assert allowed_keys([a.public_z85, b]) == {a.public, b.public}
    with pytest.raises(NotADirectoryError):
        load_public_keys(tmp_path / "nowhere")
    with pytest.raises(TypeError):
        allowed_keys(b"\0" * 32)  # one key, not a list of them


# -------------------------------------------------------------------- ZAP


def _request(key: bytes, domain: bytes = b"global", mechanism: bytes = b"CURVE") -> list[bytes]:
    return [b"1.0", b"7", domain, b"127.0.0.1", b"server-id", mechanism, key]


def test_zap_requests_decode_and_replies_encode() -> None:
    key = trizre.Certificate.generate().public
    request = wire.decode_zap_request(_request(key))
    assert (request.request_id, request.domain, request.identity) == (b"7", "global", b"server-id")
    assert request.curve_key == key
    reply = wire.ZapReply(b"7", 200, "OK", z85(key))
    assert wire.encode_zap_reply(reply) == [b"1.0", b"7", b"200", b"OK", z85(key).encode(), b""]
    for bad in (
        [],
        [b"2.0", *_request(key)[1:]],
        [*_request(key)[:-1], b"x" * 300],
        [1, 2, 3, 4, 5, 6],
    ):
        with pytest.raises(wire.DecodeError):
            wire.decode_zap_request(bad)  # type: ignore[arg-type]
    with pytest.raises(wire.EncodeError):
        wire.encode_zap_reply(wire.ZapReply(b"7", 201))


def test_a_policy_admits_only_allowed_curve_clients_of_its_domain() -> None:
    friend, stranger = trizre.Certificate.generate(), trizre.Certificate.generate()
    policy = CurvePolicy("global", frozenset({friend.public}))

    def judge(frames: list[bytes]) -> wire.ZapReply:
        return policy.judge(wire.decode_zap_request(frames))

    assert judge(_request(friend.public)).status_code == 200
    assert judge(_request(friend.public)).user_id == friend.public_z85
    assert judge(_request(stranger.public)).status_code == 400
    assert judge(_request(friend.public, domain=b"other")).status_code == 400
    assert judge(_request(friend.public, mechanism=b"NULL")).status_code == 400
    anyone = CurvePolicy("global", None)
    assert anyone.judge(wire.decode_zap_request(_request(stranger.public))).status_code == 200


# ------------------------------------------------------- the peer protocol


def test_a_stranger_hello_must_declare_the_key_it_connected_with() -> None:
    key, other = trizre.Certificate.generate(), trizre.Certificate.generate()
    peer = uuid.uuid4()

    def frames(declared: str | None) -> list[bytes]:
        headers = () if declared is None else ((PUBLIC_KEY_HEADER, declared),)
        hello = wire.Hello(1, "tcp://127.0.0.1:50000", (), 0, "p", headers)
        return [route(peer, key.public_z85), *wire.encode(hello)]

    found = hello_from_stranger(frames(key.public_z85), 2, curve=True)
    assert found is not None and found[0] == peer and found[2] == key.public_z85
    assert hello_from_stranger(frames(None), 2, curve=True) is None  # downgrade
    assert hello_from_stranger(frames(other.public_z85), 2, curve=True) is None  # lie
    assert hello_from_stranger(frames(key.public_z85)[1:], 2, curve=True) is None
    # A plain node never sees key-prefixed identities: they do not qualify.
    assert hello_from_stranger(frames(key.public_z85), 2) is None


def _zero_led_pair() -> tuple[str, str]:
    """A real key pair whose public key starts with a zero octet (1 in 256)."""
    while True:
        public, secret = zmq.curve_keypair()
        if zmq.utils.z85.decode(public)[0] == 0:
            return public.decode(), secret.decode()


def test_generate_never_makes_a_key_zyre_would_ignore(monkeypatch: pytest.MonkeyPatch) -> None:
    """zyre drops a beacon whose key starts with 0x00: generate draws again."""
    hidden = _zero_led_pair()
    raw_hidden = (hidden[0].encode(), hidden[1].encode())
    visible = zmq.curve_keypair()
    while trizre.Certificate.from_keys(visible[0].decode(), visible[1].decode()).hidden_from_zyre:
        visible = zmq.curve_keypair()  # one draw in 256 is zero-led itself
    draws = iter([raw_hidden, raw_hidden, visible])
    monkeypatch.setattr(zmq, "curve_keypair", lambda: next(draws))
    cert = trizre.Certificate.generate()
    assert cert.public[0] != 0 and not cert.hidden_from_zyre
    assert next(draws, None) is None  # both zero-led pairs were drawn and refused
    assert trizre.Certificate.from_keys(hidden[0], hidden[1]).hidden_from_zyre


async def test_a_node_with_a_key_zyre_ignores_warns_and_still_works(
    caplog: pytest.LogCaptureFixture,
) -> None:
    public, secret = _zero_led_pair()
    hidden = trizre.Certificate.from_keys(public, secret)
    other = trizre.Certificate.generate()
    port = free_udp_port()
    with trio.fail_after(20):
        async with (
            trizre.open_node("a", beacon_port=port, curve=hidden, curve_allow=[other], **FAST) as n,
            trizre.open_node("b", beacon_port=port, curve=other, curve_allow=[hidden], **FAST),
        ):
            await n.wait_for_peer("b")
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert [r.getMessage() for r in warnings if hidden.public_z85 in r.getMessage()] == [
        f"CURVE public key {hidden.public_z85} starts with a zero octet: zyre ignores "
        "this node's beacons (make a new certificate to be found by zyre)"
    ]


# ------------------------------------------------------------ the options


def test_curve_options_are_checked() -> None:
    cert = trizre.Certificate.generate()
    with pytest.raises(ValueError, match="say who may connect"):
        trizre.NodeConfig(curve=cert)
    with pytest.raises(ValueError, match="needs curve"):
        trizre.NodeConfig(curve_allow=trizre.CURVE_ALLOW_ANY)
    with pytest.raises(ValueError, match="secret key"):
        trizre.NodeConfig(curve=cert.public_only(), curve_allow=trizre.CURVE_ALLOW_ANY)
    with pytest.raises(TypeError, match="Certificate"):
        trizre.NodeConfig(curve=cert.public, curve_allow=trizre.CURVE_ALLOW_ANY)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="X-PUBLICKEY"):
        trizre.NodeConfig(
            curve=cert, curve_allow=trizre.CURVE_ALLOW_ANY, headers={"X-PUBLICKEY": "x"}
        )
    with pytest.raises(ValueError, match="Z85"):
        trizre.NodeConfig(curve=cert, curve_allow=["not a key"])
    with pytest.raises(ValueError, match="zap_domain"):
        trizre.NodeConfig(curve=cert, curve_allow=trizre.CURVE_ALLOW_ANY, zap_domain="")
    config = trizre.NodeConfig(curve=cert, curve_allow=[cert.public_z85])
    assert config.curve_allow == {cert.public}
    assert dict(config.hello_headers)["X-PUBLICKEY"] == cert.public_z85


# ------------------------------------------------------- nodes on loopback


async def test_curve_nodes_that_allow_each_other_talk() -> None:
    a, b = trizre.Certificate.generate(), trizre.Certificate.generate()
    port = free_udp_port()
    with trio.fail_after(20):
        async with (
            trizre.open_node("a", beacon_port=port, curve=a, curve_allow=[b], **FAST) as na,
            trizre.open_node("b", beacon_port=port, curve=b, curve_allow=[a], **FAST) as nb,
        ):
            events = nb.events()
            b_id = await na.wait_for_peer("b")
            await nb.wait_for_peer("a")
            assert na.peer_headers(b_id)["X-PUBLICKEY"] == b.public_z85
            await na.whisper(b_id, b"secret")
            whisper = await next_event(events, trizre.Whisper)
            assert whisper.frames == (b"secret",)


async def test_a_curve_peer_whose_connection_closes_is_ended_at_once(tmp_path: Path) -> None:
    """The CURVE inbox (its reads tag each sender with its key) notes a HELLO's connection too.

    Presence is slow here: only the inbox watch can end b within the test.
    """
    a, b = trizre.Certificate.generate(), trizre.Certificate.generate()
    port = free_udp_port()
    slow = {"beacon_port": port, "interface": "lo", "beacon_interval": 0.2}
    slow |= {"evasive_timeout": 60.0, "expired_timeout": 120.0, "trace_dir": tmp_path}
    with trio.fail_after(20):
        async with trizre.open_node("a", curve=a, curve_allow=[b], **slow) as na:
            events = na.events()
            async with trizre.open_node("b", curve=b, curve_allow=[a], **slow) as nb:
                await na.wait_for_peer(nb.uuid)
                await nb.wait_for_peer(na.uuid)
                assert na._inbox_watch is not None
                assert na._core.peers[nb.uuid] in na._inbox_watch
            gone = await next_event(events, trizre.Exit)
            assert gone.peer == nb.uuid
    assert exit_reasons(tmp_path, na.uuid) == ["link"]


async def test_a_node_not_on_the_allow_list_never_enters(caplog: pytest.LogCaptureFixture) -> None:
    a, b, c = (trizre.Certificate.generate() for _ in range(3))
    port = free_udp_port()
    caplog.set_level(logging.INFO, logger="trizre")
    with trio.fail_after(20):
        async with (
            trizre.open_node("a", beacon_port=port, curve=a, curve_allow=[c], **FAST) as na,
            trizre.open_node("b", beacon_port=port, curve=b, curve_allow=[a, c], **FAST) as nb,
            trizre.open_node("c", beacon_port=port, curve=c, curve_allow=[a, b], **FAST) as nc,
        ):
            # c is allowed by both: once a and b both have c, each has heard the other.
            await na.wait_for_peer("c")
            await nb.wait_for_peer("c")
            await nc.wait_for_peer("a")
            await nc.wait_for_peer("b")
            await wait_logged(caplog, "key not allowed")  # b's DEALER, refused by a's ZAP
            assert na.find_peers("b") == [] and nb.find_peers("a") == []
            assert "is not in curve_allow" in caplog.text  # a does not link to b


async def test_curve_and_plain_nodes_ignore_each_other(caplog: pytest.LogCaptureFixture) -> None:
    cert = trizre.Certificate.generate()
    port = free_udp_port()
    caplog.set_level(logging.INFO, logger="trizre")
    with trio.fail_after(20):
        async with (
            trizre.open_node(
                "secure", beacon_port=port, curve=cert, curve_allow=trizre.CURVE_ALLOW_ANY, **FAST
            ) as secure,
            trizre.open_node("plain", beacon_port=port, **FAST) as plain,
            trizre.open_node("plain2", beacon_port=port, **FAST) as plain2,
        ):
            await plain.wait_for_peer("plain2")
            await wait_logged(caplog, "ignoring CURVE beacons", "without a CURVE key")

            def ignored() -> int:
                return len([r for r in caplog.records if "ignoring CURVE" in r.getMessage()])

            while ignored() < 2:  # noqa: ASYNC110 -- a log record cannot wake a task
                await trio.sleep(0.01)  # each plain node logs once it hears secure
            # Some twenty more of secure's beacons (0.05 s apart): still once per plain node.
            await trio.sleep(1.0)
            assert ignored() == 2
            assert secure.peers() == [] and plain.peers() == [plain2.uuid]
            assert "lets any key connect" in caplog.text  # CURVE_ALLOW_ANY is said loudly


async def test_a_dealer_cannot_speak_as_a_connected_peer() -> None:
    """An allowed key presenting a connected peer's UUID gets nowhere; the peer carries on."""
    a, b, mallory = (trizre.Certificate.generate() for _ in range(3))
    port = free_udp_port()
    with trio.fail_after(20):
        async with (
            trizre.open_node(
                "a", beacon_port=port, curve=a, curve_allow=[b, mallory], **FAST
            ) as na,
            trizre.open_node("b", beacon_port=port, curve=b, curve_allow=[a], **FAST) as nb,
        ):
            events = na.events()
            b_id = await na.wait_for_peer("b")
            async with raw_peer(na, curve=mallory, claim=b_id) as spoof:
                # Lying about its key too: the key it connected with decides.
                await spoof.hello("b", headers=((PUBLIC_KEY_HEADER, b.public_z85),))
                await spoof.send(wire.Whisper(spoof.next_seq(), (b"forged",)))
                for n in range(20):
                    await nb.whisper(na.uuid, b"genuine %d" % n)
                    whisper = await next_event(events, trizre.Whisper)
                    assert whisper.frames == (b"genuine %d" % n,) and whisper.peer == b_id
                assert na.peer_headers(b_id)["X-PUBLICKEY"] == b.public_z85


async def test_a_hello_for_a_known_uuid_under_another_key_is_refused(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A UUID heard of by beacon, with its key, cannot be taken by another key."""
    a, x, mallory = (trizre.Certificate.generate() for _ in range(3))
    port = free_udp_port()
    caplog.set_level(logging.INFO, logger="trizre")
    with trio.fail_after(20):
        async with trizre.open_node(
            "a", beacon_port=port, curve=a, curve_allow=[x, mallory], **FAST
        ) as na:
            x_id = uuid.uuid4()
            beacon = wire.Beacon(x_id, 1, 3, x.public)  # a closed port: x never connects
            na._on_beacon(
                beacon, "127.0.0.1", wire.encode_beacon(beacon) + b"127.0.0.1", trio.current_time()
            )
            assert x_id in na._peers
            async with raw_peer(na, curve=mallory, claim=x_id) as spoof:
                await spoof.hello("x", headers=((PUBLIC_KEY_HEADER, mallory.public_z85),))
                await wait_logged(caplog, "refused a HELLO")
                assert na.find_peers("x") == []
                assert na._peers[x_id].protocol.key == x.public_z85


async def test_a_hello_without_its_key_is_a_downgrade_and_is_ignored() -> None:
    a, mallory = trizre.Certificate.generate(), trizre.Certificate.generate()
    port = free_udp_port()
    with trio.fail_after(20):
        async with (
            trizre.open_node("a", beacon_port=port, curve=a, curve_allow=[mallory], **FAST) as na,
            raw_peer(na, curve=mallory) as peer,
        ):
            await peer.hello("downgrade")  # no X-PUBLICKEY
            await peer.hello("late", headers=((PUBLIC_KEY_HEADER, mallory.public_z85),))
            # One connection is read in order: the key-less HELLO came first.
            await na.wait_for_peer("late")
            assert na.find_peers("downgrade") == []


async def test_a_dealer_without_curve_gets_nothing_through() -> None:
    a = trizre.Certificate.generate()
    port = free_udp_port()
    with trio.fail_after(20):
        async with trizre.open_node(
            "a", beacon_port=port, curve=a, curve_allow=trizre.CURVE_ALLOW_ANY, **FAST
        ) as na:
            plain = context().socket(zmq.DEALER)
            plain.setsockopt(zmq.IDENTITY, b"\x01" + uuid.uuid4().bytes)
            # Monitored before it connects: the first handshake is the one seen.
            events = ZSocket(plain.get_monitor_socket())
            outbox = ZSocket(plain)
            try:
                plain.connect(na.endpoint)
                await outbox.send(wire.encode(wire.Hello(1, "tcp://127.0.0.1:1", (), 0, "plain")))
                # libzmq reports the failed handshake: the HELLO never left.
                while True:
                    event = parse_monitor_message(await events.receive())["event"]
                    assert event != zmq.EVENT_HANDSHAKE_SUCCEEDED
                    if event in _HANDSHAKE_FAILED:
                        break
                assert na.find_peers("plain") == []
            finally:
                plain.disable_monitor()
                events.close()
                outbox.close()


async def test_the_zap_handler_outlives_the_first_curve_node_of_the_run() -> None:
    a, b, c = (trizre.Certificate.generate() for _ in range(3))
    port = free_udp_port()
    with trio.fail_after(20):
        async with trizre.open_node(
            "a", beacon_port=port, curve=a, curve_allow=[b, c], **FAST
        ) as na:
            async with trizre.open_node("b", beacon_port=port, curve=b, curve_allow=[a], **FAST):
                await na.wait_for_peer("b")
            async with trizre.open_node("c", beacon_port=port, curve=c, curve_allow=[a], **FAST):
                await na.wait_for_peer("c")
