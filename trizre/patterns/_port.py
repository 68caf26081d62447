"""One port per node: every pattern on a node reads through one subscription.

Pattern servers, the clients' reply routers and Binary Star servers all
need the node's events, and all of them need WHISPER envelopes decoded.
Each used to subscribe and decode for itself, so with k patterns on a node
every envelope was decoded k times, and one subscriber that fell behind
held the node's reader (``overflow="block"``) for all of them.

A :class:`PatternPort` subscribes once per node, decodes each envelope
once, and routes it:

* a REQUEST to the server registered for its service (``""``: servers
  addressed directly), through :meth:`Server.receive
  <trizre.patterns._server.Server.receive>`: a version-2 request is
  decoded in one pass straight into the
  :class:`~trizre.patterns._admission.IncomingRequest` its servers keep,
  one object for all of them;
* a REPLY or ACCEPTED to the reply router whose pending table holds its
  request id (a reply no router waits for goes to every router, each of
  which counts it ``dropped``: stale, duplicate or foreign; with one router
  on the node, the commonest, it goes to that one); a version-2 reply is
  read by :func:`~trizre.patterns._protocol.reply_v2` and handed to
  ``on_reply``, without the general decode;
* a STATE, and the Enter and Exit events, to the Binary Star servers;
* every other event to the routers (presence: requests to a peer that
  exits or goes silent are resent at once) and a Join of the status group
  to the servers (a watcher arrived).

Everything the port hands over is handled in the port's own turn, without
waiting, so no pattern can hold up another.  Each registration bounds what
it keeps, and says what it does when full (``docs/patterns.md``, "One port
per node"): a server holds at most ``max_concurrency + max_queued``
requests and sheds the rest (503, counted ``shed`` and traced), its
answers that cannot go at once wait in its outbox up to the same bound and
beyond it are counted ``unsent``; a router's table holds at most
``max_in_flight`` requests (more wait in ``request()``).

The port lives as long as one pattern uses it: :func:`open_port` finds or
makes the node's port and hosts its reading task in the caller's own
nursery; when that caller leaves while others remain, the task moves to
another caller's nursery, and the subscription (and any event buffered in
it) carries over, in order.  Ports are per Trio run.
"""

from __future__ import annotations

import logging
import math
from collections.abc import AsyncIterator, Iterable, Mapping
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, Protocol, final
from uuid import UUID

import trio

from .. import Enter, EventStream, Exit, Join, Node, Whisper
from .._concurrency import RunLocal, unwrap_single_exception_group
from . import _protocol as proto
from ._admission import new_incoming
from ._status import STATUS_GROUP

if TYPE_CHECKING:
    from ._admission import IncomingRequest

__all__ = ["PatternPort", "open_port"]

log = logging.getLogger("trizre.patterns")

VERSION_WARNING_INTERVAL = 10.0
"""Seconds between two warnings of envelopes in a version this node does not speak."""


_REQUEST_OCTET = proto.REQUEST_OCTET
_REPLY_OCTET = proto.REPLY_OCTET
_VERSION = proto.VERSION
_BATCH = 64
"""Events the pump takes at most in one read: what it dispatches between two schedule points."""


class _Server(Protocol):
    def receive(self, request: IncomingRequest) -> None: ...
    def watcher_joined(self, peer: UUID) -> None: ...


class _Router(Protocol):
    # Request id -> what the router keeps of it: the requests it waits for
    # (read-only here).  The port asks the routers themselves, rather than
    # keeping a table of its own in step with theirs.
    @property
    def pending(self) -> Mapping[int, object]: ...
    def on_message(self, peer: UUID, message: proto.Reply | proto.Accepted) -> None: ...
    def on_reply(self, peer: UUID, reply: proto.Reply) -> None: ...
    def on_event(self, event: object) -> None: ...


class _Listener(Protocol):
    def on_peer_event(self, event: Enter | Exit | Whisper, state: proto.State | None) -> None: ...


@final
class PatternPort:
    """The node's one subscription for patterns, and what is registered on it.

    Made and shared by :func:`open_port`; the methods below are for the
    patterns.  Counters: ``decoded`` envelopes (once each, whoever they are
    for), ``malformed`` pattern traffic dropped, ``unserved`` requests for
    a service no server here offers (dropped: a request for another node's
    server can reach this one only by mistake).
    """

    def __init__(self, node: Node) -> None:
        self.node = node
        self._events: EventStream = node.events()
        self._servers: dict[str, list[_Server]] = {}
        self._routers: list[_Router] = []
        self._listeners: list[_Listener] = []
        self.decoded = 0
        self.malformed = 0
        self._version_warned_at = -math.inf
        self.unserved = 0
        self.closed = False  # the node stopped: no event will come
        self._hosts: list[trio.Nursery] = []
        self._pump_host: trio.Nursery | None = None
        self._pump_scope = trio.CancelScope()
        self._pump_done: trio.Event | None = None

    def statistics(self) -> dict[str, Any]:
        """The port's counters and registrations, for tests and monitoring."""
        return {
            "users": len(self._hosts),
            "servers": sum(len(servers) for servers in self._servers.values()),
            "routers": len(self._routers),
            "listeners": len(self._listeners),
            "pending": sum(len(router.pending) for router in self._routers),
            "decoded": self.decoded,
            "malformed": self.malformed,
            "unserved": self.unserved,
        }

    # ----------------------------------------------------------- registration

    def add_server(self, service: str, server: _Server) -> None:
        """Route requests for ``service`` (``""``: addressed to this node) to ``server``.

        Two servers of one service on one node both get each request (and
        both answer it: the client takes the first reply).
        """
        self._servers.setdefault(service, []).append(server)

    def remove_server(self, service: str, server: _Server) -> None:
        """Route no more requests to ``server``; one not registered is ignored."""
        servers = self._servers.get(service, [])
        if server in servers:
            servers.remove(server)
        if not servers:
            self._servers.pop(service, None)

    def add_router(self, router: _Router) -> None:
        """Give ``router`` presence events, and the answers to the ids in its ``pending`` table."""
        self._routers.append(router)

    def remove_router(self, router: _Router) -> None:
        """Forget ``router``; one not registered is ignored."""
        if router in self._routers:
            self._routers.remove(router)

    def _waiting_for(self, request_id: int) -> list[_Router]:
        """The routers waiting for ``request_id``'s answer: usually one, and
        every router when none is (each counts the answer dropped)."""
        routers = self._routers
        return [router for router in routers if request_id in router.pending] or list(routers)

    def add_listener(self, listener: _Listener) -> None:
        """Give ``listener`` every STATE, and every Enter and Exit."""
        self._listeners.append(listener)

    def remove_listener(self, listener: _Listener) -> None:
        """Give ``listener`` nothing more; one not registered is ignored."""
        if listener in self._listeners:
            self._listeners.remove(listener)

    def _drop_malformed(self, peer: UUID, head: bytes, exc: proto.PatternDecodeError) -> None:
        """Log a dropped envelope: at debug, but an unknown version as a warning.

        Another version is what an operator must hear of (a peer upgraded
        past this node: its requests would only time out); at most one
        warning every 10 s, as any peer can send such frames.
        """
        version = head[4] if len(head) >= proto.HEADER_SIZE else None  # a whole header's
        if (
            version is not None
            and version not in proto.VERSIONS
            and (now := trio.current_time()) >= self._version_warned_at + VERSION_WARNING_INTERVAL
        ):
            self._version_warned_at = now
            log.warning(
                "%s: dropping pattern traffic in envelope version %d from %s: this node "
                "speaks versions %s (upgrade this node, or that peer's is too new)",
                self.node.name,
                version,
                peer,
                ", ".join(map(str, sorted(proto.VERSIONS))),
            )
            return
        log.debug("dropping malformed pattern traffic from %s: %s", peer, exc)

    # ---------------------------------------------------------------- routing

    def _route_request(
        self,
        event: Whisper,
        request_id: int,
        service: str,
        body: tuple[bytes, ...],
        version: int,
    ) -> None:
        """Hand a decoded REQUEST to its service's servers, one object for all of them."""
        servers = self._servers.get(service)
        if servers is None:
            self.unserved += 1
            log.debug("no server here for %r (request from %s)", service, event.peer)
            return
        request = new_incoming(
            event.peer, event.name, request_id, service, body=body, version=version
        )
        for server in servers:
            server.receive(request)

    def dispatch(self, event: object) -> None:
        """Route one node event; never waits."""
        self.dispatch_batch((event,))

    def dispatch_batch(self, events: Iterable[object]) -> None:
        """Route node events, in order; never waits.

        The pump's, one call a batch it read: the per-event work is this
        loop's body, with no call of its own for each event (issue 28).
        """
        route_request = self._route_request
        request_head, reply_v2 = proto.request_head, proto.reply_v2
        routers = self._routers
        for event in events:
            if type(event) is Whisper:  # final: no subclass to miss
                frames = event.frames
                if frames and len(head := frames[0]) > 5:
                    command = head[5]
                    if command == _REQUEST_OCTET and (fields := request_head(head)) is not None:
                        # A version-2 request, the commonest: decoded in one pass
                        # into what its servers keep (no Request in between).
                        self.decoded += 1
                        request_id, service = fields
                        route_request(event, request_id, service, tuple(frames[1:]), _VERSION)
                        continue
                    if command == _REPLY_OCTET and (reply := reply_v2(frames)) is not None:
                        # A client's commonest: a version-2 reply, read in one pass.
                        self.decoded += 1
                        if len(routers) == 1:  # one client on the node: it drops a stale one
                            routers[0].on_reply(event.peer, reply)
                        else:
                            for router in self._waiting_for(reply.request_id):
                                router.on_reply(event.peer, reply)
                        continue
                try:
                    message = proto.decode(frames)
                except proto.PatternDecodeError as exc:
                    self.malformed += 1
                    self._drop_malformed(event.peer, frames[0], exc)
                    continue
                if message is None:
                    continue  # application traffic: not ours
                self.decoded += 1
                if isinstance(message, proto.Request):
                    self._route_request(
                        event, message.request_id, message.service, message.body, message.version
                    )
                elif isinstance(message, proto.Reply | proto.Accepted):
                    for router in self._waiting_for(message.request_id):
                        router.on_message(event.peer, message)
                else:
                    for listener in self._listeners:
                        listener.on_peer_event(event, message)
                continue
            for router in self._routers:
                router.on_event(event)
            if isinstance(event, Enter | Exit):
                for listener in self._listeners:
                    listener.on_peer_event(event, None)
            elif isinstance(event, Join) and event.group == STATUS_GROUP:
                for servers in self._servers.values():
                    for server in servers:
                        server.watcher_joined(event.peer)

    # -------------------------------------------------------------- lifecycle

    def _attach(self, nursery: trio.Nursery) -> None:
        self._hosts.append(nursery)
        if self._pump_host is None and not self.closed:
            self._start_pump(nursery)

    def _detach(self, nursery: trio.Nursery) -> None:
        self._hosts.remove(nursery)
        if self._pump_host is nursery:
            self._pump_scope.cancel()
            self._pump_host = None
            if self._hosts and not self.closed:
                self._start_pump(self._hosts[-1])  # carry on in another user's nursery

    def _start_pump(self, nursery: trio.Nursery) -> None:
        previous, self._pump_done = self._pump_done, trio.Event()
        self._pump_scope = scope = trio.CancelScope()
        self._pump_host = nursery
        nursery.start_soon(self._pump, scope, previous, self._pump_done)

    async def _pump(
        self, scope: trio.CancelScope, previous: trio.Event | None, done: trio.Event
    ) -> None:
        """Read the subscription and dispatch, until cancelled or the node stops."""
        try:
            with scope:
                if previous is not None:
                    await previous.wait()  # the last reader is out: order is kept
                receive_batch = self._events.receive_batch
                dispatch_batch = self.dispatch_batch
                while True:
                    try:
                        batch = await receive_batch(_BATCH)
                    except trio.EndOfChannel:
                        break
                    dispatch_batch(batch)
                self.closed = True  # the node stopped (Stop was the last event)
        finally:
            done.set()


_PORTS: RunLocal[dict[int, PatternPort]] = RunLocal("trizre_ports", dict)


@asynccontextmanager
async def open_port(node: Node) -> AsyncIterator[PatternPort]:
    """The node's pattern port, shared by every pattern on ``node`` while any uses it.

    The first user subscribes to the node's events (at once, before the
    block's body runs: nothing after the call is missed); the port's
    reading task runs in a nursery this block owns.  When the last user's
    block ends, the subscription closes.  Cancellation: leaving the block
    on cancellation is as leaving it normally.  A ``node`` that has
    stopped gives a port that reads only :class:`~trizre.Stop`.
    """
    ports = _PORTS.get()
    port = ports.get(id(node))
    if port is None or port.node is not node:
        port = ports[id(node)] = PatternPort(node)
    with unwrap_single_exception_group():
        async with trio.open_nursery() as nursery:
            port._attach(nursery)
            try:
                yield port
            finally:
                port._detach(nursery)
                if not port._hosts:
                    if ports.get(id(node)) is port:
                        del ports[id(node)]
                    port._events.close()
