"""Conformance cases, gossip discovery.

These run against the target started again in gossip mode (``"gossip":
HUB`` in ``start``): czmq's zgossip protocol (ZGP) instead of beacons, as
zyre's gossip discovery uses it.  The suite's hub is the target's remote
(the target is its client), and the suite is in turn a client of the
target's own hub.  No RFC specifies ZGP: the clauses are czmq's
src/zgossip_msg.xml (the messages), src/zgossip.xml (the server's states)
and src/zgossip.c, and zyre's src/zyre_node.c (what zyre publishes and does
with what it hears).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any, Final

import trio

from .. import wire
from ._harness import Fail, GossipLink, Harness
from ._registry import Z36, _no_hello, case

ZGP_MSG: Final = "czmq src/zgossip_msg.xml (ZGP)"
ZGP_SERVER: Final = "czmq src/zgossip.xml (the ZGP server's states)"
ZYRE_GOSSIP: Final = "zyre src/zyre_node.c (gossip discovery)"


def _is_target_key(h: Harness) -> Callable[[Any], bool]:
    """Whether a PUBLISH's key names the target (its UUID, in any hex spelling)."""

    def match(message: Any) -> bool:
        try:
            return uuid.UUID(hex=message.key) == h.target.uuid
        except (AttributeError, ValueError):
            return False

    return match


def _target_client(h: Harness) -> bytes:
    """The routing id of the target's connection to the suite's hub."""
    hub = h.need_hub()
    if hub.last_sender is None:
        raise Fail(
            "nothing (the target started with the suite's hub as its gossip remote)",
            "the target connects to the hub",
            "no connection, no message",
        )
    return hub.last_sender


async def _hello_own_tuple(h: Harness, client: GossipLink, what: str) -> None:
    """Say HELLO to the target's hub; fail unless its own tuple comes back."""
    mark = client.mark()
    await client.send(wire.GossipHello())
    if await client.expect(wire.GossipPublish, h.profile.reply, mark, _is_target_key(h)) is None:
        raise Fail(
            f"{what}: HELLO to the target's own hub",
            f"PUBLISH of every tuple it holds, its own ({h.target.uuid.hex.upper()}) among them",
            client.seen(mark),
        )


@case(
    "gossip-hello-first",
    "in gossip mode the target's first ZGP message to its remote hub is HELLO",
    f"{ZGP_MSG}: 'C:HELLO ( C:PUBLISH / S:PUBLISH / heartbeat )'; {ZGP_SERVER}",
    needs=("agent", "gossip"),
)
async def gossip_hello_first(h: Harness) -> None:
    hub = h.need_hub()
    got = await hub.expect(None, h.profile.reply, h.hub_mark)
    if got is None or not isinstance(got[2], wire.GossipHello):
        raise Fail(
            "nothing (the target started with the suite's hub as its gossip remote)",
            "HELLO first",
            hub.seen(h.hub_mark),
        )


@case(
    "gossip-publish-self",
    "the target publishes its UUID (32 hex digits) -> its mailbox endpoint, which takes a HELLO",
    f"{ZYRE_GOSSIP}: PUBLISH zuuid_str(uuid) endpoint; {ZGP_MSG} PUBLISH",
    needs=("agent", "gossip"),
)
async def gossip_publish_self(h: Harness) -> None:
    hub = h.need_hub()
    want = h.target.uuid.hex.upper()
    got = await hub.expect(wire.GossipPublish, h.profile.reply, h.hub_mark, _is_target_key(h))
    if got is None:
        raise Fail(
            "nothing (the target started with the suite's hub as its gossip remote)",
            f"PUBLISH({want}=its mailbox endpoint)",
            hub.seen(h.hub_mark),
        )
    key = got[2].key
    if len(key) != 32 or any(c not in "0123456789abcdefABCDEF" for c in key):
        raise Fail("nothing (listened)", f"the key as 32 hex digits, {want}", repr(key))
    async with h.peer() as peer:
        await peer.hello()
        if await peer.expect(wire.Hello, h.profile.reply) is None:
            raise Fail(
                f"HELLO#1 to the published endpoint {got[2].value!r}",
                "a HELLO back",
                peer.seen(),
            )
        await peer.ping_ok_for("HELLO to the published endpoint")


@case(
    "gossip-deliver",
    "a tuple the hub publishes to the target makes a peer: it connects there and says HELLO",
    f"{ZYRE_GOSSIP}: zyre_node_recv_gossip, 'Require peer, if it's not us'",
    needs=("agent", "gossip"),
)
async def gossip_deliver(h: Harness) -> None:
    hub, client = h.need_hub(), _target_client(h)
    async with h.peer() as peer:
        tuple_ = wire.GossipPublish(peer.uuid.hex.upper(), peer.endpoint, 0)
        await hub.send(tuple_, client)
        if await peer.expect(wire.Hello, h.profile.reply) is None:
            raise Fail(
                f"hub to the target: PUBLISH({tuple_.key}={tuple_.value})",
                "the target connects to that mailbox and sends HELLO",
                peer.seen(),
            )
        await peer.hello()
        await peer.ping_ok_for("a tuple by gossip, the target's HELLO, ours")


@case(
    "gossip-invalid-rehello",
    "when its hub answers INVALID, the target says HELLO again",
    "czmq src/zgossip.c remote_handler: 'Connection was reset, so send HELLO again'",
    needs=("agent", "gossip"),
)
async def gossip_invalid_rehello(h: Harness) -> None:
    hub, client = h.need_hub(), _target_client(h)
    mark = hub.mark()
    await hub.send(wire.GossipInvalid(), client)
    if await hub.expect(wire.GossipHello, h.profile.reply, mark) is None:
        raise Fail("hub to the target: INVALID", "HELLO again", hub.seen(mark))


@case(
    "gossip-server-hello",
    "the target's own hub answers a client's HELLO with every tuple it holds, its own too",
    f"{ZGP_SERVER}: 'Peer says HELLO and we send it all known tuples'",
    needs=("agent", "gossip"),
)
async def gossip_server_hello(h: Harness) -> None:
    async with h.gossip_client() as client:
        await _hello_own_tuple(h, client, "a new client")


@case(
    "gossip-server-ping",
    "the target's hub answers PING with PONG, before HELLO and after",
    f"{ZGP_SERVER}: superstate 'external', 'PING: send PONG'",
    needs=("agent", "gossip"),
)
async def gossip_server_ping(h: Harness) -> None:
    async with h.gossip_client(keep_alive=False) as client:
        await client.send(wire.GossipPing())
        if await client.expect(wire.GossipPong, h.profile.reply) is None:
            raise Fail("PING before HELLO", "PONG", client.seen())
        await client.send(wire.GossipHello())
        mark = client.mark()
        await client.send(wire.GossipPing())
        if await client.expect(wire.GossipPong, h.profile.reply, mark) is None:
            raise Fail("HELLO, then PING", "PONG", client.seen(mark))


@case(
    "gossip-server-invalid",
    "the target's hub answers a PUBLISH before HELLO with INVALID",
    f"{ZGP_SERVER}: state 'start', any message but HELLO and PING: 'send INVALID'",
    needs=("agent", "gossip"),
)
async def gossip_server_invalid(h: Harness) -> None:
    async with h.gossip_client(keep_alive=False) as client:
        # The discard port of the suite's own address: nothing is there to meet.
        tuple_ = wire.GossipPublish(uuid.uuid4().hex.upper(), f"tcp://{h.interface.address}:9", 0)
        await client.send(tuple_)
        if await client.expect(wire.GossipInvalid, h.profile.reply) is None:
            raise Fail("PUBLISH without HELLO", "INVALID", client.seen())


@case(
    "gossip-server-forward",
    "the target's hub passes a client's new tuple on to its other clients",
    f"{ZGP_SERVER}: state 'connected', 'forward: send PUBLISH'; czmq src/zgossip.c server_accept",
    needs=("agent", "gossip"),
)
async def gossip_server_forward(h: Harness) -> None:
    async with h.gossip_client() as one, h.gossip_client() as two, h.peer() as peer:
        await _hello_own_tuple(h, one, "client A")
        await _hello_own_tuple(h, two, "client B")
        tuple_ = wire.GossipPublish(peer.uuid.hex.upper(), peer.endpoint, 0)
        mark = one.mark()
        await two.send(tuple_)

        def same(message: Any) -> bool:
            return bool(message.key == tuple_.key and message.value == tuple_.value)

        if await one.expect(wire.GossipPublish, h.profile.reply, mark, same) is None:
            raise Fail(
                f"clients A and B: HELLO; B: PUBLISH({tuple_.key}={tuple_.value})",
                "the same PUBLISH to A",
                one.seen(mark),
            )


@case(
    "gossip-own-tuple",
    "a tuple carrying the target's own UUID (another endpoint) does not make it connect",
    f"{ZYRE_GOSSIP}: 'Require peer, if it's not us'; cf. {Z36} 'discard beacons ... from itself'",
    needs=("agent", "gossip"),
)
async def gossip_own_tuple(h: Harness) -> None:
    # Late among the gossip cases: the target's hub may now hold our value
    # under its own key (the last writer wins in zgossip).
    hub, client = h.need_hub(), _target_client(h)
    async with h.peer() as peer, h.peer() as control:
        tuple_ = wire.GossipPublish(h.target.uuid.hex.upper(), peer.endpoint, 0)
        sent = f"hub to the target: PUBLISH({tuple_.key}={tuple_.value}), its own UUID"
        await hub.send(tuple_, client)
        # Then a stranger's tuple, which it must take: proof that it still
        # reads gossip, so that the silence below means something.
        await hub.send(wire.GossipPublish(control.uuid.hex.upper(), control.endpoint, 0), client)
        if await control.expect(wire.Hello, h.profile.reply) is None:
            raise Fail(f"{sent}; then another peer's tuple", "a HELLO to that peer", "none")
        await _no_hello(h, peer, sent, "ignored (it is the target itself)")


@case(
    "gossip-malformed",
    "malformed ZGP frames do not take the target's hub down (it still answers PING)",
    f"{ZGP_MSG} (robustness: signature %xAA %xA0, version 1, ids 1-5)",
    needs=("agent", "gossip"),
)
async def gossip_server_malformed(h: Harness) -> None:
    async with h.gossip_client(keep_alive=False) as client:
        await client.send(wire.GossipHello())
        bad = (b"\xaa\xa1\x03\x01", b"\xaa\xa0\x09\x01", b"\xaa\xa0\x03\x02", b"\xaa")
        for frame in bad:
            await client.send(frame)
        await trio.sleep(h.profile.quiet)
        mark = client.mark()
        await client.send(wire.GossipPing())
        if await client.expect(wire.GossipPong, h.profile.reply, mark) is None:
            raise Fail(
                "HELLO; frames with signature %xAA %xA1, id 9, version 2, one octet; PING",
                "PONG (the bad frames dropped)",
                client.seen(mark),
            )
