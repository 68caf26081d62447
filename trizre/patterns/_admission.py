"""A server's admission rules, sans I/O: which request runs, which is refused.

:class:`Admission` decides, for each request a server receives, what the
server does with it (``patterns/README.md`` §5 and §7), in this order:

1. the **gate** (a passive Binary Star server) may refuse it with a status;
2. a retry of a request held here (**dedupe**) is answered ACCEPTED again;
3. a server already holding ``capacity`` requests **sheds** it (503, not run);
4. the **reply cache**, if any, answers a finished request from its store,
   or ignores a request it runs for another client (its retry finds it);
5. otherwise it is admitted (held), and answered ACCEPTED if it is still
   held ``accept_after`` seconds later (**accept-after**).

Every input carries ``now``; nothing here waits, sends or reads a clock.
Each decision is also handed to the observer (the server's trace and its
counters watch the same stream; see :class:`Observer`).  The Trio shell
is :class:`trizre.patterns._server.Server`.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Callable
from typing import Final, TypeAlias, final
from uuid import UUID

import attrs

from . import _protocol as proto

__all__ = [
    "AcceptDue",
    "Admission",
    "Admitted",
    "CachedReply",
    "Decision",
    "Executed",
    "Gate",
    "HeldAgain",
    "IncomingRequest",
    "Received",
    "Refused",
    "Replied",
    "ReplyCache",
    "RunningElsewhere",
]


@final
@attrs.frozen
class IncomingRequest:
    """A request as a handler sees it."""

    peer: UUID
    name: str
    request_id: int
    service: str
    body: tuple[bytes, ...]
    version: int = attrs.field(default=proto.VERSION, eq=False)
    """The envelope version it came in: its answers go back in it (README §4)."""


# Made for every request a server receives (issue 28): attrs' __init__ for
# a frozen class sets each field through object.__setattr__; the slots' own
# descriptors do it faster.  The same object (a test compares the two).
_new = object.__new__
_set_peer = IncomingRequest.__dict__["peer"].__set__
_set_name = IncomingRequest.__dict__["name"].__set__
_set_request_id = IncomingRequest.__dict__["request_id"].__set__
_set_service = IncomingRequest.__dict__["service"].__set__
_set_body = IncomingRequest.__dict__["body"].__set__
_set_version = IncomingRequest.__dict__["version"].__set__


def new_incoming(
    peer: UUID, name: str, request_id: int, service: str, *, body: tuple[bytes, ...], version: int
) -> IncomingRequest:
    """``IncomingRequest(peer, name, request_id, service, body, version)``, made
    faster (the server's receive path); no checks."""
    request: IncomingRequest = _new(IncomingRequest)
    _set_peer(request, peer)
    _set_name(request, name)
    _set_request_id(request, request_id)
    _set_service(request, service)
    _set_body(request, body)
    _set_version(request, version)
    return request


Gate = Callable[[IncomingRequest], "int | None"]
"""Says a status to refuse a request with, or ``None`` to let it through."""

_IN_PROGRESS: Final = object()


@final
class ReplyCache:
    """Remembers replies by (client, request id) so a retried request runs once.

    Opt-in, for non-idempotent services: a retry of a request that is still
    held is answered ACCEPTED (its reply will come), a retry of a finished
    one gets the stored reply again without running the handler.  Entries
    are dropped beyond ``max_entries`` (oldest first) or after ``max_age``
    seconds; a retry that arrives later than that runs again.

    ``per_client=False`` keys by request id alone: for clients that give
    their requests stable ids and may come back as another node (Titanic,
    restarted, asks again with a new UUID).  Ids must then be unique
    across clients (random 64-bit ids are).

    Bad input: ``max_entries < 1`` or a non-positive ``max_age`` raises
    ``ValueError``.
    """

    def __init__(
        self, max_entries: int = 10_000, max_age: float = 300.0, *, per_client: bool = True
    ) -> None:
        if max_entries < 1:
            raise ValueError(f"max_entries must be at least 1, got {max_entries}")
        if not (max_age > 0 and math.isfinite(max_age)):
            raise ValueError(f"max_age must be a positive number of seconds, got {max_age}")
        self.max_entries = max_entries
        self.max_age = max_age
        self.per_client = per_client
        self._entries: OrderedDict[tuple[UUID | None, int], tuple[float, object]] = OrderedDict()
        self.hits = 0

    def __len__(self) -> int:
        return len(self._entries)

    def key(self, request: IncomingRequest) -> tuple[UUID | None, int]:
        """What this cache knows ``request`` by."""
        return (request.peer if self.per_client else None, request.request_id)

    def _expire(self, now: float) -> None:
        entries = self._entries
        while entries and (
            len(entries) > self.max_entries or next(iter(entries.values()))[0] + self.max_age < now
        ):
            entries.popitem(last=False)

    def lookup(self, key: tuple[UUID | None, int], now: float) -> proto.Reply | object | None:
        """The stored reply; a marker object while the request is still running;
        ``None`` if never seen or forgotten.  ``hits`` counts stored replies found.
        """
        self._expire(now)
        entry = self._entries.get(key)
        if entry is None:
            return None
        if isinstance(entry[1], proto.Reply):
            self.hits += 1
        return entry[1]

    def start(self, key: tuple[UUID | None, int], now: float) -> None:
        """Mark ``key`` as running (the newest entry)."""
        self._entries[key] = (now, _IN_PROGRESS)
        self._entries.move_to_end(key)
        self._expire(now)

    def finish(self, key: tuple[UUID | None, int], reply: proto.Reply, now: float) -> None:
        if key in self._entries:
            self._entries[key] = (now, reply)
            self._entries.move_to_end(key)
        self._expire(now)

    def forget(self, key: tuple[UUID | None, int]) -> None:
        self._entries.pop(key, None)


# ------------------------------------------------------------------ decisions


@final
@attrs.frozen
class Received:
    """A request for this server arrived (before any rule looked at it)."""

    request: IncomingRequest


@final
@attrs.frozen
class Refused:
    """Answer ``status`` at once; the handler does not run.

    ``reason`` is ``"gate"`` (the gate said so) or ``"shed"`` (the server
    already holds ``capacity`` requests: 503, its client asks elsewhere).
    """

    request: IncomingRequest
    status: int
    reason: str


@final
@attrs.frozen
class HeldAgain:
    """A retry of a request held here: answer ACCEPTED again, run nothing."""

    request: IncomingRequest


@final
@attrs.frozen
class CachedReply:
    """The reply cache has the answer: send ``reply`` again, run nothing."""

    request: IncomingRequest
    reply: proto.Reply


@final
@attrs.frozen
class RunningElsewhere:
    """The reply cache runs it for another client: send nothing (its retry finds the reply)."""

    request: IncomingRequest


@final
@attrs.frozen
class Admitted:
    """Held: run it when a handler is free; ACCEPTED is due at ``accept_at``."""

    request: IncomingRequest
    accept_at: float


# Made for every request a server holds (issue 28), as new_incoming makes
# the request: the slots' descriptors, not attrs' frozen __init__ (820 -> 520
# ns).  The same object (a test compares the two).
_set_admitted_request = Admitted.__dict__["request"].__set__
_set_accept_at = Admitted.__dict__["accept_at"].__set__


def _admitted(request: IncomingRequest, accept_at: float) -> Admitted:
    verdict: Admitted = _new(Admitted)
    _set_admitted_request(verdict, request)
    _set_accept_at(verdict, accept_at)
    return verdict


@final
@attrs.frozen
class AcceptDue:
    """Held ``accept_after`` without a reply: say ACCEPTED now."""

    request: IncomingRequest


@final
@attrs.frozen
class Executed:
    """A handler starts on the request (``idempotent``: a reply cache guards it)."""

    request: IncomingRequest
    idempotent: bool


@final
@attrs.frozen
class Replied:
    """A reply (or an ACCEPTED, ``status`` None) went to the client."""

    request: IncomingRequest
    status: int | None


Decision: TypeAlias = (
    Received
    | Refused
    | HeldAgain
    | CachedReply
    | RunningElsewhere
    | Admitted
    | AcceptDue
    | Executed
    | Replied
)
Verdict: TypeAlias = Refused | HeldAgain | CachedReply | RunningElsewhere | Admitted
"""What :meth:`Admission.admit` returns: the decisions about one arrival."""

Observer = Callable[[Decision], None]
"""Sees every decision, in order, as it is made (the trace writes from these)."""

Key = tuple[int, int]
"""A held request: its client's UUID as an int, and its id.  Ints, not the
UUID: a tuple holding a UUID is hashed through ``UUID.__hash__``, a Python
call, each time it is looked up (five times a request)."""


@final
class Admission:
    """The admission rules of one server, with its counters.

    ``capacity`` is how many requests it may hold (running or waiting for
    a handler); ``accept_after`` the seconds a held request waits before
    ACCEPTED is due; ``cache`` and ``gate`` are optional.  Counters, as the
    server's ``stats()`` reports them: ``received``, ``refused`` (gate),
    ``shed``, ``retried`` (held or cached retries), ``executed``,
    ``replied``, ``accepted``; ``held`` is the number held now.

    Bad input: ``capacity < 1`` or a negative or non-finite
    ``accept_after`` raises ``ValueError``.  An exception from the gate
    propagates out of :meth:`admit`, with nothing counted but ``received``.
    """

    __slots__ = (
        "_unaccepted",
        "accept_after",
        "accepted",
        "cache",
        "capacity",
        "executed",
        "gate",
        "holding",
        "observer",
        "received",
        "refused",
        "replied",
        "retried",
        "shed",
    )

    def __init__(
        self,
        *,
        capacity: int,
        accept_after: float,
        cache: ReplyCache | None = None,
        gate: Gate | None = None,
        observer: Observer | None = None,
    ) -> None:
        if not isinstance(capacity, int) or capacity < 1:
            raise ValueError(f"capacity must be a whole number >= 1: {capacity!r}")
        if not (isinstance(accept_after, int | float) and 0 <= accept_after < math.inf):
            raise ValueError(f"accept_after must be a finite number >= 0: {accept_after!r}")
        self.capacity = capacity
        self.accept_after = accept_after
        self.cache = cache
        self.gate = gate
        self.observer = observer  # None: no decision objects are built but the verdicts
        self.received = self.refused = self.shed = self.retried = 0
        self.executed = self.replied = self.accepted = 0
        self.holding: set[Key] = set()  # (client, request id) held here
        # Held requests not yet answered ACCEPTED, oldest first, with when it is due.
        self._unaccepted: dict[Key, tuple[IncomingRequest, float]] = {}

    @property
    def held(self) -> int:
        """Requests held now: running, or waiting for a free handler."""
        return len(self.holding)

    def admit(self, request: IncomingRequest, now: float) -> Verdict:
        """Decide what becomes of ``request``, arrived at ``now`` (rules 1-5 above)."""
        observe = self.observer
        self.received += 1
        if observe is not None:
            observe(Received(request))
        verdict: Verdict
        if self.gate is not None and (status := self.gate(request)) is not None:
            self.refused += 1
            verdict = Refused(request, status, "gate")
        elif (key := (request.peer.int, request.request_id)) in self.holding:
            # A retry of a request held here (our ACCEPTED was late): say it again.
            self.retried += 1
            verdict = HeldAgain(request)
        elif len(self.holding) >= self.capacity:
            self.shed += 1
            verdict = Refused(request, proto.Status.UNAVAILABLE, "shed")
        elif self.cache is not None and (cached := self._cached(request, now)) is not None:
            verdict = cached
        else:
            self.holding.add(key)
            due = now + self.accept_after
            self._unaccepted[key] = (request, due)
            verdict = _admitted(request, due)
        if observe is not None:
            observe(verdict)
        return verdict

    def _cached(self, request: IncomingRequest, now: float) -> Verdict | None:
        assert self.cache is not None
        key = self.cache.key(request)
        found = self.cache.lookup(key, now)
        if found is None:
            self.cache.start(key, now)
            return None
        self.retried += 1
        if isinstance(found, proto.Reply):
            return CachedReply(request, found)
        # Running for another client (per_client=False: a Titanic that
        # restarted asks again).  Its reply goes to the first one; this one
        # gets no ACCEPTED, so it asks again, and finds it stored.
        return RunningElsewhere(request)

    def next_accept(self) -> float | None:
        """When the oldest held request is due its ACCEPTED; ``None``: none is."""
        for _request, due in self._unaccepted.values():
            return due
        return None

    def accepts_due(self, now: float) -> list[AcceptDue]:
        """The held requests due their ACCEPTED at ``now``, oldest first (each once)."""
        due: list[AcceptDue] = []
        unaccepted = self._unaccepted
        while unaccepted:
            key, (request, at) = next(iter(unaccepted.items()))
            if now < at:
                break
            del unaccepted[key]
            decision = AcceptDue(request)
            if self.observer is not None:
                self.observer(decision)
            due.append(decision)
        return due

    def started(self, request: IncomingRequest) -> None:
        """A handler starts on ``request``."""
        self.executed += 1
        if self.observer is not None:
            self.observer(Executed(request, self.cache is not None))

    def finished(self, request: IncomingRequest, reply: proto.Reply, now: float) -> None:
        """The handler answered ``reply``: it is cached (if there is a cache) and no longer held."""
        if self.cache is not None:
            self.cache.finish(self.cache.key(request), reply, now)
        self.release(request)

    def abandoned(self, request: IncomingRequest) -> None:
        """``request`` will not be answered (cancelled, or never run): a retry must run it."""
        if self.cache is not None:
            self.cache.forget(self.cache.key(request))
        self.release(request)

    def release(self, request: IncomingRequest) -> None:
        """``request`` is no longer held (its reply is on its way)."""
        key = (request.peer.int, request.request_id)
        self.holding.discard(key)
        self._unaccepted.pop(key, None)

    def sent(self, request: IncomingRequest, message: proto.Reply | proto.Accepted) -> None:
        """``message`` went to the request's client."""
        if isinstance(message, proto.Reply):
            self.replied += 1
            if self.observer is not None:
                self.observer(Replied(request, message.status))
        else:
            self.accepted += 1
            if self.observer is not None:
                self.observer(Replied(request, None))
