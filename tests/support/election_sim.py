"""A group forming and changing, simulated without sockets, for the election tests.

Each node is either trizre's :class:`~trizre.sansio._election.Elections` or
:class:`ZyreRules`, a model of what zyre's ``zyre_node.c`` does with ELECT
and LEADER (counts compared with ``==``, a wave restarted on every new
member, an empty election object after a stray LEADER). Both take the
same inputs, so a group can mix them.

The network is what ZRE gives: a node learns a peer from its beacon, sends
HELLO on its own link, and only counts the peer as a member once the
peer's HELLO has come back. Each ordered pair of nodes has one FIFO link.
The random generator picks what happens next: a beacon heard, or the
head of any busy link delivered. Time moves on a millisecond a step, and
when the network is quiet it jumps to the next election ``deadline``.
"""

from __future__ import annotations

import math
import random
import uuid
from collections import deque
from collections.abc import Callable, Collection
from typing import Any, Protocol

from trizre.sansio._election import Elected, ElectionAction, Elections, SendElect, SendLeader
from trizre.sansio._peer import node_id

GROUP = "g"


class Rules(Protocol):
    leaders: dict[str, str]

    def contest(self, group: str) -> None: ...
    def running(self, group: str) -> bool: ...
    def deadline(self) -> float: ...
    def poll(
        self, now: float, members_of: Callable[[str], Collection[uuid.UUID]]
    ) -> list[ElectionAction]: ...
    def start(
        self, group: str, members: Collection[uuid.UUID], now: float
    ) -> list[ElectionAction]: ...
    def member_joined(
        self, group: str, peer: uuid.UUID, members: Collection[uuid.UUID], now: float
    ) -> list[ElectionAction]: ...
    def member_left(
        self, group: str, peer: uuid.UUID, members: Collection[uuid.UUID], now: float
    ) -> list[ElectionAction]: ...
    def elect(
        self,
        peer: uuid.UUID,
        group: str,
        candidate: str,
        members: Collection[uuid.UUID],
        now: float,
    ) -> list[ElectionAction]: ...
    def leader(
        self, peer: uuid.UUID, group: str, leader: str, members: Collection[uuid.UUID], now: float
    ) -> list[ElectionAction]: ...


class ZyreRules:
    """zyre's election as ``zyre_node.c`` runs it, for one group (a model, not its code)."""

    def __init__(self, me: uuid.UUID) -> None:
        self.me = node_id(me)
        self.contests = False
        self.leaders: dict[str, str] = {}
        self.election: dict[str, Any] | None = None  # caw, father, erec, lrec, leader
        self.group_leader: str | None = None  # zyre_group_leader: a peer, never us

    def contest(self, group: str) -> None:
        self.contests = True

    def running(self, group: str) -> bool:
        return self.election is not None and self.election["caw"] is not None

    def deadline(self) -> float:
        return math.inf

    def poll(
        self, now: float, members_of: Callable[[str], Collection[uuid.UUID]]
    ) -> list[ElectionAction]:
        return []

    def _new(self, caw: str | None) -> dict[str, Any]:
        return {"caw": caw, "father": None, "erec": 0, "lrec": 0, "leader": None}

    def member_joined(
        self, group: str, peer: uuid.UUID, members: Collection[uuid.UUID], now: float
    ) -> list[ElectionAction]:
        # A HELLO listing the group, or a JOIN while we are in it: a new wave.
        return self.start(group, members, now)

    def start(self, group: str, members: Collection[uuid.UUID], now: float) -> list[ElectionAction]:
        if not self.contests:
            return []
        self.election = self._new(self.me)
        self.group_leader = None
        self.leaders.pop(group, None)
        return [SendElect(tuple(members), group, self.me)]

    def member_left(
        self, group: str, peer: uuid.UUID, members: Collection[uuid.UUID], now: float
    ) -> list[ElectionAction]:
        # EXIT: zyre decides with the leaving peer still counted in the group.
        before = len(members) + 1
        election = self.election
        leader_left = self.group_leader == node_id(peer)
        if not self.contests or not (
            (election is not None and election["lrec"] != before) or leader_left
        ):
            return []
        self.election = None
        self.group_leader = None
        if before == 1:
            self.leaders[group] = self.me
            return [Elected(group, self.me)]
        self.election = self._new(self.me)
        self.leaders.pop(group, None)
        return [SendElect(tuple(members), group, self.me)]

    def elect(
        self,
        peer: uuid.UUID,
        group: str,
        candidate: str,
        members: Collection[uuid.UUID],
        now: float,
    ) -> list[ElectionAction]:
        if self.election is None:
            self.election = self._new(None)
        election = self.election
        actions: list[ElectionAction] = []
        if election["caw"] is None or candidate < election["caw"]:
            election.update(self._new(candidate), father=peer)
            others = tuple(m for m in members if m != peer)
            actions.append(SendElect(others, group, candidate))
        if election["caw"] == candidate:
            election["erec"] += 1
            if election["erec"] == len(members):
                if candidate == self.me:
                    actions.append(SendLeader(tuple(members), group, candidate))
                else:
                    actions.append(SendElect((election["father"],), group, candidate))
        return actions

    def leader(
        self, peer: uuid.UUID, group: str, leader: str, members: Collection[uuid.UUID], now: float
    ) -> list[ElectionAction]:
        if self.election is None:
            self.election = self._new(None)  # zyre_group_require_election
        election = self.election
        if election["caw"] is None:
            return []
        actions: list[ElectionAction] = []
        if leader != self.me and election["lrec"] == 0:
            actions.append(SendLeader(tuple(members), group, election["caw"]))
        election["lrec"] += 1
        election["leader"] = leader
        if election["lrec"] == len(members):
            self.election = None
            # zyre reports a leader it knows: itself, or a peer (found by id).
            if leader == self.me or leader in map(node_id, members):
                self.group_leader = None if leader == self.me else leader
                self.leaders[group] = leader
                actions.append(Elected(group, leader))
        return actions


class Network:
    """``n`` nodes in one group; ``zyre`` of them follow zyre's rules, the rest trizre's."""

    def __init__(
        self, rng: random.Random, n: int, contesters: int, zyre: int = 0, timeout: float = 5.0
    ) -> None:
        self.rng = rng
        self.now = 0.0
        self.ids = [uuid.UUID(int=rng.getrandbits(128)) for _ in range(n)]
        kinds = ["zyre"] * zyre + ["trizre"] * (n - zyre)
        rng.shuffle(kinds)
        self.kind = dict(zip(self.ids, kinds, strict=True))
        self.rules: dict[uuid.UUID, Rules] = {
            u: ZyreRules(u) if self.kind[u] == "zyre" else Elections(u, timeout=timeout)
            for u in self.ids
        }
        self.contesters = rng.sample(self.ids, contesters)
        for u in self.contesters:
            self.rules[u].contest(GROUP)
        self.alive = set(self.ids)
        self.members: dict[uuid.UUID, set[uuid.UUID]] = {u: set() for u in self.ids}
        self.linked: set[tuple[uuid.UUID, uuid.UUID]] = set()
        self.links: dict[tuple[uuid.UUID, uuid.UUID], deque[tuple[str, str]]] = {}
        self.beacons: list[tuple[uuid.UUID, uuid.UUID]] = []  # (hearer, heard)
        self.left: list[tuple[uuid.UUID, uuid.UUID]] = []  # (told, gone)
        self.elected: dict[uuid.UUID, list[str]] = {u: [] for u in self.ids}
        self.elected_at: dict[uuid.UUID, float] = {}  # when each last reported a leader

    # ------------------------------------------------------------ plumbing

    def _members(self, u: uuid.UUID) -> list[uuid.UUID]:
        return sorted(self.members[u])

    def _act(self, at: uuid.UUID, actions: list[ElectionAction]) -> None:
        for action in actions:
            if isinstance(action, Elected):
                self.elected[at].append(action.leader)
                self.elected_at[at] = self.now
                continue
            if isinstance(action, SendElect):
                item = ("elect", action.candidate)
            else:
                item = ("leader", action.leader)
            for to in action.to:
                if (at, to) in self.linked:
                    self.links[(at, to)].append(item)

    def _send_hello(self, src: uuid.UUID, dst: uuid.UUID) -> None:
        if (src, dst) not in self.linked and dst in self.alive:
            self.linked.add((src, dst))
            self.links[(src, dst)] = deque([("hello", "")])

    def _deliver(self, src: uuid.UUID, dst: uuid.UUID, kind: str, what: str) -> None:
        rules = self.rules[dst]
        if kind == "hello":
            self._send_hello(dst, src)  # the HELLO back, on our own link
            self.members[dst].add(src)
            self._act(dst, rules.member_joined(GROUP, src, self._members(dst), self.now))
        elif src not in self.members[dst]:
            return  # from a peer we do not know (yet): dropped, as a node does
        elif kind == "elect":
            self._act(dst, rules.elect(src, GROUP, what, self._members(dst), self.now))
        else:
            self._act(dst, rules.leader(src, GROUP, what, self._members(dst), self.now))

    # ------------------------------------------------------------- driving

    def meet(self, among: Collection[uuid.UUID] | None = None) -> None:
        """Every node will hear every other's beacon, in an order the generator picks.

        ``among``: only those nodes hear each other, for now (nodes of one
        process, which link in memory, meet before they meet the others).
        """
        nodes = [u for u in self.alive if among is None or u in among]
        self.beacons = [(a, b) for a in nodes for b in nodes if a != b]

    def leave(self, gone: uuid.UUID) -> None:
        """``gone`` stops: its links die now, each member learns it (EXIT) at a random time."""
        self.alive.discard(gone)
        for key in [k for k in self.links if gone in k]:
            del self.links[key]
        self.linked = {k for k in self.linked if gone not in k}
        self.left += [(u, gone) for u in self.alive if gone in self.members[u]]

    def step(self) -> bool:
        """One thing happens; False when nothing can (quiet, no deadline)."""
        self.now += 0.001
        busy = [link for link, queue in self.links.items() if queue]
        choices = len(busy) + len(self.beacons) + len(self.left)
        if choices:
            pick = self.rng.randrange(choices)
            if pick < len(busy):
                src, dst = busy[pick]
                kind, what = self.links[(src, dst)].popleft()
                self._deliver(src, dst, kind, what)
            elif pick < len(busy) + len(self.beacons):
                hearer, heard = self.beacons.pop(pick - len(busy))
                self._send_hello(hearer, heard)
            else:
                told, gone = self.left.pop(pick - len(busy) - len(self.beacons))
                self.members[told].discard(gone)
                rules = self.rules[told]
                self._act(told, rules.member_left(GROUP, gone, self._members(told), self.now))
            return True
        deadline = min(self.rules[u].deadline() for u in self.alive)
        if deadline == math.inf:
            return False
        self.now = max(self.now, deadline)
        for u in self.alive:
            rules = self.rules[u]
            if rules.deadline() <= self.now:
                self._act(u, rules.poll(self.now, lambda group, u=u: self._members(u)))
        return True

    def settle(self, max_steps: int = 200_000) -> None:
        for _ in range(max_steps):
            if not self.step():
                return
        raise AssertionError("the election never settled")

    # ------------------------------------------------------------ judging

    def winner(self) -> str:
        return min(node_id(u) for u in self.contesters if u in self.alive)

    def outcome(self) -> str:
        """``agree``, ``stuck`` (an election left running), ``disagree`` or ``not lowest``.

        What counts is what each node reported: every one's last LEADER
        names the lowest contester.  A zyre node may keep an unfinished
        count after reporting it (it restarts on the next membership
        change); that alone is no failure.
        """
        alive = sorted(self.alive)
        last = {self.elected[u][-1] if self.elected[u] else None for u in alive}
        if last == {self.winner()}:
            return "agree"
        if any(self.rules[u].running(GROUP) for u in alive):
            return "stuck"
        return "disagree" if len(last) > 1 else "not lowest"
