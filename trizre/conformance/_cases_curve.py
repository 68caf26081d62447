"""Conformance cases, CURVE (43/ZRE).

These run against the target started again with CURVE (``"curve": true``
in ``start``), allowing any client key.
"""

from __future__ import annotations

from typing import Final

import trio

from .. import wire
from ._harness import Fail, Harness
from ._registry import Z43, _no_hello, case

CURVE_RULE: Final = (
    f"{Z43} Node Discovery and Presence: 'A ZRE node configured with CURVE security SHALL "
    "ignore beacons that do not contain a valid 32-octet CURVE key'"
)


@case(
    "curve-beacon",
    "a CURVE target beacons 54 octets, version 3, with the key it reports",
    f"{Z43} beacon",
    needs=("agent", "curve"),
)
async def curve_beacon(h: Harness) -> None:
    t = h.target
    if t.beacon_size != 54 or t.beacon_version != 3 or t.beacon[22:] != h.target_key:
        raise Fail(
            "nothing (listened, CURVE on)",
            "54-octet version-3 beacons carrying its public key",
            f"{t.beacon_size} octets, version {t.beacon_version}",
        )


@case(
    "curve-meet",
    "a CURVE peer's keyed beacon: the target connects over CURVE, HELLO, PING answered",
    f"{Z43} beacon; 43/ZRE Security Aspects (CURVE)",
    needs=("agent", "curve"),
)
async def curve_meet(h: Harness) -> None:
    async with h.peer(curve=True) as peer:
        await peer.meet()
        await peer.ping_ok_for("HELLO over CURVE")


@case(
    "curve-zero-key",
    "a keyed beacon whose key starts with a zero octet is taken like any other",
    f"{Z43} beacon (any 32-octet key is valid)",
    needs=("agent", "curve"),
)
async def curve_zero_key(h: Harness) -> None:
    async with h.peer(curve=True, zero_key=True) as peer:
        try:
            await peer.meet()
        except Fail as fail:
            raise Fail(
                "54-octet v3 beacons with a CURVE key starting %x00",
                "the target connects over CURVE and sends HELLO",
                fail.got,
            ) from None


@case(
    "curve-downgrade-beacon",
    "a CURVE target ignores key-less (version 1) beacons",
    CURVE_RULE,
    needs=("agent", "curve"),
)
async def curve_downgrade_beacon(h: Harness) -> None:
    async with h.peer() as peer:
        for _ in range(3):
            await peer.beacon()
        await _no_hello(h, peer, "22-octet v1 beacons (no key), plain mailbox", "ignored")


@case(
    "curve-plain-hello",
    "a CURVE target does not take a HELLO sent without CURVE",
    f"{Z43} Security Aspects (the mailbox is a CURVE server)",
    needs=("agent", "curve"),
)
async def curve_plain_hello(h: Harness) -> None:
    async with h.peer() as peer:
        await peer.hello()
        if await peer.expect(None, h.profile.quiet) is not None:
            raise Fail("HELLO#1 over a plain (not CURVE) connection", "nothing", peer.seen())
    await _still_alive_curve(h)


@case(
    "curve-keyless-hello",
    "a CURVE target ignores a HELLO without X-PUBLICKEY",
    "zyre's CURVE convention (HELLO header X-PUBLICKEY); 43/ZRE downgrade rule",
    needs=("agent", "curve"),
)
async def curve_keyless_hello(h: Harness) -> None:
    async with h.peer(curve=True) as peer:
        await peer.meet(key_header=False)
        mark = peer.mark()
        await peer.send(wire.Ping(peer.next_seq()))
        if await peer.expect(wire.PingOk, h.profile.quiet, mark) is not None:
            raise Fail("keyed beacons, HELLO without X-PUBLICKEY, PING", "no PING-OK", peer.seen())


@case(
    "curve-empty-key-header",
    "a HELLO whose X-PUBLICKEY is empty is ignored, and does not take the target down",
    "zyre's CURVE convention (HELLO header X-PUBLICKEY); 43/ZRE downgrade rule",
    needs=("agent", "curve"),
)
async def curve_empty_key_header(h: Harness) -> None:
    async with h.peer(curve=True) as peer:
        await peer.meet(headers=(("X-PUBLICKEY", ""),))
        await trio.sleep(h.profile.quiet)
    await _still_alive_curve(h)


async def _still_alive_curve(h: Harness) -> None:
    async with h.peer("alive-check", curve=True) as fresh:
        try:
            await fresh.meet()
            await fresh.ping_ok_for("a fresh CURVE peer's HELLO")
        except Fail as fail:
            raise Fail(
                "a fresh CURVE peer's keyed beacon, HELLO and PING (after the case)",
                "the target still works",
                fail.got,
            ) from None
