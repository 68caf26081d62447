"""A gossip service, as czmq's ``zgossip``, with tuples that expire: the rules, sans I/O.

zyre's gossip discovery runs over a loose network of gossip services: each
accepts clients on a ROUTER and connects DEALERs to remote services, and
every service passes each new ``key -> value`` tuple to all it talks to,
so the network converges (czmq's ``src/zgossip.c``, which we read for the
rules; the code is ours).  :class:`GossipState` holds one service's
tuples and clients; its methods take messages and times and return what to
send and what to tell the application, so the rules are tested without
sockets.

Compatible with zgossip:

* a client says HELLO first; the server then sends it every tuple, and
  later every new one; a PUBLISH before HELLO is answered with INVALID,
  and a PING with PONG in any state;
* a server forgets a client silent for ``client_timeout`` (zgossip: 1 s);
  that client's next PUBLISH gets INVALID, on which a client says HELLO
  again and republishes;
* on connecting to a remote, a service sends HELLO and then its tuples;
* a tuple is new when its key is unknown or its value changed; new tuples
  are delivered to the application and passed on to every client and
  remote (zgossip passes them back to the sender too; duplicates are
  dropped on arrival, so that is harmless and we do the same).

Beyond zgossip, which never forgets a tuple (its own docs say so):

* a PUBLISH with a ``ttl`` (milliseconds, 0 = forever, zgossip's only
  value) expires ``ttl`` after it was last heard unless published again;
  the application is told (:class:`Forget`) so that, say, a node stops
  linking to a peer that left;
* a tuple is passed on with the time it has *left*, so a copy that comes
  back round a cycle never extends it much; a refresh (same key and value)
  travels on only when it moves the expiry by more than a slack (a tenth
  of the ttl, at most a second), which the publisher's refreshes, every
  third of the ttl, always do and a cycle's delays never add up to;
* zgossip services pass tuples on with ttl 0 (they drop it): behind one,
  ours live as long as zgossip's do.
* ``unpublish`` removes a tuple here (zyre's UNPUBLISH, for a peer that
  exited); it is not propagated, as in zyre.
"""

from __future__ import annotations

import math
from collections.abc import Hashable
from typing import Final, TypeAlias, final

import attrs

from .. import wire

__all__ = [
    "Deliver",
    "Forget",
    "GossipAction",
    "GossipState",
    "ToClient",
    "ToRemote",
]

PING_INTERVAL: Final = 0.5  # seconds: under zgossip's 1 s client timeout


@final
@attrs.frozen
class ToClient:
    """Send ``message`` to the client with this routing id."""

    client: bytes
    message: wire.GossipMessage


@final
@attrs.frozen
class ToRemote:
    """Send ``message`` to this remote service."""

    remote: Hashable
    message: wire.GossipMessage


@final
@attrs.frozen
class Deliver:
    """A new tuple for the application (zgossip's DELIVER)."""

    key: str
    value: str


@final
@attrs.frozen
class Forget:
    """A tuple expired (its ttl passed) or was unpublished."""

    key: str


GossipAction: TypeAlias = ToClient | ToRemote | Deliver | Forget


@final
@attrs.define
class _Tuple:
    value: str
    ttl: int  # milliseconds; 0: forever
    expires: float  # math.inf when ttl is 0


@final
class GossipState:
    """One gossip service's tuples, clients and remotes.

    Times are seconds on any monotonic clock.  ``remotes`` are whatever
    hashable names the caller gives its DEALERs.  At most ``max_tuples``
    tuples are held: a new key beyond that is refused (and counted in
    :attr:`refused`), so a client publishing endless keys cannot exhaust
    memory; changes to known keys still pass.
    """

    def __init__(self, *, client_timeout: float = 1.0, max_tuples: int = 65_536) -> None:
        if not client_timeout > 0:
            raise ValueError(f"client_timeout must be positive, got {client_timeout!r}")
        if max_tuples < 1:
            raise ValueError(f"max_tuples must be at least 1, got {max_tuples!r}")
        self.client_timeout = client_timeout
        self.max_tuples = max_tuples  # beyond it new keys are refused: memory stays bounded
        self.refused = 0  # new tuples refused for want of room
        self.tuples: dict[str, _Tuple] = {}
        self._clients: dict[bytes, float] = {}  # said HELLO: last heard
        self._remotes: dict[Hashable, float] = {}  # next PING due
        self._own: dict[
            str, tuple[str, int, float]
        ] = {}  # published here: value, ttl, next refresh

    # ----------------------------------------------------------- the app

    def publish(self, key: str, value: str, ttl: int, now: float) -> list[GossipAction]:
        """Publish a tuple of ours (``ttl`` ms, 0 = forever); refreshed by :meth:`poll`.

        Bad input: what :func:`wire.encode_gossip` refuses raises ``EncodeError`` here.
        """
        wire.encode_gossip(wire.GossipPublish(key, value, ttl))  # validate now
        refresh = now + ttl / 3000 if ttl else math.inf
        self._own[key] = (value, ttl, refresh)
        return self._accept(None, key, value, ttl, now, deliver=False)

    def unpublish(self, key: str) -> list[GossipAction]:
        """Forget ``key`` here (ours or not); not propagated."""
        self._own.pop(key, None)
        if self.tuples.pop(key, None) is None:
            return []
        return [Forget(key)]

    # ------------------------------------------------------------- server

    def from_client(
        self, client: bytes, message: wire.GossipMessage, now: float
    ) -> list[GossipAction]:
        """What a client (by ROUTER routing id) sent us."""
        if isinstance(message, wire.GossipPing):
            if client in self._clients:
                self._clients[client] = now
            return [ToClient(client, wire.GossipPong())]
        if isinstance(message, wire.GossipHello):
            self._clients[client] = now
            return [ToClient(client, self._publish_of(k, now)) for k in self.tuples]
        if client not in self._clients or not isinstance(message, wire.GossipPublish):
            # zgossip: anything else outside "connected" is invalid.
            self._clients.pop(client, None)
            return [ToClient(client, wire.GossipInvalid())]
        self._clients[client] = now
        return self._accept(client, message.key, message.value, message.ttl, now)

    # ------------------------------------------------------------ remotes

    def connected(self, remote: Hashable, now: float) -> list[GossipAction]:
        """A remote service is (re)connected: HELLO, then our every tuple."""
        self._remotes[remote] = now + PING_INTERVAL
        hello: list[GossipAction] = [ToRemote(remote, wire.GossipHello())]
        return hello + [ToRemote(remote, self._publish_of(k, now)) for k in self.tuples]

    def from_remote(
        self, remote: Hashable, message: wire.GossipMessage, now: float
    ) -> list[GossipAction]:
        """What a remote service sent us."""
        if isinstance(message, wire.GossipPublish):
            return self._accept(remote, message.key, message.value, message.ttl, now)
        if isinstance(message, wire.GossipInvalid):
            return self.connected(remote, now)  # it forgot us: greet it again
        return []  # PONG, and whatever a server should not send

    # -------------------------------------------------------------- clock

    def poll(self, now: float) -> list[GossipAction]:
        """Expire tuples and silent clients, refresh our tuples, ping remotes."""
        actions: list[GossipAction] = []
        for key in [k for k, t in self.tuples.items() if t.expires <= now]:
            del self.tuples[key]
            actions.append(Forget(key))
        for client in [
            c for c, heard in self._clients.items() if heard + self.client_timeout <= now
        ]:
            del self._clients[client]
        for key, (value, ttl, refresh) in list(self._own.items()):
            if refresh <= now:
                self._own[key] = (value, ttl, now + ttl / 3000)
                actions += self._accept(None, key, value, ttl, now, deliver=False)
        for remote, due in self._remotes.items():
            if due <= now:
                self._remotes[remote] = now + PING_INTERVAL
                actions.append(ToRemote(remote, wire.GossipPing()))
        return actions

    def deadline(self) -> float:
        """The earliest time :meth:`poll` has something to do."""
        times = [t.expires for t in self.tuples.values()]
        times += [heard + self.client_timeout for heard in self._clients.values()]
        times += [refresh for _, _, refresh in self._own.values()]
        times += list(self._remotes.values())
        return min(times, default=math.inf)

    # ------------------------------------------------------------ private

    def _publish_of(self, key: str, now: float) -> wire.GossipPublish:
        """The tuple as we pass it on: with the milliseconds it has left."""
        found = self.tuples[key]
        if not found.ttl:
            return wire.GossipPublish(key, found.value, 0)
        left = max(1, min(0xFFFFFFFF, round((found.expires - now) * 1000)))
        return wire.GossipPublish(key, found.value, left)

    def _accept(
        self,
        source: object,
        key: str,
        value: str,
        ttl: int,
        now: float,
        *,
        deliver: bool = True,
    ) -> list[GossipAction]:
        expires = now + ttl / 1000 if ttl else math.inf
        known = self.tuples.get(key)
        if known is not None and known.value == value:
            # Not new: a refresh, passed on only if it really extends the tuple.
            if expires - known.expires <= min(1.0, ttl / 10_000) or (not ttl and known.ttl == 0):
                return []
            known.expires, known.ttl = expires, ttl
            return self._forward(key, now)
        if known is None and len(self.tuples) >= self.max_tuples:
            self.refused += 1  # a flood of keys: known tuples keep their room
            return []
        self.tuples[key] = _Tuple(value, ttl, expires)
        actions = self._forward(key, now)
        if deliver:
            actions.insert(0, Deliver(key, value))
        return actions

    def _forward(self, key: str, now: float) -> list[GossipAction]:
        message = self._publish_of(key, now)
        actions: list[GossipAction] = [ToClient(c, message) for c in self._clients]
        actions += [ToRemote(r, message) for r in self._remotes]
        return actions
