"""Two ZRE nodes on loopback greet each other, and what that looks like on the wire.

The smallest end-to-end use of trizre's public API: two nodes find each
other by UDP beacon on ``lo``, one WHISPERs two frames to the other, and the
receiver prints the event.  Then the same WHISPER is encoded with the public
wire codec (``trizre.wire``) to show the ZRE frames that crossed the link.

    python examples/hello_loopback.py
"""

from __future__ import annotations

import trio

import trizre
from trizre import wire


async def main() -> None:
    with trio.fail_after(10):
        # interface="lo": beacons go to 127.255.255.255 and never leave this machine.
        async with (
            trizre.open_node("alice", interface="lo", headers={"X-DEMO": "yes"}) as alice,
            trizre.open_node("bob", interface="lo") as bob,
        ):
            events = bob.events()
            await alice.wait_for_peer("bob")
            await alice.whisper(bob.uuid, b"hello,", "Zoë".encode())
            async for event in events:
                if isinstance(event, trizre.Enter):
                    print(f"bob got Enter from {event.name}, headers {dict(event.headers)}")
                elif isinstance(event, trizre.Whisper):
                    print(f"bob got Whisper from {event.name}: {event.frames}")
                    break
            # The same message as ZRE frames (the sequence number is alice's
            # second message to bob: HELLO was the first).
            message = wire.Whisper(2, (b"hello,", "Zoë".encode()))
            frames = wire.encode(message)
            print(f"on the wire: {frames}")
            print(f"decoded: {wire.decode(frames)}")


if __name__ == "__main__":
    trio.run(main)
