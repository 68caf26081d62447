"""A round trip's critical path in the pinging process: from the reply's wake-up to the next send.

    PYTHONPATH=<tree> python benchmarks/wake_send.py [--round-trips 20000] [--repeat 3]

``trio_floor.py``'s pingpong, the least Trio program's and trizre's, with
two intervals timed in the pinging process (``time.perf_counter``):

* **wake-up → send**: from Trio's ``wait_readable`` returning to the
  first frame of the next request handed to libzmq.  This is the part of
  a round trip that is the pinging process's own: the echo waits for it.
* **send → park**: from that send to the next ``wait_readable``; work
  done here overlaps the echo's (on a second core).

Two processes' CPU a round trip can be alike while their rates are not:
what counts for latency is how much of it is on the path between a
message and its answer.  The hooks (a wrapper around
``trio.lowlevel.wait_readable`` and around the send) add the same few
microseconds to both programs, so compare the two, not the figures with
``trio_floor.py``'s.  Loopback only; the echo is ``trio_floor.py``'s.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import trio
import zmq

sys.path.insert(0, str(Path(__file__).resolve().parent))
import trio_floor  # the round trips themselves, unchanged

from trizre.transport import _zsock


class _Timer:
    """Records the two intervals while its hooks are installed."""

    def __init__(self) -> None:
        self.woke: float | None = None
        self.sent: float | None = None
        self.wake_to_send: list[float] = []
        self.send_to_park: list[float] = []

    async def wait_readable(self, real: Callable[[Any], Any], fd: Any) -> None:
        if self.sent is not None:
            self.send_to_park.append(time.perf_counter() - self.sent)
            self.sent = None
        await real(fd)
        self.woke = time.perf_counter()

    def before_send(self) -> None:
        if self.woke is not None:
            self.wake_to_send.append(time.perf_counter() - self.woke)
            self.woke = None

    def after_send(self) -> None:
        if self.sent is None:
            self.sent = time.perf_counter()


class _HookedSends:
    """The compiled module (``_zread``) with its two sends wrapped, the rest as it is."""

    def __init__(self, module: Any, hooked: Callable[[Callable[..., Any]], Callable[..., Any]]):
        self._module = module
        self.send = hooked(module.send)
        self.write = hooked(module.write)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._module, name)


def _timed(program: str, count: int) -> tuple[float, float, float]:
    """Round trips/s, median wake-up → send and send → park (µs) of one run.

    ``program``: ``"trizre"``, or anything else for the least Trio program.
    """
    timer = _Timer()
    real_wait = trio.lowlevel.wait_readable

    async def wait_readable(fd: Any) -> None:
        await timer.wait_readable(real_wait, fd)

    def hooked(send: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            timer.before_send()
            result = send(*args, **kwargs)
            timer.after_send()
            return result

        return wrapper

    trio.lowlevel.wait_readable = wait_readable
    try:
        if program == "trizre":
            # Its sends go through the compiled module when it is built,
            # through pyzmq's backend otherwise: the one in use is hooked.
            real_send, compiled = _zsock._backend_send, _zsock._zread
            if compiled is None:
                _zsock._backend_send = hooked(real_send)  # type: ignore[misc]
            else:
                _zsock._zread = _HookedSends(compiled, hooked)
            try:
                rate, _ = trio_floor.trizre_pingpong(count)
            finally:
                _zsock._backend_send = real_send  # type: ignore[misc]
                _zsock._zread = compiled
        else:
            real_socket_send = zmq.Socket.send
            zmq.Socket.send = hooked(real_socket_send)  # type: ignore[method-assign]
            try:
                rate, _ = trio_floor.pingpong("trio", count)
            finally:
                zmq.Socket.send = real_socket_send  # type: ignore[method-assign]
    finally:
        trio.lowlevel.wait_readable = real_wait
    # The warm-up's intervals too: both programs have the same number of them.
    return (
        rate,
        1e6 * statistics.median(timer.wake_to_send),
        1e6 * statistics.median(timer.send_to_park),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--round-trips", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    runs: dict[str, list[tuple[float, float, float]]] = {"trio floor": [], "trizre": []}
    for _ in range(args.repeat):  # alternated, a run each
        for program, results in runs.items():
            results.append(_timed(program, args.round_trips))
    print(f"127.0.0.1, 100 B, median (min-max) of {args.repeat}, hooks in both")
    print()
    print("| program | round trips/s | wake-up → send, µs | send → park, µs |")
    print("|---|---|---|---|")
    for program, results in runs.items():
        columns = ((0, 0), (1, 1), (2, 1))  # (field, digits)
        cells = [trio_floor._median([r[i] for r in results], d) for i, d in columns]
        print(f"| {program} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
