"""The compiled inbox read and sends (``_zread.pyx``) and the pure-Python loops alike (issue 28).

Each test with ``read_way`` runs both ways: compiled (when built; ``make``
builds it, and CI fails if it is missing: ``TRIZRE_EXPECT_COMPILED``) and
pure (``_zsock._zread`` set to ``None``, as ``TRIZRE_PURE_PYTHON=1`` does).
"""

from __future__ import annotations

import ast
import gc
import os
import subprocess
import sys
import uuid
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio
import zmq

from trizre import Enter, Shout, Whisper
from trizre.transport import _zsock
from trizre.transport._zsock import ZSocket, context
from trizre.wire import OVERSIZE

LIMIT = 1000
# Frame counts from one to five, empty frames, and totals on either side of
# LIMIT, with frames each under it: what a ROUTER's limit is about.
MESSAGES: list[list[bytes]] = [
    [b"a"],
    [b"", b""],
    [b"h" * 10, b"b" * 10, b""],
    [b"z" * LIMIT],
    [b"z" * (LIMIT + 1)],
    [b"x" * 600, b"y" * 400],
    [b"x" * 600, b"y" * 401],
    [b"q"] * 5,
    [b"w" * 300] * 4,
    [b"last"],
]


def _compiled() -> Any:
    """The compiled module; the test is skipped where it is not built."""
    if _zsock._zread is None:
        pytest.skip("the compiled read is not built (scripts/build_ext.py)")
    return _zsock._zread


@pytest.fixture(params=["compiled", "pure"])
def read_way(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "compiled":
        _compiled()
    else:
        monkeypatch.setattr(_zsock, "_zread", None)
    return str(request.param)


def _socket(kind: int) -> zmq.Socket[Any]:
    sock = context().socket(kind)
    sock.setsockopt(zmq.SNDHWM, 1000)
    sock.setsockopt(zmq.RCVHWM, 1000)
    return sock


@asynccontextmanager
async def router_and_dealer() -> AsyncIterator[tuple[ZSocket, ZSocket]]:
    router = ZSocket(_socket(zmq.ROUTER), max_message_size=LIMIT)
    dealer = _socket(zmq.DEALER)
    dealer.setsockopt(zmq.IDENTITY, b"me")
    wrapped = ZSocket(dealer)
    try:
        router.zmq_socket.bind("tcp://127.0.0.1:*")  # ok-net: loopback
        dealer.connect(router.zmq_socket.getsockopt_string(zmq.LAST_ENDPOINT))
        yield router, wrapped
    finally:
        router.close()
        wrapped.close()


async def _take(sock: ZSocket, count: int, max_messages: int = 256) -> list[list[bytes]]:
    got: list[list[bytes]] = []
    while len(got) < count:
        batch = await sock.receive_batch(max_messages)
        assert 1 <= len(batch) <= max_messages
        got += batch
    return got


def test_the_compiled_read_is_built_where_it_is_expected() -> None:
    # make's test run sets it: the compiled read must be what its tests ran.
    if os.environ.get("TRIZRE_EXPECT_COMPILED"):
        assert _zsock._zread is not None, "run scripts/build_ext.py"


def _python(code: str, **env: str) -> str:
    """What ``code`` prints in a new interpreter, with the switch only if ``env`` sets it."""
    base = {k: v for k, v in os.environ.items() if k != "TRIZRE_PURE_PYTHON"}
    result = subprocess.run(
        [sys.executable, "-c", code],
        check=False,
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_trizre_pure_python_turns_the_compiled_read_off() -> None:
    code = "from trizre.transport import _zsock; print(_zsock._zread is None, _zsock.inbox_read())"
    got = _python(code, TRIZRE_PURE_PYTHON="1")
    assert got == "True ('python', 'TRIZRE_PURE_PYTHON is set')"


def test_inbox_read_says_which_read_runs_and_why() -> None:
    if _zsock._zread is not None:
        assert _zsock.inbox_read() == ("compiled", _zsock._zread.__file__)
    else:
        assert _zsock.inbox_read()[0] == "python"
    # The import failing: with the file there (built), its error is the why;
    # without it (a wheel's install), how to build it.
    code = (
        "import sys; sys.modules['trizre.transport._zread'] = None\n"
        "from trizre.transport import _zsock; print(_zsock.inbox_read())"
    )
    read, why = ast.literal_eval(_python(code))
    assert read == "python"
    if _zsock._zread_built():
        halted = "import of trizre.transport._zread halted; None in sys.modules"
        assert why == f"built, but it did not load: {halted}"
    else:
        assert why == "not built: run make, or scripts/build_ext.py; see the README"


async def test_a_router_reads_each_message_whole_or_as_oversize(read_way: str) -> None:
    with trio.fail_after(10):
        async with router_and_dealer() as (router, dealer):
            for message in MESSAGES:
                await dealer.send(message)
            got = await _take(router, len(MESSAGES))
    expected = [
        [b"me", *message] if sum(map(len, message)) <= LIMIT else [b"me", OVERSIZE]
        for message in MESSAGES
    ]
    assert got == expected
    assert all(type(frame) is bytes for message in got for frame in message[:1])
    assert router.received_messages == len(MESSAGES)
    assert router.received_bytes == sum(sum(map(len, message)) for message in MESSAGES)
    # A message's frames are bytes: it cannot be in a cycle, so the compiled
    # read hides it from the cyclic GC (tracked, a flood of them made
    # collections a tenth of a reader's time, issue 28); the values are as
    # read either way (above).
    assert [gc.is_tracked(message) for message in got] == [read_way == "pure"] * len(MESSAGES)


async def test_a_dealer_reads_every_frame_and_counts_no_octets(read_way: str) -> None:
    with trio.fail_after(10):
        async with router_and_dealer() as (router, dealer):
            await dealer.send([b"hello"])  # the router learns the dealer's identity
            await _take(router, 1)
            for message in MESSAGES:
                await router.send([b"me", *message])
            got = await _take(dealer, len(MESSAGES))
    assert got == MESSAGES  # no limit on a DEALER
    assert dealer.received_messages == len(MESSAGES)
    assert dealer.received_bytes == 0


async def test_a_batch_holds_at_most_max_messages_and_keeps_the_order(read_way: str) -> None:
    with trio.fail_after(10):
        async with router_and_dealer() as (router, dealer):
            for seq in range(50):
                await dealer.send([b"%d" % seq])
            got = await _take(router, 50, max_messages=3)
    assert got == [[b"me", b"%d" % seq] for seq in range(50)]


async def test_sends_reach_the_peer_whole_and_in_order(read_way: str) -> None:
    # The first send of a turn goes through ZSocket._send, the rest are held
    # and handed over together (_flush_cork): both compiled, or both pyzmq.
    sender = ZSocket(_socket(zmq.DEALER), cork=True)
    receiver = ZSocket(_socket(zmq.DEALER))
    like = [bytearray(b"bytes-like"), memoryview(b"view"), b"plain"]
    try:
        receiver.zmq_socket.bind(f"inproc://sends-{uuid.uuid4()}")
        sender.zmq_socket.connect(receiver.zmq_socket.getsockopt_string(zmq.LAST_ENDPOINT))
        with trio.fail_after(10):
            for message in MESSAGES:
                assert sender.send_nowait(message)
            assert sender._cork  # held: handed over when the turn ends
            await sender.send(like)  # type: ignore[arg-type]
            got = await _take(receiver, len(MESSAGES) + 1)
    finally:
        sender.close()
        receiver.close()
    assert got == [*MESSAGES, [b"bytes-like", b"view", b"plain"]]


def _inproc_pair(hwm: int) -> tuple[zmq.Socket[Any], zmq.Socket[Any]]:
    """A DEALER whose peer takes ``hwm`` messages before libzmq says EAGAIN.

    Over inproc the pipe holds the sender's SNDHWM plus the receiver's
    RCVHWM; with nothing read, that many sends succeed, then none.
    """
    tx, rx = context().socket(zmq.DEALER), context().socket(zmq.DEALER)
    tx.setsockopt(zmq.SNDHWM, hwm - 1)
    rx.setsockopt(zmq.RCVHWM, 1)
    endpoint = f"inproc://hwm-{uuid.uuid4()}"
    rx.bind(endpoint)
    tx.connect(endpoint)
    return tx, rx


def test_write_hands_over_oldest_first_until_libzmq_is_full() -> None:
    zread = _compiled()
    tx, rx = _inproc_pair(hwm=3)
    try:
        held = deque([(b"%d" % i, b"tail") for i in range(5)])
        assert zread.write(tx.underlying, held) == zmq.EAGAIN
        assert list(held) == [(b"3", b"tail"), (b"4", b"tail")]  # the rest stay, in order
        assert [rx.recv_multipart(zmq.NOBLOCK) for _ in range(3)] == [
            [b"%d" % i, b"tail"] for i in range(3)
        ]
        assert tx.poll(5000, zmq.POLLOUT)  # libzmq tells the sender of the room
        assert zread.write(tx.underlying, held) == 0  # the rest go
        assert not held
        assert [rx.recv_multipart(zmq.NOBLOCK) for _ in range(2)] == [
            [b"3", b"tail"],
            [b"4", b"tail"],
        ]
        assert zread.write(tx.underlying, deque()) == 0
    finally:
        tx.close(linger=0)
        rx.close(linger=0)


def test_a_bad_message_raises_before_any_of_its_frames_is_sent() -> None:
    zread = _compiled()
    tx, rx = _inproc_pair(hwm=10)
    try:
        with pytest.raises(TypeError):
            zread.send(tx.underlying, [b"first", "not bytes"])
        with pytest.raises(ValueError, match="at least one frame"):
            zread.send(tx.underlying, [])
        held = deque([(b"ok",), (b"first", 7), (b"after",)])
        with pytest.raises(TypeError):
            zread.write(tx.underlying, held)
        assert list(held) == [(b"first", 7), (b"after",)]  # sent ones removed, the bad one kept
        assert zread.send(tx.underlying, (b"last",)) == 0
        # No frame of a bad message went: the next message is not glued to it.
        assert [rx.recv_multipart(zmq.NOBLOCK) for _ in range(2)] == [[b"ok"], [b"last"]]
        with pytest.raises(zmq.Again):
            rx.recv_multipart(zmq.NOBLOCK)
    finally:
        tx.close(linger=0)
        rx.close(linger=0)


async def test_a_send_libzmq_refuses_raises_its_error(read_way: str) -> None:
    # A SUB socket cannot send: libzmq says ENOTSUP, raised as pyzmq raises it.
    sub = ZSocket(context().socket(zmq.SUB), cork=True)
    try:
        with pytest.raises(zmq.ZMQError) as refused:
            sub.send_nowait([b"x"])
        assert refused.value.errno == zmq.ENOTSUP
        sub._cork = deque([(b"held",)])  # as if held in an earlier turn
        with pytest.raises(zmq.ZMQError) as refused:
            sub._flush_cork()
        assert refused.value.errno == zmq.ENOTSUP
        assert list(sub._cork) == [(b"held",)]
    finally:
        sub.close()


def test_libzmq_errors_are_raised_as_pyzmq_raises_them() -> None:
    assert type(_zsock._zmq_error(zmq.ETERM)) is zmq.ContextTerminated
    error = _zsock._zmq_error(zmq.ENOTSOCK)
    assert type(error) is zmq.ZMQError and error.errno == zmq.ENOTSOCK


PEER = uuid.UUID(int=7)


def _frames(*frames: bytes | bytearray) -> tuple[bytes, ...]:
    """A tuple made at run time, as received ones are (a literal's is a constant, untracked)."""
    return tuple(list(frames))  # type: ignore[arg-type]


def _data_events() -> list[object]:
    return [
        Whisper(PEER, "bob", _frames(b"one")),
        Shout(PEER, "bob", "g", _frames(b"one", b"two")),
        Whisper(PEER, "bob", _frames(b"mutable", bytearray(b"could hold anything"))),
        Shout(PEER, "bob", "g", ()),
        Enter(PEER, "bob", {"k": "v"}, "tcp://127.0.0.1:5555"),
    ]


def test_untrack_events_untracks_only_what_cannot_be_in_a_cycle(read_way: str) -> None:
    events = _data_events()
    _zsock.untrack_events(events, (Whisper, Shout))
    tracked = [(gc.is_tracked(e), gc.is_tracked(e.frames)) for e in events[:4]]  # type: ignore[attr-defined]
    if read_way == "pure":
        assert tracked == [(True, True)] * 3 + [(True, False)]  # () is a shared constant
    else:
        # Bytes-only frames: the event and its tuple.  Any other frame (here
        # a bytearray; a subclass of bytes could carry attributes): both
        # left as they are.
        assert tracked == [(False, False), (False, False), (True, True), (False, False)]
    assert gc.is_tracked(events[4])  # not one of the kinds named
    assert events == _data_events()  # untracking changes no value


def test_untrack_events_leaves_kinds_not_named_alone() -> None:
    _compiled()
    events = _data_events()
    _zsock.untrack_events(events, (Shout,))
    assert [gc.is_tracked(e) for e in events] == [True, False, True, False, True]
