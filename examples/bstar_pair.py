"""A Binary Star pair over ZRE on loopback: the primary dies, the backup takes over.

All in one process (what ``make demo`` runs): a primary and a backup
server and a client sending numbered requests; the primary's node is
killed mid-run; the backup takes over after the failover timeout; the
client carries on; a short timeline is printed, and the exit status is 0
only if every request was answered exactly once.

    python examples/bstar_pair.py

Or one role per terminal, killing processes by hand (Ctrl-C, kill -9):

    python examples/bstar_pair.py --role primary
    python examples/bstar_pair.py --role backup
    python examples/bstar_pair.py --role client

Servers print every state change with its wall-clock time and cause, and
how many requests they have served; they note what they ran in a ledger
(``--ledger``) from which the client reports requests lost, answered
wrongly or run twice. Ctrl-C and SIGTERM stop any role cleanly. A second
primary (or backup) started by mistake stops with an error saying so;
the running one goes on. With ``--trace-dir`` the servers' state changes
are recorded for tools outside the process (``docs/traces.md``).
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import tempfile
import uuid
from collections import Counter
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from datetime import datetime
from pathlib import Path
from typing import TextIO

import trio
from trio_util import AsyncValue, wait_any

import trizre
from trizre import patterns
from trizre.patterns import IncomingRequest, RetryPolicy, State

PRIMARY, BACKUP = "bstar-primary", "bstar-backup"
HEARTBEAT = 0.25  # seconds; failover after two heartbeats


def open_node(name: str, port: int) -> AbstractAsyncContextManager[trizre.Node]:
    """Every role's node: on loopback, beacons every 0.1 s for a quick start."""
    return trizre.open_node(name, interface="lo", beacon_port=port, beacon_interval=0.1)


class Ledger:
    """What the servers executed, and a value to wait on as it grows."""

    def __init__(self) -> None:
        self.counts: Counter[bytes] = Counter()
        self.total: AsyncValue[int] = AsyncValue(0)

    def record(self, body: bytes) -> None:
        self.counts[body] += 1
        self.total.value += 1


def make_handler(label: str, executions: Ledger) -> patterns.Handler:
    async def handler(request: IncomingRequest) -> bytes:
        executions.record(b"".join(request.body))
        return label.encode() + b" did " + b"".join(request.body)

    return handler


async def serve(
    role: str,
    port: int,
    executions: Ledger,
    task_status: trio.TaskStatus[patterns.BinaryStarServer] = trio.TASK_STATUS_IGNORED,
) -> None:
    primary = role == "primary"
    name, partner = (PRIMARY, BACKUP) if primary else (BACKUP, PRIMARY)
    async with (
        open_node(name, port) as server_node,
        patterns.open_binary_star_server(
            server_node,
            make_handler(role, executions),
            primary=primary,
            partner=partner,
            heartbeat=HEARTBEAT,
        ) as star,
    ):
        task_status.started(star)
        await trio.sleep_forever()


async def run_client(
    port: int,
    count: int,
    pace: float,
    answers: dict[int, bytes],
    *,
    note: Callable[[str], None],
    prefix: bytes = b"",
) -> None:
    """Send ``count`` numbered requests, one at a time, into ``answers``; ``note`` slow ones."""
    policy = RetryPolicy(attempt_timeout=2 * HEARTBEAT + 0.25, attempts=20)
    async with (
        open_node("bstar-client", port) as client_node,
        patterns.open_binary_star_client(client_node, PRIMARY, BACKUP, policy) as client,
    ):
        # Either server will do: the primary may be down when the client starts.
        await wait_any(
            lambda: client_node.wait_for_peer(PRIMARY),
            lambda: client_node.wait_for_peer(BACKUP),
        )
        for i in range(count):
            sent = trio.current_time()
            reply = await client.request(prefix + b"request %d" % i)
            waited = trio.current_time() - sent
            answers[i] = reply[0]
            if waited > HEARTBEAT:
                note(f"request {i} waited {waited:.2f} s (failover), answered by {client.current}")
            await trio.sleep(pace)


async def all_in_one(count: int, kill_at: int, pace: float) -> int:
    port = 5670 + 1001  # a port of its own: a demo must not meet real nodes
    executions = Ledger()
    timeline: list[str] = []
    start = trio.current_time()

    def stamp(text: str) -> None:
        timeline.append(f"{trio.current_time() - start:6.2f}s  {text}")

    said: list[str] = []  # the signal that stopped the demo early, if one did
    log: list[str] = []
    answers: dict[int, bytes] = {}
    async with trio.open_nursery() as nursery:
        nursery.start_soon(stop_on_signals, nursery.cancel_scope, said)
        primary_scope = trio.CancelScope()

        async def primary_role(
            task_status: trio.TaskStatus[patterns.BinaryStarServer] = trio.TASK_STATUS_IGNORED,
        ) -> None:
            with primary_scope:
                await serve("primary", port, executions, task_status=task_status)

        primary = await nursery.start(primary_role)
        backup = await nursery.start(serve, "backup", port, executions)
        await primary.state.wait_value(State.ACTIVE)
        await backup.state.wait_value(State.PASSIVE)
        stamp("primary ACTIVE, backup PASSIVE")
        print(f"pair ready; {count} requests follow (Ctrl-C stops with a report)", flush=True)

        async def watch(star: patterns.BinaryStarServer, who: str) -> None:
            async for state in star.state.eventual_values():
                stamp(f"{who} is {state.name}")

        nursery.start_soon(watch, backup, "backup")

        async def client_role() -> None:
            await run_client(port, count, pace, answers, note=log.append)

        async with trio.open_nursery() as clients:
            clients.start_soon(client_role)
            await executions.total.wait_value(lambda total: total >= kill_at)
            stamp(f"killing the primary after {executions.total.value} requests")
            primary_scope.cancel()
        stamp(f"client done: {len(answers)} answered")
        nursery.cancel_scope.cancel()

    if said:
        stamp(f"stopped by {said[0]} after {len(answers)} of {count} requests")
        count = len(answers)  # the requests never sent are not lost
    print("timeline:")
    for line in timeline:
        print("  " + line)
    for line in log:
        print("  " + line)
    by = Counter(answer.split(b" ")[0].decode() for answer in answers.values())
    twice = [r for r, n in executions.counts.items() if n > 1]
    lost = [i for i in range(count) if i not in answers]
    wrong = [i for i, a in answers.items() if not a.endswith(b"request %d" % i)]
    print(
        f"requests sent {count}, answered {len(answers)} "
        f"(primary {by['primary']}, backup {by['backup']})"
    )
    print(f"lost {len(lost)}, wrong answers {len(wrong)}, executed more than once {len(twice)}")
    if said:
        return 128 + getattr(signal, said[0])  # 130 for Ctrl-C, as the trizre command
    return 0 if not lost and not wrong and len(answers) == count else 1


def clock() -> str:
    """Wall-clock time for operators' logs: what they compare across terminals."""
    return datetime.now().strftime("%H:%M:%S.%f")[:-3]


async def stop_on_signals(scope: trio.CancelScope, said: list[str]) -> None:
    """Ctrl-C or SIGTERM: end the role cleanly (no traceback), saying which."""
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for signum in signals:
            said.append(signal.Signals(signum).name)
            scope.cancel()
            return


async def server_role(role: str, port: int, executed: TextIO, trace_dir: str | None) -> int:
    """One server of the pair: every state change with its time and cause, on stdout.

    What it runs goes to ``executed`` (the ledger), for the client's report.
    """
    primary = role == "primary"
    name, partner = (PRIMARY, BACKUP) if primary else (BACKUP, PRIMARY)
    said: list[str] = []

    async def handler(request: IncomingRequest) -> bytes:
        body = b"".join(request.body)
        print(body.decode(), file=executed, flush=True)
        return role.encode() + b" did " + body

    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(stop_on_signals, nursery.cancel_scope, said)
            async with (
                trizre.open_node(
                    name,
                    interface="lo",
                    beacon_port=port,
                    beacon_interval=0.1,
                    trace_dir=trace_dir,
                ) as node,
                patterns.open_binary_star_server(
                    node, handler, primary=primary, partner=partner, heartbeat=HEARTBEAT
                ) as star,
            ):

                def served() -> int:
                    return star.server.executed if star.server else 0

                async def report() -> None:
                    # State changes come before requests do: counts are shown as they grow.
                    shown = 0
                    while True:
                        await trio.sleep(1.0)
                        if served() != shown:
                            shown = served()
                            print(f"{clock()} {role}: {shown} requests served", flush=True)

                nursery.start_soon(report)
                async for state in star.state.eventual_values():
                    cause = f"start; waiting for {partner}"
                    if star.transitions:
                        cause = star.transitions[-1][1].event.name.lower().replace("_", " ")
                    print(
                        f"{clock()} {role}: now {state.name} (on {cause}); "
                        f"{served()} requests served so far",
                        flush=True,
                    )
    except* patterns.BinaryStarError as fatal:
        # Out of this example's nursery it comes in a group: say it plainly.
        for exc in fatal.exceptions:
            print(f"{clock()} {role}: stopped: {exc}", file=sys.stderr, flush=True)
        said.append("error")
    if said == ["error"]:
        return 2
    print(f"{clock()} {role}: stopped by {said[0] if said else 'request'}", flush=True)
    return 0


async def client_role(
    port: int, count: int, pace: float, run: str, answers: dict[int, bytes]
) -> list[str]:
    """Numbered requests into ``answers``; the signal that stopped it early, if one did."""
    said: list[str] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(stop_on_signals, nursery.cancel_scope, said)
        await run_client(
            port,
            count,
            pace,
            answers,
            note=lambda line: print(f"{clock()} {line}", flush=True),
            prefix=b"run %s " % run.encode(),
        )
        nursery.cancel_scope.cancel()
    return said


def client_report(
    count: int, run: str, answers: dict[int, bytes], said: list[str], ledger: Path
) -> int:
    """What was lost, answered wrongly or run twice: the servers' ledger says what ran."""
    executed: Counter[str] = Counter()
    for log in ledger.glob("*.log"):
        executed.update(line for line in log.read_text().splitlines() if f"run {run} " in line)
    # Stopped early by a signal, the requests never sent are not lost.
    sent = len(answers) if said else count
    lost = [i for i in range(sent) if i not in answers]
    wrong = [i for i, a in answers.items() if not a.endswith(b"request %d" % i)]
    twice = [r for r, n in executed.items() if n > 1]
    by = Counter(answer.split(b" ")[0].decode() for answer in answers.values())
    if said:
        print(f"{clock()} stopped by {said[0]} after {len(answers)} of {count} requests")
    print(
        f"{clock()} requests sent {sent}, answered {len(answers)} "
        f"(primary {by['primary']}, backup {by['backup']})"
    )
    print(
        f"lost {len(lost)}, wrong answers {len(wrong)}, executed more than once {len(twice)} "
        f"(the servers' ledger: {ledger})"
    )
    # As the all-in-one run: the request in flight when a server is killed
    # may have run there too (its reply died with it), so runs are reported,
    # not failed on; answers must be whole and right.
    return 0 if not lost and not wrong else 1


def main() -> int:
    parser = argparse.ArgumentParser(description="A Binary Star pair over ZRE on loopback.")
    parser.add_argument("--role", choices=["primary", "backup", "client"])
    parser.add_argument("--port", type=int, default=5670, help="UDP discovery port (on lo)")
    parser.add_argument("--requests", type=int, default=40)
    parser.add_argument("--kill-at", type=int, default=15, help="kill the primary after N")
    parser.add_argument("--pace", type=float, default=0.02, help="seconds between requests")
    parser.add_argument(
        "--ledger",
        type=Path,
        default=None,
        help="separate processes: where servers note what they ran, for the client's report "
        "(default: a directory per port in the system's temporary directory)",
    )
    parser.add_argument("--trace-dir", help="servers: record traces (state changes) here")
    args = parser.parse_args()
    ledger = args.ledger or Path(tempfile.gettempdir()) / f"bstar-pair-{args.port}"
    if args.role == "client":
        run = uuid.uuid4().hex[:8]  # this run's requests, among earlier ones in the ledger
        answers: dict[int, bytes] = {}
        said = trio.run(client_role, args.port, args.requests, args.pace, run, answers)
        return client_report(args.requests, run, answers, said, ledger)
    if args.role:
        logging.basicConfig(
            format="%(asctime)s.%(msecs)03d %(message)s", datefmt="%H:%M:%S", level=logging.WARNING
        )
        ledger.mkdir(parents=True, exist_ok=True)
        with (ledger / f"{args.role}-{os.getpid()}.log").open("a") as executed:
            return trio.run(server_role, args.role, args.port, executed, args.trace_dir)
    return trio.run(all_in_one, args.requests, args.kill_at, args.pace)


if __name__ == "__main__":
    sys.exit(main())
