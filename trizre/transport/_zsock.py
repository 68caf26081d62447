"""pyzmq under Trio: the only module that touches ``zmq.FD`` and ``zmq.EVENTS``.

libzmq exposes one file descriptor per socket that becomes readable when the
socket's state *may* have changed, and any zmq call on the socket (a send, a
failed receive, reading ``EVENTS``) may consume that signal.  Three rules
follow, and this module exists to keep them in one place:

1. Before waiting on the descriptor, read ``EVENTS``: the condition may
   already hold and no further signal would come.  (Or know its answer:
   an ``EVENTS`` that said not readable, with no zmq call on the socket
   since, serves; see :meth:`ZSocket.receive_batch`.)
2. After every zmq call, if another task is waiting on this socket, read
   ``EVENTS`` and wake it when its condition now holds: our call may have
   eaten the signal it was waiting for.
3. Trio allows one task in ``wait_readable`` per descriptor, so one waiting
   task owns the descriptor and the others park beside it; whoever wakes
   wakes them all to re-check.  Another task ends the owner's wait with
   ``trio.lowlevel.notify_closing`` on the descriptor (the owner takes the
   ``ClosedResourceError`` for a wake-up while the socket is open; Trio
   registers the descriptor anew at the next wait), not by cancelling a
   scope around the wait: entering and leaving a cancel scope cost ~3.7 us,
   on every wait of every message (issue 28).

Cancellation never loses or duplicates a message: a message is taken off
the socket only by a call that then returns it, and a send either happens
(and the call returns normally) or does not (and the call raises).

Corking: libzmq wakes its I/O thread with a syscall whenever a message lands
in an empty pipe, and a Python sender is slow enough that the pipe is empty
before every message.  So on a socket made with ``cork=True`` (the node's
DEALERs), the first :meth:`ZSocket.send_nowait` of a turn of the run loop
goes to libzmq at once, and the socket's later ones in the same turn are
held (at most ``_CORK_MAX``) until a per-run flusher task, scheduled by
the second, hands them over in one batch: the turn ends when the tasks
running in it have yielded (turns are counted by an instrument,
``_Turns``, so that a turn of one send costs no flusher step).  One wake-up per turn instead of per
message, whether one task floods or many tasks send one message each, and
however long the tasks take between sends.  A socket whose last turn sent
more than one message holds the first of the next turn too, until a turn
sends only one: a burst then costs one wake-up, not one for its first
message and one for the rest.  Isolated sends (a round trip) never wait
for the flusher.  Corked messages count as sent: they go out in order
before any later message, or are dropped by ``close`` as libzmq's own
queue is (LINGER 0).

Busy-polling (issue 28, opt-in: ``busy_poll`` seconds, default 0 = off):
parking the run in ``epoll_wait`` and being woken by libzmq's I/O thread
costs a thread wake-up on every message of a round trip.  A socket with
``busy_poll`` set, on finding nothing to receive *right after* it received
something, first waits (up to ``busy_poll``) for the run to have nothing
else to do (``wait_all_tasks_blocked``: the application's reply is sent
first), then spins, without a checkpoint, reading ``EVENTS`` for up to
``busy_poll`` before it parks as usual.  The spin gives the CPU away
(``sched_yield``) between reads, as the kernel's own busy poll does: on a
machine with few cores the thread that brings the message (libzmq's I/O
thread) may need the very CPU the spin holds.  Only after a message: an idle
socket never spins.  One spin per run at a time polls every socket that
waits to spin, so the run is held for at most one ``busy_poll`` per idle
moment however many sockets busy-poll; timers and other descriptors wait
at most that long.  ``EVENTS``, not a non-blocking ``recv``: libzmq
throttles a ``recv``'s look at its command mailbox (up to ~1 ms), so only
``EVENTS`` sees a message that arrived a microsecond ago.
"""

from __future__ import annotations

import errno
import logging
import math
import os
import resource
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path
from time import perf_counter
from typing import Any, Final, cast, final

import trio
import zmq

from ..wire import OVERSIZE

__all__ = ["BUSY_POLL_MAX", "SOURCES_MAX", "ZSocket", "check_busy_poll", "context"]

logger = logging.getLogger("trizre.zsock")

# Plain ints, not pyzmq's enums: an enum flag costs ~1 us an operation
# (``&``, or a send's flags), and these are on every message's path.
_POLLIN: Final = int(zmq.POLLIN)
_POLLOUT: Final = int(zmq.POLLOUT)
_NOBLOCK: Final = int(zmq.NOBLOCK)
_SNDMORE_NOBLOCK: Final = int(zmq.SNDMORE | zmq.NOBLOCK)
_EVENTS: Final = int(zmq.EVENTS)
_backend_recv: Final = zmq.backend.Socket.recv
_SRCFD: Final = int(zmq.SRCFD)
_EVENT_ALL: Final = int(zmq.EVENT_ALL)

SOURCES_MAX: Final = 4096
"""Most connections :meth:`ZSocket.note_sources` remembers before it forgets them all."""
_EAGAIN: Final = errno.EAGAIN


def _zread_built() -> bool:
    """Whether the compiled read's module file is beside this one (loaded or not)."""
    return any(Path(__file__).with_name(f"_zread{end}").exists() for end in EXTENSION_SUFFIXES)


# The inbox read and the sends compiled (scripts/build_ext.py), unless it is
# not built or TRIZRE_PURE_PYTHON is set; the pure-Python loops do the same.
_zread: Any = None
_pure_why = "TRIZRE_PURE_PYTHON is set"
if not os.environ.get("TRIZRE_PURE_PYTHON"):
    try:
        from . import _zread  # type: ignore[attr-defined,no-redef]
    except ImportError as exc:
        _pure_why = (
            f"built, but it did not load: {exc}"
            if _zread_built()
            else "not built: run make, or scripts/build_ext.py; see the README"
        )


def inbox_read() -> tuple[str, str]:
    """Which read :meth:`ZSocket.receive_batch` uses in this process, and why.

    The sends go the same way: compiled with the compiled read, else pyzmq.

    ``("compiled", path of the module)`` or ``("python", the reason)``:
    ``TRIZRE_PURE_PYTHON`` was set, or the module is not built, or it would
    not load (its ``ImportError``).  Fixed at import: for ``trizre version
    --verbose`` and the ``trizre_node_info`` metric, what an operator asks
    first when a node is slower than its twin.
    """
    if _zread is not None:
        return "compiled", str(_zread.__file__)
    return "python", _pure_why


def untrack_events(events: Iterable[object], kinds: tuple[type, ...]) -> None:
    """Untrack received events from the cyclic GC, with the compiled read; else nothing.

    Each event of ``events`` whose type is one of ``kinds`` and whose
    ``frames`` is a tuple of ``bytes`` is untracked, with that tuple: the
    caller vouches that such an event holds no other container (Whisper
    and Shout), so it can never be in a reference cycle.  Values and
    lifetimes are unchanged; what changes is that a collection no longer
    traverses and promotes every event still queued (see ``_zread.pyx``).
    Other items are left as they are; never raises for them.
    """
    if _zread is not None:
        _zread.untrack_events(events, kinds)


def _zmq_error(error: int) -> zmq.ZMQError:
    """What pyzmq's own read or send raises for libzmq's ``error`` (an errno)."""
    if error == zmq.ETERM:
        return zmq.ContextTerminated(error)
    return zmq.ZMQError(error)


# Typed as what it returns for EVENTS, the only option read on the hot
# path: typing.cast is a call at run time, ~80 ns, three a message.
_backend_get: Final[Callable[[zmq.Socket[Any], int], int]] = zmq.backend.Socket.get  # type: ignore[assignment]
_backend_send: Final = zmq.backend.Socket.send
# The spin's clock and its yield: module globals, so that a test can make
# the spin a fixed number of reads whatever the machine's load.
_spin_clock = perf_counter
_sched_yield = os.sched_yield
_CORK_MAX: Final = 64  # held messages per socket; beyond that the sender flushes

BUSY_POLL_MAX: Final = 0.001
"""The longest ``busy_poll`` (seconds): a spin holds the whole run, so 1 ms at most."""


def check_busy_poll(value: object) -> float:
    """``value`` as a ``busy_poll``: seconds, 0 (off) to :data:`BUSY_POLL_MAX`.

    Bad input: a non-number (``bool`` included) raises ``TypeError``; a
    negative, non-finite or too large one raises ``ValueError``.
    """
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"busy_poll must be a number of seconds, got {value!r}")
    if not (math.isfinite(value) and 0 <= value <= BUSY_POLL_MAX):
        raise ValueError(
            f"busy_poll must be 0 (off) to {BUSY_POLL_MAX} seconds (1 ms), got {value!r}"
        )
    return float(value)


_context: zmq.Context[Any] | None = None


def context() -> zmq.Context[Any]:
    """The zmq context shared by every trizre socket in this process.

    One context (and so one set of libzmq I/O threads) serves any number of
    nodes, which keeps many nodes per process cheap.
    """
    global _context
    if _context is None or _context.closed:
        ctx: zmq.Context[Any] = zmq.Context()
        # libzmq's default of 1023 sockets is too few for many nodes in one
        # process (a full mesh of n nodes holds n*(n-1) DEALERs); let the
        # process's file descriptor limit be the only limit.
        soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        ceiling = ctx.get(zmq.SOCKET_LIMIT)
        limit = ceiling if soft == resource.RLIM_INFINITY else min(soft, ceiling)
        ctx.set(zmq.MAX_SOCKETS, max(1024, limit))
        _context = ctx
    return _context


@final
class ZSocket:
    """A pyzmq socket driven by Trio.

    Wraps a *non-blocking* use of an existing ``zmq.Socket`` and takes
    ownership of it: :meth:`close` closes it with ``LINGER 0``.  Any number
    of tasks may call any method concurrently; they never steal each other's
    wake-ups.

    Errors: every method raises :class:`trio.ClosedResourceError` once the
    socket is closed (also a task that was waiting when it was closed);
    other ``zmq.ZMQError`` from libzmq propagate unchanged.

    ``cork=True`` lets :meth:`send_nowait` hold the messages after the
    first of a turn of the run loop (and the first too, after a turn that
    sent several) for one hand-over to libzmq when the turn ends (see the
    module docstring); then up to ``_CORK_MAX`` messages beyond the high
    water mark count as sent, and frames are copied into a tuple when held.

    ``busy_poll`` (seconds, 0 = off, at most :data:`BUSY_POLL_MAX`; may be
    set later, between calls) makes :meth:`receive_batch` busy-poll after
    a message (see the module docstring): lower latency for a round trip,
    paid in CPU (up to ``busy_poll`` of a core after each message that is
    not followed by another within it).  ``busy_polls`` counts the polls
    begun, ``busy_poll_hits`` those that found a message without parking.
    """

    __slots__ = (
        "__weakref__",
        "_bursts",
        "_busy_poll",
        "_closed",
        "_cork",
        "_corks",
        "_draining",
        "_early",
        "_fd",
        "_fd_owned",
        "_handle",
        "_interrupted",
        "_lone",
        "_lot",
        "_max_size",
        "_poll_armed",
        "_router",
        "_sent_this_turn",
        "_source_prefix",
        "_sources",
        "_tag_user_id",
        "_turn",
        "_turns_seen",
        "_unready",
        "_want",
        "_zsock",
        "busy_poll_hits",
        "busy_polls",
        "received_bytes",
        "received_messages",
    )

    def __init__(
        self,
        zsock: zmq.Socket[Any],
        *,
        cork: bool = False,
        tag_user_id: bool = False,
        max_message_size: int = -1,
        busy_poll: float = 0.0,
    ) -> None:
        """Wrap ``zsock`` (LINGER set to 0).

        ``tag_user_id``, for a ROUTER whose clients all authenticated through
        ZAP: prefix each message's identity frame with the message's
        ``User-Id`` property (what the ZAP handler answered for the
        connection it came on), so the reader knows who sent it.

        ``max_message_size`` (-1: none), for a ROUTER: a message whose
        frames after the identity total more octets is not copied out of
        libzmq; :meth:`receive_batch` gives it as ``[identity, OVERSIZE]``
        (:data:`trizre.wire.OVERSIZE`; libzmq's own ``MAXMSGSIZE`` is per
        frame).

        ``busy_poll``: see the class docstring; bad input raises as
        :func:`check_busy_poll` does.
        """
        busy_poll = check_busy_poll(busy_poll)  # before anything is changed
        zsock.setsockopt(zmq.LINGER, 0)
        self._zsock = zsock
        self._fd = cast(int, zsock.getsockopt(zmq.FD))
        self._closed = False
        # Who waits for what: counts per zmq event bit, so that after an
        # operation we know whether anybody could be waiting for the events.
        self._want: dict[int, int] = {_POLLIN: 0, _POLLOUT: 0}
        self._fd_owned = False  # a task waits on the descriptor (Rule 3)
        self._interrupted = False  # see interrupt()
        self._lot = trio.lowlevel.ParkingLot()
        self._cork: deque[Sequence[bytes]] | None = None  # held by send_nowait
        self._draining = False  # a task waits for room to hand the cork over
        self._corks = cork  # see "Corking" above
        self._sent_this_turn = False  # messages are held: the flusher is due
        self._turn = -1  # the run loop's turn (_Turns) in which a send last went out at once
        self._bursts = False  # its last turn sent more than one: hold the first too
        self._turns_seen: _Turns | None = None  # the run's turn counter, once a send needed it
        self._router = zsock.type == zmq.ROUTER
        self._handle: int = zsock.underlying  # libzmq's socket, for _zread
        self._tag_user_id = tag_user_id and self._router
        self._max_size = max_message_size if max_message_size >= 0 else 2**63
        # What receive_batch took off the socket since it opened (a node's
        # statistics): messages, and a ROUTER's octets after the identity.
        self.received_messages = 0
        self.received_bytes = 0
        self._busy_poll = busy_poll
        self._poll_armed = False  # a message was just received: poll before parking
        # The last zmq call on this socket was receive_batch's EVENTS, which
        # said not readable: Rule 1 is served for the next wait (see there).
        self._unready = False
        # See receive_batch: the last wake-up brought one message alone (a
        # round trip's traffic), and the last call returned its wake-up's
        # first message without asking whether more came.
        self._lone = False
        self._early = False
        self.busy_polls = 0
        self.busy_poll_hits = 0
        self._sources: dict[bytes, int] | None = None  # see note_sources
        self._source_prefix = b""

    @property
    def busy_poll(self) -> float:
        """Seconds :meth:`receive_batch` busy-polls after a message; 0: off."""
        return self._busy_poll

    @busy_poll.setter
    def busy_poll(self, value: float) -> None:
        self._busy_poll = check_busy_poll(value)

    @property
    def zmq_socket(self) -> zmq.Socket[Any]:
        """The wrapped socket, for options and bind/connect (not for I/O)."""
        self._unready = False  # any call on it may take the descriptor's signal
        return self._zsock

    @property
    def closed(self) -> bool:
        """True once :meth:`close` has been called."""
        return self._closed

    def note_sources(self, prefix: bytes) -> dict[bytes, int]:
        """Note which connection each ROUTER message starting with ``prefix`` came on.

        From now on, :meth:`receive_batch` sets ``sources[identity]`` to
        the file descriptor of the connection (libzmq's ``ZMQ_SRCFD``) of
        each message whose first frame after the identity starts with
        ``prefix``; ``sources`` is the dict returned, which the caller
        empties as it uses it.  Kept at most :data:`SOURCES_MAX` entries:
        a batch finding it fuller clears it first, so a flood of such
        messages nobody takes costs bounded memory.  Only the first call's
        ``prefix`` counts; later calls return the same dict.  Raises
        ``ValueError`` on a socket that is not a ROUTER.
        """
        if not self._router:
            raise ValueError("only a ROUTER's messages have sources to note")
        if self._sources is None:
            self._sources = {}
            self._source_prefix = bytes(prefix)
        return self._sources

    # ------------------------------------------------------------ receive

    async def receive(self) -> list[bytes]:
        """Wait for and return one multipart message.

        Cancellation: if cancelled, no message was taken off the socket.
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        while True:
            self._check_open()
            self._unready = False
            try:
                frames: list[bytes] = self._zsock.recv_multipart(_NOBLOCK)
            except zmq.Again:
                frames = []  # no message has no frames
            self._after_op()
            if frames:
                await trio.lowlevel.cancel_shielded_checkpoint()
                return frames
            # Waited for outside the except clause: inside it, the Again and
            # its traceback would live as long as the wait, ~2 kB held by
            # every idle socket (a link's monitor waits for its lifetime).
            await self._wait(_POLLIN)

    async def receive_batch(
        self, max_messages: int = 256, *, checked: bool = False
    ) -> list[list[bytes]]:
        """Wait until a message is ready, then return every ready message.

        Returns between 1 and ``max_messages`` multipart messages in arrival
        order, taken off the socket without yielding in between: one
        scheduling round per batch instead of per message is what lets a
        Trio inbox keep up with libzmq.  One exception, for latency: when
        the socket's last wake-up brought a lone message, a call woken by
        the next returns that message at once, and the following call takes
        whatever came with it (without a schedule point of its own).

        A ROUTER's message whose frames after the identity total more
        than ``max_message_size`` octets is taken off the socket without
        being copied and returned as ``[identity, OVERSIZE]``.

        With ``busy_poll`` set, a call that finds nothing ready right after
        the previous call returned messages polls before it parks (see the
        class docstring); cancellation and errors are as without it.

        It returns an empty list only when :meth:`interrupt` ended its wait.

        Cancellation: if cancelled, no message was taken off the socket.
        ``checked=True`` skips the cancellation check on entry, for a caller
        that made it with no schedule point since (each costs a coroutine).
        Bad input: ``max_messages < 1`` raises ``ValueError``.
        """
        if max_messages < 1:
            raise ValueError(f"max_messages must be at least 1, got {max_messages}")
        if not checked:
            await trio.lowlevel.checkpoint_if_cancelled()
        self._interrupted = False  # meant for a wait, and this call has not waited yet
        zsock = self._zsock
        # pyzmq's recv_multipart, minus its per-call option conversions:
        # this loop runs for every message an inbox receives.
        recv, get = _backend_recv, _backend_get
        router = self._router
        tag = self._tag_user_id
        limit = self._max_size
        sources, prefix = self._sources, self._source_prefix
        if sources is not None and len(sources) > SOURCES_MAX:
            sources.clear()
        # After a call that returned its wake-up's message early, this one
        # finishes that batch: the wait was the schedule point of both.
        waited = early = self._early
        self._early = False
        woken = False  # the descriptor just woke this call: a message is likely
        while True:
            if self._closed:
                self._check_open()  # raises
            batch: list[list[bytes]] = []
            octets = 0  # a ROUTER's, counted from the sizes read anyway
            # Ask EVENTS rather than let recv raise Again (pyzmq builds that
            # exception in Python): before the first message, and after it,
            # which is where a round trip's one-message batch ends.  In a
            # flood the batch runs on until Again or max_messages.  Not
            # asked (each EVENTS is a Python enum and libzmq's poll and
            # getpid syscalls, issue 28) when the answer is known: right
            # after the descriptor woke us, a message is all but certain
            # (a wrong guess costs one Again, then EVENTS is asked); and
            # when the previous call's last EVENTS said not readable with
            # no zmq call on this socket since, the descriptor will signal
            # the next message, as Rule 1 needs.
            if woken:
                events = _POLLIN
            elif self._unready:
                events = 0
            else:
                events = get(zsock, _EVENTS)
                if early:
                    early = False
                    self._lone = not events & _POLLIN  # more came with the last wake-up?
            self._unready = False
            if events & _POLLIN and _zread is not None and not tag:
                # The same read, compiled (_zread.pyx): it ends as this
                # loop does, at max_messages, after a lone wake-up's
                # message, or when EVENTS says nothing more is ready.
                first_only = woken and self._lone
                added, error = _zread.read(
                    self._handle,
                    batch,
                    1 if first_only else max_messages,
                    router,
                    limit,
                    OVERSIZE,
                    sources,
                    prefix,
                )
                octets += added
                if error == _EAGAIN:
                    self._unready = True
                    self._lone = woken and len(batch) == 1
                elif error:
                    raise _zmq_error(error)
                elif first_only:
                    self._early = True
                elif len(batch) > 1:
                    self._lone = False
            elif events & _POLLIN:
                try:
                    while True:
                        # A zmq.Frame's ``more`` is read in C; getsockopt
                        # (RCVMORE) builds a Python enum on every call.  A
                        # ROUTER's first frame is the sender's identity,
                        # never the last: it needs no Frame.
                        if router:
                            frames = [recv(zsock, _NOBLOCK)]
                            frame = recv(zsock, _NOBLOCK, False)
                            size = len(frame)
                            if size <= limit:
                                frames.append(frame.bytes)
                            if tag:
                                frames[0] = cast(str, frame.get("User-Id")).encode() + frames[0]
                            if (
                                sources is not None
                                and size <= limit
                                and frames[1].startswith(prefix)
                            ):
                                sources[frames[0]] = frame.get(_SRCFD)
                            # The total is checked before each copy: an
                            # oversize message costs libzmq's memory only.
                            while frame.more:
                                frame = recv(zsock, _NOBLOCK, False)
                                size += len(frame)
                                if size <= limit:
                                    frames.append(frame.bytes)
                            if size > limit:
                                frames[1:] = (OVERSIZE,)
                            octets += size
                        else:
                            frame = recv(zsock, _NOBLOCK, False)
                            frames = [frame.bytes]
                            while frame.more:
                                frame = recv(zsock, _NOBLOCK, False)
                                frames.append(frame.bytes)
                        batch.append(frames)
                        if len(batch) >= max_messages:
                            break
                        if len(batch) == 1:
                            # A round trip's reply: the caller answers it
                            # before the next call asks EVENTS (~3 us of
                            # pyzmq and syscalls) off the critical path.
                            if woken and self._lone:
                                self._early = True
                                break
                            if not get(zsock, _EVENTS) & _POLLIN:
                                self._unready = True  # unless a call follows (below)
                                self._lone = woken
                                break
                            self._lone = False
                except zmq.Again:
                    pass
            if woken and not batch:
                woken = False  # a wake-up without a message: ask EVENTS afresh
                continue
            woken = False
            if batch:
                self.received_messages += len(batch)
                self.received_bytes += octets
                if self._busy_poll:
                    self._poll_armed = True
                if self._want[_POLLIN] or self._want[_POLLOUT]:
                    self._unready = False  # _after_op asks EVENTS
                    self._after_op()
                # Waiting was this call's schedule point; a second one would
                # cost a trip through the run queue on every wake-up, which
                # is what a round trip is made of.
                if not waited:
                    await trio.lowlevel.cancel_shielded_checkpoint()
                return batch
            if self._interrupted:
                self._interrupted = False
                return batch  # empty: see interrupt()
            if self._poll_armed:
                # Once per message: a miss parks below, a hit re-arms.
                self._poll_armed = False
                await self._busy_poll_once()
                waited = True
                continue  # EVENTS afresh: the spin's, and any call since, are stale
            if self._want[_POLLIN] or self._want[_POLLOUT]:
                self._after_op()
                await self._wait(_POLLIN)
            else:
                # Nothing taken and nobody else waiting: the EVENTS just read
                # (or known) serves Rule 1 (a second read costs libzmq a
                # poll() syscall).  A recv ran since only if it said POLLIN:
                # _wait then retries.
                await self._wait(_POLLIN, events)
            waited = True
            woken = not self._interrupted

    async def _busy_poll_once(self) -> None:
        """Wait for the run to be idle, then spin on ``EVENTS`` until a message or the budget.

        Each phase lasts at most ``busy_poll``.  The wait is a schedule
        point (Cancelled propagates, nothing taken); the spin has no
        checkpoint and ends at the first ``POLLIN`` of any socket waiting
        to spin (the run's other spinners are in the same batch and look
        for themselves), so it holds the run at most ``busy_poll``.
        """
        budget = self._busy_poll
        if not budget:
            return
        self.busy_polls += 1
        spinner = _spinner()
        generation = spinner.generation
        spinner.waiting[self] = None
        try:
            with trio.move_on_after(budget) as idle_wait:
                await _all_tasks_blocked()
        finally:
            # pop: two tasks receiving on one socket may both be polling.
            spinner.waiting.pop(self, None)
        self._check_open()
        self._unready = False
        get = _backend_get
        if get(self._zsock, _EVENTS) & _POLLIN:
            self.busy_poll_hits += 1
            return
        if idle_wait.cancelled_caught or spinner.generation != generation:
            return  # the run stayed busy, or another socket's spin polled ours
        spinner.generation += 1
        others = [sock._zsock for sock in spinner.waiting if not sock._closed]
        for sock in spinner.waiting:
            sock._unready = False  # the spin asks their EVENTS too
        mine = self._zsock
        clock = _spin_clock
        until = clock() + budget
        while clock() < until and not self._interrupted:
            if get(mine, _EVENTS) & _POLLIN:
                self.busy_poll_hits += 1
                return
            for zsock in others:
                if get(zsock, _EVENTS) & _POLLIN:
                    return  # its task runs next and takes it; we park
            # As the kernel's busy poll (cond_resched): a thread that is
            # ready on this CPU runs first, libzmq's I/O thread bringing
            # the message above all; alone, it is a ~1 µs syscall.
            _sched_yield()

    def interrupt(self) -> None:
        """End the wait of a task in :meth:`receive_batch`: it returns what is ready, maybe nothing.

        For a socket that only :meth:`receive_batch` reads (a node's
        inbox): a task that waits there for something else as well (its
        events, which another task may queue) is woken by it.  Nothing is
        lost: what arrives later is read by the next call.  Does nothing
        when no task is in :meth:`receive_batch`, or once the socket is
        closed.  A task busy-polling (``busy_poll``) sees it when its poll
        ends, at most two ``busy_poll`` later.  Never blocks.
        """
        if self._closed:
            return
        # Set even with nobody parked: a task busy-polling looks before it
        # parks; receive_batch clears it on entry, so a stale one is dropped.
        self._interrupted = True
        if self._want[_POLLIN]:
            self._wake_waiters()

    def connect(self, endpoint: str) -> None:
        """Connect to ``endpoint``; raises ``zmq.ZMQError`` as pyzmq's ``connect`` does.

        Through the wrapper, not the bare socket: the call processes the
        socket's pending commands, which may make a waiting reader's
        message ready without its descriptor signalling again (Rule 2).
        """
        self._check_open()
        try:
            self._zsock.connect(endpoint)
        finally:
            self._after_op()

    def monitor(self, address: str | None, events: int = _EVENT_ALL) -> None:
        """Start libzmq's monitor of this socket, sending ``events`` to ``address``; or stop it.

        ``events`` defaults to every event, as pyzmq's ``monitor``;
        ``address=None`` stops it.  Raises ``zmq.ZMQError`` as pyzmq's
        ``monitor`` does (out of sockets, a bad address).  Rule 2 is kept
        after the call, as after any zmq call on the socket (libzmq 4.3's
        monitor processes no commands, but nothing here relies on that).
        """
        self._check_open()
        try:
            if address is None:
                self._zsock.disable_monitor()
            else:
                self._zsock.monitor(address, events)
        finally:
            self._after_op()

    def receive_nowait(self) -> list[bytes] | None:
        """Return one ready message, or ``None`` if none is ready now."""
        self._check_open()
        self._unready = False
        try:
            frames: list[bytes] = self._zsock.recv_multipart(_NOBLOCK)
        except zmq.Again:
            return None
        finally:
            self._after_op()
        return frames

    # --------------------------------------------------------------- send

    def send_nowait(self, frames: Sequence[bytes]) -> bool:
        """Queue one multipart message if there is room now.

        Returns ``False`` (and sends nothing) when the socket is at its high
        water mark, or has no peer to send to.  Bad input: an empty
        ``frames`` raises ``ValueError``.
        """
        if self._closed:
            self._check_open()  # raises
        cork = self._cork
        if cork:
            if self._draining:
                return False  # libzmq is full and the held ones go first
            if len(cork) >= _CORK_MAX:
                self._flush_cork()
                if cork:
                    return False
            # _hold, inline: a fan-out holds nearly every message it sends.
            if not frames:
                raise ValueError("a zmq message needs at least one frame")
            cork.append(tuple(frames))
            return True
        if self._sent_this_turn:
            self._hold(frames)  # the flusher, due already, hands it over
            return True
        # _after_op only when a task waits on this socket: a link's sends
        # (a round trip's) have nobody waiting, and each call costs.
        want = self._want
        if not self._corks:
            sent = self._send(frames)
            if want[_POLLIN] or want[_POLLOUT]:
                self._after_op()
            return sent
        turns = self._turns_seen
        if turns is None:
            # Looked up once: a RunVar lookup on every send costs ~0.3 us,
            # and a socket's sends all happen in the run that opened it.
            turns = self._turns_seen = _turns()
        turn = turns.count
        if self._bursts or self._turn == turn:
            # After a burst, or a second message this turn: held for the flusher.
            self._hold(frames)
            self._sent_this_turn = True
            _flusher().schedule(self)
            return True
        sent = self._send(frames)
        if want[_POLLIN] or want[_POLLOUT]:
            self._after_op()
        if sent:
            # Remembered, not scheduled: a turn that sends one message
            # costs no flusher step (a round trip's send is such a turn).
            self._turn = turn
        return sent

    def _hold(self, frames: Sequence[bytes]) -> None:
        if not frames:
            raise ValueError("a zmq message needs at least one frame")
        if self._cork is None:
            self._cork = deque()
        self._cork.append(tuple(frames))

    def _flush_cork(self) -> None:
        """Hand held messages to libzmq, in order, while it takes them."""
        cork = self._cork
        if not cork or self._closed:
            return
        self._unready = False
        if _zread is not None:
            # The same loop, compiled (_zread.pyx): ~1.4 us less a message.
            error = _zread.write(self._handle, cork)
            if error and error != _EAGAIN:
                raise _zmq_error(error)
            self._after_op()
            return
        # _send, inline: this loop hands over nearly every message a flood
        # or a fan-out sends (held messages are never empty: see _hold).
        zsock, zsend = self._zsock, _backend_send
        more, last_flags = _SNDMORE_NOBLOCK, _NOBLOCK
        while cork:
            frames = cork[0]
            last = len(frames) - 1
            try:
                zsend(zsock, frames[0], more if last else last_flags)
            except zmq.Again:
                break
            for i in range(1, last):
                zsend(zsock, frames[i], more)
            if last:
                zsend(zsock, frames[last], last_flags)
            cork.popleft()
        self._after_op()

    async def _drain(self) -> None:
        """Wait for room until every held message went out (a flusher's helper)."""
        try:
            while self._cork and not self._closed:
                await self._wait(_POLLOUT)
                self._flush_cork()
        except trio.ClosedResourceError:
            pass  # closed: held messages are dropped as libzmq's are
        except Exception:
            logger.exception("held messages could not be sent; dropped")  # see _Flusher.run
            self._cork = None
        finally:
            self._draining = False

    async def _room_after_cork(self) -> None:
        """Hand over held messages first, waiting for room as needed."""
        while self._cork:
            self._check_open()
            self._flush_cork()
            if self._cork:
                await self._wait(_POLLOUT)

    async def send(self, frames: Sequence[bytes]) -> None:
        """Queue one multipart message, waiting while the socket is full.

        This is backpressure: a slow peer slows the sender rather than
        losing messages.  Cancellation: if cancelled, nothing was sent;
        if the call returns, the message was queued exactly once.
        Bad input: an empty ``frames`` raises ``ValueError``.
        """
        if not frames:
            raise ValueError("a zmq message needs at least one frame")
        await trio.lowlevel.checkpoint_if_cancelled()
        await self._room_after_cork()
        while True:
            self._check_open()
            sent = self._send(frames)
            self._after_op()
            if sent:
                await trio.lowlevel.cancel_shielded_checkpoint()
                return
            await self._wait(_POLLOUT)

    async def send_some(self, messages: Sequence[Sequence[bytes]]) -> int:
        """Wait until there is room, then queue as many messages as fit now.

        Returns how many of ``messages`` (a prefix, at least one) were
        queued; the caller sends the rest with another call.  The mirror of
        :meth:`receive_batch`: one scheduling round for many messages,
        which is what a sender that floods a peer needs to keep up with
        libzmq.

        Cancellation: if cancelled, nothing was sent.  Bad input: an empty
        ``messages`` or an empty message raises ``ValueError`` before
        anything is sent.
        """
        if not messages or not all(messages):
            raise ValueError("send_some needs at least one message, each of at least one frame")
        await trio.lowlevel.checkpoint_if_cancelled()
        await self._room_after_cork()
        while True:
            self._check_open()
            count = 0
            for frames in messages:
                if not self._send(frames):
                    break
                count += 1
            self._after_op()
            if count:
                await trio.lowlevel.cancel_shielded_checkpoint()
                return count
            await self._wait(_POLLOUT)

    def _send(self, frames: Sequence[bytes]) -> bool:
        self._unready = False
        if _zread is not None:
            error = _zread.send(self._handle, frames)  # compiled, as _flush_cork's
            if not error:
                return True
            if error == _EAGAIN:
                return False
            raise _zmq_error(error)
        if not frames:
            raise ValueError("a zmq message needs at least one frame")
        zsock, zsend = self._zsock, _backend_send  # skip pyzmq's Python wrapper
        last = len(frames) - 1
        # Only the first frame can meet the high water mark: libzmq counts
        # whole messages, so once it is accepted the rest always follow.
        try:
            zsend(zsock, frames[0], _SNDMORE_NOBLOCK if last else _NOBLOCK)
        except zmq.Again:
            return False
        for i in range(1, last + 1):
            zsend(zsock, frames[i], _SNDMORE_NOBLOCK if i < last else _NOBLOCK)
        return True

    # ---------------------------------------------------- waiting and waking

    async def _wait(self, event: int, events: int | None = None) -> None:
        """Return once ``event`` may hold; the caller retries its operation.

        ``events``: ``EVENTS`` as the caller read it, with no zmq call on
        this socket since; else it is read here (Rule 1).
        """
        self._unready = False
        if events is None:
            events = _backend_get(self._zsock, _EVENTS)
        if events & event:
            # Rule 1: it already holds, the descriptor would not tell us.
            await trio.lowlevel.checkpoint()
            return
        self._want[event] += 1
        try:
            if self._fd_owned:
                # Somebody else owns the descriptor: they wake us when it fires.
                await self._lot.park()
            else:
                # No cancel scope around the wait (issue 28: entering and
                # leaving one cost ~3.7 us, on every wait of a round trip):
                # _wake_waiters ends it with notify_closing instead, which
                # wakes it with ClosedResourceError and leaves the
                # descriptor open (Trio registers it anew at the next wait).
                self._fd_owned = True
                try:
                    await trio.lowlevel.wait_readable(self._fd)
                except trio.ClosedResourceError:
                    if self._closed:
                        raise
                    # A wake-up (see _wake_waiters): the caller looks again.
                finally:
                    self._fd_owned = False
                    # Those parked on the lot are counted in _want beside us:
                    # asked so, not through the lot's __bool__ or an empty
                    # lot's unpark_all (~0.5 us), both Python calls.
                    if self._want[_POLLIN] + self._want[_POLLOUT] > 1:
                        self._lot.unpark_all()
        except trio.ClosedResourceError:
            raise trio.ClosedResourceError("the zmq socket was closed") from None
        finally:
            self._want[event] -= 1
        if self._closed:
            self._check_open()  # raises

    def _after_op(self) -> None:
        """Rule 2: after any zmq call, wake waiters whose event now holds."""
        want = self._want
        if not (want[_POLLIN] or want[_POLLOUT]) or self._closed:
            return
        self._unready = False
        events = _backend_get(self._zsock, _EVENTS)
        if (events & _POLLIN and want[_POLLIN]) or (events & _POLLOUT and want[_POLLOUT]):
            self._wake_waiters()

    def _wake_waiters(self) -> None:
        if self._fd_owned:
            # Ends the owner's wait_readable with ClosedResourceError, which
            # _wait takes for a wake-up while the socket is open.
            trio.lowlevel.notify_closing(self._fd)
        if self._lot:
            self._lot.unpark_all()

    # -------------------------------------------------------------- close

    def _check_open(self) -> None:
        if self._closed:
            raise trio.ClosedResourceError("the zmq socket was closed")

    def close(self, linger_ms: int = 0) -> None:
        """Close the socket, waking every waiting task.

        Waiting tasks raise :class:`trio.ClosedResourceError`; so does any
        later call.  With ``linger_ms`` 0 (the default) messages still
        queued for sending are dropped, which is what a node that is
        leaving wants; otherwise libzmq goes on sending them in the
        background for up to that long (closing never waits).  Idempotent.
        """
        if self._closed:
            return
        if linger_ms > 0 and self._cork:
            self._flush_cork()
        self._closed = True
        self._cork = None
        # Wake the descriptor's owner before libzmq closes the descriptor.
        trio.lowlevel.notify_closing(self._fd)
        self._lot.unpark_all()
        self._zsock.close(linger=linger_ms)

    async def aclose(self) -> None:
        """Close the socket (see :meth:`close`); a checkpoint, never blocks."""
        self.close()
        await trio.lowlevel.checkpoint()

    async def __aenter__(self) -> ZSocket:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


# ------------------------------------------------------------- the flusher

_FLUSHER: Final[trio.lowlevel.RunVar[_Flusher]] = trio.lowlevel.RunVar("trizre_zsock_flusher")


@final
class _Flusher:
    """One system task per Trio run that hands corked messages to libzmq.

    It is woken when a socket starts holding messages and runs as soon as
    the sending task yields.  A socket that libzmq will not take all of
    gets a draining task that waits for room, so one full peer never holds
    up the others.
    """

    def __init__(self) -> None:
        self._dirty: list[ZSocket] = []
        self._lot = trio.lowlevel.ParkingLot()

    def schedule(self, sock: ZSocket) -> None:
        self._dirty.append(sock)
        if self._lot:
            self._lot.unpark()

    async def run(self) -> None:
        while True:
            while not self._dirty:
                await self._lot.park()
            dirty, self._dirty = self._dirty, []
            for sock in dirty:
                sock._sent_this_turn = False  # its next send opens a new turn
                # A turn that sent more than one makes the next one hold its
                # first message too, until a turn sends only one.
                sent = len(sock._cork) if sock._cork else 0
                if not sock._bursts:
                    sent += 1  # its first went out at once
                sock._bursts = sent > 1
                try:
                    sock._flush_cork()
                except Exception:
                    # A system task must not raise (it would end the run);
                    # libzmq refusing a held message is a bug worth a log.
                    logger.exception("held messages could not be sent; dropped")
                    sock._cork = None
                if sock._cork and not sock._draining and not sock._closed:
                    sock._draining = True
                    trio.lowlevel.spawn_system_task(sock._drain)


# ------------------------------------------------------------- the spinner

_SPINNER: Final[trio.lowlevel.RunVar[_Spinner]] = trio.lowlevel.RunVar("trizre_zsock_spinner")


@final
class _Spinner:
    """Per Trio run: the sockets waiting to busy-poll, and a count of spins.

    The idle run wakes all of them in one batch; the first to run spins for
    all (polling each one's ``EVENTS``), the others see ``generation`` moved
    on and do not spin again: the run is held once per idle moment.
    """

    def __init__(self) -> None:
        self.generation = 0
        self.waiting: dict[ZSocket, None] = {}  # in order of arrival


async def _all_tasks_blocked() -> None:
    """``trio.testing.wait_all_tasks_blocked``, imported on the first busy poll.

    ``trio.testing`` loads pytest's modules when pytest is installed (about
    10 MB of RSS a process): a node without ``busy_poll`` must not pay that.
    """
    from trio.testing import wait_all_tasks_blocked  # noqa: PLC0415

    await wait_all_tasks_blocked()


def _spinner() -> _Spinner:
    try:
        return _SPINNER.get()
    except LookupError:
        spinner = _Spinner()
        _SPINNER.set(spinner)
        return spinner


_TURNS: Final[trio.lowlevel.RunVar[_Turns]] = trio.lowlevel.RunVar("trizre_zsock_turns")


@final
class _Turns(trio.abc.Instrument):
    """Counts the turns of the run loop (one a wait for I/O, then a batch of task steps).

    A corked socket compares its last immediate send's turn with the
    current one: a second send in the same turn is held for the flusher,
    and a turn of one send needs no flusher at all.  An instrument hook
    a turn (~1 µs) instead of a flusher step a send.
    """

    __slots__ = ("count",)

    def __init__(self) -> None:
        self.count = 0

    def after_io_wait(self, timeout: float) -> None:
        self.count += 1


def _turns() -> _Turns:
    try:
        return _TURNS.get()
    except LookupError:
        turns = _Turns()
        _TURNS.set(turns)
        trio.lowlevel.add_instrument(turns)
        return turns


def _flusher() -> _Flusher:
    try:
        return _FLUSHER.get()
    except LookupError:
        flusher = _Flusher()
        _FLUSHER.set(flusher)
        trio.lowlevel.spawn_system_task(flusher.run)
        return flusher
