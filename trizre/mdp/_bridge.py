"""The Majordomo bridge: an MDP broker endpoint whose services are trizre services.

* An MDP client's REQUEST for service S goes to a Majordomo worker of S
  connected to this bridge if there is one, else to the trizre service S
  (a ZRE group) through a :class:`~trizre.patterns.ServiceClient`, with
  its retries; the reply comes back as FINAL.
* An MDP worker's READY for S makes the bridge a trizre worker of S: it
  joins the group S and hands trizre requests to its MDP workers, one
  request per worker at a time.  When the last MDP worker of S leaves,
  the bridge leaves the group.
* ``mmi.service`` is answered from ZRE membership and the MDP workers
  here (``200``/``404``); other ``mmi.*`` names get ``501``.

MDP has no error replies.  A request for a service with no worker at all
(no MDP worker here, no member of the ZRE group), once the bridge has run
``discovery_grace`` seconds, is answered at once with
MMI's ``404``, one frame, as a FINAL reply in the client's dialect: it
holds no place.  A request that a worker exists for but none answers
(every attempt timed out, the worker failed) gets no reply, as with the
Guide's broker, and the client's own timeout ends it.  Each client (a
ROUTER identity) holds at most ``max_in_flight_per_client`` places; one
more gets no reply and counts in ``refused``.  Every log line a peer can
trigger is rate-limited (:func:`trizre.sansio._guard.log_rarely`).
"""

from __future__ import annotations

import itertools
import logging
import math
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from typing import Any, Final, final

import attrs
import trio
import zmq

from .._concurrency import unwrap_single_exception_group
from ..node._node import Node
from ..patterns import (
    IncomingRequest,
    PatternError,
    ReplyWith,
    RetryPolicy,
    ServiceClient,
    Status,
    open_server,
    open_service_client,
)
from ..sansio._guard import LogLimiter, log_rarely
from ..transport._links import bind_when_free
from ..transport._zsock import ZSocket, context
from . import _codec as mdp

log = logging.getLogger("trizre.mdp")
NO_WORKER: Final = (b"404",)  # MMI's answer for a service nobody offers

MMI_SERVICE: Final = b"mmi.service"


@attrs.define(eq=False)
class _Worker:
    identity: bytes
    service: bytes
    dialect: mdp.Dialect
    expires: float
    next_heartbeat: float
    job: _Job | None = None


@attrs.define(eq=False)
class _Job:
    token: bytes
    service: bytes
    body: tuple[bytes, ...]
    # An MDP client here (identity, dialect), or None for a trizre request.
    client: tuple[bytes, mdp.Dialect] | None
    # Whether it holds one of its client's places (released once, when done).
    placed: bool = False
    partials: list[bytes] = attrs.field(factory=list)
    reply: tuple[bytes, ...] | None = None
    failed: bool = False
    done: trio.Event = attrs.field(factory=trio.Event)


@final
class MdpBridge:
    """A running bridge: what :func:`open_mdp_bridge` yields.

    ``endpoint`` is the address bound (the real port when ``:*`` or ``:0``
    was asked).  The counters are for tests and monitoring:
    ``requests`` from MDP clients, ``to_trizre`` of those sent to trizre
    services, ``from_trizre`` trizre requests served by MDP workers,
    ``unanswered`` requests that got no reply, ``no_worker`` answered
    ``404`` at once (no worker of their service anywhere), ``refused``
    requests beyond their client's share (``max_in_flight_per_client``;
    no reply), ``dropped`` malformed or refused messages.
    """

    def __init__(
        self,
        node: Node,
        sock: ZSocket,
        endpoint: str,
        client: ServiceClient,
        nursery: trio.Nursery,
        *,
        heartbeat: float,
        liveness: int,
        busy_timeout: float,
        max_workers: int,
        max_queued: int,
        max_in_flight: int,
        max_in_flight_per_client: int,
        discovery_grace: float,
    ) -> None:
        self.node = node
        self.endpoint = endpoint
        self.requests = 0
        self.to_trizre = 0
        self.from_trizre = 0
        self.unanswered = 0
        self.no_worker = 0
        self.refused = 0
        self.dropped = 0
        self._logs = LogLimiter()  # what a peer can trigger: once a topic every 10 s
        self._sock = sock
        self._client = client
        self._nursery = nursery
        self._heartbeat = heartbeat
        self._liveness = liveness
        self._busy_timeout = busy_timeout
        self._max_workers = max_workers
        self._max_queued = max_queued
        self._max_in_flight = max_in_flight
        self._per_client = max_in_flight_per_client
        # Until then the node may not have heard of workers that exist: hold, as before.
        self._sure_from = trio.current_time() + discovery_grace
        self._places: dict[bytes, int] = {}  # by client identity, only while above 0
        self._asking = 0  # requests waiting for trizre services
        self._workers: dict[bytes, _Worker] = {}
        self._idle: dict[bytes, deque[_Worker]] = {}  # by service
        self._queues: dict[bytes, deque[_Job]] = {}  # by service
        self._queued = 0
        self._jobs: dict[bytes, _Job] = {}  # by token, sent to a worker
        self._servers: dict[bytes, trio.CancelScope] = {}  # trizre servers we run
        self._tokens = itertools.count(1)

    def log_rarely(self, topic: str, level: int, message: str, *args: object) -> None:
        """Log ``message % args`` unless ``topic`` was logged in the last 10 s (floods)."""
        log_rarely(log, self._logs, topic, level, message, *args, now=trio.current_time())

    def workers(self, service: str) -> int:
        """The MDP workers of ``service`` connected now."""
        wanted = service.encode()
        return sum(1 for w in self._workers.values() if w.service == wanted)

    # ---------------------------------------------------------------- input

    async def _read(self) -> None:
        while True:
            for frames in await self._sock.receive_batch(256):
                identity, rest = frames[0], frames[1:]
                try:
                    message = mdp.decode(rest)
                except mdp.MdpDecodeError as exc:
                    self.dropped += 1
                    self.log_rarely(
                        "malformed",
                        logging.DEBUG,
                        "dropping a message from %s: %s",
                        identity.hex(),
                        exc,
                    )
                    continue
                self._handle(identity, message)

    def _handle(self, identity: bytes, message: mdp.Message) -> None:
        now = trio.current_time()
        if isinstance(message, mdp.ClientRequest):
            self._client_request(identity, message)
            return
        worker = self._workers.get(identity)
        if isinstance(message, mdp.WorkerReady):
            if worker is not None:
                self._remove(worker, "it said READY again")
            if worker is not None or message.service.startswith(b"mmi."):
                self._drop_worker(identity, message.dialect, "READY twice, or for mmi.*")
                return
            if len(self._workers) >= self._max_workers:
                self._drop_worker(identity, message.dialect, "too many workers")
                return
            self._ready(identity, message, now)
            return
        if worker is None:
            # The spec: a message from a worker not READY gets DISCONNECT.
            if not isinstance(message, mdp.WorkerDisconnect):
                self._drop_worker(identity, message.dialect, "not READY")
            return
        # Any message is a heartbeat; a busy worker keeps its longer allowance.
        worker.expires = now + (
            self._busy_timeout if worker.job is not None else self._liveness * self._heartbeat
        )
        if isinstance(message, mdp.WorkerDisconnect):
            self._remove(worker, "it disconnected")
        elif isinstance(message, mdp.WorkerReply):
            self._worker_reply(worker, message)

    def _drop_worker(self, identity: bytes, dialect: mdp.Dialect, why: str) -> None:
        self.dropped += 1
        self.log_rarely(
            "worker refused",
            logging.WARNING,
            "disconnecting MDP worker %s: %s",
            identity.hex(),
            why,
        )
        self._send(identity, mdp.worker_disconnect(dialect))

    def _ready(self, identity: bytes, message: mdp.WorkerReady, now: float) -> None:
        worker = _Worker(
            identity,
            message.service,
            message.dialect,
            expires=now + self._liveness * self._heartbeat,
            next_heartbeat=now + self._heartbeat,
        )
        self._workers[identity] = worker
        self.log_rarely(
            "worker ready", logging.INFO, "MDP worker %s serves %r", identity.hex(), message.service
        )
        if message.service not in self._servers:
            self._servers[message.service] = scope = trio.CancelScope()
            self._nursery.start_soon(self._serve_trizre, message.service, scope)
        self._idle_again(worker)

    def _client_request(self, identity: bytes, message: mdp.ClientRequest) -> None:
        self.requests += 1
        service, dialect = message.service, message.dialect
        if service.startswith(b"mmi."):
            self._send(identity, mdp.client_reply(dialect, service, self._mmi(message)))
            return
        job = _Job(self._token(), service, message.body, (identity, dialect))
        served_here = self._serves(service)
        if (
            not served_here
            and not self._offered(service)
            and trio.current_time() >= self._sure_from
        ):
            # Nobody to wait for: holding a place would only starve others.
            self.no_worker += 1
            self.log_rarely(
                "no worker", logging.INFO, "MDP request for %r: no worker, answered 404", service
            )
            self._send(identity, mdp.client_reply(dialect, service, NO_WORKER))
            return
        if self._places.get(identity, 0) >= self._per_client:
            self.refused += 1
            self._unanswered(
                job, f"its client already holds {self._per_client} places (its share)", "share"
            )
            return
        if served_here:
            self._take_place(job)
            self._submit(job)  # an MDP worker here: no round trip over ZRE
            return
        if self._asking >= self._max_in_flight:
            self._unanswered(job, "too many requests in flight to trizre services", "full")
            return
        self._take_place(job)
        self._asking += 1
        self.to_trizre += 1
        self._nursery.start_soon(self._ask_trizre, job)

    def _token(self) -> bytes:
        """The next request token (the "client address" workers echo back)."""
        return next(self._tokens).to_bytes(8, "big")

    def _serves(self, service: bytes) -> bool:
        return any(w.service == service for w in self._workers.values())

    def _offered(self, service: bytes) -> bool:
        """Whether a ZRE peer is in the group ``service`` (a trizre worker may answer)."""
        try:
            group = service.decode()
            return bool(group) and bool(self.node.peers_by_group(group))
        except (UnicodeDecodeError, trio.ClosedResourceError):
            return False

    def _take_place(self, job: _Job) -> None:
        assert job.client is not None
        identity = job.client[0]
        self._places[identity] = self._places.get(identity, 0) + 1
        job.placed = True

    def _finish(self, job: _Job) -> None:
        """The job is over (answered or failed): wake its waiter, free its client's place."""
        job.done.set()
        if job.placed and job.client is not None:
            job.placed = False
            identity = job.client[0]
            left = self._places[identity] - 1
            if left:
                self._places[identity] = left
            else:
                del self._places[identity]

    def _mmi(self, message: mdp.ClientRequest) -> tuple[bytes, ...]:
        if message.service != MMI_SERVICE:
            return (b"501",)
        name = message.body[0] if message.body else b""
        return (b"200",) if self._offered(name) or self._serves(name) else NO_WORKER

    # ------------------------------------------------------- MDP workers

    def _submit(self, job: _Job) -> None:
        idle = self._idle.get(job.service)
        if idle:
            self._start(idle.popleft(), job)
            return
        if self._queued >= self._max_queued:
            job.failed = True
            self._finish(job)
            self._unanswered(
                job, f"{self._max_queued} requests already wait for MDP workers", "queue full"
            )
            return
        self._queues.setdefault(job.service, deque()).append(job)
        self._queued += 1

    def _start(self, worker: _Worker, job: _Job) -> None:
        worker.job = job
        self._jobs[job.token] = job
        worker.expires = trio.current_time() + self._busy_timeout
        worker.next_heartbeat = trio.current_time() + self._heartbeat
        self._send(worker.identity, mdp.worker_request(worker.dialect, job.token, job.body))

    def _idle_again(self, worker: _Worker) -> None:
        worker.job = None
        queue = self._queues.get(worker.service)
        if queue:
            self._queued -= 1
            self._start(worker, queue.popleft())
        else:
            self._idle.setdefault(worker.service, deque()).append(worker)

    def _worker_reply(self, worker: _Worker, message: mdp.WorkerReply) -> None:
        job = worker.job
        if job is None or job.token != message.token:
            self.log_rarely(
                "stray reply",
                logging.DEBUG,
                "a reply from %s for no request of ours",
                worker.identity.hex(),
            )
            return
        if job.client is not None and job.client[1].version == 2:
            # A 0.2 client hears PARTIALs as they come.
            identity, dialect = job.client
            frames = mdp.client_reply(dialect, job.service, message.body, final=message.final)
            self._send(identity, frames)
        elif not message.final:
            job.partials.extend(message.body)
        if not message.final:
            return
        del self._jobs[job.token]
        if job.client is not None and job.client[1].version == 1:
            identity, dialect = job.client
            body = (*job.partials, *message.body)  # 0.1 clients know no PARTIAL
            self._send(identity, mdp.client_reply(dialect, job.service, body))
        job.reply = (*job.partials, *message.body)
        self._finish(job)
        worker.expires = trio.current_time() + self._liveness * self._heartbeat
        self._idle_again(worker)

    def _remove(self, worker: _Worker, why: str) -> None:
        del self._workers[worker.identity]
        idle = self._idle.get(worker.service)
        if idle is not None and worker in idle:
            idle.remove(worker)
        self.log_rarely(
            "worker removed",
            logging.INFO,
            "MDP worker %s of %r removed: %s",
            worker.identity.hex(),
            worker.service,
            why,
        )
        job = worker.job
        if job is not None:
            del self._jobs[job.token]
            job.partials.clear()
            if self._serves(worker.service):
                self._submit(job)  # another worker here takes it (at least once, as retries)
            else:
                job.failed = True
                self._finish(job)
                if job.client is not None:
                    self._unanswered(job, f"its MDP worker went away ({why})", "worker gone")
        if not self._serves(worker.service):
            for orphan in self._queues.pop(worker.service, deque()):
                self._queued -= 1
                orphan.failed = True
                self._finish(orphan)
                if orphan.client is not None:
                    self._unanswered(
                        orphan, "the last MDP worker of its service went away", "worker gone"
                    )
            self._idle.pop(worker.service, None)
            if (scope := self._servers.pop(worker.service, None)) is not None:
                scope.cancel()  # leave the ZRE group: nobody serves it here now

    async def _keepalive(self) -> None:
        """Heartbeat idle workers; remove those silent too long (busy: ``busy_timeout``)."""
        while True:
            now = trio.current_time()
            for worker in list(self._workers.values()):
                if now >= worker.expires:
                    self._send(worker.identity, mdp.worker_disconnect(worker.dialect))
                    self._remove(worker, "silent too long")
                elif now >= worker.next_heartbeat:
                    self._send(worker.identity, mdp.worker_heartbeat(worker.dialect))
                    worker.next_heartbeat = now + self._heartbeat
            await trio.sleep(self._heartbeat / 4)

    # ------------------------------------------------------- trizre side

    async def _ask_trizre(self, job: _Job) -> None:
        assert job.client is not None
        identity, dialect = job.client
        try:
            try:
                reply = await self._client.request(job.service.decode(), *job.body)
            except (PatternError, UnicodeDecodeError, ValueError) as exc:
                self._unanswered(job, f"the trizre service did not answer: {exc}", "trizre")
                return
            except trio.ClosedResourceError:
                return  # the node stopped: the bridge is ending
            self._send(identity, mdp.client_reply(dialect, job.service, reply))
        finally:
            self._asking -= 1
            self._finish(job)

    async def _serve_trizre(self, service: bytes, scope: trio.CancelScope) -> None:
        async def handler(request: IncomingRequest) -> tuple[bytes, ...]:
            if not self._serves(service):
                raise ReplyWith(Status.UNAVAILABLE)
            self.from_trizre += 1
            job = _Job(self._token(), service, request.body, None)
            self._submit(job)
            await job.done.wait()
            if job.failed or job.reply is None:
                # Not answered here: the trizre client asks another worker.
                raise ReplyWith(Status.UNAVAILABLE)
            return job.reply

        with scope:
            try:
                name = service.decode()
                async with open_server(self.node, handler, service=name):
                    await trio.sleep_forever()
            except (UnicodeDecodeError, ValueError) as exc:
                self.log_rarely(
                    "bad service",
                    logging.WARNING,
                    "MDP service %r cannot be a trizre service: %s",
                    service,
                    exc,
                )
                await trio.sleep_forever()  # MDP clients here are still served

    # ---------------------------------------------------------------- util

    def _unanswered(self, job: _Job, why: str, topic: str) -> None:
        self.unanswered += 1
        self.log_rarely(
            f"unanswered: {topic}",
            logging.WARNING,
            "MDP request for %r gets no reply: %s",
            job.service,
            why,
        )

    def _send(self, identity: bytes, frames: list[bytes]) -> None:
        # A ROUTER drops messages for peers that are gone; a full peer, too.
        self._sock.send_nowait([identity, *frames])


@asynccontextmanager
async def open_mdp_bridge(
    node: Node,
    bind: str = "tcp://127.0.0.1:5555",
    *,
    policy: RetryPolicy | None = None,
    heartbeat: float = 2.5,
    liveness: int = 3,
    busy_timeout: float = 60.0,
    max_workers: int = 1000,
    max_queued: int = 10_000,
    max_in_flight: int = 1000,
    max_in_flight_per_client: int | None = None,
    discovery_grace: float = 5.0,
) -> AsyncIterator[MdpBridge]:
    """Run a Majordomo broker endpoint at ``bind`` over ``node``'s services.

    Args:
        node: the trizre node whose services MDP clients reach, and through
            which MDP workers serve trizre clients.
        bind: a ZeroMQ endpoint (``tcp://127.0.0.1:5555``; ``:*`` picks a port).
        policy: retries of the requests sent to trizre services.
        heartbeat: seconds between heartbeats to idle MDP workers
            (majortomo's and the Guide's 2.5); a worker silent for
            ``liveness`` heartbeats is removed.
        busy_timeout: how long a worker busy with a request may stay silent
            (majortomo's workers do not heartbeat while busy); then it is
            removed and its request goes to another worker.
        max_workers: MDP workers at most; one more is disconnected.
        max_queued: requests waiting for a busy MDP worker at most; one
            more gets no reply (a warning is logged).
        max_in_flight: requests waiting for trizre services at most; one
            more gets no reply (a warning is logged).
        max_in_flight_per_client: requests one MDP client (one ROUTER
            identity) may have held by the bridge at once, waiting for
            trizre services or MDP workers; one more gets no reply and
            counts in ``refused`` (a warning is logged, rarely).  Default:
            a tenth of ``max_in_flight`` (100), so that no client can
            starve the others.

        discovery_grace: seconds after the start during which a request
            for a service with no known worker is held as any other (the
            node may not have discovered its workers yet); after them, it
            is answered ``404`` at once (MMI's answer, as a FINAL reply:
            ``docs/mdp-bridge.md``).

    Cancellation: leaving the block closes the socket, stops serving the
    services, and leaves their groups; requests in flight get no reply.
    Bad input: non-positive timings or bounds raise ``ValueError``; an
    endpoint ZeroMQ cannot bind raises ``zmq.ZMQError`` naming it.
    """
    for name, value in (("heartbeat", heartbeat), ("busy_timeout", busy_timeout)):
        if not (isinstance(value, int | float) and 0 < value < math.inf):
            raise ValueError(f"{name} must be a positive number of seconds, got {value!r}")
    if not (isinstance(discovery_grace, int | float) and 0 <= discovery_grace < math.inf):
        raise ValueError(f"discovery_grace must be 0 or more seconds, got {discovery_grace!r}")
    for name, count in (
        ("liveness", liveness),
        ("max_workers", max_workers),
        ("max_queued", max_queued),
        ("max_in_flight", max_in_flight),
        ("max_in_flight_per_client", max_in_flight_per_client),
    ):
        if count is None and name == "max_in_flight_per_client":
            continue
        if not isinstance(count, int) or count < 1:
            raise ValueError(f"{name} must be a positive integer, got {count!r}")
    raw: zmq.Socket[Any] = context().socket(zmq.ROUTER)
    try:
        await bind_when_free(raw, bind, "the MDP bridge")
    except BaseException:
        raw.close(linger=0)
        raise
    sock = ZSocket(raw)
    endpoint = raw.getsockopt_string(zmq.LAST_ENDPOINT)
    try:
        with unwrap_single_exception_group():
            async with (
                open_service_client(
                    node, policy or RetryPolicy(), max_in_flight=max_in_flight
                ) as client,
                trio.open_nursery() as nursery,
            ):
                bridge = MdpBridge(
                    node,
                    sock,
                    endpoint,
                    client,
                    nursery,
                    heartbeat=heartbeat,
                    liveness=liveness,
                    busy_timeout=busy_timeout,
                    max_workers=max_workers,
                    max_queued=max_queued,
                    max_in_flight=max_in_flight,
                    max_in_flight_per_client=max_in_flight_per_client
                    or max(1, max_in_flight // 10),
                    discovery_grace=discovery_grace,
                )
                nursery.start_soon(bridge._read)
                nursery.start_soon(bridge._keepalive)
                try:
                    yield bridge
                finally:
                    nursery.cancel_scope.cancel()
    finally:
        # Only once the tasks have ended: closing under a task still waiting
        # on the socket would raise ClosedResourceError in it.
        with suppress(Exception):
            sock.close()
