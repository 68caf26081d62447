"""pyzmq under Trio: the only module that touches ``zmq.FD`` and ``zmq.EVENTS``.

libzmq exposes one file descriptor per socket that becomes readable when the
socket's state *may* have changed, and any zmq call on the socket (a send, a
failed receive, reading ``EVENTS``) may consume that signal.  Three rules
follow, and this module exists to keep them in one place:

1. Before waiting on the descriptor, read ``EVENTS``: the condition may
   already hold and no further signal would come.
2. After every zmq call, if another task is waiting on this socket, read
   ``EVENTS`` and wake it when its condition now holds: our call may have
   eaten the signal it was waiting for.
3. Trio allows one task in ``wait_readable`` per descriptor, so one waiting
   task owns the descriptor and the others park beside it; whoever wakes
   wakes them all to re-check.

Cancellation never loses or duplicates a message: a message is taken off
the socket only by a call that then returns it, and a send either happens
(and the call returns normally) or does not (and the call raises).
"""

from __future__ import annotations

import resource
from collections.abc import Sequence
from typing import Any, Final, cast, final

import trio
import zmq

__all__ = ["ZSocket", "context"]

_POLLIN: Final = zmq.POLLIN
_POLLOUT: Final = zmq.POLLOUT
_NOBLOCK: Final = zmq.NOBLOCK
_SNDMORE_NOBLOCK: Final = zmq.SNDMORE | zmq.NOBLOCK
_EVENTS: Final = zmq.EVENTS
_RCVMORE: Final = int(zmq.RCVMORE)
_backend_recv: Final = zmq.backend.Socket.recv
_backend_get: Final = zmq.backend.Socket.get
_backend_send: Final = zmq.backend.Socket.send

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
    """

    __slots__ = ("__weakref__", "_closed", "_fd", "_fd_scope", "_lot", "_want", "_zsock")

    def __init__(self, zsock: zmq.Socket[Any]) -> None:
        zsock.setsockopt(zmq.LINGER, 0)
        self._zsock = zsock
        self._fd = cast(int, zsock.getsockopt(zmq.FD))
        self._closed = False
        # Who waits for what: counts per zmq event bit, so that after an
        # operation we know whether anybody could be waiting for the events.
        self._want: dict[int, int] = {_POLLIN: 0, _POLLOUT: 0}
        self._fd_scope: trio.CancelScope | None = None
        self._lot = trio.lowlevel.ParkingLot()

    @property
    def zmq_socket(self) -> zmq.Socket[Any]:
        """The wrapped socket, for options and bind/connect (not for I/O)."""
        return self._zsock

    @property
    def closed(self) -> bool:
        """True once :meth:`close` has been called."""
        return self._closed

    # ------------------------------------------------------------ receive

    async def receive(self) -> list[bytes]:
        """Wait for and return one multipart message.

        Cancellation: if cancelled, no message was taken off the socket.
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        while True:
            self._check_open()
            try:
                frames: list[bytes] = self._zsock.recv_multipart(_NOBLOCK)
            except zmq.Again:
                self._after_op()
                await self._wait(_POLLIN)
                continue
            self._after_op()
            await trio.lowlevel.cancel_shielded_checkpoint()
            return frames

    async def receive_batch(self, max_messages: int = 256) -> list[list[bytes]]:
        """Wait until a message is ready, then return every ready message.

        Returns between 1 and ``max_messages`` multipart messages in arrival
        order, taken off the socket without yielding in between: one
        scheduling round per batch instead of per message is what lets a
        Trio inbox keep up with libzmq.

        Cancellation: if cancelled, no message was taken off the socket.
        Bad input: ``max_messages < 1`` raises ``ValueError``.
        """
        if max_messages < 1:
            raise ValueError(f"max_messages must be at least 1, got {max_messages}")
        await trio.lowlevel.checkpoint_if_cancelled()
        zsock = self._zsock
        # pyzmq's recv_multipart, minus its per-call option conversions:
        # this loop runs for every message an inbox receives.
        recv, get = _backend_recv, _backend_get
        waited = False
        while True:
            self._check_open()
            batch: list[list[bytes]] = []
            # Ask EVENTS rather than let recv raise Again (pyzmq builds that
            # exception in Python): before the first message, and after it,
            # which is where a round trip's one-message batch ends.  In a
            # flood the batch runs on until Again or max_messages.
            if cast(int, get(zsock, _EVENTS)) & _POLLIN:
                try:
                    while True:
                        frames = [recv(zsock, _NOBLOCK)]
                        while get(zsock, _RCVMORE):
                            frames.append(recv(zsock, _NOBLOCK))
                        batch.append(frames)
                        if len(batch) >= max_messages:
                            break
                        if len(batch) == 1 and not cast(int, get(zsock, _EVENTS)) & _POLLIN:
                            break
                except zmq.Again:
                    pass
            self._after_op()
            if batch:
                # Waiting was this call's schedule point; a second one would
                # cost a trip through the run queue on every wake-up, which
                # is what a round trip is made of.
                if not waited:
                    await trio.lowlevel.cancel_shielded_checkpoint()
                return batch
            await self._wait(_POLLIN)
            waited = True

    def receive_nowait(self) -> list[bytes] | None:
        """Return one ready message, or ``None`` if none is ready now."""
        self._check_open()
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
        self._check_open()
        sent = self._send(frames)
        self._after_op()
        return sent

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

    async def _wait(self, event: int) -> None:
        """Return once ``event`` may hold; the caller retries its operation."""
        if cast(int, _backend_get(self._zsock, _EVENTS)) & event:
            # Rule 1: it already holds, the descriptor would not tell us.
            await trio.lowlevel.checkpoint()
            return
        self._want[event] += 1
        try:
            if self._fd_scope is not None:
                # Somebody else owns the descriptor: they wake us when it fires.
                await self._lot.park()
            else:
                with trio.CancelScope() as scope:
                    self._fd_scope = scope
                    try:
                        await trio.lowlevel.wait_readable(self._fd)
                    finally:
                        self._fd_scope = None
                        self._lot.unpark_all()
        except trio.ClosedResourceError:
            raise trio.ClosedResourceError("the zmq socket was closed") from None
        finally:
            self._want[event] -= 1
        self._check_open()

    def _after_op(self) -> None:
        """Rule 2: after any zmq call, wake waiters whose event now holds."""
        want = self._want
        if not (want[_POLLIN] or want[_POLLOUT]) or self._closed:
            return
        events = cast(int, _backend_get(self._zsock, _EVENTS))
        if (events & _POLLIN and want[_POLLIN]) or (events & _POLLOUT and want[_POLLOUT]):
            self._wake_waiters()

    def _wake_waiters(self) -> None:
        if self._fd_scope is not None:
            self._fd_scope.cancel()
        self._lot.unpark_all()

    # -------------------------------------------------------------- close

    def _check_open(self) -> None:
        if self._closed:
            raise trio.ClosedResourceError("the zmq socket was closed")

    def close(self) -> None:
        """Close the socket with ``LINGER 0``, waking every waiting task.

        Waiting tasks raise :class:`trio.ClosedResourceError`; so does any
        later call.  Messages still queued for sending are dropped (LINGER
        0), which is what a node that is leaving wants.  Idempotent.
        """
        if self._closed:
            return
        self._closed = True
        # Wake the descriptor's owner before libzmq closes the descriptor.
        trio.lowlevel.notify_closing(self._fd)
        self._lot.unpark_all()
        self._zsock.close(linger=0)

    async def aclose(self) -> None:
        """Close the socket (see :meth:`close`); a checkpoint, never blocks."""
        self.close()
        await trio.lowlevel.checkpoint()

    async def __aenter__(self) -> ZSocket:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
