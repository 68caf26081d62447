"""A userspace Ethernet switch with loss, delay, reordering and link cuts (``make chaos``).

``make chaos`` joins each of its network namespaces to this switch by a
TAP device: the switch creates ``PREFIX0``, ``PREFIX1``… (``--ports N``),
the orchestrator moves each into its namespace, and every frame a
namespace sends reaches the others only through here.  The impairments
are what ``tc netem`` would add on each link, done in userspace because
the kernels we run on do not all ship ``sch_netem``:

* ``loss20``: 20 % of frames lost, each delayed 5 ± 5 ms (uniform, so
  frames overtake each other);
* ``reorder``: 1 % lost, 5 ms delay, but a quarter of the frames go at
  once (netem's ``reorder 25%``), overtaking those before them;
* ``clean``: none.

Loss and delay are drawn per frame and per destination port (a broadcast
beacon may reach some namespaces and not others).  A cut port neither
sends nor receives.  Commands arrive one per line on stdin: ``profile
NAME``, ``cut PORT``, ``restore PORT``; ``ready`` is printed once the TAP
devices exist, and every command is answered ``ok`` (or ``error ...``).

:class:`Switch` is the decision, without I/O: frames and times in,
``(due, port, frame)`` out, so it is tested on exact times with a seeded
random generator (``tests/system/test_chaos.py``).
"""

from __future__ import annotations

import argparse
import fcntl
import heapq
import os
import random
import selectors
import struct
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Final

BROADCAST_BIT: Final = 0x01  # the group bit of a destination MAC address


@dataclass(frozen=True)
class Impairment:
    """What a link does to each frame (netem's loss, delay, jitter, reorder)."""

    loss: float = 0.0
    delay: float = 0.0
    jitter: float = 0.0
    reorder: float = 0.0  # this share of frames goes at once, skipping the delay

    def delay_for(self, rng: random.Random) -> float | None:
        """Seconds to hold one frame, or ``None`` to drop it."""
        if rng.random() < self.loss:
            return None
        if self.reorder and rng.random() < self.reorder:
            return 0.0
        if self.jitter:
            return max(0.0, self.delay + rng.uniform(-self.jitter, self.jitter))
        return self.delay


PROFILES: Final = {
    "clean": Impairment(),
    "loss20": Impairment(loss=0.20, delay=0.005, jitter=0.005),
    "reorder": Impairment(loss=0.01, delay=0.005, reorder=0.25),
}


@dataclass
class Switch:
    """A learning switch whose forwarding is impaired (no I/O).

    ``receive(port, frame, now)`` gives the deliveries for one frame as
    ``(due, port, frame)``; the caller writes each frame to its port at
    ``due``.  Frames to a MAC address the switch has not seen, and
    broadcast or multicast frames, go to every other port.
    """

    ports: int
    impairment: Impairment = field(default_factory=Impairment)
    rng: random.Random = field(default_factory=random.Random)
    cut: set[int] = field(default_factory=set)
    _where: dict[bytes, int] = field(default_factory=dict)
    dropped: int = 0
    forwarded: int = 0

    def receive(self, port: int, frame: bytes, now: float) -> Iterator[tuple[float, int, bytes]]:
        if len(frame) < 14 or port in self.cut:
            return
        destination, source = frame[:6], frame[6:12]
        if not source[0] & BROADCAST_BIT:
            self._where[source] = port
        known = None if destination[0] & BROADCAST_BIT else self._where.get(destination)
        targets = [known] if known is not None else range(self.ports)
        for target in targets:
            if target == port or target in self.cut:
                continue
            delay = self.impairment.delay_for(self.rng)
            if delay is None:
                self.dropped += 1
                continue
            self.forwarded += 1
            yield now + delay, target, frame


# ------------------------------------------------------------------ TAP I/O

_TUNSETIFF: Final = 0x400454CA
_IFF_TAP: Final = 0x0002
_IFF_NO_PI: Final = 0x1000


def open_tap(name: str) -> int:
    """A non-blocking file descriptor on a new TAP device ``name``."""
    fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK)
    fcntl.ioctl(fd, _TUNSETIFF, struct.pack("16sH", name.encode(), _IFF_TAP | _IFF_NO_PI))
    return fd


def command(switch: Switch, line: str, names: list[str]) -> str:
    """Apply one control line; the answer to print."""
    words = line.split()
    if len(words) == 2 and words[0] == "profile" and words[1] in PROFILES:
        switch.impairment = PROFILES[words[1]]
        return "ok"
    if len(words) == 2 and words[0] in ("cut", "restore") and words[1] in names:
        port = names.index(words[1])
        if words[0] == "cut":
            switch.cut.add(port)
        else:
            switch.cut.discard(port)
        return "ok"
    return f"error: cannot do {line.strip()!r}"


def serve(prefix: str, ports: int, profile: str, seed: int | None) -> None:
    """Create the TAP devices, say ``ready``, and switch until stdin closes."""
    names = [f"{prefix}{i}" for i in range(ports)]
    fds = [open_tap(name) for name in names]
    switch = Switch(ports, PROFILES[profile], random.Random(seed))
    selector = selectors.DefaultSelector()
    for port, fd in enumerate(fds):
        selector.register(fd, selectors.EVENT_READ, port)
    os.set_blocking(sys.stdin.fileno(), False)
    selector.register(sys.stdin.fileno(), selectors.EVENT_READ, None)
    print("ready", flush=True)
    due: list[tuple[float, int, int, bytes]] = []  # (time, order, port, frame)
    order = 0
    pending_input = ""
    while True:
        timeout = max(0.0, due[0][0] - time.monotonic()) if due else None
        for key, _ in selector.select(timeout):
            if key.data is None:
                chunk = os.read(sys.stdin.fileno(), 4096).decode()
                if not chunk:
                    return  # the orchestrator is gone: so are we
                pending_input += chunk
                while "\n" in pending_input:
                    line, pending_input = pending_input.split("\n", 1)
                    print(command(switch, line, names), flush=True)
                continue
            port = key.data
            now = time.monotonic()
            while True:
                try:
                    frame = os.read(fds[port], 65536)
                except BlockingIOError:
                    break
                for when, target, data in switch.receive(port, frame, now):
                    heapq.heappush(due, (when, order, target, data))
                    order += 1
        now = time.monotonic()
        while due and due[0][0] <= now:
            _, _, target, data = heapq.heappop(due)
            if target in switch.cut:
                continue  # cut while the frame was on the wire
            try:
                os.write(fds[target], data)
            except (BlockingIOError, OSError):
                switch.dropped += 1  # the device's queue is full or it is down: lost


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--prefix", required=True, help="TAP device names: PREFIX0, PREFIX1...")
    parser.add_argument("--ports", type=int, required=True)
    parser.add_argument("--profile", choices=sorted(PROFILES), default="clean")
    parser.add_argument("--seed", type=int)
    args = parser.parse_args()
    serve(args.prefix, args.ports, args.profile, args.seed)


if __name__ == "__main__":
    main()
