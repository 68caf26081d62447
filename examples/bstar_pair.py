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
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from contextlib import AbstractAsyncContextManager

import trio
from trio_util import AsyncValue

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


async def run_client(port: int, count: int, pace: float, log: list[str]) -> dict[int, bytes]:
    answers: dict[int, bytes] = {}
    policy = RetryPolicy(attempt_timeout=2 * HEARTBEAT + 0.25, attempts=20)
    async with (
        open_node("bstar-client", port) as client_node,
        patterns.open_binary_star_client(client_node, PRIMARY, BACKUP, policy) as client,
    ):
        await client_node.wait_for_peer(PRIMARY)
        for i in range(count):
            sent = trio.current_time()
            reply = await client.request(b"request %d" % i)
            waited = trio.current_time() - sent
            answers[i] = reply[0]
            if waited > HEARTBEAT:
                log.append(
                    f"request {i} waited {waited:.2f} s (failover), answered by {client.current}"
                )
            await trio.sleep(pace)
    return answers


async def all_in_one(count: int, kill_at: int, pace: float) -> int:
    port = 5670 + 1001  # a port of its own: a demo must not meet real nodes
    executions = Ledger()
    timeline: list[str] = []
    start = trio.current_time()

    def stamp(text: str) -> None:
        timeline.append(f"{trio.current_time() - start:6.2f}s  {text}")

    async with trio.open_nursery() as nursery:
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

        async def watch(star: patterns.BinaryStarServer, who: str) -> None:
            async for state in star.state.eventual_values():
                stamp(f"{who} is {state.name}")

        nursery.start_soon(watch, backup, "backup")
        log: list[str] = []
        answers: dict[int, bytes] = {}

        async def client_role() -> None:
            answers.update(await run_client(port, count, pace, log))

        async with trio.open_nursery() as clients:
            clients.start_soon(client_role)
            await executions.total.wait_value(lambda total: total >= kill_at)
            stamp(f"killing the primary after {executions.total.value} requests")
            primary_scope.cancel()
        stamp(f"client done: {len(answers)} answered")
        nursery.cancel_scope.cancel()

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
    return 0 if not lost and not wrong and len(answers) == count else 1


async def single_role(role: str, port: int, count: int, pace: float) -> int:
    if role == "client":
        log: list[str] = []
        answers = await run_client(port, count, pace, log)
        for line in log:
            print(line)
        print(f"{len(answers)} of {count} requests answered")
        return 0 if len(answers) == count else 1
    executions = Ledger()
    async with trio.open_nursery() as nursery:
        star = await nursery.start(serve, role, port, executions)
        async for state in star.state.eventual_values():
            print(f"{role}: {state.name} ({executions.total.value} requests so far)", flush=True)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description="A Binary Star pair over ZRE on loopback.")
    parser.add_argument("--role", choices=["primary", "backup", "client"])
    parser.add_argument("--port", type=int, default=5670, help="UDP discovery port (on lo)")
    parser.add_argument("--requests", type=int, default=40)
    parser.add_argument("--kill-at", type=int, default=15, help="kill the primary after N")
    parser.add_argument("--pace", type=float, default=0.02, help="seconds between requests")
    args = parser.parse_args()
    if args.role:
        return trio.run(single_role, args.role, args.port, args.requests, args.pace)
    return trio.run(all_in_one, args.requests, args.kill_at, args.pace)


if __name__ == "__main__":
    sys.exit(main())
