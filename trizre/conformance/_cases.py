"""The cases: each checks one rule, cites its clause, and says what it sent.

A case is an async function of a :class:`Harness`; it returns to pass,
raises :class:`Fail` (sent, expected, got) to fail, or
:class:`NotApplicable` when the target cannot be asked (no agent, a
timeout it cannot set).  Cases are independent: each makes its own fake
peers with fresh UUIDs and says goodbye (a port-0 beacon) at its end.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from typing import Any, Final, Literal

import attrs
import trio

from .. import wire
from ._agent import b64, unb64
from ._harness import Fail, FakePeer, GossipLink, Harness, NotApplicable

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


# --------------------------------------------------------------- beacons


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


# --------------------------------------------------------------- messages


@case(
    "hello-first",
    "the target's first message on a new connection is HELLO with sequence 1",
    f"{Z36} ZRE Commands: 'The first message from a peer (HELLO) MUST have sequence number 1'",
)
async def hello_first(h: Harness) -> None:
    async with h.peer() as peer:
        await peer.meet()
        _t, identity, first = peer.received[0]
        if not isinstance(first, wire.Hello) or first.sequence != 1:
            raise Fail("a beacon", "HELLO#1 first", peer.seen())
        if identity != b"\x01" + h.target.uuid.bytes:
            raise Fail(
                "a beacon",
                "DEALER identity %x01 + the target's UUID",
                identity.hex(),
            )


@case(
    "hello-fields",
    "the target's HELLO: endpoint of its mailbox, valid name, its groups and headers",
    f"{Z36} The HELLO Command",
)
async def hello_fields(h: Harness) -> None:
    async with h.peer() as peer:
        _t, _i, hello = await peer.meet()
    if hello.endpoint.rsplit(":", 1)[-1] != str(h.target.port):
        raise Fail("a beacon", f"endpoint with port {h.target.port}", hello.endpoint)
    agent = h.agent
    if agent is None:
        return
    if "conformance-pre" not in hello.groups:
        raise Fail("a beacon", "groups listing 'conformance-pre'", repr(hello.groups))
    if hello.headers_dict().get("X-Conformance") != "yes":
        raise Fail("a beacon", "header X-Conformance=yes", repr(hello.headers))
    if hello.name != agent.info.get("name"):
        raise Fail("a beacon", f"name {agent.info.get('name')!r}", repr(hello.name))


@case("ping", "PING is answered with PING-OK", f"{Z36} The PING-OK Command")
async def ping(h: Harness) -> None:
    async with h.peer() as peer:
        await peer.meet()
        await peer.ping_ok_for("HELLO")


@case(
    "sequence-increments",
    "the target numbers its messages 1, 2, 3, ... on each connection",
    f"{Z36} ZRE Commands: 'every message must have a strictly incrementing sequence number'",
)
async def sequence_increments(h: Harness) -> None:
    async with h.peer() as peer:
        await peer.meet()
        for _ in range(3):
            await peer.ping_ok_for("HELLO")
        seqs = [m.sequence for _t, _i, m in peer.received if not isinstance(m, wire.DecodeError)]
        if seqs != list(range(1, len(seqs) + 1)):
            raise Fail("HELLO and three PINGs", "sequence numbers 1, 2, 3, ...", repr(seqs))


@case(
    "sequence-wrap",
    "the peer's sequence number wraps from 65535 to 0",
    f"{Z36} ZRE Commands (two-octet sequence, so it wraps)",
)
async def sequence_wrap(h: Harness) -> None:
    async with h.peer() as peer:
        await peer.meet()
        await peer.ping_ok_for("HELLO")
        # Unsolicited PING-OKs: every target reads them, none answers them.
        batch = []
        while peer.seq != 0xFFFF:
            batch.append(wire.encode(wire.PingOk(peer.next_seq())))
        assert peer.outbox is not None
        for frames in batch:
            await peer.outbox.send(frames)
        await peer.ping_ok_for("PING-OKs numbered up to 65535")


@case(
    "sequence-gap",
    "a gap in the peer's sequence numbers makes the target drop it",
    f"{Z36} ZRE Commands: 'When a peer detects gaps in the sequence ... disconnect the peer'",
)
async def sequence_gap(h: Harness) -> None:
    async with h.peer() as peer:
        await peer.meet()
        await peer.ping_ok_for("HELLO")
        mark = peer.mark()
        skipped = peer.next_seq() + 1
        peer.seq = skipped
        await peer.send(wire.Ping(skipped))
        if await peer.expect(wire.PingOk, h.profile.quiet, mark) is not None:
            raise Fail(
                f"PING seq {skipped} after seq {skipped - 2}",
                "no PING-OK (the peer is invalid)",
                peer.seen(mark),
            )


@case(
    "before-hello",
    "commands before HELLO are ignored",
    f"{Z36} The HELLO Command: 'SHALL silently ignore any commands that precede a HELLO'",
)
async def before_hello(h: Harness) -> None:
    async with h.peer() as peer:
        # The target knows us by our beacon (it connects and says HELLO),
        # but we have not said HELLO: our PINGs must go unanswered.
        peer.beaconing = True
        await peer.beacon()
        if await peer.expect(wire.Hello, h.profile.reply) is None:
            raise Fail("v1 beacons", "the target connects and sends HELLO", peer.seen())
        mark = peer.mark()
        await peer.send(wire.Ping(1))
        await peer.send(wire.Ping(2))
        if await peer.expect(wire.PingOk, h.profile.quiet, mark) is not None:
            raise Fail("beacons, then PING#1, PING#2 without HELLO", "no PING-OK", peer.seen(mark))


@case(
    "hello-unknown",
    "a HELLO from a peer never heard by beacon makes a new peer",
    f"{Z36} Interconnection Model: 'a valid message from an unknown node ... a new peer'",
)
async def hello_unknown(h: Harness) -> None:
    async with h.peer() as peer:
        await peer.hello()
        if await peer.expect(wire.Hello, h.profile.reply) is None:
            raise Fail("HELLO#1 with our endpoint, no beacon", "a HELLO back", peer.seen())
        await peer.ping_ok_for("HELLO")


@case(
    "bad-signature",
    "a message without the %xAA %xA1 signature is discarded",
    f"{Z36} Protocol Signature: 'SHALL silently discard'",
)
async def bad_signature(h: Harness) -> None:
    async with h.peer() as peer:
        await peer.meet()
        await peer.ping_ok_for("HELLO")
        mark = peer.mark()
        frame = wire.encode(wire.Ping(peer.seq + 1))[0]
        await peer.send_frames([b"\xaa\xa2" + frame[2:]])
        if await peer.expect(wire.PingOk, h.profile.quiet, mark) is not None:
            raise Fail("a PING with signature %xAA %xA2", "discarded", peer.seen(mark))


@case(
    "bad-version",
    "a message with an unknown version octet is discarded",
    f"{Z36} Versioning: 'SHALL discard messages that do not contain a valid version number'",
)
async def bad_version(h: Harness) -> None:
    async with h.peer() as peer:
        await peer.meet()
        await peer.ping_ok_for("HELLO")
        mark = peer.mark()
        frame = bytearray(wire.encode(wire.Ping(peer.seq + 1))[0])
        frame[3] = 9
        await peer.send_frames([bytes(frame)])
        if await peer.expect(wire.PingOk, h.profile.quiet, mark) is not None:
            raise Fail("a PING with version octet 9", "discarded", peer.seen(mark))


@case(
    "oversize-frame",
    "a 32 MiB WHISPER frame does not take the target down",
    f"{Z36} (robustness; message-size limits are the implementation's)",
)
async def oversize_frame(h: Harness) -> None:
    async with h.peer() as peer:
        await peer.meet()
        await peer.send(wire.Whisper(peer.next_seq(), (bytes(32 * 1024 * 1024),)))
        await trio.sleep(h.profile.quiet)
    await _still_alive(h, "a 32 MiB WHISPER")


# ------------------------------------------------- what the target reports


async def _event(
    h: Harness, kind: str, peer: FakePeer, start: int, sent: str, **fields: object
) -> dict[str, Any]:
    agent = h.need_agent()

    def match(e: dict[str, object]) -> bool:
        return (
            e.get("event") == kind
            and e.get("peer") == peer.uuid.hex
            and all(e.get(k) == v for k, v in fields.items())
        )

    event = await agent.wait_for(match, h.profile.reply, start)
    if event is None:
        shown = f" with {fields}" if fields else ""
        raise Fail(sent, f"a {kind} event{shown}", "; ".join(agent.transcript(5)) or "nothing")
    return event


@case(
    "utf8-name-headers",
    "a UTF-8 name and headers arrive intact",
    f"{Z36} TCP Protocol Grammar (string, dictionary: UTF-8)",
    needs=("agent",),
)
async def utf8_name_headers(h: Harness) -> None:
    agent = h.need_agent()
    start = agent.mark()
    name = "Zoë-東京-🦊"
    headers = (("X-Ünïcode", "välue ✓"), ("X-Empty", ""))
    async with h.peer() as peer:
        await peer.meet(name=name, headers=headers)
        event = await _event(h, "ENTER", peer, start, "HELLO with a UTF-8 name and headers")
        if event.get("name") != name or event.get("headers") != dict(headers):
            raise Fail(
                f"HELLO name {name!r}, headers {dict(headers)}",
                "the same in the ENTER event",
                f"name {event.get('name')!r}, headers {event.get('headers')}",
            )


@case(
    "join-leave-in",
    "a peer's JOIN and LEAVE (and the groups in its HELLO) are reported",
    f"{Z36} The JOIN Command, The LEAVE Command",
    needs=("agent",),
)
async def join_leave_in(h: Harness) -> None:
    agent = h.need_agent()
    start = agent.mark()
    async with h.peer() as peer:
        await peer.meet(groups=("conf-hello",), status=1)
        await _event(h, "JOIN", peer, start, "HELLO listing group conf-hello", group="conf-hello")
        await peer.send(wire.Join(peer.next_seq(), "conf-j", 2))
        await _event(h, "JOIN", peer, start, "JOIN conf-j status 2", group="conf-j")
        await peer.send(wire.Leave(peer.next_seq(), "conf-j", 3))
        await _event(h, "LEAVE", peer, start, "LEAVE conf-j status 3", group="conf-j")


@case(
    "whisper-in",
    "a WHISPER's content arrives intact",
    f"{Z36} The WHISPER Command",
    needs=("agent",),
)
async def whisper_in(h: Harness) -> None:
    agent = h.need_agent()
    start = agent.mark()
    async with h.peer() as peer:
        await peer.meet()
        content = b"\x00conformance\xff"
        await peer.send(wire.Whisper(peer.next_seq(), (content,)))
        event = await _event(h, "WHISPER", peer, start, "WHISPER")
        if [unb64(f) for f in event.get("frames", [])] != [content]:
            raise Fail(f"WHISPER {content!r}", "the same frame", repr(event.get("frames")))


@case(
    "shout-in",
    "a SHOUT to a group the target is in arrives with its group",
    f"{Z36} The SHOUT Command",
    needs=("agent",),
)
async def shout_in(h: Harness) -> None:
    agent = h.need_agent()
    start = agent.mark()
    async with h.peer() as peer:
        await peer.meet()
        await peer.send(wire.Shout(peer.next_seq(), "conformance-pre", (b"hi all",)))
        event = await _event(h, "SHOUT", peer, start, "SHOUT", group="conformance-pre")
        if [unb64(f) for f in event.get("frames", [])] != [b"hi all"]:
            raise Fail("SHOUT b'hi all'", "the same frame", repr(event.get("frames")))


# ----------------------------------------------------------------- presence


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


# -------------------------------------------------------------------- CURVE
#
# These run against the target started again with CURVE (``"curve": true``
# in ``start``), allowing any client key.

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


# ---------------------------------------------------------------- elections
#
# zyre's election (ELECT 8, LEADER 9: the group and an id, both ZRE strings;
# ids are UUIDs as 32 upper-case hex digits).  No RFC specifies it: the
# clause is zyre's src/zyre_election.c.  The target contests ELECT_GROUP
# from its start (``"contest"`` in ``start``; an agent whose ``started``
# does not list it there cannot stand, and these cases are n/a).

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


# ------------------------------------------------------------------ active


async def _agent_does(h: Harness, cmd: dict[str, object]) -> None:
    agent = h.need_agent()
    await agent.send(cmd)


@case(
    "whisper-out",
    "the target whispers to us: a WHISPER with its content",
    f"{Z36} The WHISPER Command",
    kind="active",
    needs=("agent",),
)
async def whisper_out(h: Harness) -> None:
    async with h.peer() as peer:
        await peer.meet()
        await peer.ping_ok_for("HELLO")
        mark = peer.mark()
        await _agent_does(h, {"cmd": "whisper", "peer": peer.uuid.hex, "frames": [b64(b"\x01w")]})
        got = await peer.expect(wire.Whisper, h.profile.reply, mark)
        if got is None or got[2].content != (b"\x01w",):
            raise Fail("agent: whisper b'\\x01w' to us", "WHISPER b'\\x01w'", peer.seen(mark))


@case(
    "join-out",
    "the target joins and leaves a group: JOIN, LEAVE, status +1 each",
    f"{Z36} The JOIN Command, The LEAVE Command ('status ... after joining')",
    kind="active",
    needs=("agent",),
)
async def join_out(h: Harness) -> None:
    async with h.peer() as peer:
        _t, _i, hello = await peer.meet()
        await peer.ping_ok_for("HELLO")
        group = f"conf-{uuid.uuid4().hex[:6]}"
        mark = peer.mark()
        await _agent_does(h, {"cmd": "join", "group": group})
        got = await peer.expect(wire.Join, h.profile.reply, mark)
        want = (hello.status + 1) & 0xFF
        if got is None or got[2].group != group or got[2].status != want:
            raise Fail(f"agent: join {group}", f"JOIN({group!r}, status {want})", peer.seen(mark))
        mark = peer.mark()
        await _agent_does(h, {"cmd": "leave", "group": group})
        got = await peer.expect(wire.Leave, h.profile.reply, mark)
        want = (want + 1) & 0xFF
        if got is None or got[2].group != group or got[2].status != want:
            raise Fail(f"agent: leave {group}", f"LEAVE({group!r}, status {want})", peer.seen(mark))


@case(
    "shout-out",
    "the target shouts to a group we joined: a SHOUT with group and content",
    f"{Z36} The SHOUT Command",
    kind="active",
    needs=("agent",),
)
async def shout_out(h: Harness) -> None:
    async with h.peer() as peer:
        await peer.meet(groups=("conformance-pre",), status=1)
        await peer.ping_ok_for("HELLO")
        mark = peer.mark()
        await _agent_does(
            h, {"cmd": "shout", "group": "conformance-pre", "frames": [b64(b"\x02s")]}
        )
        got = await peer.expect(wire.Shout, h.profile.reply, mark)
        if got is None or got[2].group != "conformance-pre" or got[2].content != (b"\x02s",):
            raise Fail(
                "agent: shout b'\\x02s' to conformance-pre (we are in it)",
                "SHOUT('conformance-pre') b'\\x02s'",
                peer.seen(mark),
            )


@case(
    "shout-not-member",
    "the target does not shout to a peer outside the group",
    f"{Z36} The SHOUT Command: 'to each peer that should receive it'",
    kind="active",
    needs=("agent",),
)
async def shout_not_member(h: Harness) -> None:
    async with h.peer() as peer:
        await peer.meet()
        await peer.ping_ok_for("HELLO")
        mark = peer.mark()
        await _agent_does(
            h, {"cmd": "shout", "group": "conformance-pre", "frames": [b64(b"\x03x")]}
        )
        if await peer.expect(wire.Shout, h.profile.quiet, mark) is not None:
            raise Fail(
                "agent: shout to conformance-pre (we are not in it)",
                "no SHOUT",
                peer.seen(mark),
            )


# ------------------------------------------------------------------- gossip
#
# These run against the target started again in gossip mode (``"gossip":
# HUB`` in ``start``): czmq's zgossip protocol (ZGP) instead of beacons, as
# zyre's gossip discovery uses it.  The suite's hub is the target's remote
# (the target is its client), and the suite is in turn a client of the
# target's own hub.  No RFC specifies ZGP: the clauses are czmq's
# src/zgossip_msg.xml (the messages), src/zgossip.xml (the server's states)
# and src/zgossip.c, and zyre's src/zyre_node.c (what zyre publishes and does
# with what it hears).

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


__all__ = ["CASES", "Case", "Fail", "NotApplicable", "select"]
