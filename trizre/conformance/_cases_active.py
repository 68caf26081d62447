"""Conformance cases, active: what the target sends when its agent asks (WHISPER, JOIN, SHOUT)."""

from __future__ import annotations

import uuid

from .. import wire
from ._agent import b64
from ._harness import Fail, Harness
from ._registry import Z36, case


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
