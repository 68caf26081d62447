"""A Majordomo worker made with majortomo, for the bridge's tests.

    python tests/support/mdp_worker.py ENDPOINT SERVICE MODE

MODE ``upper`` answers each request's frames upper-cased; ``partial``
answers with a PARTIAL then a FINAL; ``hang`` says it got the request and
never answers (the test kills it).  Prints ``ready`` once connected and
``request FRAMES`` for each request; reconnects when the broker says
DISCONNECT (a restarted bridge does, to workers it does not know).
"""

from __future__ import annotations

import sys
import time

from majortomo import Worker
from majortomo.error import Disconnected


def main(endpoint: str, service: str, mode: str) -> None:
    worker = Worker(endpoint, service.encode(), heartbeat_interval=0.5, heartbeat_timeout=3.0)
    worker.connect()
    print("ready", flush=True)
    while True:
        try:
            client, frames = worker.wait_for_request()
        except Disconnected:
            worker.connect(reconnect=True)
            continue
        print("request", b" ".join(frames).decode(), flush=True)
        if mode == "hang":
            time.sleep(3600)
        elif mode == "partial":
            worker.send_reply_partial(client, [b"part"])
            worker.send_reply_final(client, [frame.upper() for frame in frames])
        else:
            worker.send_reply_final(client, [frame.upper() for frame in frames])


if __name__ == "__main__":
    main(*sys.argv[1:4])
