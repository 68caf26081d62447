"""One process of ``bench_zre.py``: ZRE nodes (trizre or pyre) or a raw pyzmq socket.

Started by the benchmark inside a network namespace it created
(``ip netns exec NS python benchmarks/zre_worker.py --impl pyre ...``), or,
for trizre and raw pyzmq only, on loopback (``--interface lo``) when
namespaces are unavailable.  pyre always beacons on the first non-loopback
interface, so this script refuses to start pyre unless it runs inside such
a namespace (``tests.interop.ensure_in_test_namespace``); trizre on any
interface but ``lo`` is held to the same check.

It speaks JSON lines: commands on stdin, events on stdout.  Every event
carries ``t``, ``time.monotonic()`` (CLOCK_MONOTONIC is system-wide on
Linux, so times from processes in different namespaces compare).

Commands::

    {"cmd": "mode", "mode": "echo"}           whispers received are sent back
    {"cmd": "count", "n": N, "slow": false, "stall": S}
        -> {"event": "counting"}, later {"event": "counted", "nodes": [...]}
        each local node expects N messages (sequence numbers 0..N-1); done when
        every node has all of them, or after S seconds without progress
        (raw: "frames": true receives frame by frame, the cheapest pyzmq way,
        instead of recv_multipart)
    {"cmd": "pingpong", "n": N, "size": B}   -> {"event": "pingpong", ...}
    {"cmd": "flood", "n": N, "size": B}      -> {"event": "sent", "first": t, "last": t}
                                              (raw: "whisper_frames": true sends
                                              a WHISPER's two frames)
    {"cmd": "shout", "group": G, "n": N, "size": B}   -> {"event": "sent", ...}
                                              (raw: a SHOUT's frames to every DEALER)
    {"cmd": "status"}                        -> {"event": "status", "peers": [...]}
    {"cmd": "stop"}                          (stdin EOF means the same)

Unprompted events: ``started`` (with ``t0``, the time just before the first
node was created), ``mesh`` (every local node sees ``--expect-peers`` peers,
counting only members of ``--expect-group`` if given), ``exit`` (a peer left).

Before a command that opens a measured window, every worker collects its
heap once (:func:`settle`): a run measures the steady state, not the
collection its mesh's setup left due.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import logging
import os
import resource
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.interop import ensure_in_test_namespace

monotonic = time.monotonic
perf_counter = time.perf_counter
SLOW_EVERY = 1000  # the slow reader sleeps 1 ms after every 1000 messages
SLOW_SLEEP = 0.001


def emit(event: str, **fields: Any) -> None:
    fields["t"] = monotonic()
    fields["cpu"] = time.process_time()  # this process, all threads (libzmq's too)
    sys.stdout.write(json.dumps({"event": event, **fields}) + "\n")
    sys.stdout.flush()


def payload(seq: int, pad: bytes) -> bytes:
    """A message: its 8-byte big-endian sequence number, then padding."""
    return seq.to_bytes(8, "big") + pad


def padding(size: int) -> bytes:
    return b"x" * max(size - 8, 0)


class Counter:
    """Received, lost, reordered and duplicated messages of one run on one node."""

    __slots__ = ("dups", "expected", "first", "high", "last", "received", "reordered", "seen")

    def __init__(self, expected: int) -> None:
        self.expected = expected
        self.seen = bytearray(expected)
        self.received = 0
        self.high = -1
        self.reordered = 0
        self.dups = 0
        self.first = 0.0
        self.last = 0.0

    def add(self, frame: bytes) -> bool:
        """Count one message; True once all ``expected`` have arrived."""
        seq = int.from_bytes(frame[:8], "big")
        now = monotonic()
        if not self.received:
            self.first = now
        self.last = now
        if seq >= self.expected or self.seen[seq]:
            self.dups += 1
            return False
        self.seen[seq] = 1
        if seq < self.high:
            self.reordered += 1
        else:
            self.high = seq
        self.received += 1
        return self.received >= self.expected

    @property
    def done(self) -> bool:
        return self.received >= self.expected

    def report(self) -> dict[str, Any]:
        return {
            "received": self.received,
            "lost": self.expected - self.received,
            "reordered": self.reordered,
            "dups": self.dups,
            "first": self.first,
            "last": self.last,
        }


def rtt_summary(rtts: list[float], elapsed: float) -> dict[str, Any]:
    ordered = sorted(rtts)

    def pct(p: float) -> float:
        return ordered[min(len(ordered) - 1, int(p * len(ordered)))] * 1e6

    return {"rate": len(rtts) / elapsed, "p50_us": pct(0.50), "p99_us": pct(0.99)}


class Local:
    """What the worker tracks about one local node (either implementation)."""

    def __init__(self, index: int, expect_group: str | None) -> None:
        self.index = index
        self.expect_group = expect_group
        self.peers: set[Any] = set()
        self.members: set[Any] = set()
        self.mode = "idle"  # idle | echo | count | ping
        self.counter: Counter | None = None
        self.slow = False

    def seen(self) -> int:
        return len(self.members) if self.expect_group else len(self.peers)


class Mesh:
    """Emits ``mesh`` the first time every local node sees enough peers."""

    def __init__(self, locals_: list[Local], expect: int) -> None:
        self.locals = locals_
        self.expect = expect
        self.reached = False
        self.satisfied: set[int] = set()

    def update(self, local: Local) -> None:
        if self.reached:
            return
        if local.seen() >= self.expect:
            self.satisfied.add(local.index)
        else:
            self.satisfied.discard(local.index)
        if len(self.satisfied) == len(self.locals):
            self.reached = True
            emit("mesh")

    def check_all(self) -> None:
        for local in self.locals:
            self.update(local)


def counted(locals_: list[Local], stalled: bool, **fields: Any) -> None:
    reports = []
    for local in locals_:
        if local.counter is not None:
            reports.append(local.counter.report())
        local.mode = "idle"
        local.counter = None
    emit("counted", nodes=reports, stalled=stalled, **fields)


class Detail:
    """``--detail`` (trizre): what the process did during a run, counted from inside.

    Measurement only, never on by default: a Trio instrument counts the run
    loop's waits for I/O (``epoll_wait``: each that slept is a wake-up) and
    the time it slept there, and task steps; wrappers count the senders'
    waits for room at a full peer (``PeerSession.send``) and the inbox
    batches read (``receive_batch`` of the TCP and in-memory inboxes).  The
    wrappers add a coroutine frame to what they wrap, a little CPU.  A
    ``gc.callbacks`` hook counts the cyclic collector's collections (all
    generations, and the full ones apart) and times them.
    """

    def __init__(self) -> None:
        import trio  # noqa: PLC0415

        from trizre.transport import _links, _session, _zsock  # noqa: PLC0415

        self.counts = {
            "io_waits": 0,
            "slept": 0,
            "steps": 0,
            "full_waits": 0,
            "batches": 0,
            "gc_collections": 0,
            "gc_full_collections": 0,
        }
        self.times = {"idle_s": 0.0, "full_wait_s": 0.0, "gc_s": 0.0}
        detail = self
        counts, times = self.counts, self.times

        class Instrument(trio.abc.Instrument):
            def __init__(self) -> None:
                self.at = 0.0
                self.timeout = 0.0

            def before_io_wait(self, timeout: float) -> None:
                self.at = perf_counter()
                self.timeout = timeout

            def after_io_wait(self, timeout: float) -> None:
                counts["io_waits"] += 1
                if timeout > 0:
                    counts["slept"] += 1
                    times["idle_s"] += perf_counter() - self.at

            def before_task_step(self, task: Any) -> None:
                counts["steps"] += 1

        self.instrument = Instrument()
        collecting = [0.0]

        def collection(phase: str, info: dict[str, int]) -> None:
            if phase == "start":
                collecting[0] = perf_counter()
                return
            counts["gc_collections"] += 1
            counts["gc_full_collections"] += info["generation"] == 2
            times["gc_s"] += perf_counter() - collecting[0]

        gc.callbacks.append(collection)
        send = _session.PeerSession.send

        async def counted_send(session: Any, build: Any) -> int:
            start = perf_counter()
            try:
                return await send(session, build)
            finally:
                counts["full_waits"] += 1
                times["full_wait_s"] += perf_counter() - start

        _session.PeerSession.send = counted_send  # type: ignore[method-assign]
        for cls in (_zsock.ZSocket, _links.LocalInbox):
            batch = cls.receive_batch

            async def counted_batch(sock: Any, *a: Any, _batch: Any = batch, **kw: Any) -> Any:
                taken = await _batch(sock, *a, **kw)
                counts["batches"] += 1
                return taken

            cls.receive_batch = counted_batch  # type: ignore[method-assign]
        del detail

    def start(self) -> None:
        self.base = (dict(self.counts), dict(self.times), perf_counter())

    def report(self) -> dict[str, float]:
        counts, times, at = self.base
        wall = perf_counter() - at
        out: dict[str, float] = {
            f"{key}_per_k": self.counts[key] - counts[key] for key in self.counts
        }
        out["share of the run asleep in epoll_wait"] = (
            (self.times["idle_s"] - times["idle_s"]) / wall if wall else 0.0
        )
        out["waiting at full peers, s"] = self.times["full_wait_s"] - times["full_wait_s"]
        out["share of the run in garbage collection"] = (
            (self.times["gc_s"] - times["gc_s"]) / wall if wall else 0.0
        )
        return out


# The commands that open a measured window (see settle).
MEASURED = frozenset({"mode", "count", "pingpong", "flood", "shout"})


def settle(cmd: dict[str, Any]) -> dict[str, Any]:
    """``cmd``, after one full collection of the heap if it opens a measured window.

    Every Python worker alike (trizre, pyre, raw pyzmq).  Setting up a
    mesh leaves a Python process a full collection due, and the first run
    of traffic sets it off: 15-35 ms for 5 or 10 trizre nodes, a tenth of
    a 50,000-delivery fan-out run (issue 28).  Taken here, before the
    window's clocks start, the runs measure the steady state, as zyre's
    (which has no collector) do.  What a collection costs while traffic
    flows stays in: ``--detail`` reports it.
    """
    if cmd.get("cmd") in MEASURED:
        gc.collect()
    return cmd


def read_commands(buffer: bytes, command: Callable[[dict[str, Any]], bool]) -> tuple[bytes, bool]:
    """Read stdin once and run every complete JSON line; False once told to stop (or EOF)."""
    chunk = os.read(0, 65536)
    if not chunk:
        return buffer, False
    buffer += chunk
    while b"\n" in buffer:
        line, buffer = buffer.split(b"\n", 1)
        if line.strip() and not command(settle(json.loads(line))):
            return buffer, False
    return buffer, True


def node_name(args: argparse.Namespace, index: int) -> str:
    return args.name if args.nodes == 1 else f"{args.name}{index}"


# ------------------------------------------------------------------ trizre


def run_trizre(args: argparse.Namespace) -> None:
    import trio  # noqa: PLC0415

    import trizre  # noqa: PLC0415

    whisper_t, shout_t = trizre.Whisper, trizre.Shout
    enter_t, exit_t, join_t, leave_t = trizre.Enter, trizre.Exit, trizre.Join, trizre.Leave

    detail = Detail() if args.detail else None

    async def main() -> None:
        if detail is not None:
            trio.lowlevel.add_instrument(detail.instrument)
        locals_ = [Local(i, args.expect_group) for i in range(args.nodes)]
        mesh = Mesh(locals_, args.expect_peers)
        nodes: list[trizre.Node] = []
        progress = {"at": monotonic()}
        all_counted = trio.Event()
        ping: dict[str, Any] = {}

        async def consume(local: Local, node: trizre.Node, events: trizre.EventStream) -> None:
            whisper = node.whisper
            async for event in events:
                cls = type(event)
                if cls is whisper_t or cls is shout_t:
                    mode = local.mode
                    if mode == "count":
                        counter = local.counter
                        assert counter is not None
                        if counter.add(event.frames[0]):
                            progress["at"] = monotonic()
                            if all(c.counter is None or c.counter.done for c in locals_):
                                all_counted.set()
                        elif not counter.received % 256:
                            progress["at"] = monotonic()
                        if local.slow and not counter.received % SLOW_EVERY:
                            await trio.sleep(SLOW_SLEEP)
                    elif mode == "echo":
                        await whisper(event.peer, *event.frames)
                    elif mode == "ping":
                        now = perf_counter()
                        ping["rtts"].append(now - ping["sent"])
                        if len(ping["rtts"]) < ping["n"]:
                            ping["sent"] = now
                            await whisper(event.peer, ping["payload"])
                        else:
                            local.mode = "idle"
                            ping["done"].set()
                elif cls is enter_t:
                    local.peers.add(event.peer)
                    mesh.update(local)
                elif cls is join_t:
                    if event.group == local.expect_group:
                        local.members.add(event.peer)
                        mesh.update(local)
                elif cls is leave_t:
                    local.members.discard(event.peer)
                elif cls is exit_t:
                    local.peers.discard(event.peer)
                    local.members.discard(event.peer)
                    emit("exit", node=local.index, peer=event.peer.hex, name=event.name)

        async def count(cmd: dict[str, Any]) -> None:
            stall = float(cmd.get("stall", 5.0))
            more = {} if detail is None else {"detail": detail}
            while not all_counted.is_set():
                # With --detail, one wait (no 50 ms poll among the counts).
                with trio.move_on_after(0.05 if detail is None else stall):
                    await all_counted.wait()
                if monotonic() - progress["at"] > stall:
                    counted(locals_, stalled=True, **{k: v.report() for k, v in more.items()})
                    return
            counted(locals_, stalled=False, **{k: v.report() for k, v in more.items()})

        def polled() -> dict[str, int]:
            # The low-latency mode's counts (issue 28): a private seam, read
            # here only, for bench_lowlat.py's hit rate.
            inboxes = [getattr(n, "_inbox", None) for n in nodes]
            return {
                "busy_polls": sum(getattr(i, "busy_polls", 0) for i in inboxes),
                "busy_poll_hits": sum(getattr(i, "busy_poll_hits", 0) for i in inboxes),
            }

        def target(node: trizre.Node) -> uuid.UUID:
            peers = node.peers()
            if not peers:
                raise RuntimeError("no peer to send to")
            return peers[0]

        async def handle(cmd: dict[str, Any], nursery: trio.Nursery) -> bool:
            nonlocal all_counted
            what = cmd["cmd"]
            node = nodes[0]
            if what == "stop":
                return False
            if what == "mode":
                for local in locals_:
                    local.mode = cmd["mode"]
            elif what == "count":
                all_counted = trio.Event()
                for local in locals_:
                    local.counter = Counter(int(cmd["n"]))
                    local.slow = bool(cmd.get("slow"))
                    local.mode = "count"
                progress["at"] = monotonic()
                if detail is not None:
                    detail.start()
                emit("counting")
                nursery.start_soon(count, cmd)
            elif what == "pingpong":
                n, size = int(cmd["n"]), int(cmd["size"])
                peer = target(node)
                ping.update(n=n, rtts=[], payload=payload(0, padding(size)), done=trio.Event())
                locals_[0].mode = "ping"
                cpu0, start = time.process_time(), perf_counter()
                ping["sent"] = start
                await node.whisper(peer, ping["payload"])
                await ping["done"].wait()
                emit(
                    "pingpong",
                    cpu0=cpu0,
                    **rtt_summary(ping["rtts"], perf_counter() - start),
                    **polled(),
                )
            elif what == "flood":
                n, pad, peer = int(cmd["n"]), padding(int(cmd["size"])), target(node)
                whisper = node.whisper
                cpu0, first = time.process_time(), monotonic()
                if cmd.get("nowait"):
                    # Queue back to back while there is room, yield once per
                    # 256; wait (backpressure) only when the queue is full.
                    whisper_nowait, checkpoint = node.whisper_nowait, trio.lowlevel.checkpoint
                    for seq in range(n):
                        message = payload(seq, pad)
                        if not whisper_nowait(peer, message):
                            await whisper(peer, message)
                        elif not seq & 255:
                            await checkpoint()
                else:
                    for seq in range(n):
                        await whisper(peer, payload(seq, pad))
                emit("sent", first=first, last=monotonic(), cpu0=cpu0)
            elif what == "shout":
                n, pad, group = int(cmd["n"]), padding(int(cmd["size"])), cmd["group"]
                shout = node.shout
                if detail is not None:
                    detail.start()
                cpu0, first = time.process_time(), monotonic()
                for seq in range(n):
                    await shout(group, payload(seq, pad))
                emit("sent", first=first, last=monotonic(), cpu0=cpu0)
            elif what == "status":
                more = {}
                if detail is not None and hasattr(detail, "base"):
                    more["detail"] = detail.report()
                emit("status", peers=[len(n.peers()) for n in nodes], **polled(), **more)
            else:
                emit("error", error=f"unknown command {what!r}")
            return True

        async def obey(nursery: trio.Nursery) -> None:
            stream = trio.lowlevel.FdStream(os.dup(0))
            buffer = b""
            while True:
                data = await stream.receive_some(65536)
                if not data:
                    return
                buffer += data
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    if line.strip() and not await handle(settle(json.loads(line)), nursery):
                        return

        t0 = monotonic()
        async with contextlib.AsyncExitStack() as stack:
            subscriptions = []
            for i in range(args.nodes):
                node = await stack.enter_async_context(
                    trizre.open_node(
                        node_name(args, i),
                        interface=args.interface,
                        beacon_port=args.port,
                        evasive_timeout=args.evasive,
                        expired_timeout=args.expired,
                        beacons_refresh=args.beacons_refresh,
                        busy_poll=args.busy_poll,
                        **({"send_hwm": args.send_hwm} if args.send_hwm else {}),
                    )
                )
                subscriptions.append(node.events())
                if args.group:
                    await node.join(args.group)
                nodes.append(node)
            emit(
                "started",
                t0=t0,
                pid=os.getpid(),
                uuids=[n.uuid.hex for n in nodes],
                endpoint=nodes[0].endpoint,
            )
            mesh.check_all()
            if args.echo:
                for local in locals_:
                    local.mode = "echo"
            async with trio.open_nursery() as nursery:
                for local, node, events in zip(locals_, nodes, subscriptions, strict=True):
                    nursery.start_soon(consume, local, node, events)
                await obey(nursery)
                nursery.cancel_scope.cancel()

    trio.run(main)


# -------------------------------------------------------------------- pyre


def run_pyre(args: argparse.Namespace) -> None:
    import zmq  # noqa: PLC0415
    from pyre import Pyre  # noqa: PLC0415

    logging.basicConfig(level=logging.CRITICAL)
    locals_ = [Local(i, args.expect_group) for i in range(args.nodes)]
    mesh = Mesh(locals_, args.expect_peers)
    group_bytes = args.expect_group.encode() if args.expect_group else None

    t0 = monotonic()
    nodes = []
    for i in range(args.nodes):
        node = Pyre(node_name(args, i))
        node.set_port(str(args.port).encode())
        if args.group:
            node.join(args.group)
        node.start()
        nodes.append(node)
    socks = [node.socket() for node in nodes]
    emit(
        "started",
        t0=t0,
        pid=os.getpid(),
        uuids=[n.uuid().hex for n in nodes],
        endpoint=nodes[0].endpoint(),
    )
    mesh.check_all()
    if args.echo:
        for local in locals_:
            local.mode = "echo"
    state: dict[str, Any] = {"progress": monotonic(), "stall": 5.0, "counting": False}

    def handle(local: Local, frames: list[bytes]) -> None:
        kind = frames[0]
        if kind == b"WHISPER" or kind == b"SHOUT":
            mode = local.mode
            content = frames[3:] if kind == b"WHISPER" else frames[4:]
            if mode == "count":
                counter = local.counter
                assert counter is not None
                if counter.add(content[0]) or not counter.received % 256:
                    state["progress"] = monotonic()
                if local.slow and not counter.received % SLOW_EVERY:
                    time.sleep(SLOW_SLEEP)
            elif mode == "echo":
                nodes[local.index].whisper(uuid.UUID(bytes=frames[1]), content)
        elif kind == b"ENTER":
            local.peers.add(frames[1])
            mesh.update(local)
        elif kind == b"JOIN":
            if frames[3] == group_bytes:
                local.members.add(frames[1])
                mesh.update(local)
        elif kind == b"LEAVE":
            local.members.discard(frames[1])
        elif kind == b"EXIT":
            local.peers.discard(frames[1])
            local.members.discard(frames[1])
            emit("exit", node=local.index, peer=frames[1].hex(), name=frames[2].decode())

    def drain(local: Local, limit: int = 1000) -> None:
        sock = socks[local.index]
        for _ in range(limit):
            try:
                frames = sock.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            handle(local, frames)

    def target(local: Local) -> uuid.UUID:
        if not local.peers:
            raise RuntimeError("no peer to send to")
        return uuid.UUID(bytes=next(iter(local.peers)))

    def command(cmd: dict[str, Any]) -> bool:
        what = cmd["cmd"]
        node, local = nodes[0], locals_[0]
        if what == "stop":
            return False
        if what == "mode":
            for each in locals_:
                each.mode = cmd["mode"]
        elif what == "count":
            for each in locals_:
                each.counter = Counter(int(cmd["n"]))
                each.slow = bool(cmd.get("slow"))
                each.mode = "count"
            state.update(progress=monotonic(), stall=float(cmd.get("stall", 5.0)), counting=True)
            emit("counting")
        elif what == "pingpong":
            n, size = int(cmd["n"]), int(cmd["size"])
            peer, message, sock = target(local), [payload(0, padding(size))], socks[0]
            rtts = []
            cpu0, start = time.process_time(), perf_counter()
            for _ in range(n):
                sent = perf_counter()
                node.whisper(peer, message)
                while True:
                    frames = sock.recv_multipart()
                    if frames[0] == b"WHISPER":
                        break
                    handle(local, frames)
                rtts.append(perf_counter() - sent)
            emit("pingpong", cpu0=cpu0, **rtt_summary(rtts, perf_counter() - start))
        elif what == "flood":
            n, pad, peer = int(cmd["n"]), padding(int(cmd["size"])), target(local)
            whisper = node.whisper
            cpu0, first = time.process_time(), monotonic()
            for seq in range(n):
                whisper(peer, [payload(seq, pad)])
            emit("sent", first=first, last=monotonic(), cpu0=cpu0)
        elif what == "shout":
            n, pad, group = int(cmd["n"]), padding(int(cmd["size"])), cmd["group"]
            shout = node.shout
            cpu0, first = time.process_time(), monotonic()
            for seq in range(n):
                shout(group, [payload(seq, pad)])
            emit("sent", first=first, last=monotonic(), cpu0=cpu0)
        elif what == "status":
            emit("status", peers=[len(each.peers) for each in locals_])
        else:
            emit("error", error=f"unknown command {what!r}")
        return True

    poller = zmq.Poller()
    for sock in socks:
        poller.register(sock, zmq.POLLIN)
    poller.register(0, zmq.POLLIN)
    by_sock = {sock: local for sock, local in zip(socks, locals_, strict=True)}
    stdin_buffer = b""
    running = True
    while running:
        for sock, _ in poller.poll(50):
            if sock == 0:
                stdin_buffer, running = read_commands(stdin_buffer, command)
                if not running:
                    break
            else:
                drain(by_sock[sock])
        if state["counting"]:
            if all(each.counter is None or each.counter.done for each in locals_):
                state["counting"] = False
                counted(locals_, stalled=False)
            elif monotonic() - state["progress"] > state["stall"]:
                state["counting"] = False
                counted(locals_, stalled=True)

    # pyre's stop() can hang on a dead link, and its threads are not daemons.
    stopper = threading.Thread(target=lambda: [n.stop() for n in nodes], daemon=True)
    stopper.start()
    stopper.join(5.0)


# --------------------------------------------------------------- raw pyzmq


def run_raw(args: argparse.Namespace) -> None:
    """Raw pyzmq, no Trio and no ZRE state: the ceiling a Python peer on pyzmq could reach.

    Without ``--connect``: ``--nodes`` ROUTER sockets, bound (each counts
    or echoes what it receives).  With it: one DEALER a comma-separated
    endpoint, all sending; a SHOUT puts a ZRE SHOUT's frames on the wire
    (header with the group, then content) to each in turn.
    """
    import zmq  # noqa: PLC0415

    ctx = zmq.Context()
    socks: list[zmq.Socket[bytes]] = []
    if args.connect:
        for endpoint in args.connect.split(","):
            sock = ctx.socket(zmq.DEALER)
            sock.setsockopt(zmq.LINGER, 0)
            sock.connect(endpoint)
            socks.append(sock)
        endpoints = args.connect.split(",")
    else:
        for _ in range(args.nodes):
            sock = ctx.socket(zmq.ROUTER)
            sock.setsockopt(zmq.LINGER, 0)
            sock.bind(f"tcp://{args.address}:*")
            socks.append(sock)
        endpoints = [s.getsockopt_string(zmq.LAST_ENDPOINT) for s in socks]
    sock = socks[0]
    locals_ = [Local(i, None) for i in range(len(socks))]
    local = locals_[0]
    emit(
        "started",
        t0=monotonic(),
        pid=os.getpid(),
        uuids=[],
        endpoint=endpoints[0],
        endpoints=endpoints,
    )
    emit("mesh")
    if args.echo:
        local.mode = "echo"
    state: dict[str, Any] = {"progress": monotonic(), "stall": 5.0, "fast": False}

    recv = zmq.backend.Socket.recv
    nonblocking = zmq.NOBLOCK

    def receive(sock: zmq.Socket[bytes]) -> list[bytes]:
        # recv_multipart asks RCVMORE through pyzmq's option enum, about
        # 0.8 us a frame; a zmq.Frame carries its ``more`` flag from C.
        frame = recv(sock, nonblocking, False)
        frames = [frame.bytes]
        while frame.more:
            frame = recv(sock, nonblocking, False)
            frames.append(frame.bytes)
        return frames

    def drain(sock: zmq.Socket[bytes], local: Local, limit: int = 1000) -> None:
        fast = state["fast"]
        for _ in range(limit):
            try:
                frames = receive(sock) if fast else sock.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            if local.mode == "echo":
                sock.send_multipart(frames)
            elif local.mode == "count":
                counter = local.counter
                assert counter is not None
                if counter.add(frames[-1]) or not counter.received % 256:
                    state["progress"] = monotonic()

    def command(cmd: dict[str, Any]) -> bool:
        what = cmd["cmd"]
        if what == "stop":
            return False
        if what == "mode":
            local.mode = cmd["mode"]
        elif what == "count":
            for node in locals_:
                node.counter = Counter(int(cmd["n"]))
                node.mode = "count"
            state.update(
                progress=monotonic(),
                stall=float(cmd.get("stall", 5.0)),
                fast=bool(cmd.get("frames")),
            )
            emit("counting")
        elif what == "pingpong":
            n, message = int(cmd["n"]), payload(0, padding(int(cmd["size"])))
            rtts = []
            cpu0, start = time.process_time(), perf_counter()
            for _ in range(n):
                sent = perf_counter()
                sock.send(message)
                sock.recv()
                rtts.append(perf_counter() - sent)
            emit("pingpong", cpu0=cpu0, **rtt_summary(rtts, perf_counter() - start))
        elif what == "flood":
            n, pad = int(cmd["n"]), padding(int(cmd["size"]))
            send = sock.send
            cpu0, first = time.process_time(), monotonic()
            if cmd.get("whisper_frames"):
                # The frames a ZRE WHISPER puts on the wire: a 6-octet header
                # (signature, id 2, version 2, sequence), then the content.
                more = zmq.SNDMORE
                for seq in range(n):
                    send(b"\xaa\xa1\x02\x02" + (seq & 0xFFFF).to_bytes(2, "big"), more)
                    send(payload(seq, pad))
            else:
                for seq in range(n):
                    send(payload(seq, pad))
            emit("sent", first=first, last=monotonic(), cpu0=cpu0)
        elif what == "shout":
            # A ZRE SHOUT's frames (signature, id 3, version 2, sequence,
            # the group as a short string), then the content, to every
            # DEALER in turn; the header is built once a SHOUT, as every
            # peer here is at the same sequence number.
            n, pad, group = int(cmd["n"]), padding(int(cmd["size"])), cmd["group"].encode()
            sends = [s.send for s in socks]
            more = zmq.SNDMORE
            tail = bytes([len(group)]) + group
            cpu0, first = time.process_time(), monotonic()
            for seq in range(n):
                header = b"\xaa\xa1\x03\x02" + ((seq + 1) & 0xFFFF).to_bytes(2, "big") + tail
                content = payload(seq, pad)
                for send in sends:
                    send(header, more)
                    send(content)
            emit("sent", first=first, last=monotonic(), cpu0=cpu0)
        elif what == "status":
            emit("status", peers=[1])
        else:
            emit("error", error=f"unknown command {what!r}")
        return True

    poller = zmq.Poller()
    for polled in socks:
        poller.register(polled, zmq.POLLIN)
    poller.register(0, zmq.POLLIN)
    by_sock = dict(zip(socks, locals_, strict=True))
    buffer = b""
    running = True
    while running:
        for what, _ in poller.poll(50):
            if what == 0:
                buffer, running = read_commands(buffer, command)
                if not running:
                    break
            else:
                drain(what, by_sock[what])
        if all(each.mode == "count" and each.counter is not None for each in locals_):
            counters = [each.counter for each in locals_ if each.counter is not None]
            stalled = monotonic() - state["progress"] > state["stall"]
            if all(c.done for c in counters) or stalled:
                for node in locals_:
                    node.counter = None
                    node.mode = "idle"
                emit(
                    "counted",
                    nodes=[c.report() for c in counters],
                    stalled=not all(c.done for c in counters),
                )
    for closing in socks:
        closing.close(linger=0)
    ctx.term()


IMPLS: dict[str, Callable[[argparse.Namespace], None]] = {
    "trizre": run_trizre,
    "pyre": run_pyre,
    "raw": run_raw,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--impl", choices=sorted(IMPLS), required=True)
    parser.add_argument("--name", default="node")
    parser.add_argument("--nodes", type=int, default=1, help="ZRE nodes in this process")
    parser.add_argument("--interface", default="lo", help="trizre: interface name")
    parser.add_argument("--address", default="127.0.0.1", help="raw: address to bind")
    parser.add_argument(
        "--connect", help="raw: endpoints to connect a DEALER to, comma-separated (one each)"
    )
    parser.add_argument("--port", type=int, default=5670, help="UDP beacon port")
    parser.add_argument("--group", help="join this group at start")
    parser.add_argument("--expect-peers", type=int, default=0)
    parser.add_argument("--expect-group")
    parser.add_argument("--echo", action="store_true", help="start in echo mode")
    parser.add_argument("--evasive", type=float, default=5.0, help="trizre only")
    parser.add_argument("--expired", type=float, default=30.0, help="trizre only")
    parser.add_argument("--beacons-refresh", action="store_true", help="trizre only")
    parser.add_argument(
        "--busy-poll", type=float, default=0.0, help="trizre only: seconds (low-latency mode)"
    )
    parser.add_argument("--nofile", type=int, default=0, help="raise RLIMIT_NOFILE first")
    parser.add_argument(
        "--send-hwm", type=int, default=0, help="trizre only: send_hwm (0: the default)"
    )
    parser.add_argument(
        "--detail", action="store_true", help="trizre only: count waits and batches (see Detail)"
    )
    args = parser.parse_args()

    if args.nofile:
        # Before zmq or trizre is imported: trizre sizes libzmq's socket cap
        # from the soft limit when it creates its context.
        _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (args.nofile, args.nofile))
        except (ValueError, OSError):
            # Raising the hard limit needs CAP_SYS_RESOURCE: take what we may.
            resource.setrlimit(resource.RLIMIT_NOFILE, (min(args.nofile, hard), hard))
    # pyre beacons on the first non-loopback interface: only inside a
    # namespace the benchmark made.  So must anything not on loopback.
    if args.impl == "pyre" or args.interface != "lo" or args.address != "127.0.0.1":
        ensure_in_test_namespace()
    IMPLS[args.impl](args)
    emit("exiting")
    sys.stdout.flush()
    os._exit(0)  # pyre's node threads are not daemons


if __name__ == "__main__":
    main()
