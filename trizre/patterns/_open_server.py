"""``open_server``: a handler's arguments checked, its :class:`Server` made and run for a block.

The server's life is here: its place on the node's port, its group
joined and left, its tasks (replies, ACCEPTED, status, a gate's
failure) in one nursery.  What it does with each request is
``_server.py``'s.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress

import trio

from .. import Node
from .._concurrency import unwrap_single_exception_group
from ._admission import Gate, ReplyCache
from ._port import open_port
from ._server import Handler, Server, check_service_name

__all__ = ["open_server"]


def _is_async(handler: object) -> bool:
    """An ``async def`` function, a partial of one, or an object whose ``__call__`` is one."""
    return inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(
        getattr(handler, "__call__", None)  # noqa: B004 -- the method, not callability
    )


@asynccontextmanager
async def open_server(
    node: Node,
    handler: Handler,
    *,
    service: str | None = None,
    reply_cache: ReplyCache | None = None,
    max_concurrency: int = 64,
    max_queued: int = 10_000,
    accept_after: float = 0.1,
    hide_errors: bool = False,
    _gate: Gate | None = None,
) -> AsyncIterator[Server]:
    """Answer pattern requests arriving at ``node`` with ``handler``.

    With ``service=None`` it answers requests addressed to this peer
    directly (Lazy Pirate); with a service name it joins that ZRE group and
    answers requests for that service (a Majordomo-style worker), leaving
    the group when the block ends.  Requests for anything else are left to
    other servers on the node.

    A request it holds ``accept_after`` seconds (0.1 s) without replying
    is answered ACCEPTED, and its client stops timing it: a request
    waiting for a free handler is never sent again elsewhere.  (A retry of
    a request it still holds is answered ACCEPTED at once.)  Clients'
    attempt timeouts must be longer than ``accept_after``.  Up to
    ``max_concurrency`` handlers run at once, and up to ``max_queued``
    more requests wait; beyond that a request is refused with 503 (not
    executed), and its client asks another worker.

    A handler that raises is answered with status 500, whose body is the
    exception's type name and message (nothing with ``hide_errors``); the
    traceback is logged on the ``trizre.patterns`` logger at ERROR, and the
    server goes on.  A handler's cancellation (the block ending) sends no
    reply.  If the node's block ends first, the server reads nothing more,
    replies still owed are dropped, and the block ends without error when
    its body does.

    Bad input: a ``handler`` that is not an async function raises
    ``TypeError``; an invalid or ``mmi.*`` service name, or
    ``max_concurrency < 1``, ``max_queued < 0`` or a negative
    ``accept_after``, raises ``ValueError``;
    all before anything starts.  With a service, a node that has already
    stopped raises ``trio.ClosedResourceError``.
    """
    if not _is_async(handler):
        raise TypeError(
            f"the handler must be an async function (async def), got {handler!r}: "
            "a plain function would block every other request"
        )
    if service is not None:
        check_service_name(service)
    if max_concurrency < 1:
        raise ValueError(f"max_concurrency must be at least 1, got {max_concurrency}")
    if max_queued < 0:
        raise ValueError(f"max_queued cannot be negative, got {max_queued}")
    if not (isinstance(accept_after, int | float) and 0 <= accept_after < math.inf):
        raise ValueError(f"accept_after must be a finite number of seconds >= 0: {accept_after!r}")
    server = Server(
        node,
        service,
        handler,
        reply_cache=reply_cache,
        max_concurrency=max_concurrency,
        max_queued=max_queued,
        accept_after=accept_after,
        gate=_gate,
        hide_errors=hide_errors,
    )
    wanted = service or ""
    with unwrap_single_exception_group():
        async with open_port(node) as port, trio.open_nursery() as nursery:
            server._nursery = nursery  # where runners start
            port.add_server(wanted, server)
            try:
                if service is not None:
                    await node.join(service)
                nursery.start_soon(server._send_replies)
                nursery.start_soon(server._accept)
                nursery.start_soon(server._send_status)
                nursery.start_soon(server._watch_failure)
                yield server
            finally:
                port.remove_server(wanted, server)
                nursery.cancel_scope.cancel()
                server._drop_waiting()
                if service is not None:
                    with trio.CancelScope(shield=True):
                        await _leave(node, service)


async def _leave(node: Node, service: str) -> None:
    """Leave the service's group, unless the node already stopped (its peers know)."""
    with suppress(trio.ClosedResourceError):
        await node.leave(service)
