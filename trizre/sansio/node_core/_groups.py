"""Groups as records, and what their changes ask of the elections.

:class:`Membership` keeps a :class:`Group` per group that we are in or that
an entered peer is in: its members (updated by JOIN, LEAVE, HELLO and Exit,
never found by scanning the peer table), whether we joined it; its leader
and whether we contest it come from the node's
:class:`~trizre.sansio._election.Elections`, which own them.  It hands the
elections every membership change and every ballot, and turns what they
decide into actions: ELECT and LEADER queued to members (:class:`Flush`),
:class:`~trizre.Leader` events (:class:`Publish`), the next deadline
(:class:`WakeAt`).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Collection, Sequence
from typing import Generic, final
from uuid import UUID

import attrs

from ... import wire
from .._election import Elected, ElectionAction, Elections, SendElect
from .._events import Leader
from .._peer import Ballot, node_id
from ._actions import Action, Flush, Publish, S, WakeAt

__all__ = ["Group", "Membership"]

log = logging.getLogger("trizre.node")


@final
@attrs.define(slots=True, eq=False)
class Group(Generic[S]):
    """One group as this node sees it: its members, whether we are in it, its leader.

    ``members``: the entered peers in it by UUID, in joining order (O(1) to
    update and to ask; nothing scans the peer table), each mapped to its
    entry in the core's peer table: a SHOUT reaches them without hashing a
    UUID per member.  ``joined``: we joined it.
    :attr:`contested` and :attr:`leader` are read from the node's
    elections, which own them (one source of truth).
    """

    name: str
    elections: Elections = attrs.field(repr=False)
    members: dict[UUID, S] = attrs.Factory(dict)
    joined: bool = False

    @property
    def contested(self) -> bool:
        """Whether we stand in its elections."""
        return self.name in self.elections.contested

    @property
    def leader(self) -> UUID | None:
        """The leader last elected in it (our UUID if we won), or ``None``."""
        found = self.elections.leaders.get(self.name)
        return None if found is None else UUID(hex=found)


@final
class Membership(Generic[S]):
    """Our groups and our peers' groups, and the elections they drive.

    ``me``, ``name``, ``version``: ours; ``peers``: the core's peer table
    (read: ELECT and LEADER go to members still in it, a winner is named by
    its HELLO's name); ``say(topic, level, text)``: the core's rate-limited
    log.
    """

    def __init__(
        self,
        me: UUID,
        *,
        name: str,
        version: int,
        elections: Elections,
        peers: dict[UUID, S],
        say: Callable[[str, int, str], None],
    ) -> None:
        self._me = me
        self._name = name
        self._version = version
        self.elections = elections
        self._peers = peers
        self._say = say
        self.groups: dict[str, Group[S]] = {}
        self.status = 0  # our group status, counted by our JOINs and LEAVEs

    # ------------------------------------------------------------- queries

    def members(self, group: str) -> Collection[UUID]:
        """The entered peers in ``group`` (a live view; copy it to keep it)."""
        found = self.groups.get(group)
        return () if found is None else found.members.keys()

    def own_groups(self) -> list[str]:
        """The groups we joined, sorted."""
        return sorted(name for name, group in self.groups.items() if group.joined)

    def joined(self, group: str) -> bool:
        """Whether we are in ``group``."""
        found = self.groups.get(group)
        return found is not None and found.joined

    def _group(self, name: str) -> Group[S]:
        found = self.groups.get(name)
        if found is None:
            found = self.groups[name] = Group(name, self.elections)
        return found

    def _prune(self, group: Group[S]) -> None:
        if not group.joined and not group.members:
            del self.groups[group.name]

    # ------------------------------------------------------- peers' groups

    def joined_by(self, peer: S, name: str, now: float, actions: list[Action[S]]) -> None:
        """``peer`` joined ``name`` (its HELLO or a JOIN): one of ours starts an election."""
        group = self._group(name)
        group.members[peer.uuid] = peer
        if group.joined:
            decided = self.elections.member_joined(name, peer.uuid, group.members.keys(), now)
            self.elect(decided, actions)

    def left_by(self, peer: S, name: str, now: float, actions: list[Action[S]]) -> None:
        """``peer`` left ``name`` (a LEAVE, a HELLO without it, or its exit)."""
        group = self.groups.get(name)
        if group is None:
            return
        group.members.pop(peer.uuid, None)
        if group.joined:
            decided = self.elections.member_left(name, peer.uuid, group.members.keys(), now)
            self.elect(decided, actions)
        self._prune(group)

    def entered(self, peer: S, actions: list[Action[S]]) -> None:
        """A peer entered that some group elected before we knew it: say so now.

        Ballots travel other links than HELLOs, so a node can hear a wave
        end, naming a winner, before the winner's own HELLO reaches it.
        Such a winner's Leader event waits for its Enter instead of being
        dropped.
        """
        elected = node_id(peer.uuid)
        for group, leader in sorted(self.elections.leaders.items()):
            if leader == elected and self.joined(group):
                actions.append(Publish(Leader(peer.uuid, peer.protocol.name, group)))

    # ----------------------------------------------------------- elections

    def ballot(self, peer: S, ballot: Ballot, now: float, actions: list[Action[S]]) -> None:
        """An ELECT or LEADER from ``peer``; ignored for a group we are not in."""
        group = self.groups.get(ballot.group)
        if group is None or not group.joined:
            return  # we left it (or never joined): not ours to elect, and no state kept
        members = group.members.keys()
        if log.isEnabledFor(logging.DEBUG):  # a peer can send any number: rate-limited
            self._say(
                "ballot",
                logging.DEBUG,
                f"{self._name}: {'LEADER' if ballot.leader else 'ELECT'} {ballot.group} "
                f"{ballot.candidate} from {peer.protocol.name}",
            )
        if ballot.leader:
            decided = self.elections.leader(peer.uuid, ballot.group, ballot.candidate, members, now)
        else:
            decided = self.elections.elect(peer.uuid, ballot.group, ballot.candidate, members, now)
        self.elect(decided, actions)

    def elect(self, decided: Sequence[ElectionAction], actions: list[Action[S]]) -> None:
        """Queue what the elections ask to send, publish what they decided."""
        if decided or self.elections.deadline() < math.inf:
            # An election may have begun, or (with nothing to send) a repair
            # been set to rerun the leader's wave: poll must come for it.
            actions.append(WakeAt(self.elections.deadline()))
        if decided and log.isEnabledFor(logging.DEBUG):  # peers' ballots cause these
            self._say("elections", logging.DEBUG, f"{self._name}: elections: {decided}")
        for action in decided:
            if isinstance(action, Elected):
                winner = UUID(hex=action.leader)
                if winner == self._me:
                    actions.append(Publish(Leader(winner, self._name, action.group)))
                elif (found := self._peers.get(winner)) is not None and found.protocol.ready:
                    actions.append(Publish(Leader(winner, found.protocol.name, action.group)))
                # Else the others decided before its HELLO reached us: its
                # Enter announces it (entered).
                continue
            if isinstance(action, SendElect):
                body = wire.election_body(action.group, action.candidate)
                message: wire.Message = wire.Elect(0, body, version=self._version)
            else:
                body = wire.election_body(action.group, action.leader)
                message = wire.Leader(0, body, version=self._version)
            for target in action.to:
                if (member := self._peers.get(target)) is not None:
                    member.protocol.queue(message)
                    actions.append(Flush(member))

    def poll(self, now: float, actions: list[Action[S]]) -> None:
        """End stuck elections, repair and rerun, if due at ``now``."""
        if now >= self.elections.deadline():
            self.elect(self.elections.poll(now, self.members), actions)

    # ------------------------------------------------------------ our side

    def join(self, name: str, now: float) -> list[Action[S]]:
        """Join ``name``: a JOIN queued to every peer, then an election if we contest it.

        Nothing if we are in it already.  Our JOIN is queued first, so
        members see it before our ELECT.
        """
        group = self._group(name)
        if group.joined:
            return []
        group.joined = True
        actions = self._tell(wire.Join, name)
        self.elect(self.elections.start(name, group.members.keys(), now), actions)
        return actions

    def leave(self, name: str) -> list[Action[S]]:
        """Leave ``name``: a LEAVE queued to every peer; its election state is dropped."""
        group = self.groups.get(name)
        if group is None or not group.joined:
            return []
        group.joined = False
        self._prune(group)
        actions = self._tell(wire.Leave, name)
        self.elections.forget(name)
        return actions

    def _tell(self, kind: type[wire.Join | wire.Leave], name: str) -> list[Action[S]]:
        self.status = (self.status + 1) % 256
        message = kind(0, name, self.status, version=self._version)
        actions: list[Action[S]] = []
        for peer in self._peers.values():
            peer.protocol.queue(message)
            actions.append(Flush(peer))
        return actions

    def contest(self, name: str, now: float) -> list[Action[S]]:
        """Stand in ``name``'s elections; in it already, with members, one starts now."""
        self.elections.contest(name)
        actions: list[Action[S]] = []
        group = self.groups.get(name)
        if group is not None and group.joined and group.members:
            self.elect(self.elections.start(name, group.members.keys(), now), actions)
        return actions
