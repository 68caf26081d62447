"""LinkWatch: one socket tells which watched TCP links broke (issue 25, made cheap in issue 28)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager

import pytest
import trio
import zmq

from trizre.transport._link_watch import LinkWatch
from trizre.transport._links import TcpLink
from trizre.transport._zsock import ZSocket, context

pytestmark = pytest.mark.trio


@contextmanager
def _routers(n: int) -> Iterator[list[tuple[ZSocket, str]]]:
    """``n`` ROUTERs on loopback, each with the endpoint a link connects to."""
    routers: list[tuple[ZSocket, str]] = []
    try:
        for _ in range(n):
            raw = context().socket(zmq.ROUTER)
            port = raw.bind_to_random_port("tcp://127.0.0.1")
            routers.append((ZSocket(raw), f"tcp://127.0.0.1:{port}"))
        yield routers
    finally:
        for router, _ in routers:
            router.close()


async def _linked(router: ZSocket, endpoint: str, name: bytes) -> TcpLink:
    """A link whose connection is made: the router has its first message."""
    link = TcpLink.connect(endpoint, name, 100)
    await link.send([b"hello"])
    assert await router.receive() == [name, b"hello"]
    return link


@asynccontextmanager
async def _watch() -> AsyncIterator[LinkWatch[str]]:
    watch: LinkWatch[str] = LinkWatch()
    try:
        yield watch
    finally:
        watch.close()


async def test_a_broken_connection_is_reported_to_a_waiter_parked_before_the_watch() -> None:
    """The waiter parks first: watch() must not eat the wake-up (a real bug, found so)."""
    got: list[list[str]] = []
    with trio.fail_after(10), _routers(1) as [(router, endpoint)]:
        async with _watch() as watch, trio.open_nursery() as nursery:

            async def wait() -> None:
                got.append(await watch.broken())

            nursery.start_soon(wait)
            await trio.testing.wait_all_tasks_blocked()
            link = await _linked(router, endpoint, b"a")
            watch.watch(link, "a")
            assert link in watch and len(watch) == 1
            router.close()  # the connection breaks
        assert got == [["a"]]
        link.close()
        assert link not in watch and len(watch) == 0


async def test_only_the_links_that_broke_are_reported_each_once() -> None:
    with trio.fail_after(10), _routers(2) as [(r1, e1), (r2, e2)]:
        async with _watch() as watch:
            one, two = await _linked(r1, e1, b"1"), await _linked(r2, e2, b"2")
            watch.watch(one, "one")
            watch.watch(two, "two")
            r1.close()
            assert await watch.broken() == ["one"]
            r2.close()
            assert await watch.broken() == ["two"]
            one.close()
            two.close()


async def test_a_closed_link_is_forgotten_and_never_reported() -> None:
    with trio.fail_after(10), _routers(2) as [(r1, e1), (r2, e2)]:
        async with _watch() as watch:
            gone, kept = await _linked(r1, e1, b"g"), await _linked(r2, e2, b"k")
            watch.watch(gone, "gone")
            watch.watch(kept, "kept")
            gone.close()  # its monitor stops: its break below says nothing
            assert gone not in watch and len(watch) == 1 and gone.on_close is None
            r1.close()
            r2.close()
            assert await watch.broken() == ["kept"]  # "gone" would have come first
            kept.close()


async def test_links_to_one_endpoint_are_reported_together() -> None:
    """The event names the endpoint, not the socket: documented, and both are reported."""
    with trio.fail_after(10), _routers(1) as [(router, endpoint)]:
        async with _watch() as watch:
            first, second = (
                await _linked(router, endpoint, b"1"),
                await _linked(router, endpoint, b"2"),
            )
            watch.watch(first, "first")
            watch.watch(second, "second")
            router.close()
            tags = await watch.broken()
            assert sorted(set(tags)) == ["first", "second"]
            first.close()
            second.close()


async def test_bad_input_watching_twice_and_another_watch() -> None:
    with trio.fail_after(10), _routers(1) as [(router, endpoint)]:
        async with _watch() as watch, _watch() as other:
            link = await _linked(router, endpoint, b"x")
            watch.watch(link, "x")
            watch.watch(link, "again")  # nothing: it is watched already
            assert len(watch) == 1
            with pytest.raises(ValueError, match="watched already"):
                other.watch(link, "x")
            assert "x" not in watch  # not a link at all
            link.close()
            with pytest.raises(trio.ClosedResourceError):
                watch.watch(link, "closed")  # a closed link


async def test_close_wakes_a_waiter_stops_the_monitors_and_leaves_the_links_open() -> None:
    with trio.fail_after(10), _routers(2) as [(router, endpoint), (r2, e2)]:
        watch: LinkWatch[str] = LinkWatch()
        link = await _linked(router, endpoint, b"x")
        watch.watch(link, "x")
        raised: list[BaseException] = []
        async with trio.open_nursery() as nursery:

            async def wait() -> None:
                try:
                    await watch.broken()
                except trio.ClosedResourceError as exc:
                    raised.append(exc)

            nursery.start_soon(wait)
            await trio.testing.wait_all_tasks_blocked()
            watch.close()
            watch.close()  # idempotent
        assert len(raised) == 1 and watch.closed
        assert link.on_close is None and not link.closed
        with pytest.raises(trio.ClosedResourceError):
            await watch.broken()
        with pytest.raises(trio.ClosedResourceError):
            watch.watch(link, "x")
        # The link's connection breaks with no monitor left to tell a
        # closed reader (libzmq's monitor would block its I/O thread on
        # it): another watch hears its own link's break, and other
        # traffic still flows.
        async with _watch() as witness:
            beside = await _linked(router, endpoint, b"w")
            witness.watch(beside, "w")
            router.close()
            assert await witness.broken() == ["w"]
            other = await _linked(r2, e2, b"y")
            await link.send([b"still open"])
            for each in (beside, other, link):
                each.close()


async def test_a_cancelled_wait_loses_nothing() -> None:
    with trio.fail_after(10), _routers(1) as [(router, endpoint)]:
        async with _watch() as watch:
            link = await _linked(router, endpoint, b"x")
            watch.watch(link, "x")
            with trio.move_on_after(0.01):
                await watch.broken()
            router.close()
            assert await watch.broken() == ["x"]
            link.close()


async def test_a_mass_break_reports_every_link() -> None:
    """More links than one wake-up takes (a killed process breaks all its links at once)."""
    n = 300
    with trio.fail_after(30), _routers(n) as routers:
        async with _watch() as watch:
            links = []
            for i, (router, endpoint) in enumerate(routers):
                link = await _linked(router, endpoint, b"%d" % i)
                watch.watch(link, str(i))
                links.append(link)
            for router, _ in routers:
                router.close()
            seen: set[str] = set()
            while len(seen) < n:
                seen.update(await watch.broken())
            assert seen == {str(i) for i in range(n)}
            for link in links:
                link.close()
            assert len(watch) == 0
