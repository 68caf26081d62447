"""What a node receives is out of the cyclic GC's sight, with the compiled read (issue 28).

A flood's events and messages, tracked, made collections about a tenth of
a receiving thread's time: they cannot be in a cycle, so they are
untracked as they are made (``_zread.pyx``).  The pure-Python read leaves
them tracked; values are the same either way.
"""

from __future__ import annotations

import gc

import pytest
import trio

import trizre
from tests.support.nodes import next_event, open_pair
from trizre.transport import _zsock


@pytest.mark.parametrize("max_buffer", [1000, 1], ids=["runs", "one at a time"])
@pytest.mark.parametrize("local_links", [False, True], ids=["tcp", "in memory"])
async def test_received_whispers_and_shouts_are_untracked(
    local_links: bool, max_buffer: int
) -> None:
    # A subscriber with room for one event takes the rest one at a time,
    # each waiting for room: the receive path's other way.
    compiled = _zsock._zread is not None
    with trio.fail_after(20):
        async with open_pair(local_links=local_links) as (a, b):
            events = a.events(max_buffer=max_buffer)
            await a.wait_for_peer(b.uuid)
            await b.wait_for_peer(a.uuid)
            b_events = b.events()
            await a.join("g")
            await next_event(b_events, trizre.Join, lambda e: e.peer == a.uuid)
            for i in range(50):
                await b.whisper(a.uuid, b"w%d" % i)
                await b.shout("g", b"s%d" % i, b"more")
            got: list[trizre.Whisper | trizre.Shout] = []
            async for event in events:
                if isinstance(event, trizre.Whisper | trizre.Shout):
                    got.append(event)
                    if len(got) == 100:
                        break
    assert sorted(e.frames[0] for e in got) == sorted(
        [b"w%d" % i for i in range(50)] + [b"s%d" % i for i in range(50)]
    )
    tracked = [gc.is_tracked(e) or gc.is_tracked(e.frames) for e in got]
    assert tracked == [not compiled] * 100
