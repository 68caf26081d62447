"""Leader election in a group, on zyre's wire (ELECT = 8, LEADER = 9), sans I/O.

zyre elects with an echo wave (``src/zyre_election.c`` and the ELECT/LEADER
handling in ``src/zyre_node.c``; the facts are taken from there, the code is
our own):

* A node's id is its UUID as 32 upper-case hex digits (zyre's
  ``zuuid_str``). Ids compare as strings; the lowest contester wins.
* A node that *contests* a group starts a wave, ELECT(its id) to every
  member, whenever the group gains a member: a HELLO that lists the group,
  or a JOIN while we are in it. It also starts one when the leader leaves,
  or when a member leaves while an election is unfinished.
* A node takes up a lower challenger than its current wave's (or any, if
  it has none). The sender becomes its *father* and it passes the ELECT on
  to every other member. When it has heard the wave from every member, it
  echoes it to its father; the wave's origin sends LEADER to every member
  instead.
* On its first LEADER a node passes LEADER on to every member. When it has
  heard LEADER from every member, the election is over: the LEADER event.

The wire does not say which run of a wave a message belongs to, and zyre
counts messages: a wave restarted under a running one (every new member
restarts every contester's wave) overshoots a count, or a node drops a
wave others still count on, and the election never ends there. In the
simulation of groups forming in ``tests/support/election_sim.py``, one all-zyre
group of four in twelve never ends, and one re-election in six
(``docs/elections.md``). trizre keeps zyre's messages, so zyre peers see
what they would from zyre, and changes what it decides with them:

* **A newcomer joins the running wave.** Instead of restarting, a node
  carrying an undecided wave passes it to the newcomer, as if it had been
  there all along. With no election running, the leader (or, with none
  known, each contester) starts a new one, so the newcomer learns who
  leads.
* **Heard from, not counted.** A member counts once per run of a wave.
  An ELECT from the wave's origin, when the origin has already been
  heard, is the origin starting again (as zyre's do): the run restarts
  here too. A second ELECT from any other member belongs to the next run
  and is kept for it.
* **Decided at the first LEADER.** A LEADER is sent only once the origin
  has heard from every member, so every member carries the wave: the
  leader is reported then (once: the same leader elected again is no
  news). The run is kept to count the other LEADERs.
* **The lowest contester wins.** A contester never carries a higher wave
  than its own: it starts its own instead (zyre carries any wave when none
  runs, so a higher contester could win). A wave higher than the leader
  that still stands is set aside, and taken up if that leader leaves
  (its exit can reach us after the next election's first ballots).
* **Members leaving.** A count that waited for a member that left is
  checked again (zyre's non-contesters wait forever); a wave whose origin
  left is dropped, and when the leader or that origin leaves, contesters
  start their waves, as zyre's do.
* **Stuck elections end.** ``timeout`` after a run began undecided, the
  node runs the wave of the lowest contester it has heard from itself, if
  that is lower than the run's; else it declares the run's wave won
  (LEADER to every member). A zyre member that miscounted that wave ends
  its election on those LEADERs.
* **Unfinished members are repaired.** Two timeouts after a decision, if
  some member never passed the LEADER on (a zyre member stuck in a count),
  the node starts a wave with an id below every node's (``-`` sorts before
  hex digits): the one thing that resets zyre's count. When it has gone
  round, the node runs the leader's wave again (a node takes up its own
  id's wave and leads it, as zyre does), and everyone ends that election.
  At most three repairs per group until its membership changes.
* **Doubtful elections are repaired too** (issue 32), even if every
  LEADER came: zyre passes a LEADER on with the id of the wave it carries,
  not the one received, so a LEADER naming a higher wave than ours means
  zyre members counting it may end on that id; a member that takes our
  wave up again after passing its LEADER on is a zyre member whose count
  restarted, which may never end; and a member met while the decided run
  still counts LEADERs may have known us first (HELLOs cross) and count a
  LEADER we never sent it.

Nodes that do not contest take part all the same: they pass waves on and
echo them. Only contesters start waves of their own, so only a contester
can win. A node left alone in a group it contests is its leader at once.

:class:`Elections` takes these inputs together with the group's current
members (our peers that are in it) and returns :data:`ElectionAction`
values: messages to send and results to report.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Collection
from typing import TypeAlias, final
from uuid import UUID

import attrs

from ._peer import node_id

__all__ = ["Elected", "ElectionAction", "Elections", "SendElect", "SendLeader"]

_MAX_REPAIRS = 3  # per group, until its membership changes
_GONE_KEPT = 64  # per group: the latest members to leave, whose late ballots are ignored


def _repair(caw: str) -> bool:
    """Is this the wave of a repair (see :meth:`Elections._repair`), not a node's?"""
    return caw.startswith("-")


_ID = re.compile(r"-?[0-9]*[0-9A-F]{32}")


def _valid(candidate: str) -> bool:
    """A node's id, or a repair's: what zyre and trizre send. Anything else is ignored."""
    return len(candidate) <= 64 and _ID.fullmatch(candidate) is not None


@final
@attrs.frozen
class SendElect:
    """Send ELECT(group, candidate) to each of ``to``."""

    to: tuple[UUID, ...]
    group: str
    candidate: str


@final
@attrs.frozen
class SendLeader:
    """Send LEADER(group, leader) to each of ``to``."""

    to: tuple[UUID, ...]
    group: str
    leader: str


@final
@attrs.frozen
class Elected:
    """The election in ``group`` is over: ``leader`` (an id, see :func:`node_id`) won."""

    group: str
    leader: str


ElectionAction: TypeAlias = SendElect | SendLeader | Elected


@final
@attrs.define
class _Run:
    """One run of the wave this node currently carries in a group."""

    caw: str  # the current active wave: its origin's id
    father: UUID | None  # whom we echo to (None: the wave is ours)
    due: float  # when poll looks at it: a timeout from its start, or from its decision
    sent: set[UUID] = attrs.Factory(set)  # members we passed this run's ELECT to
    heard: set[UUID] = attrs.Factory(set)  # members whose ELECT of this run came
    early: set[UUID] = attrs.Factory(set)  # members whose ELECT of the next run came
    echoed: bool = False  # we echoed to the father (or, as origin, sent LEADER)
    passed_leader: bool = False  # the wave's LEADER went out from here: decided
    heard_leader: set[UUID] = attrs.Factory(set)
    told: set[UUID] = attrs.Factory(set)  # members we sent this run's LEADER to
    # Some zyre member may end this election on another leader, or never
    # (Elections.leader, elect): repaired once decided, even if every LEADER came.
    doubted: bool = False


@final
class Elections:
    """Every election this node takes part in, one per group.

    ``me`` is our own UUID; ``timeout`` (seconds, positive, else
    ``ValueError``) is how long an election may stay undecided here before
    this node ends it (see the module's rules). Every input takes the
    group's current members, not counting us, and the time now (on the
    caller's clock; only differences matter), and returns what to do.
    """

    def __init__(self, me: UUID, *, timeout: float = 5.0) -> None:
        if not timeout > 0:
            raise ValueError(f"timeout must be a positive number of seconds, not {timeout!r}")
        self.me = node_id(me)
        self.timeout = timeout
        self.contested: set[str] = set()
        self.leaders: dict[str, str] = {}  # group -> the last elected leader's id
        self._runs: dict[str, _Run] = {}
        self._repairs: dict[str, int] = {}  # group -> repairs since its membership changed
        self._reruns: dict[str, float] = {}  # group -> when to rerun its leader's wave
        self._contenders: dict[str, set[str]] = {}  # group -> ids whose own ELECT came
        # group -> the lowest wave set aside while a leader stood, and its senders
        self._ignored: dict[str, tuple[str, dict[UUID, None]]] = {}
        # group -> ids of members that left, latest last (at most _GONE_KEPT)
        self._gone: dict[str, dict[str, None]] = {}

    def running(self, group: str) -> bool:
        """True while an election in ``group`` is under way here and undecided."""
        run = self._runs.get(group)
        return run is not None and not run.passed_leader

    def contest(self, group: str) -> None:
        """Stand in ``group``'s elections from now on (zyre's ``set_contest_in_group``)."""
        self.contested.add(group)

    def deadline(self) -> float:
        """When :meth:`poll` next has something to do (``inf``: never, as things stand)."""
        return min(
            min((run.due for run in self._runs.values()), default=math.inf),
            min(self._reruns.values(), default=math.inf),
        )

    def poll(
        self, now: float, members_of: Callable[[str], Collection[UUID]]
    ) -> list[ElectionAction]:
        """Apply the clock: end stuck elections, repair and rerun (the module's rules).

        Call it at :meth:`deadline`. ``members_of(group)`` gives a group's
        current members.
        """
        actions: list[ElectionAction] = []
        for group, when in list(self._reruns.items()):
            if now >= when:
                del self._reruns[group]
                actions += self._rerun(group, members_of(group), now)
        for group, run in list(self._runs.items()):
            if now < run.due:
                continue
            members = members_of(group)
            standing = self._standing(group, members)
            if (
                run.passed_leader
                and not _repair(run.caw)
                and (run.doubted or not run.heard_leader.issuperset(members))
                and self._repairs.get(group, 0) < _MAX_REPAIRS
            ):
                actions += self._repair(group, members, now)
            elif run.passed_leader or (standing is not None and standing < run.caw):
                del self._runs[group]  # reported already, or a lower leader stands
            elif not _repair(run.caw) and (lower := self._contender(group, members)) < run.caw:
                # A lower contester's wave got lost here (we ignored it, or a
                # member dropped it to restart its own): run it for it.
                actions += self._run_for(group, lower, members, now)
            elif run.caw == self.me or run.caw in map(node_id, members):
                # Stuck, in a zyre member's count most likely (see above): no
                # lower wave has come in all this time, so this one won. A
                # zyre member carrying it ends its election on the LEADERs.
                self._decided(run, members, now)
                if members:
                    actions.append(SendLeader(tuple(members), group, run.caw))
                actions += self._decide(group, run.caw)
            elif group in self.contested:
                actions += self.start(group, members, now)  # its origin is gone
            else:
                del self._runs[group]
        return actions

    def start(self, group: str, members: Collection[UUID], now: float) -> list[ElectionAction]:
        """We joined ``group``, or began to contest it: start our wave, if we contest.

        Any election under way here is dropped.
        """
        if group not in self.contested:
            return []
        self._reruns.pop(group, None)
        self._repairs.pop(group, None)
        return self._wave(group, members, now)

    def member_joined(
        self, group: str, peer: UUID, members: Collection[UUID], now: float
    ) -> list[ElectionAction]:
        """``peer`` joined ``group`` (its HELLO listed it, or its JOIN came); we are in it.

        zyre restarts every contester's wave here. A restarted wave cannot
        be told from the running one on the wire, so trizre extends the
        running one instead: the newcomer gets our ELECT of it, as if it
        had been there all along. With no election running, the leader
        (or, with none, each contester) starts a new one, so that the
        newcomer learns who leads.
        """
        self._repairs.pop(group, None)
        self._gone.get(group, {}).pop(node_id(peer), None)
        run = self._runs.get(group)
        if run is not None and run.passed_leader and peer not in run.told and not _repair(run.caw):
            # Decided here, and counting LEADERs still: it may have known us
            # before we knew it (HELLOs cross), and a zyre member then counts
            # our LEADER, which never went to it. Sent now, it could find a
            # zyre member restarted by our HELLO: a repair is safe.
            run.doubted = True
        if run is not None and not run.passed_leader:
            if peer in run.sent or peer == run.father:
                return []
            run.sent.add(peer)
            return [SendElect((peer,), group, run.caw)]
        if group not in self.contested:
            return []
        standing = self._standing(group, members)
        if standing is not None and standing != self.me:
            return []  # the leader's new wave will come
        self._reruns.pop(group, None)
        return self._wave(group, members, now)

    def _wave(self, group: str, members: Collection[UUID], now: float) -> list[ElectionAction]:
        """Start our own wave in ``group`` (or lead at once, alone)."""
        self._runs.pop(group, None)
        if not members:
            return self._decide(group, self.me)
        return self._new_run(group, self.me, members, now)

    def _new_run(
        self, group: str, caw: str, members: Collection[UUID], now: float
    ) -> list[ElectionAction]:
        """Start a run of ``caw``'s wave from here: ELECT to every member."""
        self._runs[group] = _Run(caw, None, now + self.timeout, sent=set(members))
        return [SendElect(tuple(members), group, caw)] if members else []

    def member_left(
        self, group: str, peer: UUID, members: Collection[UUID], now: float
    ) -> list[ElectionAction]:
        """``peer`` left ``group`` or the network; ``members`` are the ones that remain."""
        self._repairs.pop(group, None)
        self._contenders.get(group, set()).discard(node_id(peer))
        gone = self._gone.setdefault(group, {})
        gone.pop(node_id(peer), None)  # latest last, if it left before
        gone[node_id(peer)] = None
        if len(gone) > _GONE_KEPT:
            del gone[next(iter(gone))]
        leader_left = self.leaders.get(group) == node_id(peer)
        if leader_left:
            del self.leaders[group]
        run = self._runs.get(group)
        if run is not None:
            for heard in (run.sent, run.heard, run.heard_leader):
                heard.discard(peer)
            if run.caw == node_id(peer):
                del self._runs[group]  # its origin is gone: the wave can no longer win
                run = None
        actions: list[ElectionAction] = []
        if group in self.contested and run is None and (leader_left or group not in self.leaders):
            actions = self.start(group, members, now)  # as zyre: the leader is gone
        elif run is not None:
            actions = self._check(group, run, members, now)
        if leader_left:
            # Waves we ignored while it stood (its exit reached us late) can win now.
            candidate, senders = self._ignored.pop(group, ("", {}))
            for sender in senders:
                if sender in members:
                    actions += self.elect(sender, group, candidate, members, now)
        return actions

    def forget(self, group: str) -> None:
        """We left ``group``: drop its election and its leader (we still contest it)."""
        self._runs.pop(group, None)
        self.leaders.pop(group, None)
        self._reruns.pop(group, None)
        self._repairs.pop(group, None)
        self._contenders.pop(group, None)
        self._ignored.pop(group, None)
        self._gone.pop(group, None)

    def elect(
        self, peer: UUID, group: str, candidate: str, members: Collection[UUID], now: float
    ) -> list[ElectionAction]:
        """An ELECT(group, candidate) came from ``peer``."""
        if not _valid(candidate) or self._left(group, candidate):
            return []
        if node_id(peer) == candidate:
            self._contenders.setdefault(group, set()).add(candidate)
        run = self._runs.get(group)
        if run is not None and run.passed_leader and _repair(run.caw) and candidate > run.caw:
            run = None  # a finished reset: only its last LEADERs were awaited
        actions: list[ElectionAction] = []
        if run is not None and run.passed_leader and candidate > run.caw:
            # A decided run, kept to count LEADERs: a higher wave is a new
            # election, which cannot win while a lower leader stands, unless
            # that leader leaves (its exit can reach us after this wave).
            if self._outranked(group, candidate, members):
                self._set_aside(group, candidate, peer)
            return actions
        if run is None or candidate < run.caw:
            if self._outranked(group, candidate, members):
                # A lower leader stands: this wave cannot win, unless it leaves.
                self._set_aside(group, candidate, peer)
                return actions
            if group in self.contested and self.me < candidate:
                return self.start(group, members, now)  # we are the better challenger
            run, actions = self._take_up(group, peer, candidate, members, now)
        elif candidate == run.caw and peer in run.heard:
            if node_id(peer) == candidate:
                # The origin started again: so do we, with what came early.
                early = run.early
                run, actions = self._take_up(group, peer, candidate, members, now)
                run.heard |= early - {peer}
            else:
                run.early.add(peer)
                if run.passed_leader and peer in run.heard_leader and not _repair(run.caw):
                    # It passed the LEADER on, then took the wave up again: a
                    # zyre member whose count restarted, and may never end.
                    run.doubted = True
                return actions
        if candidate != run.caw:
            return actions  # a higher challenger than our wave's: ignored, as zyre
        run.heard.add(peer)
        return actions + self._check(group, run, members, now)

    def leader(
        self, peer: UUID, group: str, leader: str, members: Collection[UUID], now: float
    ) -> list[ElectionAction]:
        """A LEADER(group, leader) came from ``peer``."""
        if not _valid(leader) or self._left(group, leader):
            return []
        run = self._runs.get(group)
        if _repair(leader) and (run is None or run.caw != leader):
            return []  # a reset we are not in (any more)
        if run is None:
            # An election we were left out of (we ignored its wave while the
            # last leader seemed to stand) decided: it stands unless a lower
            # leader does.
            standing = self._standing(group, members)
            if leader in map(node_id, members) and (standing is None or leader < standing):
                return self._decide(group, leader)
            if standing is not None and leader > standing and not _repair(leader):
                self._doubt_decided(group, standing, members, now)  # as below
            return []
        if leader > run.caw:
            # From a run we have left: the election now running will tell
            # us. Or a zyre member's: it passes on, at its first LEADER, the
            # LEADER of the wave *it* carries, and the zyre members counting
            # that one may end on it. Repaired once this run is decided.
            if not _repair(leader) and not _repair(run.caw):
                run.doubted = True
            return []
        if leader < run.caw:
            # A lower wave won without us (we restarted ours under it): it stands.
            del self._runs[group]
            return self._decide(group, leader)
        actions: list[ElectionAction] = []
        if not run.passed_leader and leader != self.me:
            # Decided: the origin heard from every member, so all carry its wave.
            self._decided(run, members, now)
            actions.append(SendLeader(tuple(members), group, leader))
            if not _repair(leader):
                actions += self._decide(group, leader)
        run.heard_leader.add(peer)
        return actions + self._check(group, run, members, now)

    def _left(self, group: str, candidate: str) -> bool:
        """Whether ``candidate`` left ``group``: its wave can no longer win.

        Its ballots still come, sent before the others heard it leave
        (bench_elections, 2 zyre + 2 trizre: taken up, they re-elected the
        departed leader, and no election ran again).
        """
        return candidate in self._gone.get(group, ())

    def _take_up(
        self, group: str, father: UUID, candidate: str, members: Collection[UUID], now: float
    ) -> tuple[_Run, list[ElectionAction]]:
        """Carry ``candidate``'s wave, heard first from ``father``: pass it on, but not back."""
        others = tuple(m for m in members if m != father)
        run = self._runs[group] = _Run(candidate, father, now + self.timeout, sent=set(others))
        return run, [SendElect(others, group, candidate)] if others else []

    def _check(
        self, group: str, run: _Run, members: Collection[UUID], now: float
    ) -> list[ElectionAction]:
        """Echo, lead or finish, as far as what has been heard allows."""
        actions: list[ElectionAction] = []
        if not run.echoed and run.heard.issuperset(members):
            run.echoed = True
            ours = run.father is None and _repair(run.caw)
            if run.caw == self.me or ours:
                self._decided(run, members, now)
                if members:
                    actions.append(SendLeader(tuple(members), group, run.caw))
                if not ours:
                    actions += self._decide(group, self.me)
            elif run.father is not None and run.father in members:
                actions.append(SendElect((run.father,), group, run.caw))
            # else: we rerun another's wave; its LEADER comes from it.
        if run.passed_leader and run.heard_leader.issuperset(members) and not run.doubted:
            del self._runs[group]  # every member has heard: nothing more will come
            if run.father is None and _repair(run.caw):
                # Our reset went round. Rerun the leader's wave once its last
                # LEADERs have reached everyone (a member still counting them
                # would ignore the wave).
                self._reruns[group] = now + self.timeout / 10
        return actions

    def _repair(self, group: str, members: Collection[UUID], now: float) -> list[ElectionAction]:
        """Reset every member's election with a wave lower than any node's id.

        The election ended here, but some member never passed its LEADER
        on: a zyre member stuck in a count it cannot finish, most likely. A
        lower wave is the one thing that resets zyre's count. Once it has
        gone round, the leader's wave is run again, for everyone.
        """
        count = self._repairs[group] = self._repairs.get(group, 0) + 1
        # Lower than every real id ("-" sorts before hex digits), lower for
        # each repair (a wave is only taken up by lower ones), and ours.
        caw = f"-{_MAX_REPAIRS - count}{self.me}"
        return self._new_run(group, caw, members, now)

    def _rerun(self, group: str, members: Collection[UUID], now: float) -> list[ElectionAction]:
        """Run the leader's wave for it (it is taken up, and won, as its own)."""
        leader = self.leaders.get(group)
        if group in self._runs or not members or leader is None:
            return []  # an election began meanwhile, or there is nothing to rerun
        if leader != self.me and leader not in map(node_id, members):
            return []
        return self._run_for(group, leader, members, now)

    def _run_for(
        self, group: str, leader: str, members: Collection[UUID], now: float
    ) -> list[ElectionAction]:
        """Start ``leader``'s wave ourselves: it takes it up, and wins it, as its own."""
        if leader == self.me:
            return self._wave(group, members, now)
        return self._new_run(group, leader, members, now)

    def _contender(self, group: str, members: Collection[UUID]) -> str:
        """The lowest contester still in ``group`` that we know of ("~" if none: above all)."""
        present = set(map(node_id, members))
        known = {c for c in self._contenders.get(group, ()) if c in present}
        if group in self.contested:
            known.add(self.me)
        return min(known, default="~")

    def _decided(self, run: _Run, members: Collection[UUID], now: float) -> None:
        """The run's LEADER goes out from here: keep the run for the LEADERs to come.

        Looked at again two timeouts on, after any other member's timeout
        has fired: their LEADERs would cross a repair.
        """
        run.passed_leader = True
        run.told = set(members)
        run.due = now + 2 * self.timeout

    def _doubt_decided(
        self, group: str, leader: str, members: Collection[UUID], now: float
    ) -> None:
        """Doubt the election that ended here on ``leader``: keep it decided, for poll to repair.

        Kept as a decided run is once every LEADER came, so a new run of
        the same wave restarts it as usual.
        """
        every = set(members)
        run = _Run(leader, None, now, sent=every, heard=set(every), echoed=True, doubted=True)
        run.heard_leader = set(every)
        self._decided(run, members, now)
        self._runs[group] = run

    def _set_aside(self, group: str, candidate: str, peer: UUID) -> None:
        """Keep the lowest wave ignored while a leader stood: one wave, each sender once."""
        kept = self._ignored.get(group)
        if kept is None or candidate < kept[0]:
            self._ignored[group] = (candidate, {peer: None})
        elif candidate == kept[0]:
            kept[1][peer] = None

    def _outranked(self, group: str, candidate: str, members: Collection[UUID]) -> bool:
        """Whether a leader lower than ``candidate`` stands in ``group``, and it is not us."""
        standing = self._standing(group, members)
        return standing is not None and standing < candidate and standing != self.me

    def _standing(self, group: str, members: Collection[UUID]) -> str | None:
        """The leader we know in ``group``, if it is still there."""
        leader = self.leaders.get(group)
        if leader is None or (leader != self.me and leader not in map(node_id, members)):
            return None
        return leader

    def _decide(self, group: str, leader: str) -> list[ElectionAction]:
        """``leader`` leads ``group``: report it if that is news."""
        self._ignored.pop(group, None)  # waves set aside lost this election
        if self.leaders.get(group) == leader:
            return []
        self.leaders[group] = leader
        return [Elected(group, leader)]
