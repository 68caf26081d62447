"""The contracts every ``Link`` and every ``Discovery`` keeps, as functions of a factory.

In the manner of :func:`trio.testing.check_two_way_stream`: a transport
passes if ``await check_link(its_factory)`` (or ``check_discovery``)
returns.  Each check is also exposed alone (``LINK_CHECKS``,
``DISCOVERY_CHECKS``) so that a suite can parametrize over both the
implementations and the checks, and name the one that failed.

A link is checked together with the inbox it feeds (what the receiving
node reads); a discovery as one network of several listeners.  Every
check bounds itself with ``trio.fail_after``; none sleeps to synchronise.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager

import attrs
import pytest
import trio
import trio.testing

from trizre.transport._discovery import Discovery
from trizre.transport._links import Inbox, Link
from trizre.wire import OVERSIZE, Beacon, EncodeError

__all__ = [
    "DISCOVERY_CHECKS",
    "LINK_CHECKS",
    "DiscoveryFactory",
    "LinkPair",
    "PairFactory",
    "check_discovery",
    "check_link",
]

BOUND = 5  # seconds any one check may take (TCP reconnects take ~0.1 s)
CORK_SLACK = 64  # a corked TcpLink counts this many beyond its hwm as sent (_zsock._CORK_MAX)


# ---------------------------------------------------------------- links


@attrs.define
class LinkPair:
    """A link and the inbox it feeds.

    ``sender``: the identity frame the inbox gives each message of the link
    (a CURVE inbox prefixes the client's key).  ``listen``: make the inbox
    reachable; a pair opened with ``listening=False`` has a link whose
    messages go nowhere yet (a TCP peer not yet bound, an in-memory one not
    yet read), so its sender meets backpressure.
    """

    link: Link
    inbox: Inbox
    sender: bytes
    hwm: int
    limit: int
    close_inbox: Callable[[], None]
    listen: Callable[[], None] = lambda: None


PairFactory = Callable[..., AbstractAsyncContextManager[LinkPair]]
"""``factory(hwm=, limit=, listening=)``: an async context manager yielding a :class:`LinkPair`."""


async def _receive(pair: LinkPair, count: int) -> list[list[bytes]]:
    got: list[list[bytes]] = []
    while len(got) < count:
        got += await pair.inbox.receive_batch(count - len(got))
    return got


def _message(i: int) -> list[bytes]:
    """Message ``i``: one to three frames, some empty, all telling ``i`` apart."""
    tag = i.to_bytes(2, "big")
    return [[tag], [tag, b""], [b"", tag, b"x" * (i % 7)]][i % 3]


async def link_keeps_order(factory: PairFactory) -> None:
    """Messages arrive whole, in sending order, each behind the sender's identity."""
    with trio.fail_after(BOUND):
        async with factory(hwm=1000, limit=1000, listening=True) as pair:
            sent = [_message(i) for i in range(120)]
            for i, frames in enumerate(sent):
                if i % 2:
                    await pair.link.send(frames)
                else:
                    assert pair.link.send_nowait(frames)
            got = await _receive(pair, len(sent))
            assert got == [[pair.sender, *frames] for frames in sent]
            assert not pair.link.closed


async def link_carries_sizes_up_to_the_limit(factory: PairFactory) -> None:
    """A message whose frames total exactly the inbox's limit arrives unchanged."""
    limit = 4096
    with trio.fail_after(BOUND):
        async with factory(hwm=100, limit=limit, listening=True) as pair:
            sent = [
                [b"\xaa" * limit],
                [b"\x01" * (limit - 1), b"\x02"],
                [b"", b"\x03" * limit, b""],
                [b""],
            ]
            for frames in sent:
                await pair.link.send(frames)
            assert await _receive(pair, len(sent)) == [[pair.sender, *f] for f in sent]


async def link_refuses_oversize_with_the_marker(factory: PairFactory) -> None:
    """Frames totalling one octet over the limit arrive as ``[sender, OVERSIZE]``, nothing more.

    The link stays usable: the next message arrives whole.
    """
    limit = 4096
    with trio.fail_after(BOUND):
        async with factory(hwm=100, limit=limit, listening=True) as pair:
            await pair.link.send([b"\x01" * (limit // 2), b"\x02" * (limit // 2 + 1)])
            await pair.link.send([b"after"])
            refused, after = await _receive(pair, 2)
            assert refused[0] == pair.sender
            assert len(refused) == 2 and refused[1] is OVERSIZE
            assert after == [pair.sender, b"after"]


async def link_refuses_when_full_and_loses_nothing(factory: PairFactory) -> None:
    """Backpressure: ``send_nowait`` refuses once ``hwm`` wait, ``send`` waits, none is lost.

    A corked TCP link may count up to ``CORK_SLACK`` more as sent; every
    message accepted arrives, in order, once the peer reads.
    """
    hwm = 4
    with trio.fail_after(BOUND):
        async with factory(hwm=hwm, limit=1000, listening=False) as pair:
            accepted: list[list[bytes]] = []
            while pair.link.send_nowait(frames := _message(len(accepted))):
                accepted.append(frames)
                assert len(accepted) <= hwm + CORK_SLACK
            assert len(accepted) >= hwm
            waiting = _message(len(accepted))
            done = trio.Event()

            async def sender() -> None:
                await pair.link.send(waiting)
                done.set()

            async with trio.open_nursery() as nursery:
                nursery.start_soon(sender)
                await trio.testing.wait_all_tasks_blocked()
                assert not done.is_set()
                pair.listen()
                got = await _receive(pair, len(accepted) + 1)
                await done.wait()
            assert got == [[pair.sender, *frames] for frames in [*accepted, waiting]]


async def link_cancelled_send_sends_nothing(factory: PairFactory) -> None:
    """A ``send`` cancelled while it waits for room sent nothing."""
    with trio.fail_after(BOUND):
        async with factory(hwm=2, limit=1000, listening=False) as pair:
            accepted: list[list[bytes]] = []
            while pair.link.send_nowait(frames := _message(len(accepted))):
                accepted.append(frames)
            async with trio.open_nursery() as nursery:

                async def sender() -> None:
                    await pair.link.send([b"cancelled"])
                    raise AssertionError("there was no room")

                nursery.start_soon(sender)
                await trio.testing.wait_all_tasks_blocked()
                nursery.cancel_scope.cancel()
            pair.listen()
            got = await _receive(pair, len(accepted))
            marker = [b"marker"]  # the next message: had the cancelled one gone, it came first
            await pair.link.send(marker)
            got += await _receive(pair, 1)
            assert got == [[pair.sender, *frames] for frames in [*accepted, marker]]


async def link_cancelled_receive_loses_nothing(factory: PairFactory) -> None:
    """An inbox read cancelled while it waits takes nothing; the next read gets the message."""
    with trio.fail_after(BOUND):
        async with factory(hwm=10, limit=1000, listening=True) as pair:
            async with trio.open_nursery() as nursery:

                async def reader() -> None:
                    await pair.inbox.receive_batch(10)
                    raise AssertionError("nothing was sent yet")

                nursery.start_soon(reader)
                await trio.testing.wait_all_tasks_blocked()
                nursery.cancel_scope.cancel()
            await pair.link.send([b"kept"])
            assert await _receive(pair, 1) == [[pair.sender, b"kept"]]


async def link_closed_refuses_with_closed_resource_error(factory: PairFactory) -> None:
    """After ``close`` (twice is fine) both sends raise ``trio.ClosedResourceError``."""
    with trio.fail_after(BOUND):
        async with factory(hwm=10, limit=1000, listening=True) as pair:
            assert not pair.link.closed
            pair.link.close()
            pair.link.close()
            assert pair.link.closed
            with pytest.raises(trio.ClosedResourceError):
                pair.link.send_nowait([b"x"])
            with pytest.raises(trio.ClosedResourceError):
                await pair.link.send([b"x"])


async def link_close_wakes_a_waiting_sender(factory: PairFactory) -> None:
    """A sender waiting for room when the link closes gets ``trio.ClosedResourceError``."""
    with trio.fail_after(BOUND):
        async with factory(hwm=2, limit=1000, listening=False) as pair:
            while pair.link.send_nowait([b"fill"]):
                pass
            errors: list[BaseException] = []

            async def sender() -> None:
                try:
                    await pair.link.send([b"waits"])
                except trio.ClosedResourceError as exc:
                    errors.append(exc)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(sender)
                await trio.testing.wait_all_tasks_blocked()
                assert errors == []
                pair.link.close()
            assert len(errors) == 1


async def inbox_close_wakes_its_reader(factory: PairFactory) -> None:
    """Closing the inbox wakes a waiting reader with ``trio.ClosedResourceError``; so after."""
    with trio.fail_after(BOUND):
        async with factory(hwm=10, limit=1000, listening=True) as pair:
            errors: list[BaseException] = []

            async def reader() -> None:
                try:
                    await pair.inbox.receive_batch(10)
                except trio.ClosedResourceError as exc:
                    errors.append(exc)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(reader)
                await trio.testing.wait_all_tasks_blocked()
                pair.close_inbox()
            assert len(errors) == 1
            with pytest.raises(trio.ClosedResourceError):
                await pair.inbox.receive_batch(10)


async def link_tells_how_liveness_is_known(factory: PairFactory) -> None:
    """An in-process link reports its peer's liveness (now, while it reads); others ``None``."""
    with trio.fail_after(BOUND):
        async with factory(hwm=10, limit=1000, listening=True) as pair:
            now = trio.current_time()
            if pair.link.in_process:
                assert pair.link.liveness(now) == now
            else:
                assert pair.link.liveness(now) is None


LINK_CHECKS: Sequence[Callable[[PairFactory], Awaitable[None]]] = (
    link_keeps_order,
    link_carries_sizes_up_to_the_limit,
    link_refuses_oversize_with_the_marker,
    link_refuses_when_full_and_loses_nothing,
    link_cancelled_send_sends_nothing,
    link_cancelled_receive_loses_nothing,
    link_closed_refuses_with_closed_resource_error,
    link_close_wakes_a_waiting_sender,
    inbox_close_wakes_its_reader,
    link_tells_how_liveness_is_known,
)


async def check_link(factory: PairFactory) -> None:
    """Every check of the :class:`~trizre.transport._links.Link` contract, in turn."""
    for check in LINK_CHECKS:
        await check(factory)


# ------------------------------------------------------------ discovery

DiscoveryFactory = Callable[[], AbstractAsyncContextManager[Discovery]]
"""Each call joins the same network: what one handle sends, every handle's listeners hear."""

Heard = tuple[Beacon, str, bytes]


@attrs.define
class _Ear:
    """One listener: what it heard, in order, and its cancel scope."""

    heard: trio.MemoryReceiveChannel[Heard]
    scope: trio.CancelScope

    async def next(self) -> Heard:
        return await self.heard.receive()

    def nothing_more(self) -> bool:
        try:
            self.heard.receive_nowait()
        except trio.WouldBlock:
            return True
        return False


async def _listen(
    discovery: Discovery,
    deliver: Callable[[Beacon, str, bytes, float], None],
    scope: trio.CancelScope,
    task_status: trio.TaskStatus[None],
) -> None:
    with scope:
        task_status.started()  # listen() registers before its first checkpoint
        await discovery.listen(deliver)


@asynccontextmanager
async def _network(
    factory: DiscoveryFactory, listeners: int, fail: int | None = None
) -> AsyncIterator[tuple[list[Discovery], list[_Ear]]]:
    """``listeners`` handles of one network, each with a listener; the one at ``fail`` raises."""
    async with AsyncExitStack() as stack, trio.open_nursery() as nursery:
        handles = [await stack.enter_async_context(factory()) for _ in range(listeners)]
        ears: list[_Ear] = []
        for i, handle in enumerate(handles):
            send, receive = trio.open_memory_channel[Heard](1000)

            def deliver(
                beacon: Beacon,
                source: str,
                key: bytes,
                now: float,
                send: trio.MemorySendChannel[Heard] = send,
                since: float = trio.current_time(),
            ) -> None:
                # The time of delivery, read once for every listener: never
                # before this listener came nor after this call.  A wrong one
                # is never heard (the wait for it fails the check).
                if since <= now <= trio.current_time():
                    send.send_nowait((beacon, source, key))

            def refuse(beacon: Beacon, source: str, key: bytes, now: float) -> None:
                raise RuntimeError("this listener fails on purpose")

            ear = _Ear(receive, trio.CancelScope())
            await nursery.start(_listen, handle, refuse if i == fail else deliver, ear.scope)
            ears.append(ear)
        try:
            yield handles, ears
        finally:
            nursery.cancel_scope.cancel()


def _beacon(port: int = 0xC000, **kwargs: object) -> Beacon:
    return Beacon(uuid.uuid4(), port, **kwargs)  # type: ignore[arg-type]


async def discovery_every_listener_hears_every_beacon_in_order(
    factory: DiscoveryFactory,
) -> None:
    """What any handle sends, every listener hears (the sender's own too), in sending order."""
    with trio.fail_after(BOUND):
        async with _network(factory, 3) as (handles, ears):
            sent = [_beacon() for _ in range(5)]
            for beacon in sent:
                await handles[1].send(beacon)
            for ear in ears:
                heard = [await ear.next() for _ in sent]
                assert [(beacon, source) for beacon, source, _ in heard] == [
                    (beacon, "127.0.0.1") for beacon in sent
                ]


async def discovery_keys_tell_content_and_sender(factory: DiscoveryFactory) -> None:
    """The key is equal for the same beacon from the same sender, and differs otherwise."""
    with trio.fail_after(BOUND):
        async with _network(factory, 1) as (handles, (ear,)):
            same, other = _beacon(), _beacon()
            for beacon in (same, same, other):
                await handles[0].send(beacon)
            (_, _, a), (_, _, b), (_, _, c) = [await ear.next() for _ in range(3)]
            assert a == b
            assert a != c


async def discovery_carries_every_beacon_form(factory: DiscoveryFactory) -> None:
    """Version 1, version 3 with a CURVE key (the largest), and a leaving beacon, unchanged."""
    with trio.fail_after(BOUND):
        async with _network(factory, 2) as (handles, ears):
            sent = [_beacon(), _beacon(version=3, public_key=bytes(range(32))), _beacon(port=0)]
            for beacon in sent:
                await handles[0].send(beacon)
            for ear in ears:
                assert [(await ear.next())[0] for _ in sent] == sent


async def discovery_refuses_an_unencodable_beacon(factory: DiscoveryFactory) -> None:
    """A beacon that cannot be encoded raises ``EncodeError`` and reaches nobody."""
    with trio.fail_after(BOUND):
        async with _network(factory, 2) as (handles, ears):
            with pytest.raises(EncodeError):
                await handles[0].send(_beacon(port=70000))
            with pytest.raises(EncodeError):
                await handles[0].send(_beacon(version=3, public_key=b"short"))
            after = _beacon()
            await handles[1].send(after)
            for ear in ears:
                assert (await ear.next())[0] == after


async def discovery_cancelled_listener_hears_no_more(factory: DiscoveryFactory) -> None:
    """A listener cancelled while it waits hears nothing after; the others still hear all.

    The first listener is cancelled: where listeners share one socket and
    the first reads it for all, another must take over.
    """
    with trio.fail_after(BOUND):
        async with _network(factory, 3) as (handles, ears):
            ears[0].scope.cancel()
            await trio.testing.wait_all_tasks_blocked()
            sent = _beacon()
            await handles[2].send(sent)
            for ear in ears[1:]:
                assert (await ear.next())[0] == sent
            await trio.testing.wait_all_tasks_blocked()
            assert ears[0].nothing_more()


async def discovery_a_failing_listener_harms_no_other(factory: DiscoveryFactory) -> None:
    """A listener whose ``deliver`` raises: the others still get the beacon, and the next."""
    with trio.fail_after(BOUND):
        async with _network(factory, 3, fail=0) as (handles, ears):
            sent = [_beacon(), _beacon()]
            for beacon in sent:
                await handles[0].send(beacon)
            for ear in ears[1:]:
                assert [(await ear.next())[0] for _ in sent] == sent


async def discovery_closed_refuses_with_closed_resource_error(
    factory: DiscoveryFactory,
) -> None:
    """Once every handle of the network is closed, ``send`` raises ``trio.ClosedResourceError``."""
    with trio.fail_after(BOUND):
        async with factory() as first, factory() as second:
            pass
        for handle in (first, second):
            with pytest.raises(trio.ClosedResourceError):
                await handle.send(_beacon())


DISCOVERY_CHECKS: Sequence[Callable[[DiscoveryFactory], Awaitable[None]]] = (
    discovery_every_listener_hears_every_beacon_in_order,
    discovery_keys_tell_content_and_sender,
    discovery_carries_every_beacon_form,
    discovery_refuses_an_unencodable_beacon,
    discovery_cancelled_listener_hears_no_more,
    discovery_a_failing_listener_harms_no_other,
    discovery_closed_refuses_with_closed_resource_error,
)


async def check_discovery(factory: DiscoveryFactory) -> None:
    """Every check of the :class:`~trizre.transport._discovery.Discovery` contract, in turn."""
    for check in DISCOVERY_CHECKS:
        await check(factory)
