"""A pure NodeCore driven by hand: a made-up network, sessions that record, a shell that obeys.

Shared by the node core's unit tests (``tests/unit/test_node_core*.py``):
no sockets, no event loop, exact times.
"""

from __future__ import annotations

import base64
import uuid
from collections.abc import Sequence

import attrs

from trizre import wire
from trizre.sansio._peer import PeerProtocol
from trizre.sansio.node_core import (
    Action,
    Connect,
    CoreRules,
    Drop,
    Flush,
    NodeCore,
    Publish,
    Trim,
    WakeAt,
)
from trizre.trace._contract import ExitReason

ME = uuid.UUID("0f000000000000000000000000000000")  # lowest: we win the elections we contest
PEER = uuid.UUID("10000000000000000000000000000001")
OTHER = uuid.UUID("20000000000000000000000000000002")
NET = "192.168.1."  # ok-net: our network as the pure core is told it; no socket anywhere
HOST = f"{NET}20"
KEY_A, KEY_B, OUR_KEY = b"A" * 32, b"B" * 32, b"O" * 32
EVASIVE, EXPIRED, HANDSHAKE = 5.0, 30.0, 5.0


@attrs.define(eq=False)
class Session:
    """What the shell holds per peer; the "link" is the list of frames sent."""

    protocol: PeerProtocol
    in_process: bool = False
    beacon_key: bytes | None = None
    sent: list[list[bytes]] = attrs.Factory(list)
    closed: bool = False

    @property
    def uuid(self) -> uuid.UUID:
        return self.protocol.uuid

    def flush(self) -> None:
        while (frames := self.protocol.queued()) is not None:
            self.sent.append(frames)
            self.protocol.sent_queued()


@attrs.define
class Shell:
    """Carries out the core's actions as the node's shell does, and remembers them."""

    core: NodeCore[Session]
    published: list[object] = attrs.Factory(list)
    drops: list[tuple[uuid.UUID, ExitReason]] = attrs.Factory(list)
    wakes: list[float] = attrs.Factory(list)
    trims: int = 0
    refused: int = 0

    def apply(self, actions: Sequence[Action[Session]], now: float) -> list[Session]:
        made = []
        for action in actions:
            if isinstance(action, Connect):
                if not self.core.admit(action, in_process=False, now=now):
                    self.refused += 1
                    continue
                session = Session(self.core.protocol_for(action, now))
                self.apply(self.core.add(session, now), now)
                made.append(session)
            elif isinstance(action, Flush):
                action.peer.flush()
            elif isinstance(action, Publish):
                self.published.append(action.event)
            elif isinstance(action, Drop):
                action.peer.closed = True
                self.drops.append((action.peer.uuid, action.reason))
            elif isinstance(action, WakeAt):
                self.wakes.append(action.at)
            elif isinstance(action, Trim):
                self.trims += 1
        return made

    def beacon(self, beacon: wire.Beacon, source: str, now: float) -> list[Session]:
        key = wire.encode_beacon(beacon) + source.encode()  # as the discovery keys them
        made = self.apply(self.core.on_beacon(beacon, source, key, now), now)
        for session in made:
            self.core.beacon_seen(session, beacon, source, key, now)
        return made

    def frames(self, session: Session, message: wire.Message, now: float) -> None:
        frames = [session.protocol.route, *wire.encode(message)]
        events = session.protocol.receive(frames, now)
        self.apply(self.core.received(session, events, now), now)

    def poll(self, now: float) -> None:
        def pongs(peer: uuid.UUID) -> int | None:
            found = self.core.peers.get(peer)
            return None if found is None else found.protocol.pongs

        self.apply(self.core.poll(now, pongs), now)


def make(**rules: object) -> Shell:
    options: dict[str, object] = {
        "name": "me",
        "evasive_timeout": EVASIVE,
        "expired_timeout": EXPIRED,
        "handshake_timeout": HANDSHAKE,
    }
    options.update(rules)
    core: NodeCore[Session] = NodeCore(
        ME,
        CoreRules(**options),  # type: ignore[arg-type]
        contains=lambda host: host.startswith(NET),
        key_text=text,
        key_bytes=base64.b85decode,
    )
    core.endpoint = core.advertised = f"tcp://{NET}1:40000"
    return Shell(core)


def text(key: bytes) -> str:
    """A key's 40-character text (Base85, as long as Z85: the rules need no more)."""
    return base64.b85encode(key).decode()


def hello(groups: tuple[str, ...] = (), name: str = "bob", key: bytes | None = None) -> wire.Hello:
    headers = () if key is None else (("X-PUBLICKEY", text(key)),)
    return wire.Hello(1, f"tcp://{HOST}:5000", groups, 1, name, headers)


def entered(
    shell: Shell,
    peer: uuid.UUID = PEER,
    groups: tuple[str, ...] = (),
    now: float = 0.0,
    port: int = 5000,
) -> Session:
    """``peer`` linked by its beacon (at HOST:``port``, which no other entered peer may hold)."""
    (session,) = shell.beacon(wire.Beacon(peer, port), HOST, now)
    shell.frames(session, hello(groups), now)
    assert session.protocol.ready
    return session


def sent(session: Session) -> list[wire.Message]:
    return [wire.decode(frames) for frames in session.sent]


# ------------------------------------------------------------------ beacons
