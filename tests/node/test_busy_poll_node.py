"""The low-latency mode reaches a node's TCP inbox (issue 28), and only when asked."""

from __future__ import annotations

import pytest
import trio

import trizre
from tests.support.nodes import next_event, open_pair
from trizre.transport._zsock import ZSocket


async def test_whispers_over_tcp_with_the_mode_on_busy_poll_the_inbox() -> None:
    with trio.fail_after(20):
        async with open_pair(local_links=False, busy_poll=50e-6) as (a, b):
            assert a.config.busy_poll == 50e-6
            inbox = a._inbox
            assert isinstance(inbox, ZSocket)
            assert inbox.busy_poll == 50e-6
            a_events, b_events = a.events(), b.events()
            await a.wait_for_peer(b.uuid)
            await b.wait_for_peer(a.uuid)

            async def echo() -> None:
                while True:
                    got = await next_event(b_events, trizre.Whisper)
                    await b.whisper(a.uuid, got.frames[0].replace(b"ping", b"pong"))

            async with trio.open_nursery() as nursery:
                nursery.start_soon(echo)
                for i in range(20):  # a round trip at a time
                    await a.whisper(b.uuid, b"ping %d" % i)
                    # b's task has not run yet: a waits for the pong, and
                    # from the second on it polls first (a message armed it).
                    back = await next_event(a_events, trizre.Whisper)
                    assert back.frames == (b"pong %d" % i,)
                nursery.cancel_scope.cancel()
            # Whether a poll catches the pong is timing, not asserted.
            assert inbox.busy_polls >= 19
            assert a.statistics().messages_in >= 20


async def test_the_mode_is_off_by_default() -> None:
    with trio.fail_after(20):
        async with open_pair(local_links=False) as (a, b):
            events = a.events()
            await a.wait_for_peer(b.uuid)
            await b.wait_for_peer(a.uuid)
            await b.whisper(a.uuid, b"hello")
            await next_event(events, trizre.Whisper)
            assert a.config.busy_poll == 0.0
            assert isinstance(a._inbox, ZSocket)
            assert a._inbox.busy_polls == 0


@pytest.mark.parametrize(
    ("value", "kind"),
    [
        (-1.0, trizre.ConfigValueError),
        (0.5, trizre.ConfigValueError),
        ("1", trizre.ConfigTypeError),
    ],
)
async def test_open_node_refuses_a_bad_busy_poll(value: object, kind: type[Exception]) -> None:
    with trio.fail_after(5), pytest.raises(kind, match="busy_poll"):
        async with trizre.open_node("x", interface="lo", busy_poll=value):  # type: ignore[arg-type]
            pass
