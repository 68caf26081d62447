"""One peer's ZRE protocol (36/ZRE, 43/ZRE), sans I/O: the rules in one place.

:class:`PeerProtocol` is the state of our conversation with one remote
node, in the manner of h11: frames and times go in, events and frames to
send come out; it never touches a socket or reads a clock.  The node owns
one per peer, feeds it what the peer's link delivers and what the clock
says, and hands what it returns to the link and to the event subscribers.

The rules it enforces, all of them from 36/ZRE unless noted:

* Outbound, every message carries the next sequence number, HELLO is 1,
  and numbers wrap 65535 -> 0.  A number is *committed* only once the link
  took the message (:meth:`PeerProtocol.sent`), so a full queue or a
  cancelled send can never open a gap.  Protocol messages (HELLO, JOIN,
  LEAVE, PING, PING-OK) wait in a queue, in order, until the link has room;
  HELLO is queued first, at construction.
* Inbound, anything before a HELLO is ignored; a HELLO must carry 1 and
  come from a DEALER identity ``0x01 + UUID``.  After it, each message must
  carry exactly the next number: a gap, repeat or reordering ends the peer
  (:attr:`ExitReason.SEQUENCE`).  A second HELLO ends it too (it restarted
  its link to us; :attr:`ExitReason.HELLO`), except one that answers ours:
  when this conversation was made on hearing the peer's HELLO
  (``answering``) and nothing else has come since, the peer linked on
  hearing ours too; its HELLO starts the numbering of its new link, and
  the groups it lists give Join and Leave events.
* JOIN and LEAVE update the peer's groups and status; a JOIN of a group it
  is in, or a LEAVE of one it is not in, changes nothing visible.  Each
  costs O(1) whatever the number of groups (the set is the protocol's own;
  :attr:`PeerProtocol.groups` is a read-only view of it).
* Limits (:class:`PeerLimits`, issue 25): a peer whose HELLO lists more
  groups or headers than the limits allow, whose headers hold more bytes,
  whose JOINs would take it past the group limit, or that sends a message
  over the size limit is ended (:attr:`ExitReason.LIMITS`).  A HELLO is
  measured from its counts and lengths before it is decoded
  (:func:`~trizre.wire.hello_excess`), so refusing a huge one costs at
  most ``groups + headers`` steps; a message over the size limit reaches
  the protocol as ``[identity, OVERSIZE]`` (the transport refused to
  copy it, see :meth:`~trizre.transport._zsock.ZSocket.receive_batch`).
* PING is answered with PING-OK; GOODBYE (zyre's id 10) ends the peer.
* Messages of another protocol version are ignored (their numbers do not
  count); a command id we do not know counts its number and is skipped; a
  message with the ZRE signature that does not decode ends the peer
  (:attr:`ExitReason.MALFORMED`); bytes without the signature are ignored.
  PING-OK only proves the peer is alive; ELECT and LEADER (zyre's
  election) come out as :class:`Ballot` for the node's elections, and one
  whose body is not zyre's (group, candidate) is counted and skipped.
* Presence: in-sequence traffic proves the peer alive; :meth:`poll` turns
  silence into PINGs, :class:`~trizre.Evasive` (a PING left unanswered)
  and :class:`~trizre.Silent` events and, at ``expired``,
  :attr:`ExitReason.EXPIRED` (see :mod:`trizre.sansio._presence`).  Beacons the node counts
  (:meth:`PeerProtocol.beacon_heard`) prove the peer alive, not the link:
  a link silent for twice ``expired`` still ends it, with a
  :attr:`PeerProtocol.detail` that says so.
* CURVE (43/ZRE, as zyre): the peer's identity is prefixed by the Z85
  key it authenticated with (the inbox tags it), and its HELLO must carry
  that key as ``X-PUBLICKEY``; a HELLO without it is a downgrade attempt
  and ends the peer (:attr:`ExitReason.KEY`).
* Handshake: a peer whose HELLO has not arrived ``handshake`` seconds after
  the conversation began is ended (:attr:`ExitReason.HANDSHAKE`): anyone
  can forge a beacon, and a peer that never greets must not hold a socket.

When the peer is over, :attr:`PeerProtocol.ended` says why; the node then
forgets the peer and reports :class:`~trizre.Exit` if it had entered.
"""

from __future__ import annotations

import math
import sys
from collections import deque
from collections.abc import KeysView, Sequence
from typing import Final, TypeAlias, final
from uuid import UUID

import attrs

from .. import wire
from ..trace._contract import ExitReason
from ..wire import OVERSIZE
from ._events import Enter, Evasive, Join, Leave, Shout, Silent, Whisper, new_shout, new_whisper
from ._presence import Deafness, Presence, PresenceAction

__all__ = [
    "PUBLIC_KEY_HEADER",
    "Ballot",
    "PeerEvent",
    "PeerLimits",
    "PeerProtocol",
    "Published",
    "hello_from_stranger",
    "route",
]


@final
@attrs.frozen
class Ballot:
    """An ELECT (``leader=False``) or LEADER (``leader=True``) for ``group``, naming ``candidate``.

    Not published: the node hands it to its elections (:mod:`trizre.sansio._election`).
    """

    group: str
    candidate: str
    leader: bool


Published: TypeAlias = Enter | Join | Leave | Whisper | Shout | Evasive | Silent
"""What a peer's protocol reports that the node publishes to subscribers."""

PeerEvent: TypeAlias = Published | Ballot
"""What a peer's protocol reports: published events, and ballots for the elections."""

_NOTHING: Final[tuple[PeerEvent, ...]] = ()
_ABSENT: Final = object()
_HELLO: Final = int(wire.Command.HELLO)
_SIG: Final = wire.SIGNATURE
_SIG_WORD: Final = int.from_bytes(wire.SIGNATURE, "big")
_PACK_HEADER: Final = wire.HEADER.pack  # (signature, command, version, sequence)
_HEADER_SIZE: Final = wire.HEADER.size
_WHISPER: Final = int(wire.Command.WHISPER)
_SHOUT: Final = int(wire.Command.SHOUT)
# Groups as a SHOUT's frame 0 ends with them (a ZRE string) -> decoded,
# for every peer of the process: only what shout_header accepted goes in,
# so a SHOUT whose frame 0 ends with a key is well formed.  Bounded.
_SHOUT_GROUPS: Final[dict[bytes, str]] = {}
_SHOUT_GROUPS_KEPT: Final = 1024
_IDENTITY_SIZE: Final = 17  # 0x01 + a 16-octet UUID (36/ZRE)
_Z85_KEY_SIZE: Final = 40

PUBLIC_KEY_HEADER: Final = "X-PUBLICKEY"
"""The HELLO header in which a CURVE node gives its public key in Z85 (zyre's name)."""


@final
@attrs.frozen
class PeerLimits:
    """What one peer may make us hold: :class:`~trizre.NodeConfig`'s per-peer bounds.

    ``groups``: groups it may be in at once (HELLO list, then JOINs);
    ``headers``: entries in its HELLO's header dictionary; ``header_bytes``:
    their names and values together, in UTF-8 octets; ``message_size``: one
    message's frames together, in octets (a transport refuses more, see
    :meth:`PeerProtocol.receive`).  The defaults are NodeConfig's.
    """

    groups: int = 10_000
    headers: int = 10_000
    header_bytes: int = 1024 * 1024
    message_size: int = 16 * 1024 * 1024

    def hello_excess(self, head: bytes) -> str | None:
        """What of the HELLO whose frame 0 is ``head`` is over the limits; ``None`` if nothing.

        Reads only counts and lengths (see :func:`trizre.wire.hello_excess`):
        at most ``groups + headers`` steps, whatever the HELLO's size.
        Never raises for bytes input.
        """
        return wire.hello_excess(
            head,
            max_groups=self.groups,
            max_headers=self.headers,
            max_header_bytes=self.header_bytes,
        )


_DEFAULT_LIMITS: Final = PeerLimits()


def node_id(node: UUID) -> str:
    """A node's UUID as zyre writes it (``zuuid_str``): 32 upper-case hex digits."""
    return node.hex.upper()


def route(peer: UUID, key: str | None = None) -> bytes:
    """What a ROUTER inbox shows as the sender of ``peer``'s messages.

    ``0x01 + UUID`` (36/ZRE's DEALER identity); in CURVE mode prefixed with
    the Z85 key the peer authenticated with.
    """
    identity = b"\x01" + peer.bytes
    return identity if key is None else key.encode("ascii") + identity


def _declares(hello: wire.Hello, key: str) -> bool:
    # As peers read headers: for a repeated name the last value counts.
    return hello.headers_dict().get(PUBLIC_KEY_HEADER) == key


def hello_from_stranger(
    frames: Sequence[bytes],
    version: int,
    *,
    curve: bool = False,
    limits: PeerLimits | None = _DEFAULT_LIMITS,
) -> tuple[UUID, wire.Hello, str | None] | None:
    """The sender, its HELLO and its CURVE key, if ``frames`` can open a conversation.

    ``frames`` are as a ROUTER delivers them: the sender's identity, then
    the message.  Only a HELLO numbered 1, of our protocol version, from a
    DEALER identity ``0x01 + UUID`` qualifies; anything else from a sender
    we do not know is ignored (36/ZRE).  With ``curve`` the identity is
    prefixed by the Z85 key the sender authenticated with, and the HELLO
    must declare that same key in ``X-PUBLICKEY`` (downgrade protection).
    A HELLO over ``limits`` does not qualify either, and is refused before
    it is decoded (see :meth:`PeerLimits.hello_excess`); ``limits=None``
    when the caller has already measured it (the node does, to log it).
    Returns ``None`` when it does not qualify; never raises for bytes input.
    """
    if len(frames) < 2:
        return None
    identity = frames[0]
    key: str | None = None
    if curve:
        if len(identity) != _Z85_KEY_SIZE + _IDENTITY_SIZE:
            return None
        try:
            key = identity[:_Z85_KEY_SIZE].decode("ascii")
        except UnicodeDecodeError:
            return None
        identity = identity[_Z85_KEY_SIZE:]
    if len(identity) != _IDENTITY_SIZE or identity[0] != 1:
        return None
    if limits is not None and limits.hello_excess(frames[1]) is not None:
        return None
    try:
        message = wire.decode(frames[1:], version)
    except wire.DecodeError:
        return None
    if not isinstance(message, wire.Hello) or message.sequence != wire.HELLO_SEQUENCE:
        return None
    if key is not None and not _declares(message, key):
        return None
    return UUID(bytes=bytes(identity[1:])), message, key


@final
class PeerProtocol:
    """Our ZRE conversation with one peer: sequence numbers, queue, inbound rules.

    Create it when the peer is discovered, with the HELLO to send it
    (queued first), in CURVE mode the Z85 ``key`` the peer authenticates
    with, and the ``limits`` on what the peer may make us hold.  Bad
    input: a HELLO not numbered 1 raises ``ValueError``; ``version`` must
    be one of ``wire.MESSAGE_VERSIONS``.
    Times are any monotonic float clock; the node passes Trio's, and its
    :class:`~trizre.sansio._presence.Deafness`, shared by all its peers, so that
    the time it could not read is not held against them.
    """

    # A process may hold thousands of these (100 local nodes: 9,900), so the
    # queue is made on first use and dropped when empty.
    __slots__ = (
        "_answering",
        "_groups",
        "_handshake_by",
        "_limits",
        "_pending",
        "detail",
        "ended",
        "endpoint",
        "has_queued",
        "headers",
        "in_seq",
        "key",
        "name",
        "next_sequence",
        "pongs",
        "presence",
        "ready",
        "route",
        "status",
        "uuid",
        "version",
    )

    def __init__(
        self,
        peer: UUID,
        endpoint: str,
        hello: wire.Hello,
        *,
        now: float,
        evasive: float,
        expired: float,
        handshake: float = math.inf,
        key: str | None = None,
        answering: bool = False,
        deafness: Deafness | None = None,
        limits: PeerLimits = _DEFAULT_LIMITS,
    ) -> None:
        if hello.sequence != wire.HELLO_SEQUENCE:
            raise ValueError(f"a HELLO is numbered 1, got {hello.sequence}")
        if hello.version not in wire.MESSAGE_VERSIONS:
            raise ValueError(f"version must be 2 or 3, got {hello.version!r}")
        self.uuid = peer
        self.key = key  # CURVE: the Z85 key it must connect with and declare
        self.route = route(peer, key)
        self.endpoint = endpoint
        self.version = hello.version
        self.presence = Presence(now, evasive, expired, deafness)
        self.name = ""
        self.headers: tuple[tuple[str, str], ...] = ()
        # Ours to mutate, in place: a JOIN costs O(1) however many groups
        # (a copy per JOIN made 80,000 JOINs quadratic).  A dict, for its
        # read-only live view and its order (Joins come out as listed).
        self._groups: dict[str, None] = {}
        self._limits = limits
        self.status = 0
        self.ready = False  # its HELLO arrived (Enter was reported)
        self.in_seq = wire.INITIAL_SEQUENCE  # the last number received
        self.pongs = 0  # PING-OKs received (Node.ping waits for the next)
        # The number the next message to this peer must carry (the link
        # took the one before): read on every send, so an attribute, which
        # only sent() (and the sent_seq setter) moves.
        self.next_sequence = (wire.INITIAL_SEQUENCE + 1) & 0xFFFF
        self.ended: ExitReason | None = None
        self.detail = ""
        self._pending: deque[wire.Message] | None = deque((hello,))
        # True while protocol messages wait for the link to take them;
        # kept with _pending (by queue and sent_queued), since every send asks.
        self.has_queued = True
        self._handshake_by = now + handshake
        # Made on hearing its HELLO, and nothing from it since (see _hello).
        self._answering = answering

    @property
    def groups(self) -> KeysView[str]:
        """The groups the peer is in: a read-only, live, set-like view."""
        return self._groups.keys()

    # ------------------------------------------------------------ outbound

    @property
    def sent_seq(self) -> int:
        """The last number the link took (:attr:`next_sequence` is the one after it)."""
        return (self.next_sequence - 1) & 0xFFFF

    @sent_seq.setter
    def sent_seq(self, seq: int) -> None:
        self.next_sequence = (seq + 1) & 0xFFFF

    def sent(self) -> int:
        """The link took a data message numbered :attr:`next_sequence`: commit it.

        Returns the committed number.  Call it only after the link took the
        message: a message that was not sent must not use up a number.
        """
        seq = self.next_sequence
        self.next_sequence = (seq + 1) & 0xFFFF
        return seq

    def queue(self, message: wire.Message) -> None:
        """Queue a protocol message; its sequence number is set when it is sent."""
        if self._pending is None:
            self._pending = deque()
        self._pending.append(message)
        self.has_queued = True

    def queued(self) -> list[bytes] | None:
        """The oldest queued protocol message as frames, numbered next; ``None`` if none.

        It stays queued until :meth:`sent_queued`: offering it again gives
        the same frames.
        """
        if self._pending is None:
            return None
        return wire.encode(attrs.evolve(self._pending[0], sequence=self.next_sequence))

    def sent_queued(self) -> int:
        """The link took what :meth:`queued` returned: dequeue it, commit its number."""
        pending = self._pending
        assert pending is not None, "sent_queued() without a queued message"
        pending.popleft()
        if not pending:
            self._pending = None  # an empty deque still holds ~600 bytes
            self.has_queued = False
        return self.sent()

    def farewell(self) -> list[list[bytes]]:
        """Everything still queued, then GOODBYE, numbered and committed.

        For a node that stops: the link delivers these last words if it
        can.  The conversation is over afterwards.
        """
        words: list[list[bytes]] = []
        while (frames := self.queued()) is not None:
            words.append(frames)
            self.sent_queued()
        words.append(wire.encode(wire.Goodbye(self.next_sequence, version=self.version)))
        self.sent()
        return words

    # ------------------------------------------------------------- inbound

    def receive(self, frames: Sequence[bytes], now: float) -> Sequence[PeerEvent]:
        """Take one message from this peer; return the events it gives.

        ``frames`` are as a ROUTER delivers them: the peer's identity, then
        the message.  ``[identity, OVERSIZE]`` stands for a message the
        transport refused as over ``limits.message_size``
        (:data:`trizre._concurrency.OVERSIZE`): it ends the peer
        (:attr:`ExitReason.LIMITS`).  Replies (PING-OK) are queued
        (see :meth:`queued`).  When the message ends the peer,
        :attr:`ended` is set and nothing more should be fed in.  Never
        raises for bytes input: a peer that misbehaves is ended or
        ignored, as the module docstring lists.
        """
        events, taken = self.receive_run((frames,), 0, now)
        if taken:
            return tuple(events)
        if len(frames) < 2:
            return _NOTHING
        return self._receive(frames, now)

    def receive_run(
        self, batch: Sequence[Sequence[bytes]], start: int, now: float, most: int = sys.maxsize
    ) -> tuple[list[Whisper | Shout], int]:
        """:meth:`receive`'s fast path over ``batch[start:]``: a run of data messages at once.

        Takes messages while each is a WHISPER or a SHOUT in sequence from
        the sender of ``batch[start]`` (the same identity), at most
        ``most``: nearly all traffic, decided from its header without a
        message object, and never ending the peer.  Returns their events
        and the index of the first message not taken; the events are what
        :meth:`receive` gives for each, and the state is as after it.
        ``start`` returned (no event): that message is anything else, and
        nothing changed; give it to :meth:`receive`.  Never raises for
        bytes input.
        """
        events: list[Whisper | Shout] = []
        if not self.ready:
            return events, start
        append = events.append
        version, peer, name = self.version, self.uuid, self.name
        # Each data message is decided by comparing its frame 0 with the one
        # it must be: the header packed for the expected number, and (a
        # SHOUT) its group looked up by the octets that end frame 0 among
        # those of groups already decoded (see _SHOUT_GROUPS).
        pack, sig, groups = _PACK_HEADER, _SIG_WORD, _SHOUT_GROUPS
        first = batch[start]
        route = first[0] if first else b""  # no frame at all: stops below
        seq = self.in_seq
        end = min(len(batch), start + most)
        i = start
        while i < end:
            frames = batch[i]
            if len(frames) < 2 or (i > start and frames[0] != route):
                break
            head = frames[1]
            expected = (seq + 1) & 0xFFFF
            content = (frames[2],) if len(frames) == 3 else tuple(frames[2:])
            if len(head) == _HEADER_SIZE:
                if head != pack(sig, _WHISPER, version, expected):
                    break
                append(new_whisper(peer, name, content))
            elif (
                head[:_HEADER_SIZE] == pack(sig, _SHOUT, version, expected)
                and (group := groups.get(head[_HEADER_SIZE:])) is not None
            ):
                append(new_shout(peer, name, group, content))
            else:
                shout = wire.shout_header(head, version)
                if shout is None or shout[0] != expected:
                    break
                if len(groups) >= _SHOUT_GROUPS_KEPT:
                    groups.clear()  # a peer SHOUTing to ever new groups: bounded
                groups[head[_HEADER_SIZE:]] = shout[1]
                append(new_shout(peer, name, shout[1], content))
            seq = expected
            i += 1
        if events:
            self.in_seq = seq
            self._answering = False
            self.presence.heard(now)
        return events, i

    def _receive(self, frames: Sequence[bytes], now: float) -> Sequence[PeerEvent]:
        head = frames[1]
        if head is OVERSIZE:
            if frames[0] == self.route:
                limit = self._limits.message_size
                self._end(ExitReason.LIMITS, f"a message over max_message_size ({limit} octets)")
            return _NOTHING
        if len(head) > 3 and head[2] == _HELLO and head[3] == self.version and head[:2] == _SIG:
            # Measured before it is decoded: a HELLO of a million groups
            # must cost as little as a small one to refuse.
            excess = self._limits.hello_excess(head)
            if excess is not None:
                if frames[0] == self.route:
                    self._end(ExitReason.LIMITS, f"its HELLO {excess}")
                return _NOTHING
        try:
            message = wire.decode(frames[1:], self.version)
        except wire.UnknownCommand as exc:
            self._in_sequence(exc.sequence, now)  # from a newer protocol: skip it
            return _NOTHING
        except wire.VersionMismatch:
            return _NOTHING  # peers on other protocol versions ignore each other
        except wire.DecodeError as exc:
            if self.ready and frames[1][:2] == wire.SIGNATURE:
                self._end(ExitReason.MALFORMED, str(exc))
            return _NOTHING
        if isinstance(message, wire.Hello):
            return self._hello(frames[0], message, now)
        if not self._in_sequence(message.sequence, now):
            return _NOTHING
        if isinstance(message, wire.Whisper):
            return (Whisper(self.uuid, self.name, message.content),)
        if isinstance(message, wire.Shout):
            return (Shout(self.uuid, self.name, message.group, message.content),)
        if isinstance(message, wire.Join):
            self.status = message.status
            groups = self._groups
            if message.group in groups:
                return _NOTHING
            if len(groups) >= self._limits.groups:
                self._end(ExitReason.LIMITS, f"a JOIN past max_peer_groups ({self._limits.groups})")
                return _NOTHING
            groups[message.group] = None
            return (Join(self.uuid, self.name, message.group),)
        if isinstance(message, wire.Leave):
            self.status = message.status
            if self._groups.pop(message.group, _ABSENT) is _ABSENT:
                return _NOTHING
            return (Leave(self.uuid, self.name, message.group),)
        if isinstance(message, wire.Ping):
            self.queue(wire.PingOk(0, version=self.version))
        elif isinstance(message, wire.Goodbye):
            self._end(ExitReason.GOODBYE)
        elif isinstance(message, wire.Elect | wire.Leader):
            try:
                group, candidate = wire.parse_election_body(message.body)
            except wire.DecodeError:
                return _NOTHING  # counted, not understood: as an unknown command
            return (Ballot(group, candidate, isinstance(message, wire.Leader)),)
        elif isinstance(message, wire.PingOk):
            self.pongs += 1  # for presence the traffic itself was the point
        return _NOTHING

    def _in_sequence(self, seq: int, now: float) -> bool:
        """Accept ``seq`` if it is the next number (refreshing presence); else end the peer."""
        if not self.ready:
            return False  # commands before HELLO are ignored
        expected = (self.in_seq + 1) & 0xFFFF
        if seq != expected:
            self._end(ExitReason.SEQUENCE, f"{seq}, expected {expected}")
            return False
        self.in_seq = seq
        self._answering = False
        self.presence.heard(now)
        return True

    def _hello(self, identity: bytes, hello: wire.Hello, now: float) -> Sequence[PeerEvent]:
        if identity != self.route or hello.sequence != wire.HELLO_SEQUENCE:
            return _NOTHING
        if self.key is not None and not _declares(hello, self.key):
            self._end(ExitReason.KEY, f"its HELLO does not declare {PUBLIC_KEY_HEADER} {self.key}")
            return _NOTHING
        if self.ready and self._answering:
            # We linked on hearing its HELLO, and it linked on hearing ours:
            # this is its answer, not a restart.  Taken as one, each side
            # would answer the other's answer for ever (make scale: a HELLO
            # every round trip between overloaded nodes).
            self._answering = False
            self.in_seq = hello.sequence  # its new link numbers from here
            self.presence.heard(now)
            return self._regroup(hello)
        if self.ready:
            # A HELLO from a peer that already entered: it restarted its
            # link to us.  This conversation is over; the node starts anew.
            self._end(ExitReason.HELLO)
            return _NOTHING
        self.ready = True
        self.in_seq = hello.sequence
        self.presence.heard(now)
        self.name = hello.name
        self.headers = hello.headers
        self.status = hello.status
        self._groups = dict.fromkeys(hello.groups)
        enter = Enter(self.uuid, self.name, self.headers, self.endpoint)
        return (enter, *(Join(self.uuid, self.name, group) for group in self._groups))

    def _regroup(self, hello: wire.Hello) -> Sequence[PeerEvent]:
        """Joins and leaves between the groups we knew and those ``hello`` lists."""
        self.status = hello.status
        groups = dict.fromkeys(hello.groups)
        joined, left = sorted(groups.keys() - self._groups), sorted(self._groups.keys() - groups)
        self._groups = groups
        return (
            *(Join(self.uuid, self.name, group) for group in joined),
            *(Leave(self.uuid, self.name, group) for group in left),
        )

    def _end(self, reason: ExitReason, detail: str = "") -> None:
        if self.ended is None:
            self.ended = reason
            self.detail = detail

    # ------------------------------------------------------------ presence

    def heard(self, now: float) -> None:
        """The peer and our link to it proved alive at ``now`` by other means (a local link)."""
        self.presence.heard(now)

    def beacon_heard(self, now: float) -> None:
        """A beacon proved the peer alive at ``now`` (``beacons_refresh``), not our link to it."""
        self.presence.beacon(now)

    @property
    def responsive(self) -> bool:
        """False while the peer is evasive or silent (it left a PING unanswered)."""
        return self.presence.responsive

    def deadline(self) -> float:
        """The earliest time at which :meth:`poll` may have something to do."""
        if self.ready:
            return self.presence.deadline()
        return min(self.presence.deadline(), self._handshake_by)

    def poll(self, now: float) -> Sequence[Published]:
        """Apply the presence clock at ``now``: queue PINGs, return Evasive/Silent.

        Sets :attr:`ended` to :attr:`ExitReason.EXPIRED` when the peer has
        been silent for ``expired`` seconds, or to
        :attr:`ExitReason.HANDSHAKE` when it has not said HELLO within
        ``handshake`` seconds.  Evasive and Silent are reported only for a
        peer that entered.
        """
        if not self.ready and now >= self._handshake_by:
            self._end(ExitReason.HANDSHAKE)
            return []
        events: list[Published] = []
        while (action := self.presence.poll(now)) is not None:
            if action is PresenceAction.EXPIRED:
                if self.presence.link_only(now):
                    silent = now - self.presence.last_link
                    detail = f"nothing over its link for {silent:.1f} s, though its beacons arrive"
                    self._end(ExitReason.EXPIRED, detail)
                else:
                    self._end(ExitReason.EXPIRED)
                break
            if action is PresenceAction.EVASIVE:
                # Its PING went out a step earlier and is still unanswered.
                if self.ready:
                    events.append(Evasive(self.uuid, self.name))
                continue
            self.queue(wire.Ping(0, version=self.version))
            if self.ready and action is PresenceAction.SILENT:
                events.append(Silent(self.uuid, self.name))
        return events
