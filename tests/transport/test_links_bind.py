"""bind_when_free: a port still being released is waited for, briefly; a held one is named."""

from __future__ import annotations

import socket

import pytest
import trio
import zmq

from trizre.transport._links import REBIND_GRACE, bind_when_free
from trizre.transport._zsock import context


def _held_port() -> socket.socket:
    holder = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    return holder


async def test_a_port_released_within_the_grace_is_bound(autojump_clock: trio.abc.Clock) -> None:
    holder = _held_port()
    port = holder.getsockname()[1]
    sock = context().socket(zmq.ROUTER)
    try:
        with trio.fail_after(5):
            async with trio.open_nursery() as nursery:

                async def release() -> None:
                    await trio.sleep(REBIND_GRACE / 2)
                    holder.close()

                nursery.start_soon(release)
                await bind_when_free(sock, f"tcp://127.0.0.1:{port}", "the test's ROUTER")
                assert trio.current_time() >= REBIND_GRACE / 2  # it did wait
        assert sock.getsockopt_string(zmq.LAST_ENDPOINT) == f"tcp://127.0.0.1:{port}"
    finally:
        holder.close()
        sock.close(linger=0)


async def test_a_port_held_past_the_grace_fails_naming_it(autojump_clock: trio.abc.Clock) -> None:
    holder = _held_port()
    port = holder.getsockname()[1]
    sock = context().socket(zmq.ROUTER)
    try:
        with trio.fail_after(5), pytest.raises(zmq.ZMQError, match=f"the test's ROUTER.*{port}"):
            await bind_when_free(sock, f"tcp://127.0.0.1:{port}", "the test's ROUTER")
        assert trio.current_time() >= REBIND_GRACE
    finally:
        holder.close()
        sock.close(linger=0)
