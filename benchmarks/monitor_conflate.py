"""Why a monitor's reader is never ZMQ_CONFLATE: libzmq aborts the process (issue 28).

Measured for ``LinkWatch``, which read every link's monitor with one
socket until the watch moved to the inbox (``InboxWatch``, one monitor a
node); its reader is not conflated for the same reason.

A conflated pipe keeps one message, and libzmq's monitor sends each event
as two frames; a reader that finds the first alone, then asks for the
second before the I/O thread wrote it, trips ``zmq_assert (!_more)`` in
``fq.cpp``.  Here 50 DEALERs reconnect every millisecond to a loopback
listener that closes each connection at once, each monitored into one
conflated PULL that sleeps ``--pause`` between reads.

    python benchmarks/monitor_conflate.py [--links 50] [--seconds 40] [--pause 0.0001]

Expect "Assertion failed: !_more (src/fq.cpp:80)" and exit status 134
(SIGABRT) within the time (it did in 40 s, 2026-11-30); exit 0 means it
did not happen this time.  ``--pause 0`` reads as fast as it can, which
rarely shows it (150,000 events in 20 s did not).  Loopback only.
"""

from __future__ import annotations

import argparse
import socket
import threading
import time
from typing import Any

import zmq


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--links", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=40.0)
    parser.add_argument("--pause", type=float, default=0.0001, help="seconds between reads")
    args = parser.parse_args()

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1000)
    port = listener.getsockname()[1]

    def refuse() -> None:
        while True:
            connection, _ = listener.accept()
            connection.close()

    threading.Thread(target=refuse, daemon=True).start()
    ctx: zmq.Context[Any] = zmq.Context()
    reader = ctx.socket(zmq.PULL)
    reader.setsockopt(zmq.CONFLATE, 1)
    dealers = []
    for i in range(args.links):
        dealer = ctx.socket(zmq.DEALER)
        dealer.setsockopt(zmq.LINGER, 0)
        dealer.setsockopt(zmq.RECONNECT_IVL, 1)
        dealer.setsockopt(zmq.RECONNECT_IVL_MAX, 1)
        dealer.monitor(f"inproc://conflate-{i}", zmq.EVENT_DISCONNECTED)
        reader.connect(f"inproc://conflate-{i}")
        dealer.connect(f"tcp://127.0.0.1:{port}")
        dealers.append(dealer)
    events = 0
    end = time.monotonic() + args.seconds
    while time.monotonic() < end:
        try:
            reader.recv_multipart(zmq.NOBLOCK)
            events += 1
        except zmq.Again:
            continue
        if args.pause:
            time.sleep(args.pause)
    print(f"{events:,} events in {args.seconds:.0f} s, no abort this time")
    for dealer in dealers:
        dealer.disable_monitor()
    ctx.destroy(linger=0)


if __name__ == "__main__":
    main()
