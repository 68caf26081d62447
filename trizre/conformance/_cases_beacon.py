"""Conformance cases, beacons (22/ZRE-DISC).

The target's own beacons, and how it takes version 1, version 3, keyed and
invalid ones, its own UUID and a port-0 beacon.
"""

from __future__ import annotations

from collections.abc import Callable

import trio

from .. import wire
from ._harness import Fail, FakePeer, Harness, NotApplicable
from ._registry import Z36, Z43, _no_hello, _still_alive, case


@case(
    "beacon-target-format",
    "the target's own beacons are valid (22 octets v1, or 54 octets v3 with a key)",
    f"{Z36} Node Discovery and Presence; {Z43} beacon",
)
async def beacon_target_format(h: Harness) -> None:
    t = h.target
    try:
        wire.decode_beacon(t.beacon)
    except wire.DecodeError as exc:
        raise Fail(
            "nothing (listened)",
            "22-octet version 1 or 3, or 54-octet version 3 beacons",
            f"{t.beacon_size} octets {t.beacon.hex()}: {exc}",
        ) from None


@case("beacon-v1", "a 22-octet version 1 beacon makes a new peer", f"{Z36} Node Discovery")
async def beacon_v1(h: Harness) -> None:
    async with h.peer() as peer:
        await peer.meet()


def _invalid_beacon(
    id: str,
    title: str,
    make: Callable[[FakePeer], bytes],
    clause: str = f"{Z36} Node Discovery",
    round_port: bool = False,
) -> None:
    async def run(h: Harness) -> None:
        async with h.peer(round_port=round_port) as peer:
            data = make(peer)
            for _ in range(3):
                await h.radio.send(data)
            await _no_hello(
                h, peer, f"{len(data)} octets {data[:6].hex()}...", "the beacon discarded silently"
            )
            await _still_alive(h, f"{len(data)}-octet invalid beacons")

    case(id, title, f"{clause}: 'SHALL discard it silently'")(run)


_invalid_beacon(
    "beacon-short",
    "a 21-octet beacon is discarded",
    lambda p: p.beacon_bytes()[:21],
    round_port=True,
)
_invalid_beacon(
    "beacon-long-v1",
    "a 23-octet version 1 beacon is discarded",
    lambda p: p.beacon_bytes() + b"\x00",
)
_invalid_beacon(
    "beacon-bad-header",
    "a beacon whose header is not 'ZRE' is discarded",
    lambda p: b"ZRF" + p.beacon_bytes()[3:],
)
_invalid_beacon(
    "beacon-version-2",
    "a version 2 beacon is discarded",
    lambda p: b"ZRE\x02" + p.beacon_bytes()[4:],
)
_invalid_beacon(
    "beacon-54-v1",
    "a 54-octet beacon with version 1 is discarded (and does not crash the target)",
    lambda p: p.beacon_bytes() + bytes(32),
    f"{Z43} beacon",
)
_invalid_beacon(
    "beacon-oversize",
    "a 255-octet datagram is discarded",
    lambda p: (p.beacon_bytes() * 12)[:255],
)


@case(
    "beacon-v3-keyed",
    "a 54-octet version 3 beacon (with a CURVE key) does not crash a target without CURVE",
    f"{Z43} beacon",
)
async def beacon_v3_keyed(h: Harness) -> None:
    async with h.peer() as peer:
        data = peer.beacon_bytes(version=3) + bytes(range(1, 33))
        for _ in range(3):
            await h.radio.send(data)
        # Whether it connects is the target's business (43/ZRE does not say
        # what a node without CURVE does with a key); it must live on.
        await trio.sleep(h.profile.quiet)
    await _still_alive(h, "54-octet version-3 beacons")


@case(
    "beacon-v3-zero-key",
    "a 54-octet version 3 beacon whose key starts with a zero octet is read like any other",
    f"{Z43} beacon",
)
async def beacon_v3_zero_key(h: Harness) -> None:
    async with h.peer() as peer:
        plain = await _accepts(h, peer, peer.beacon_bytes(version=3) + bytes(range(1, 33)))
    if not plain:
        await _still_alive(h, "54-octet version-3 beacons")
        raise NotApplicable("the target ignores keyed beacons altogether (no CURVE)")
    async with h.peer() as peer:
        data = peer.beacon_bytes(version=3) + b"\x00" + bytes(range(1, 32))
        zero = await _accepts(h, peer, data)
    if not zero:
        raise Fail(
            "54-octet v3 beacons, key starting %x00",
            "treated like the same beacon with a key starting %x01 (which it accepted)",
            "no HELLO",
        )


async def _accepts(h: Harness, peer: FakePeer, data: bytes) -> bool:
    for _ in range(3):
        await h.radio.send(data)
    return await peer.expect(wire.Hello, h.profile.quiet) is not None


@case(
    "beacon-v3-unkeyed",
    "a 22-octet version 3 beacon: a 36/ZRE target discards it, a 43/ZRE one meets the peer",
    f"{Z36} Node Discovery ('version number, which SHALL be %x01'); {Z43} beacon",
)
async def beacon_v3_unkeyed(h: Harness) -> None:
    async with h.peer() as peer:
        accepted = await _accepts(h, peer, peer.beacon_bytes(version=3))
        if h.target.beacon_version == 1 and accepted:
            raise Fail(
                "22-octet v3 beacons to a target that beacons v1 (36/ZRE)",
                "discarded: not its recognised header",
                peer.seen(),
            )
        if h.target.beacon_version == 3 and not accepted:
            raise Fail("22-octet v3 beacons", "the target connects and sends HELLO", peer.seen())
    await _still_alive(h, "22-octet version-3 beacons")


@case(
    "beacon-own-uuid",
    "a beacon carrying the target's own UUID is discarded",
    f"{Z36} Node Discovery: 'SHALL discard beacons that it receives from itself'",
)
async def beacon_own_uuid(h: Harness) -> None:
    async with h.peer() as peer:
        data = wire.encode_beacon(wire.Beacon(h.target.uuid, peer.port))
        for _ in range(3):
            await h.radio.send(data)
        await _no_hello(
            h, peer, f"beacons with the target's UUID and our port {peer.port}", "discarded"
        )
    await _still_alive(h, "beacons carrying the target's UUID")


@case(
    "beacon-port-zero",
    "a known peer's port-0 beacon makes the target disconnect from it",
    f"{Z36} Node Discovery: 'with a zero port number, it SHALL disconnect'",
)
async def beacon_port_zero(h: Harness) -> None:
    async with h.peer() as peer:
        await peer.meet()
        await peer.ping_ok_for("HELLO")
        peer.beaconing = False
        agent_mark = h.agent.mark() if h.agent else 0
        for _ in range(3):
            await peer.beacon(port=0)
        # A target may check the hint first (a port-0 beacon is easily
        # forged): a PING, which we leave unanswered as a peer that left
        # would.  So the EXIT may take a PING timeout, not just a moment.
        if h.agent is not None:
            # Well before the expired timeout: an EXIT by expiry proves nothing.
            expired = h.agent.info.get("expired")
            within = h.profile.reply
            if isinstance(expired, int | float):
                within = min(within, 0.6 * float(expired))
            left = await h.agent.wait_for(
                lambda e: e.get("event") == "EXIT" and e.get("peer") == peer.uuid.hex,
                within,
                agent_mark,
            )
            if left is None:
                raise Fail(
                    "port-0 beacons from a known peer (its PINGs unanswered)",
                    f"an EXIT event within {within:.1f} s",
                    "none",
                )
        else:
            await trio.sleep(h.profile.quiet + h.profile.late)
        # A target that forgot us treats our next beacon as a new peer: a
        # fresh HELLO (sequence 1) on a new connection.
        mark = peer.mark()
        await peer.beacon()
        got = await peer.expect(wire.Hello, h.profile.reply, mark)
        if got is None or got[2].sequence != 1:
            raise Fail(
                "port-0 beacons from a known peer, then a normal beacon",
                "the peer forgotten, so a new HELLO#1",
                peer.seen(mark),
            )
