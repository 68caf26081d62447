"""InboxWatch: one monitor on a ROUTER inbox tells whose connection into it closed (issues 25, 28).

And ZSocket.note_sources, which names the connection a HELLO came on,
read compiled and in pure Python alike.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager

import pytest
import trio
import zmq

from trizre.transport import _zsock
from trizre.transport._inbox_watch import InboxWatch
from trizre.transport._zsock import SOURCES_MAX, ZSocket, context

pytestmark = pytest.mark.trio

HELLO = b"\xaa\xa1\x01"  # what the node notes: a ZRE HELLO's first octets


@pytest.fixture(params=["compiled", "pure"])
def reader(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Both inbox reads: _zread's, and the pure-Python loop it stands in for."""
    if request.param == "compiled":
        if _zsock._zread is None:
            pytest.skip("the compiled read is not built")
    else:
        monkeypatch.setattr(_zsock, "_zread", None)
    return str(request.param)


@contextmanager
def _inbox() -> Iterator[tuple[ZSocket, str, dict[bytes, int]]]:
    """A ROUTER on loopback noting HELLOs' sources; its endpoint and the notes."""
    raw = context().socket(zmq.ROUTER)
    port = raw.bind_to_random_port("tcp://127.0.0.1")
    inbox = ZSocket(raw)
    try:
        yield inbox, f"tcp://127.0.0.1:{port}", inbox.note_sources(HELLO)
    finally:
        inbox.close()


@contextmanager
def _dealers(endpoint: str, n: int) -> Iterator[list[ZSocket]]:
    dealers: list[ZSocket] = []
    try:
        for i in range(n):
            raw = context().socket(zmq.DEALER)
            raw.setsockopt(zmq.IDENTITY, b"%d" % i)
            raw.connect(endpoint)
            dealers.append(ZSocket(raw))
        yield dealers
    finally:
        for dealer in dealers:
            dealer.close()


async def _hello(inbox: ZSocket, sources: dict[bytes, int], dealer: ZSocket) -> int:
    """The descriptor ``dealer``'s connection has in ``inbox``, from a HELLO it sends."""
    identity = dealer.zmq_socket.getsockopt(zmq.IDENTITY)
    await dealer.send([HELLO + b"rest", b"more"])
    assert await inbox.receive_batch() == [[identity, HELLO + b"rest", b"more"]]
    return sources.pop(identity)


@asynccontextmanager
async def _watch(inbox: ZSocket) -> AsyncIterator[InboxWatch[str]]:
    watch: InboxWatch[str] = InboxWatch(inbox)
    try:
        yield watch
    finally:
        watch.close()


async def test_note_sources_names_each_hellos_connection_and_nothing_else(reader: str) -> None:
    with trio.fail_after(10), _inbox() as (inbox, endpoint, sources), _dealers(endpoint, 2) as ds:
        one, two = ds
        await one.send([b"not a hello"])
        await two.send([HELLO[:2]])  # shorter than the prefix
        got = await inbox.receive_batch()
        while len(got) < 2:
            got += await inbox.receive_batch()
        assert sources == {}
        first, second = await _hello(inbox, sources, one), await _hello(inbox, sources, two)
        assert first != second and min(first, second) > 2  # descriptors of their own
        assert await _hello(inbox, sources, one) == first  # the same connection
        assert sources == {}  # _hello took each


async def test_note_sources_bad_input_and_a_second_call() -> None:
    with _inbox() as (inbox, _, sources):
        assert inbox.note_sources(b"other") is sources  # the first prefix holds
    dealer = ZSocket(context().socket(zmq.DEALER))
    with pytest.raises(ValueError, match="ROUTER"):
        dealer.note_sources(HELLO)
    dealer.close()


async def test_notes_nobody_takes_are_bounded(reader: str) -> None:
    with trio.fail_after(10), _inbox() as (inbox, endpoint, sources), _dealers(endpoint, 1) as ds:
        sources.update((b"stale %d" % i, 7) for i in range(SOURCES_MAX + 1))
        fd = await _hello(inbox, sources, ds[0])  # the batch cleared them first
        assert sources == {} and fd > 2


async def test_a_connection_that_closed_is_reported_to_a_waiter_parked_before_the_watch() -> None:
    """The waiter parks first: starting the watch must not eat its wake-up (Rule 2)."""
    got: list[list[str]] = []
    with trio.fail_after(10), _inbox() as (inbox, endpoint, sources), _dealers(endpoint, 1) as ds:
        fd = await _hello(inbox, sources, ds[0])
        async with _watch(inbox) as watch, trio.open_nursery() as nursery:

            async def wait() -> None:
                got.append(await watch.broken())

            nursery.start_soon(wait)
            await trio.testing.wait_all_tasks_blocked()
            watch.watch(fd, "a")
            assert "a" in watch and len(watch) == 1
            ds[0].close()  # the peer goes: its connection closes
        assert got == [["a"]]
        assert "a" not in watch and len(watch) == 0  # reported once, forgotten


async def test_only_watched_connections_that_closed_are_reported_each_once(reader: str) -> None:
    with trio.fail_after(10), _inbox() as (inbox, endpoint, sources), _dealers(endpoint, 3) as ds:
        fds = [await _hello(inbox, sources, dealer) for dealer in ds]
        async with _watch(inbox) as watch:
            watch.watch(fds[0], "zero")
            watch.watch(fds[1], "one")  # ds[2] is not watched: a stranger
            ds[2].close()
            ds[1].close()
            assert await watch.broken() == ["one"]
            ds[0].close()
            assert await watch.broken() == ["zero"]
            assert len(watch) == 0


async def test_forget_and_a_reused_descriptor() -> None:
    with trio.fail_after(10), _inbox() as (inbox, endpoint, sources), _dealers(endpoint, 3) as ds:
        fds = [await _hello(inbox, sources, dealer) for dealer in ds]
        async with _watch(inbox) as watch:
            watch.watch(fds[0], "gone")
            watch.forget("gone")
            watch.forget("never watched")  # nothing
            watch.watch(fds[1], "old")
            watch.watch(fds[1], "new")  # the descriptor was reused: "old" is forgotten
            watch.watch(fds[2], "moves")
            watch.watch(fds[2], "moves")  # the same again: nothing changes
            assert len(watch) == 2 and "old" not in watch and "gone" not in watch
            for dealer in ds:
                dealer.close()
            seen: set[str] = set()
            while len(seen) < 2:
                seen.update(await watch.broken())
            assert seen == {"new", "moves"}


async def test_a_descriptor_reused_before_its_close_was_read_ends_the_old_tag_only() -> None:
    """P's connection closes; Q connects on the same descriptor and says HELLO first.

    libzmq sent P's event before it closed the descriptor, so before Q
    could have it: watching Q takes that event first, or Q would be
    reported for P's connection (and P never).
    """
    # Q is another process, so that only the accepted end of its connection
    # takes a descriptor here; it connects when told.
    q = await trio.lowlevel.open_process([sys.executable, "-c", _Q], stdin=subprocess.PIPE)
    assert q.stdin is not None
    try:
        with trio.fail_after(20), _inbox() as (inbox, endpoint, sources):
            async with _watch(inbox) as watch:
                with _dealers(endpoint, 1) as [p]:
                    fd = await _hello(inbox, sources, p)
                    watch.watch(fd, "P")
                    p_socket = _what(fd)
                # libzmq closes P's end when it reads P's close, its event
                # sent by then; polled: the event is what must stay unread.
                while _what(fd) == p_socket:  # noqa: ASYNC110
                    await trio.sleep(0.001)
                with _lowest_free_descriptor(fd):
                    await q.stdin.send_all(endpoint.encode() + b"\n")
                    got = await inbox.receive_batch()
                assert got == [[b"Q", HELLO]] and sources.pop(b"Q") == fd
                watch.watch(fd, "Q")
                assert await watch.broken() == ["P"]
                assert "Q" in watch
                await q.stdin.aclose()  # Q goes
                assert await watch.broken() == ["Q"]
    finally:
        q.kill()
        with trio.CancelScope(shield=True):
            await q.wait()


_Q = """
import sys, zmq
endpoint = sys.stdin.readline().strip()
dealer = zmq.Context().socket(zmq.DEALER)
dealer.setsockopt(zmq.IDENTITY, b"Q")
dealer.connect(endpoint)
dealer.send(b"\\xaa\\xa1\\x01")
sys.stdin.read()
dealer.close(linger=0)
"""


def _what(fd: int) -> str | None:
    """What descriptor ``fd`` of this process is (a socket's inode), or None if closed."""
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except FileNotFoundError:
        return None


@contextmanager
def _lowest_free_descriptor(fd: int) -> Iterator[None]:
    """Hold every free descriptor below ``fd`` (Linux gives out the lowest free one)."""
    held: list[int] = []
    try:
        while (opened := os.open(os.devnull, os.O_RDONLY)) < fd:
            held.append(opened)
        os.close(opened)
        assert opened == fd, f"descriptor {fd} was taken: the test shows nothing"
        yield
    finally:
        for each in held:
            os.close(each)


async def test_bad_input() -> None:
    with trio.fail_after(10), _inbox() as (inbox, _, _sources):
        async with _watch(inbox) as watch:
            with pytest.raises(ValueError, match="descriptor"):
                watch.watch(-1, "x")
        with pytest.raises(trio.ClosedResourceError):
            watch.watch(5, "closed")
    closed = ZSocket(context().socket(zmq.ROUTER))
    closed.close()
    with pytest.raises(trio.ClosedResourceError):
        InboxWatch(closed)


async def test_close_wakes_a_waiter_and_stops_the_monitor() -> None:
    with trio.fail_after(10), _inbox() as (inbox, endpoint, sources), _dealers(endpoint, 2) as ds:
        fd = await _hello(inbox, sources, ds[0])
        watch: InboxWatch[str] = InboxWatch(inbox)
        watch.watch(fd, "x")
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
        assert len(raised) == 1 and watch.closed and len(watch) == 0
        with pytest.raises(trio.ClosedResourceError):
            await watch.broken()
        # With the monitor left running, libzmq's I/O thread blocks on the
        # closed reader at the next event, and the inbox hears no more.
        ds[0].close()
        await _hello(inbox, sources, ds[1])
        # A new watch may monitor the inbox again.
        async with _watch(inbox) as again:
            again.watch(await _hello(inbox, sources, ds[1]), "y")
            ds[1].close()
            assert await again.broken() == ["y"]


async def test_a_cancelled_wait_loses_nothing() -> None:
    with trio.fail_after(10), _inbox() as (inbox, endpoint, sources), _dealers(endpoint, 1) as ds:
        async with _watch(inbox) as watch:
            watch.watch(await _hello(inbox, sources, ds[0]), "x")
            with trio.move_on_after(0.01):
                await watch.broken()
            ds[0].close()
            assert await watch.broken() == ["x"]


async def test_a_mass_close_reports_every_connection() -> None:
    """More connections than one wake-up takes (a killed process closes all of them at once)."""
    n = 300
    with trio.fail_after(30), _inbox() as (inbox, endpoint, sources), _dealers(endpoint, n) as ds:
        async with _watch(inbox) as watch:
            for i, dealer in enumerate(ds):
                watch.watch(await _hello(inbox, sources, dealer), str(i))
            for dealer in ds:
                dealer.close()
            seen: set[str] = set()
            while len(seen) < n:
                seen.update(await watch.broken())
            assert seen == {str(i) for i in range(n)}
            assert len(watch) == 0
