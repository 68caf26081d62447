"""Conformance cases, elections.

zyre's election (ELECT 8, LEADER 9: the group and an id, both ZRE strings;
ids are UUIDs as 32 upper-case hex digits).  No RFC specifies it: the
clause is zyre's src/zyre_election.c.  The target contests ELECT_GROUP
from its start (``"contest"`` in ``start``; an agent whose ``started``
does not list it there cannot stand, and these cases are n/a).
"""

from __future__ import annotations

from typing import Final

from .. import wire
from ._harness import Fail, FakePeer, Harness, NotApplicable
from ._registry import case

ELECT_GROUP: Final = "conformance-elect"
ZYRE_ELECTION: Final = "zyre's ELECT/LEADER (src/zyre_election.c; no RFC)"


def _contests(h: Harness) -> None:
    agent = h.need_agent()
    if ELECT_GROUP not in (agent.info.get("contest") or ()):
        raise NotApplicable("the agent cannot stand in elections")


async def _elect_from_target(h: Harness, peer: FakePeer) -> wire.Elect:
    await peer.meet(groups=(ELECT_GROUP,), status=1)
    got = await peer.expect(wire.Elect, h.profile.reply)
    if got is None:
        raise Fail(
            f"HELLO listing {ELECT_GROUP!r}, which the target contests",
            "ELECT from the target",
            peer.seen(),
        )
    return got[2]  # type: ignore[no-any-return]


@case(
    "elect-start",
    "a contesting target starts an election when a member appears: ELECT(group, its id)",
    ZYRE_ELECTION,
    needs=("agent",),
)
async def elect_start(h: Harness) -> None:
    _contests(h)
    async with h.peer() as peer:
        elect = await _elect_from_target(h, peer)
        want = (ELECT_GROUP, h.target.uuid.hex.upper())
        try:
            got = wire.parse_election_body(elect.body)
        except wire.DecodeError as exc:
            raise Fail("HELLO listing the group", f"ELECT body {want}", str(exc)) from None
        if got != want:
            raise Fail("HELLO listing the group", f"ELECT{want}", f"ELECT{got}")


@case(
    "elect-leader",
    "when the only other member echoes its ELECT, the target leads: LEADER(group, its id)",
    ZYRE_ELECTION,
    needs=("agent",),
)
async def elect_leader(h: Harness) -> None:
    _contests(h)
    agent = h.need_agent()
    start = agent.mark()
    async with h.peer() as peer:
        elect = await _elect_from_target(h, peer)
        mark = peer.mark()
        await peer.send(wire.Elect(peer.next_seq(), elect.body))
        got = await peer.expect(wire.Leader, h.profile.reply, mark)
        me = h.target.uuid.hex.upper()
        if got is None or wire.parse_election_body(got[2].body) != (ELECT_GROUP, me):
            raise Fail(
                f"the echo ELECT({ELECT_GROUP!r}, {me})",
                f"LEADER({ELECT_GROUP!r}, {me})",
                peer.seen(mark),
            )

        def leader(e: dict[str, object]) -> bool:
            return e.get("event") == "LEADER" and e.get("group") == ELECT_GROUP

        event = await agent.wait_for(leader, h.profile.reply, start)
        if event is None:
            # An implementation may report a leader only when it changes
            # (trizre does): then the last one it reported must be itself.
            event = next((e for e in reversed(agent.events) if leader(e)), None)
        if event is None or event.get("peer") != h.target.uuid.hex:
            raise Fail(
                "the echo ELECT",
                "a LEADER event naming the target itself",
                repr(event) if event else "none",
            )
