"""Gossip over CURVE (issue 25, section 8): our hubs and clients, refusals, and nodes using them.

A CURVE hub is a CURVE server under its key pair, its clients judged by
the process's ZAP handler; a client given the hub's public key connects
as a CURVE client with its own key pair (czmq's zgossip with its draft
security API, which zyre drives).  Each refusal test first shows a good
client getting through the very same hub, so that what refuses the other
one is the key, not the set-up; the refusal itself is observed (libzmq's
handshake events), never inferred from silence.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any, Literal

import pytest
import trio
import zmq

import trizre
from tests.interop import zyre_cache
from tests.support.czmq import ZGossip, czmq_with_drafts, free_tcp_port
from tests.support.gossip import (
    Ear,
    Shakes,
    delivered,
    gossip,
    gossip_node,
    refused,
    succeeded,
)
from tests.support.nodes import next_event
from trizre.transport._curve import CurvePolicy, z85
from trizre.transport._gossip_service import GossipService, handshake_reason, open_gossip

HUB_CERT = trizre.Certificate.generate()
GOOD_CERT = trizre.Certificate.generate()
OTHER_CERT = trizre.Certificate.generate()  # not allowed at the hub


@asynccontextmanager
async def curve_hub() -> AsyncIterator[tuple[GossipService, Ear, Shakes]]:
    """A CURVE hub under HUB_CERT that lets in GOOD_CERT's key only, publishing one tuple."""
    policy = CurvePolicy("global", frozenset({GOOD_CERT.public}))
    async with gossip(["tcp://127.0.0.1:*"], curve=HUB_CERT, allow=policy) as hub:
        hub[0].publish("HUB", "tcp://127.0.0.1:50100")
        yield hub


async def good_client_hears_the_hub(hub: GossipService, hub_ear: Ear) -> None:
    """The control: a client with the right keys gets through (both ways)."""
    async with gossip(connect=hub.endpoints, curve=GOOD_CERT, server_key=HUB_CERT.public_z85) as (
        client,
        ear,
        shakes,
    ):
        client.publish("GOOD", "tcp://127.0.0.1:50101")
        await ear.until("HUB", "tcp://127.0.0.1:50100")
        await hub_ear.until("GOOD", "tcp://127.0.0.1:50101")
        assert await shakes.until(succeeded("remote"))


async def curve_hub_refuses(
    remote: str, hub: str, publish: str | None = None, **client: Any
) -> None:
    """A good client gets through the hub, then one made with ``client`` is refused.

    Both sides' handshakes must say so (``remote``'s words at the client,
    ``hub``'s at the hub), and the refused client hears no tuple; with
    ``publish`` it publishes that key first, which the hub must not hear.
    """
    async with curve_hub() as (the_hub, hub_ear, hub_shakes):
        await good_client_hears_the_hub(the_hub, hub_ear)
        async with gossip(connect=the_hub.endpoints, **client) as (refused_one, ear, shakes):
            if publish is not None:
                refused_one.publish(publish, "tcp://127.0.0.1:50102")
            await shakes.until(refused("remote", remote))
            await hub_shakes.until(refused("hub", hub))
            assert ear.tuples == {}
            if publish is not None:
                assert publish not in hub_ear.tuples


async def test_a_curve_client_and_a_curve_hub_gossip_both_ways() -> None:
    with trio.fail_after(10):
        async with curve_hub() as (hub, hub_ear, hub_shakes):
            await good_client_hears_the_hub(hub, hub_ear)
            shake = await hub_shakes.until(succeeded("hub"))
            assert shake.endpoint == hub.endpoints[0]


async def test_a_curve_hub_refuses_a_client_without_curve() -> None:
    with trio.fail_after(10):
        # The mismatch, or the other side closing on it first: either way CURVE.
        await curve_hub_refuses("CURVE", "CURVE", publish="PLAIN")


async def test_a_curve_hub_refuses_a_client_with_the_wrong_hub_key() -> None:
    with trio.fail_after(10):
        await curve_hub_refuses(
            "the wrong gossip_server_key",
            "bad CURVE handshake",
            curve=GOOD_CERT,
            server_key=OTHER_CERT.public,
        )


async def test_a_curve_hub_refuses_a_client_key_it_does_not_allow() -> None:
    with trio.fail_after(10):
        await curve_hub_refuses(
            "does not allow this node's key",
            "key is not allowed",
            curve=OTHER_CERT,
            server_key=HUB_CERT.public,
        )


async def test_a_curve_client_is_refused_by_a_hub_without_curve() -> None:
    with trio.fail_after(10):
        async with gossip(["tcp://127.0.0.1:*"]) as (hub, _, hub_shakes):  # noqa: SIM117
            async with gossip(
                connect=hub.endpoints, curve=GOOD_CERT, server_key=HUB_CERT.public
            ) as (_, ear, shakes):
                await shakes.until(refused("remote", "CURVE"))
                await hub_shakes.until(refused("hub", "CURVE"))
                assert ear.tuples == {}


async def test_refusals_are_logged_now_and_then(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="trizre.gossip")
    with trio.fail_after(10):
        async with curve_hub() as (hub, _, hub_shakes):  # noqa: SIM117
            async with gossip(
                connect=hub.endpoints, curve=GOOD_CERT, server_key=OTHER_CERT.public
            ) as (_, _, shakes):
                # With a wrong key libzmq retries every 100 ms: wait for several refusals.
                while len([s for s in shakes.seen if not s.ok]) < 3:
                    await shakes.changed.wait()
                while len([s for s in hub_shakes.seen if not s.ok]) < 3:
                    await hub_shakes.changed.wait()
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    infos = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    # Three refusals or more on each side, each kind logged once.
    assert len(warnings) == len(set(warnings)) and len(infos) == len(set(infos))
    assert "refused us: the hub closed the handshake" in warnings[0], warnings
    assert all("refused a client" in info for info in infos) and infos, infos


@pytest.mark.parametrize(
    ("options", "error", "match"),
    [
        ({"server_key": HUB_CERT.public}, ValueError, "server_key needs curve"),
        ({"curve": HUB_CERT.public_only()}, ValueError, "with its secret key"),
        ({"curve": "key"}, TypeError, "curve must be a trizre.Certificate"),
        ({"curve": HUB_CERT, "server_key": "short"}, ValueError, "Z85 CURVE key is 40"),
        ({"curve": HUB_CERT, "server_key": b"\0" * 31}, ValueError, "raw CURVE key is 32"),
        ({"curve": HUB_CERT, "server_key": 7}, TypeError, "a CURVE key is"),
        ({"curve": HUB_CERT, "bind": ["tcp://127.0.0.1:*"]}, ValueError, "needs allow="),
        ({"allow": "anyone"}, TypeError, "allow must be a trizre CurvePolicy"),
        (
            {"curve": HUB_CERT, "server_key": {"tcp://127.0.0.1:6000": HUB_CERT}},
            ValueError,
            "names hubs that are not in connect",
        ),
    ],
)
async def test_bad_curve_arguments_are_refused(
    options: dict[str, Any], error: type[Exception], match: str
) -> None:
    bind = options.pop("bind", [])
    with pytest.raises(error, match=match):
        async with open_gossip(bind, ["tcp://127.0.0.1:5999"], **options):
            pass


# --------------------------------------------------------------------- nodes


async def test_curve_nodes_meet_and_whisper_through_a_curve_hub() -> None:
    certs = [trizre.Certificate.generate() for _ in range(3)]
    hub_endpoint = f"tcp://127.0.0.1:{free_tcp_port()}"
    with trio.fail_after(10):
        async with AsyncExitStack() as stack:
            hub = await stack.enter_async_context(
                gossip_node("hub", bind=hub_endpoint, curve=certs[0], curve_allow=certs)
            )
            a, b = [
                await stack.enter_async_context(
                    gossip_node(
                        name,
                        connect=hub_endpoint,
                        gossip_server_key=certs[0].public_z85,
                        curve=cert,
                        curve_allow=certs,
                    )
                )
                for name, cert in (("a", certs[1]), ("b", certs[2]))
            ]
            events = a.events()
            await a.wait_for_peer(b.uuid)
            await b.wait_for_peer(a.uuid)
            await hub.wait_for_peer(a.uuid)
            assert a.peer_headers(b.uuid)["X-PUBLICKEY"] == certs[2].public_z85
            await b.whisper(a.uuid, b"through an encrypted hub")
            assert (await next_event(events, trizre.Whisper)).frames == (
                b"through an encrypted hub",
            )


async def test_a_node_joins_two_curve_hubs_each_with_its_own_key() -> None:
    """gossip_server_key as a mapping: one hub's key for each gossip_connect endpoint."""
    certs = [trizre.Certificate.generate() for _ in range(5)]
    hubs = [f"tcp://127.0.0.1:{free_tcp_port()}" for _ in range(2)]
    common: dict[str, Any] = {
        "discovery": "gossip",
        "endpoint": "tcp://127.0.0.1:*",
        "curve_allow": certs,
    }
    with trio.fail_after(10):
        async with AsyncExitStack() as stack:
            for i, hub in enumerate(hubs):
                await stack.enter_async_context(
                    trizre.open_node(f"hub{i}", gossip_bind=hub, curve=certs[i], **common)
                )
            both = await stack.enter_async_context(
                trizre.open_node(
                    "both",
                    gossip_connect=hubs,
                    gossip_server_key={hubs[0]: certs[0], hubs[1]: certs[1].public_z85},
                    curve=certs[2],
                    **common,
                )
            )
            ones = [
                await stack.enter_async_context(
                    trizre.open_node(
                        f"only{i}",
                        gossip_connect=hubs[i],
                        gossip_server_key=certs[i].public,
                        curve=certs[3 + i],
                        **common,
                    )
                )
                for i in range(2)
            ]
            for one in ones:
                await both.wait_for_peer(one.uuid)
            # "both" passes each hub's tuples on to the other: the two meet too.
            await ones[0].wait_for_peer(ones[1].uuid)
            assert both.config.gossip_server_key == (
                (hubs[0], certs[0].public),
                (hubs[1], certs[1].public),
            )


class _Refusal(logging.Handler):
    """Sets a Trio event when the gossip logger says a hub refused us."""

    def __init__(self) -> None:
        super().__init__()
        self.heard = trio.Event()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if "refused us" in record.getMessage():
            self.messages.append(record.getMessage())
            self.heard.set()


async def test_a_curve_node_without_the_hub_key_is_refused_and_told_why() -> None:
    certs = [trizre.Certificate.generate() for _ in range(2)]
    hub_endpoint = f"tcp://127.0.0.1:{free_tcp_port()}"
    refusal = _Refusal()
    logger = logging.getLogger("trizre.gossip")
    logger.addHandler(refusal)
    try:
        with trio.fail_after(10):
            async with AsyncExitStack() as stack:
                hub = await stack.enter_async_context(
                    gossip_node("hub", bind=hub_endpoint, curve=certs[0], curve_allow=certs)
                )
                node = await stack.enter_async_context(
                    gossip_node("no-key", connect=hub_endpoint, curve=certs[1], curve_allow=certs)
                )
                await refusal.heard.wait()
                assert "CURVE" in refusal.messages[0]
                assert node.peers() == [] and hub.peers() == []
    finally:
        logger.removeHandler(refusal)


@pytest.mark.parametrize(
    ("options", "error", "match"),
    [
        (
            {"gossip_connect": "tcp://127.0.0.1:5999", "gossip_server_key": HUB_CERT.public},
            ValueError,
            "gossip_server_key needs curve",
        ),
        (
            {
                "gossip_bind": "tcp://127.0.0.1:5999",
                "gossip_server_key": HUB_CERT.public,
                "curve": GOOD_CERT,
                "curve_allow": "*",
            },
            ValueError,
            "key of the gossip_connect hubs",
        ),
        (
            {
                "gossip_connect": "tcp://127.0.0.1:5999",
                "gossip_server_key": "not a key",
                "curve": GOOD_CERT,
                "curve_allow": "*",
            },
            ValueError,
            "gossip_server_key: a Z85 CURVE key is 40 characters",
        ),
        (
            {
                "gossip_connect": "tcp://127.0.0.1:5999",
                "gossip_server_key": 42,
                "curve": GOOD_CERT,
                "curve_allow": "*",
            },
            TypeError,
            "gossip_server_key: a CURVE key is",
        ),
        (
            {
                "gossip_connect": "tcp://127.0.0.1:5999",
                "gossip_server_key": {"tcp://127.0.0.1:6000": HUB_CERT},
                "curve": GOOD_CERT,
                "curve_allow": "*",
            },
            ValueError,
            r"names hubs that are not in gossip_connect: \['tcp://127.0.0.1:6000'\]",
        ),
        (
            {
                "gossip_connect": "tcp://127.0.0.1:5999",
                "gossip_server_key": {"tcp://127.0.0.1:5999": "short"},
                "curve": GOOD_CERT,
                "curve_allow": "*",
            },
            ValueError,
            "gossip_server_key: a Z85 CURVE key is 40",
        ),
        (
            {
                "gossip_connect": "tcp://127.0.0.1:5999",
                "gossip_server_key": {5999: HUB_CERT},
                "curve": GOOD_CERT,
                "curve_allow": "*",
            },
            TypeError,
            "gossip_server_key: a hub endpoint is a str",
        ),
    ],
)
def test_gossip_server_key_is_checked(
    options: dict[str, Any], error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        trizre.NodeConfig(discovery="gossip", endpoint="tcp://127.0.0.1:*", **options)


def test_gossip_server_key_takes_any_key_form() -> None:
    for form in (HUB_CERT, HUB_CERT.public, HUB_CERT.public_z85):
        config = trizre.NodeConfig(
            discovery="gossip",
            gossip_connect="tcp://127.0.0.1:5999",
            gossip_server_key=form,
            curve=GOOD_CERT,
            curve_allow="*",
        )
        assert config.gossip_server_key == HUB_CERT.public


# ----------------------------------------------------------------------- CLI

GUARDED = [
    sys.executable,
    "-u",
    str(Path(__file__).resolve().parents[1] / "support" / "guarded_cli.py"),
]


async def test_the_cli_gossips_over_curve_with_a_key_or_a_certificate(tmp_path: Path) -> None:
    hub_cert, ours = trizre.Certificate.generate(), trizre.Certificate.generate()
    ours.save(tmp_path / "ours")
    hub_cert.public_only().save(tmp_path / "hub.pub")
    hub = f"ipc://{tmp_path}/hub"
    base = [*GUARDED, "peers", "--gossip", hub, "--endpoint", "tcp://127.0.0.1:*"]
    curve = ["--curve", str(tmp_path / "ours"), "--curve-allow", "any"]
    with trio.fail_after(60):
        async with gossip_node("hub", bind=hub, curve=hub_cert, curve_allow=[ours]):
            for key in (f"--gossip-server-key={hub_cert.public_z85}", str(tmp_path / "hub.pub")):
                option = [key] if key.startswith("--") else ["--gossip-server-key", key]
                result = await trio.run_process(
                    [*base, *curve, *option, "--wait", "3", "--json"],
                    capture_stdout=True,
                    capture_stderr=True,
                    check=False,
                )
                assert result.returncode == 0, result.stderr
                peers = json.loads(result.stdout)["peers"]
                assert [peer["name"] for peer in peers] == ["hub"]
    for args, words in (
        (
            # The = form; test_cli checks the separate one with a key that
            # begins with '-' (1 key in 82), which argparse alone refused.
            [*base, f"--gossip-server-key={hub_cert.public_z85}"],
            "needs --gossip (the hubs) and --curve",
        ),
        ([*base, *curve, "--gossip-server-key", "nonsense"], "neither a Z85 key nor a certificate"),
    ):
        with trio.fail_after(60):
            bad = await trio.run_process(
                args, capture_stdout=True, capture_stderr=True, check=False
            )
        stderr = bad.stderr.decode()
        assert bad.returncode == 1 and words in stderr, stderr
        assert "Traceback" not in stderr


# ------------------------------------------------------- handshake words


@pytest.mark.parametrize(
    ("event", "value", "side", "words"),
    [
        (
            zmq.EVENT_HANDSHAKE_FAILED_AUTH,
            400,
            "hub",
            "the client's key is not allowed (ZAP status 400)",
        ),
        (zmq.EVENT_HANDSHAKE_FAILED_AUTH, 400, "remote", "the hub does not allow this node's key"),
        (
            zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL,
            zmq.PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH,
            "remote",
            "one side speaks CURVE and the other does not",
        ),
        (
            zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL,
            zmq.PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH,
            "hub",
            "the client does not speak CURVE",
        ),
        (zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL, 0x11000001, "hub", "protocol error 0x11000001"),
        (zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL, 0, "remote", "or the wrong gossip_server_key"),
        (zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL, 0, "hub", "the client closed the handshake"),
    ],
)
def test_handshake_failures_are_put_in_words(
    event: int, value: int, side: Literal["hub", "remote"], words: str
) -> None:
    assert words in handshake_reason(event, value, side)


# ------------------------------------------------- czmq's zgossip, drafts on

CZMQ_DRAFTS = czmq_with_drafts(zyre_cache() / "lib")
needs_czmq_drafts = pytest.mark.skipif(
    CZMQ_DRAFTS is None,
    reason=f"no czmq with its DRAFT API in {zyre_cache() / 'lib'} (zgossip's CURVE): "
    "CZMQ_TARBALL=czmq-4.2.1.tar.gz scripts/build-zyre.sh builds one",
)


@needs_czmq_drafts
async def test_we_join_a_curve_czmq_hub_with_its_key() -> None:
    assert CZMQ_DRAFTS is not None
    czmq = ZGossip(CZMQ_DRAFTS)
    endpoint = f"tcp://127.0.0.1:{free_tcp_port()}"
    czmq.send(b"SET PUBLICKEY", HUB_CERT.public_z85.encode())
    czmq.send(b"SET SECRETKEY", z85(HUB_CERT.secret or b"").encode())
    czmq.send(b"BIND", endpoint.encode())
    czmq.send(b"PUBLISH", b"ZYRE-NODE", b"tcp://127.0.0.1:49990|" + GOOD_CERT.public_z85.encode())
    try:
        with trio.fail_after(10):
            # The control first: without the key, czmq's CURVE hub turns us away.
            async with gossip(connect=[endpoint]) as (_, plain_ear, plain_shakes):
                await plain_shakes.until(refused("remote", "CURVE"))
                assert plain_ear.tuples == {}
            async with gossip(connect=[endpoint], curve=GOOD_CERT, server_key=HUB_CERT.public) as (
                ours,
                ear,
                _,
            ):
                ours.publish("TRIZRE-NODE", "tcp://127.0.0.1:50005")
                await ear.until("ZYRE-NODE", f"tcp://127.0.0.1:49990|{GOOD_CERT.public_z85}")
                value = await trio.to_thread.run_sync(delivered, czmq, "TRIZRE-NODE")
                assert value == "tcp://127.0.0.1:50005"
    finally:
        czmq.close()


@needs_czmq_drafts
async def test_a_curve_czmq_service_joins_our_curve_hub_with_its_key() -> None:
    assert CZMQ_DRAFTS is not None
    with trio.fail_after(10):
        async with curve_hub() as (hub, ear, shakes):
            czmq = ZGossip(CZMQ_DRAFTS)
            try:
                czmq.send(b"SET PUBLICKEY", GOOD_CERT.public_z85.encode())
                czmq.send(b"SET SECRETKEY", z85(GOOD_CERT.secret or b"").encode())
                czmq.send(b"CONNECT", hub.endpoints[0].encode(), HUB_CERT.public_z85.encode())
                czmq.send(b"PUBLISH", b"ZYRE-NODE", b"tcp://127.0.0.1:49991")
                await ear.until("ZYRE-NODE", "tcp://127.0.0.1:49991")
                assert await shakes.until(succeeded("hub"))
                value = await trio.to_thread.run_sync(delivered, czmq, "HUB")
                assert value == "tcp://127.0.0.1:50100"
            finally:
                czmq.close()
