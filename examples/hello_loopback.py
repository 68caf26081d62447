"""Two ZRE mailboxes on loopback greet each other with real ZRE frames.

The smallest end-to-end use of trizre's foundation: the wire codec encodes
a HELLO and a two-frame WHISPER, the Trio socket layer carries them from a
DEALER to a ROUTER over tcp://127.0.0.1, and the receiver decodes them.

    python examples/hello_loopback.py
"""

from __future__ import annotations

import uuid

import trio
import zmq

from trizre._zsock import ZSocket, context
from trizre.wire import Hello, Whisper, decode, encode


async def main() -> None:
    alice, bob = uuid.uuid4(), uuid.uuid4()
    with trio.fail_after(5):
        inbox = ZSocket(context().socket(zmq.ROUTER))  # bob's mailbox
        inbox.zmq_socket.bind("tcp://127.0.0.1:*")
        endpoint = inbox.zmq_socket.getsockopt_string(zmq.LAST_ENDPOINT)
        outbox = ZSocket(context().socket(zmq.DEALER))  # alice's link to bob
        outbox.zmq_socket.setsockopt(zmq.IDENTITY, b"\x01" + alice.bytes)
        outbox.zmq_socket.connect(endpoint)
        async with inbox, outbox:
            hello = Hello(1, "tcp://127.0.0.1:0", ("chat",), 1, "alice", {"X-DEMO": "yes"})
            await outbox.send(encode(hello))
            await outbox.send(encode(Whisper(2, (b"hello,", "Zoë".encode()))))
            for _ in range(2):
                identity, *frames = await inbox.receive()
                sender = uuid.UUID(bytes=identity[1:])
                message = decode(frames)
                print(f"bob {bob.hex[:8]} got {type(message).__name__} from {sender.hex[:8]}:")
                print(f"    {message}")


if __name__ == "__main__":
    trio.run(main)
