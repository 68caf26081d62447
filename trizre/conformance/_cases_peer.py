"""Conformance cases, the peer protocol.

HELLO first, sequence numbers (their wrap and gaps), bad signatures,
versions and sizes; then the events the target reports (JOIN, LEAVE,
WHISPER, SHOUT, names and headers in UTF-8).
"""

from __future__ import annotations

from typing import Any

import trio

from .. import wire
from ._agent import unb64
from ._harness import Fail, FakePeer, Harness
from ._registry import Z36, _still_alive, case


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
