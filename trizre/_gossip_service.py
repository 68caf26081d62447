"""A gossip service on ZeroMQ sockets under Trio: :class:`~trizre._gossip.GossipState` wired up.

One ROUTER bound to each ``bind`` endpoint takes clients; one DEALER per
``connect`` endpoint reaches a remote service; a clock task lets the state
expire tuples and clients, refresh our tuples and ping remotes.  The
application hears of tuples through a synchronous callback.  Speaks ZGP,
so its peers may be czmq's zgossip (zyre's gossip mode) or ours.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any, Final, final

import trio
import zmq

from . import wire
from ._gossip import Deliver, Forget, GossipAction, GossipState, ToClient, ToRemote
from ._guard import LogLimiter, log_rarely
from ._util import unwrap_single_exception_group
from ._zsock import ZSocket, context

__all__ = ["GossipService", "Heard", "open_gossip"]

log = logging.getLogger("trizre.gossip")

Heard = Callable[[Deliver | Forget], None]
"""Told each new tuple and each forgotten one, synchronously; must not block."""

_HWM: Final = 10_000  # messages queued per socket before we drop (a resync follows)


@final
class GossipService:
    """A running gossip service; made by :func:`open_gossip`.

    Errors: :meth:`publish` raises ``trio.ClosedResourceError`` once the
    service stopped, ``wire.EncodeError`` for a tuple ZGP cannot carry.
    """

    def __init__(self, state: GossipState, heard: Heard) -> None:
        self._state = state
        self._heard = heard
        self._servers: list[ZSocket] = []
        self._remotes: dict[str, ZSocket] = {}
        self._wakeup = trio.Event()
        self._closed = False
        self._logs = LogLimiter(burst=10)  # what remote parties can make it say
        self.endpoints: list[str] = []
        """The endpoints bound, ports resolved (``tcp://127.0.0.1:*`` becomes a real port)."""

    def publish(self, key: str, value: str, ttl: int = 0) -> None:
        """Publish a tuple (``ttl`` milliseconds, refreshed while we run; 0: forever)."""
        if self._closed:
            raise trio.ClosedResourceError("the gossip service has stopped")
        self._carry_out(self._state.publish(key, value, ttl, trio.current_time()))

    def unpublish(self, key: str) -> None:
        """Forget ``key`` here (a peer that exited, as zyre's UNPUBLISH); not propagated."""
        self._carry_out(self._state.unpublish(key))

    @property
    def tuples(self) -> dict[str, str]:
        """Every tuple known here, ``key -> value``."""
        return {key: found.value for key, found in self._state.tuples.items()}

    # ------------------------------------------------------------ private

    def _carry_out(self, actions: list[GossipAction]) -> None:
        for action in actions:
            if isinstance(action, ToClient):
                # The state knows a client as (ROUTER index, routing id).
                frames = [action.client[1:], wire.encode_gossip(action.message)]
                self._send(self._server_of(action.client), frames)
            elif isinstance(action, ToRemote):
                remote = self._remotes.get(str(action.remote))
                if remote is not None:
                    self._send(remote, [wire.encode_gossip(action.message)])
            else:
                try:
                    self._heard(action)
                except Exception:
                    log_rarely(
                        log,
                        self._logs,
                        "listener",
                        logging.ERROR,
                        "the gossip listener failed on %r",
                        action,
                        now=trio.current_time(),
                        exc_info=True,
                    )
        self._wakeup.set()  # the state's deadline may have moved

    def _server_of(self, client: bytes) -> ZSocket | None:
        # A client's routing id carries the index of the ROUTER it came on.
        index = client[0]
        return self._servers[index] if index < len(self._servers) else None

    def _send(self, sock: ZSocket | None, frames: list[bytes]) -> None:
        if sock is None or sock.closed:
            return
        if not sock.send_nowait(frames):
            log_rarely(
                log,
                self._logs,
                "full",
                logging.DEBUG,
                "gossip socket full: dropped a message (refreshes resend state)",
                now=trio.current_time(),
            )

    async def _serve(self, index: int, sock: ZSocket) -> None:
        while True:
            for frames in await sock.receive_batch(64):
                if len(frames) != 2:
                    continue
                try:
                    message = wire.decode_gossip(frames[1])
                except wire.DecodeError as exc:
                    log_rarely(
                        log,
                        self._logs,
                        "malformed",
                        logging.DEBUG,
                        "ignoring a malformed gossip frame: %s",
                        exc,
                        now=trio.current_time(),
                    )
                    continue
                # Tag the client with the ROUTER's index: replies go back through it.
                client = bytes((index,)) + frames[0]
                actions = self._state.from_client(client, message, trio.current_time())
                self._carry_out(actions)

    async def _listen(self, endpoint: str, sock: ZSocket) -> None:
        while True:
            for frames in await sock.receive_batch(64):
                try:
                    message = wire.decode_gossip(frames[0])
                except wire.DecodeError as exc:
                    log_rarely(
                        log,
                        self._logs,
                        "malformed",
                        logging.DEBUG,
                        "ignoring a malformed gossip frame from %s: %s",
                        endpoint,
                        exc,
                        now=trio.current_time(),
                    )
                    continue
                self._carry_out(self._state.from_remote(endpoint, message, trio.current_time()))

    async def _clock(self) -> None:
        while True:
            self._carry_out(self._state.poll(trio.current_time()))
            self._wakeup = trio.Event()  # changes from here on wake the wait below
            with trio.move_on_at(self._state.deadline()):
                await self._wakeup.wait()


@asynccontextmanager
async def open_gossip(
    bind: Sequence[str] = (),
    connect: Sequence[str] = (),
    *,
    heard: Heard = lambda _: None,
    client_timeout: float = 1.0,
) -> AsyncIterator[GossipService]:
    """Run a gossip service for the block: a server on ``bind``, a client of ``connect``.

    Endpoints are ZeroMQ's (``tcp://host:port``, ``tcp://host:*``,
    ``ipc://path``).  ``heard`` is called for every new tuple
    (:class:`~trizre._gossip.Deliver`) and every one forgotten
    (:class:`~trizre._gossip.Forget`).  Bad input: an endpoint ZeroMQ
    refuses raises ``zmq.ZMQError`` naming it.  Leaving the block closes
    every socket (LINGER 0); cancellation is leaving.
    """
    state = GossipState(client_timeout=client_timeout)
    service = GossipService(state, heard)
    sockets: list[ZSocket] = []

    def socket(kind: int, verb: str, endpoint: str) -> ZSocket:
        """A ROUTER bound or a DEALER connected to ``endpoint``; errors name it."""
        raw: zmq.Socket[Any] = context().socket(kind)
        sockets.append(ZSocket(raw))
        raw.setsockopt(zmq.SNDHWM, _HWM)
        try:
            getattr(raw, verb)(endpoint)
        except zmq.ZMQError as exc:
            raise zmq.ZMQError(exc.errno, f"cannot {verb} gossip to {endpoint!r}: {exc}") from exc
        return sockets[-1]

    try:
        for endpoint in bind:
            sock = socket(zmq.ROUTER, "bind", endpoint)
            service._servers.append(sock)
            service.endpoints.append(sock.zmq_socket.getsockopt_string(zmq.LAST_ENDPOINT))
        for endpoint in connect:
            service._remotes[endpoint] = socket(zmq.DEALER, "connect", endpoint)
        with unwrap_single_exception_group():
            async with trio.open_nursery() as nursery:
                for index, sock in enumerate(service._servers):
                    nursery.start_soon(service._serve, index, sock)
                for endpoint, sock in service._remotes.items():
                    nursery.start_soon(service._listen, endpoint, sock)
                    service._carry_out(state.connected(endpoint, trio.current_time()))
                nursery.start_soon(service._clock)
                try:
                    yield service
                finally:
                    nursery.cancel_scope.cancel()
    finally:
        service._closed = True
        for sock in sockets:
            sock.close()
