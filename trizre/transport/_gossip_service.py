"""The gossip service on ZeroMQ sockets under Trio: :class:`~trizre.sansio._gossip.GossipState`.

One ROUTER bound to each ``bind`` endpoint takes clients; one DEALER per
``connect`` endpoint reaches a remote service; a clock task lets the state
expire tuples and clients, refresh our tuples and ping remotes.  The
application hears of tuples through a synchronous callback.  Speaks ZGP,
so its peers may be czmq's zgossip (zyre's gossip mode) or ours.

CURVE, as czmq's zgossip does it (its draft API, which zyre drives with
``zyre_set_zcert``, ``zyre_gossip_bind`` and ``zyre_gossip_connect_curve``):
a service with a key pair binds its ROUTERs as CURVE servers under that
key, and the process's ZAP handler (:func:`~trizre.transport._curve.open_zap`) judges
each client's key; a DEALER given the hub's public key connects as a CURVE
client with the service's own key pair.  Every socket is monitored, so a
refused handshake (no CURVE on one side, a wrong hub key, a client key not
allowed) is logged and reported (:class:`Handshake`) instead of leaving a
connection silently retrying.
"""

from __future__ import annotations

import itertools
import logging
import os
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any, Final, Literal, final

import attrs
import trio
import zmq

from .. import wire
from .._concurrency import unwrap_single_exception_group
from ..sansio._gossip import Deliver, Forget, GossipAction, GossipState, ToClient, ToRemote
from ..sansio._guard import LogLimiter, log_rarely
from ._curve import Certificate, CurveKey, CurvePolicy, curve_key, open_zap, z85
from ._zsock import ZSocket, context

__all__ = ["GossipService", "Handshake", "Heard", "open_gossip"]

log = logging.getLogger("trizre.gossip")

Heard = Callable[[Deliver | Forget], None]
"""Told each new tuple and each forgotten one, synchronously; must not block."""

_HWM: Final = 10_000  # messages queued per socket before we drop (a resync follows)

_HANDSHAKES: Final = (
    zmq.EVENT_HANDSHAKE_SUCCEEDED
    | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
    | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
    | zmq.EVENT_HANDSHAKE_FAILED_AUTH
)
_LOG_EVERY: Final = 10.0  # seconds: each kind of refusal is logged at most this often
_monitors = itertools.count()


@final
@attrs.frozen
class Handshake:
    """How a ZMTP handshake on one of the service's connections ended.

    Attributes:
        side: ``"hub"`` for a client connecting to one of our bound
            endpoints, ``"remote"`` for our connection to a hub.
        endpoint: our bound endpoint (hub side) or the hub's (remote side).
        ok: the handshake succeeded (the connection carries gossip).
        reason: why it failed, in words (empty when ``ok``).
    """

    side: Literal["hub", "remote"]
    endpoint: str
    ok: bool
    reason: str = ""


def handshake_reason(event: int, value: int, side: Literal["hub", "remote"]) -> str:
    """Words for a failed handshake from libzmq's monitor event and value (no I/O)."""
    if event == zmq.EVENT_HANDSHAKE_FAILED_AUTH:
        if side == "hub":
            return f"the client's key is not allowed (ZAP status {value})"
        return f"the hub does not allow this node's key (ZAP status {value})"
    if event == zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL:
        if value == zmq.PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH:
            if side == "hub":
                return "the client does not speak CURVE (or the hub does not and it does)"
            return "one side speaks CURVE and the other does not (see gossip_server_key)"
        if side == "hub":
            return f"a bad CURVE handshake (protocol error {value:#x}: the wrong hub key?)"
        return f"a bad CURVE handshake (protocol error {value:#x})"
    # Closed mid-handshake by the other side: when one side lacks CURVE
    # both see the mismatch, and whichever closes first leaves the other
    # only this.
    if side == "remote":
        return "the hub closed the handshake (no CURVE on one side, or the wrong gossip_server_key)"
    return "the client closed the handshake (no CURVE on one side, or the wrong hub key)"


@final
class GossipService:
    """A running gossip service; made by :func:`open_gossip`.

    Errors: :meth:`publish` raises ``trio.ClosedResourceError`` once the
    service stopped, ``wire.EncodeError`` for a tuple ZGP cannot carry.
    """

    def __init__(
        self, state: GossipState, heard: Heard, handshake: Callable[[Handshake], None]
    ) -> None:
        self._state = state
        self._heard = heard
        self._handshake = handshake
        self._logged: dict[str, float] = {}  # a kind of refusal: when last logged
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

    async def _watch(self, side: Literal["hub", "remote"], endpoint: str, monitor: ZSocket) -> None:
        """Report each handshake on a monitored socket (libzmq's monitor events)."""
        while True:
            for frames in await monitor.receive_batch(64):
                if len(frames) != 2 or len(frames[0]) != 6:
                    continue
                event = int.from_bytes(frames[0][:2], "little")
                value = int.from_bytes(frames[0][2:], "little")
                ok = event == zmq.EVENT_HANDSHAKE_SUCCEEDED
                reason = "" if ok else handshake_reason(event, value, side)
                self._report(Handshake(side, endpoint, ok, reason))

    def _report(self, shake: Handshake) -> None:
        if not shake.ok:
            # A refused connection retries every 100 ms: log each kind now and then.
            now = trio.current_time()
            key = f"{shake.side} {shake.endpoint} {shake.reason}"
            if now >= self._logged.get(key, -_LOG_EVERY) + _LOG_EVERY:
                self._logged[key] = now
                if len(self._logged) > 256:
                    self._logged.clear()
                if shake.side == "remote":
                    log.warning("gossip hub %s refused us: %s", shake.endpoint, shake.reason)
                else:
                    log.info("gossip hub %s refused a client: %s", shake.endpoint, shake.reason)
        try:
            self._handshake(shake)
        except Exception:
            log.exception("the gossip handshake listener failed on %r", shake)

    async def _clock(self) -> None:
        while True:
            self._carry_out(self._state.poll(trio.current_time()))
            self._wakeup = trio.Event()  # changes from here on wake the wait below
            with trio.move_on_at(self._state.deadline()):
                await self._wakeup.wait()


def _curve_options(
    curve: Certificate | None,
    server_key: CurveKey | Mapping[str, CurveKey] | None,
    allow: CurvePolicy | None,
    bind: Sequence[str],
    connect: Sequence[str],
) -> dict[str, bytes]:
    """Check the CURVE arguments of :func:`open_gossip`; each CURVE hub's raw key."""
    if curve is not None:
        if not isinstance(curve, Certificate):
            raise TypeError(f"curve must be a trizre.Certificate, got {type(curve).__name__}")
        if curve.secret is None:
            raise ValueError("gossip over CURVE needs a certificate with its secret key")
        if bind and allow is None:
            raise ValueError("a CURVE gossip hub needs allow= (a CurvePolicy: who may connect)")
    if allow is not None and not isinstance(allow, CurvePolicy):
        raise TypeError(f"allow must be a trizre CurvePolicy, got {type(allow).__name__}")
    if server_key is None:
        return {}
    if curve is None:
        raise ValueError(
            "server_key needs curve: a CURVE client connects with a key pair of its own"
        )
    if isinstance(server_key, Mapping):
        keys = {endpoint: curve_key(key) for endpoint, key in server_key.items()}
        strangers = sorted(set(keys) - set(connect))
        if strangers:
            raise ValueError(f"server_key names hubs that are not in connect: {strangers}")
        return keys
    key = curve_key(server_key)
    return dict.fromkeys(connect, key)


@asynccontextmanager
async def open_gossip(
    bind: Sequence[str] = (),
    connect: Sequence[str] = (),
    *,
    heard: Heard = lambda _: None,
    client_timeout: float = 1.0,
    curve: Certificate | None = None,
    server_key: CurveKey | Mapping[str, CurveKey] | None = None,
    allow: CurvePolicy | None = None,
    handshake: Callable[[Handshake], None] = lambda _: None,
) -> AsyncIterator[GossipService]:
    """Run a gossip service for the block: a server on ``bind``, a client of ``connect``.

    Endpoints are ZeroMQ's (``tcp://host:port``, ``tcp://host:*``,
    ``ipc://path``).  ``heard`` is called for every new tuple
    (:class:`~trizre.sansio._gossip.Deliver`) and every one forgotten
    (:class:`~trizre.sansio._gossip.Forget`); ``handshake`` for every handshake
    that succeeds or fails on any of the service's connections (see
    :class:`Handshake`; failures are also logged, each kind at most every
    10 s).

    CURVE: with ``curve`` (a key pair), every ``bind`` endpoint is a CURVE
    server under that key, as zgossip's with ``SET PUBLICKEY``/``SECRETKEY``:
    clients must know its public key, and ``allow`` (a
    :class:`~trizre.transport._curve.CurvePolicy`, required then) says which client
    keys the process's ZAP handler lets in.  With ``server_key`` too (the
    hubs' public key), every ``connect`` endpoint is reached as a CURVE
    client with ``curve``'s key pair (zyre's ``zyre_gossip_connect_curve``);
    without it, in the clear.  ``server_key`` may also map endpoints of
    ``connect`` to their hubs' keys: those not named are reached in the
    clear.

    Bad input: an endpoint ZeroMQ refuses raises ``zmq.ZMQError`` naming
    it; ``server_key`` without ``curve`` or naming a hub not in ``connect``,
    a certificate without its secret key, or a CURVE hub without ``allow``
    raise ``ValueError``; a malformed
    key ``ValueError`` or ``TypeError``.  Leaving the block closes every
    socket (LINGER 0); cancellation is leaving.
    """
    hub_keys = _curve_options(curve, server_key, allow, bind, connect)
    state = GossipState(client_timeout=client_timeout)
    service = GossipService(state, heard, handshake)
    sockets: list[ZSocket] = []
    watched: list[tuple[Literal["hub", "remote"], str, ZSocket]] = []
    # Our hub's ROUTERs are known to the ZAP handler by this routing id.
    zap_id = b"trizre-gossip-" + os.urandom(8)

    def socket(kind: int, verb: str, endpoint: str) -> ZSocket:
        """A ROUTER bound or a DEALER connected to ``endpoint``; errors name it."""
        raw: zmq.Socket[Any] = context().socket(kind)
        sockets.append(ZSocket(raw))
        raw.setsockopt(zmq.SNDHWM, _HWM)
        if curve is not None and curve.secret is not None:
            if kind == zmq.ROUTER:
                raw.setsockopt(zmq.ROUTING_ID, zap_id)
                raw.setsockopt(zmq.CURVE_SERVER, 1)
                raw.setsockopt(zmq.CURVE_SECRETKEY, curve.secret)
                assert allow is not None
                raw.setsockopt(zmq.ZAP_DOMAIN, allow.domain.encode("utf-8"))
            elif endpoint in hub_keys:
                raw.setsockopt(zmq.CURVE_SERVERKEY, hub_keys[endpoint])
                raw.setsockopt(zmq.CURVE_PUBLICKEY, curve.public)
                raw.setsockopt(zmq.CURVE_SECRETKEY, curve.secret)
        # Watched from before the first connection, so no handshake is missed.
        address = f"inproc://trizre-gossip-monitor-{os.getpid()}-{next(_monitors)}"
        raw.monitor(address, _HANDSHAKES)
        pair: zmq.Socket[Any] = context().socket(zmq.PAIR)
        pair.connect(address)
        side: Literal["hub", "remote"] = "hub" if kind == zmq.ROUTER else "remote"
        watched.append((side, endpoint, ZSocket(pair)))
        try:
            getattr(raw, verb)(endpoint)
        except zmq.ZMQError as exc:
            raise zmq.ZMQError(exc.errno, f"cannot {verb} gossip to {endpoint!r}: {exc}") from exc
        return sockets[-1]

    def close_all() -> None:
        service._closed = True
        for sock in sockets:
            if not sock.closed:
                sock.zmq_socket.disable_monitor()
            sock.close()
        for _, _, monitor in watched:
            monitor.close()

    async with AsyncExitStack() as stack:
        if curve is not None and bind:
            assert allow is not None
            # Registered before the bind: libzmq lets anyone in while no handler answers.
            await stack.enter_async_context(open_zap(zap_id, allow))
            log.debug("gossip hub under CURVE key %s", z85(curve.public))
        stack.callback(close_all)  # before the ZAP registration ends
        for endpoint in bind:
            sock = socket(zmq.ROUTER, "bind", endpoint)
            service._servers.append(sock)
            bound = sock.zmq_socket.getsockopt_string(zmq.LAST_ENDPOINT)
            service.endpoints.append(bound)
            side, _, monitor = watched[-1]
            watched[-1] = (side, bound, monitor)
        for endpoint in connect:
            service._remotes[endpoint] = socket(zmq.DEALER, "connect", endpoint)
        with unwrap_single_exception_group():
            async with trio.open_nursery() as nursery:
                for index, sock in enumerate(service._servers):
                    nursery.start_soon(service._serve, index, sock)
                for endpoint, sock in service._remotes.items():
                    nursery.start_soon(service._listen, endpoint, sock)
                    service._carry_out(state.connected(endpoint, trio.current_time()))
                for side, endpoint, monitor in watched:
                    nursery.start_soon(service._watch, side, endpoint, monitor)
                nursery.start_soon(service._clock)
                try:
                    yield service
                finally:
                    nursery.cancel_scope.cancel()
