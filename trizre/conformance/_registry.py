"""The suite's registry: what a case is, the list of them in suite order, and selection.

:func:`case` registers a case function under its id; the families
(``_cases_beacon.py``, ``_cases_peer.py``, ...) register theirs when
imported, and ``_cases.py`` imports them in suite order.  Also here: the
clauses the reports cite, and the checks several families share.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Final, Literal

import attrs

from .. import wire
from ._harness import Fail, FakePeer, Harness

Kind = Literal["passive", "active"]
CaseFunction = Callable[[Harness], Awaitable[None]]

# Clauses, as the reports cite them.
Z36: Final = "36/ZRE"
Z43: Final = "43/ZRE"
DISC: Final = "22/ZRE-DISC"


@attrs.frozen
class Case:
    """One conformance case.

    ``needs``: what the target must offer, beyond a beacon and a mailbox:
    ``"agent"`` (its events or commands), ``"presence"`` (timeouts the suite
    can set through the agent), ``"curve"`` / ``"gossip"`` (run against the
    target started again with CURVE / in gossip mode).
    """

    id: str
    title: str
    clause: str
    kind: Kind
    run: CaseFunction
    needs: frozenset[str] = frozenset()


CASES: list[Case] = []


def case(
    id: str, title: str, clause: str, kind: Kind = "passive", needs: tuple[str, ...] = ()
) -> Callable[[CaseFunction], CaseFunction]:
    def register(function: CaseFunction) -> CaseFunction:
        if any(c.id == id for c in CASES):
            raise ValueError(f"duplicate case id {id!r}")
        CASES.append(Case(id, title, clause, kind, function, frozenset(needs)))
        return function

    return register


async def _no_hello(
    h: Harness, peer: FakePeer, sent: str, expected: str, what: type = wire.Hello
) -> None:
    """Fail if the target sends ``what`` to ``peer`` within the quiet window."""
    got = await peer.expect(what, h.profile.quiet)
    if got is not None:
        raise Fail(sent, expected, peer.seen())


async def _still_alive(h: Harness, after: str) -> None:
    """Fail unless a fresh peer can still meet the target and get a PING-OK."""
    async with h.peer("alive-check") as fresh:
        try:
            await fresh.meet()
            await fresh.ping_ok_for(f"{after}; then a fresh peer's beacon and HELLO")
        except Fail as fail:
            raise Fail(
                f"{after}; then a fresh peer's beacon, HELLO and PING",
                "the target still works",
                fail.got,
            ) from None


def select(
    ids: list[str] | None = None, kinds: tuple[str, ...] = ("passive", "active")
) -> list[Case]:
    """The cases with these ids (all, for ``None``), in suite order.

    Raises ``ValueError`` naming an unknown id.
    """
    known = {c.id for c in CASES}
    for wanted in ids or ():
        if wanted not in known:
            raise ValueError(f"no case {wanted!r}; cases: {', '.join(sorted(known))}")
    return [c for c in CASES if (ids is None or c.id in ids) and c.kind in kinds]
