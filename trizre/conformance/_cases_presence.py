"""Conformance cases, presence.

A peer that goes quiet is pinged, then evasive, then expired, at the
timeouts the suite sets through the agent.
"""

from __future__ import annotations

import trio

from .. import wire
from ._harness import Fail, Harness, NotApplicable
from ._registry import Z36, case


def _timeouts(h: Harness) -> tuple[float, float]:
    agent = h.need_agent()
    evasive, expired = agent.info.get("evasive"), agent.info.get("expired")
    if not isinstance(evasive, int | float) or not isinstance(expired, int | float):
        raise NotApplicable("the agent cannot set the presence timeouts")
    if expired > 20:
        raise NotApplicable(f"the agent's expired timeout is {expired} s (too long to wait)")
    return float(evasive), float(expired)


@case(
    "evasive-ping",
    "a silent peer gets a PING after the evasive timeout (not before)",
    f"{Z36} The PING Command: 'SHOULD send a PING command to any peer ... not received a beacon'",
    needs=("agent", "presence"),
)
async def evasive_ping(h: Harness) -> None:
    evasive, _expired = _timeouts(h)
    async with h.peer() as peer:
        await peer.meet()
        await peer.ping_ok_for("HELLO")
        peer.beaconing = False
        silent_since = trio.current_time()
        mark = peer.mark()
        got = await peer.expect(wire.Ping, evasive + h.profile.late, mark)
        if got is None:
            raise Fail(
                f"silence (no beacon, no message) after HELLO, evasive {evasive} s",
                f"a PING within {evasive + h.profile.late:.1f} s",
                peer.seen(mark),
            )
        after = got[0] - silent_since
        if after < evasive - h.profile.early:
            raise Fail(
                f"silence after HELLO, evasive {evasive} s",
                f"no PING before {evasive - h.profile.early:.1f} s",
                f"PING after {after:.2f} s",
            )
        await peer.send(wire.PingOk(peer.next_seq()))


@case(
    "expired-exit",
    "a peer silent for the expired timeout is dropped (not before)",
    f"{Z36} The PING Command: 'it SHOULD treat that peer as dead'",
    needs=("agent", "presence"),
)
async def expired_exit(h: Harness) -> None:
    _evasive, expired = _timeouts(h)
    agent = h.need_agent()
    async with h.peer() as peer:
        await peer.meet()
        await peer.ping_ok_for("HELLO")
        peer.beaconing = False
        silent_since = trio.current_time()
        start = agent.mark()

        def gone(e: dict[str, object]) -> bool:
            return e.get("event") == "EXIT" and e.get("peer") == peer.uuid.hex

        event = await agent.wait_for(gone, expired + h.profile.late, start)
        if event is None:
            raise Fail(
                f"silence after HELLO, PINGs unanswered, expired {expired} s",
                f"EXIT within {expired + h.profile.late:.1f} s",
                "; ".join(agent.transcript(5)),
            )
        after = float(event["_t"]) - silent_since
        if after < expired - h.profile.early:
            raise Fail(
                f"silence after HELLO, expired {expired} s",
                f"no EXIT before {expired - h.profile.early:.1f} s",
                f"EXIT after {after:.2f} s",
            )
