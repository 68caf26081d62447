"""One process of a ``make chaos`` run: a server of some pattern, or a client.

Started by ``benchmarks/chaos.py`` inside the run's namespace for it::

    python benchmarks/chaos_role.py ROLE NAME --interface IF --port P --run DIR [...]

Roles: ``worker`` (service ``echo``, reply cache), ``bstar`` (one half of
the Binary Star pair; ``--primary``), ``titanic`` (its store in
``DIR/titanic.db``, requests for ``echo``), ``freelance`` (a server found
by name), and the clients ``client-service``, ``client-bstar``,
``client-titanic`` and ``client-freelance``.  Every node traces into
``DIR/traces``.

A role writes ``DIR/ready/NAME`` once it is serving (servers) or has
found what it sends to (clients); a Binary Star server also keeps
``DIR/state/NAME`` holding its current state.  SIGTERM stops any role
cleanly: servers at once; clients stop starting requests, finish those in
flight (their retry policies bound it; a Titanic client also collects the
replies it is owed, for up to ``--drain`` seconds), write their own tally
to ``DIR/counts/NAME.json`` and only then stop their node.  SIGKILL is the
fault being tested.

A worker appends the body of every request it runs to
``DIR/executed/NAME.log``, a line per run, written before it answers (one
``write`` on an ``O_APPEND`` descriptor: a kill -9 loses nothing written):
the record of executions per client request that the ``titanic`` profile
judges.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import random
import signal
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TypeVar

import attrs
import trio

import trizre
from trizre import patterns
from trizre.patterns import Handler, IncomingRequest, RequestAbandoned, RetryPolicy
from trizre.patterns._titanic import _Accept

T = TypeVar("T")

SERVICE = "echo"
HEARTBEAT = 1.0
"""Binary Star heartbeat: the failover timeout is two of them.  Under 20 %
loss a TCP segment can wait several retransmission timeouts (200 ms,
400 ms, 800 ms…), so a 250 ms heartbeat would let a merely slow active
server look dead while a client, equally delayed, votes for the backup."""

NODE_OPTIONS: dict[str, Any] = {
    "beacon_interval": 0.25,
    "evasive_timeout": 2.0,
    "expired_timeout": 5.0,
    # Beacons (UDP, never retransmitted) prove presence while TCP stalls;
    # a Binary Star server counts them as its partner's signs of life.
    "beacons_refresh": True,
    "local_links": False,
}
"""Every chaos node: quick to find and to forget (5 s), so that a cut link
outlasts the expiry timeout well within a 60 s run."""

POLICIES = {
    "client-service": RetryPolicy(attempt_timeout=2.0, attempts=5),
    "client-bstar": RetryPolicy(attempt_timeout=2.5, attempts=10),
    "client-titanic": RetryPolicy(attempt_timeout=2.0, attempts=5),
    "client-freelance": RetryPolicy(attempt_timeout=2.0, attempts=6),
}


@dataclass
class Tally:
    """What a client saw, counted by itself (the audit counts from traces)."""

    node: str = ""
    name: str = ""
    role: str = ""
    requests: int = 0
    answered: int = 0
    abandoned: int = 0
    remote_errors: int = 0
    wrong_replies: int = 0
    titanic_submitted: int = 0
    titanic_completed: int = 0
    titanic_pending: int = 0
    titanic_unknown: int = 0

    async def count(self, call: Awaitable[T]) -> T | None:
        """Await one pattern request; ``None`` when it was abandoned.

        An answer with an error status is an answer: it is counted and
        raised again.
        """
        self.requests += 1
        try:
            result = await call
        except RequestAbandoned:
            self.abandoned += 1
            return None
        except (patterns.RemoteError, patterns.TitanicUnknown):
            self.answered += 1
            self.remote_errors += 1
            raise
        self.answered += 1
        return result


def _write(path: Path, text: str) -> None:
    """Replace ``path`` atomically: the orchestrator never reads half of it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(text)
    os.replace(temporary, path)


async def echo(request: IncomingRequest) -> tuple[bytes, ...]:
    await trio.sleep(random.uniform(0, 0.01))  # some work, so requests overlap
    return request.body


def recording(handler: Handler, record: Path) -> Handler:
    """``handler``, writing each request's first frame to ``record`` before it answers."""
    record.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(record, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    async def run(request: IncomingRequest) -> bytes | Sequence[bytes]:
        reply = await handler(request)
        body = request.body[0] if request.body else b""
        os.write(fd, body.replace(b"\n", b" ") + b"\n")
        return reply

    return run


@asynccontextmanager
async def open_node(args: argparse.Namespace) -> AsyncIterator[trizre.Node]:
    async with trizre.open_node(
        args.name,
        interface=args.interface,
        beacon_port=args.port,
        trace_dir=args.run / "traces",
        **NODE_OPTIONS,
    ) as node:
        yield node


def arm_kill_mid_write(titanic: patterns.Titanic) -> None:
    """After SIGUSR1, die by SIGKILL inside the next write transaction.

    The kill lands between a change (a request stored, a reply stored, a
    request forgotten) and its COMMIT: the write Titanic must survive.
    Harness instrumentation: it reaches Titanic's SQLite connection.
    """
    armed = False

    def arm(_signum: int, _frame: object) -> None:
        nonlocal armed
        armed = True

    def on_statement(sql: str) -> None:
        if armed and sql.strip().upper() == "COMMIT":
            os.kill(os.getpid(), signal.SIGKILL)

    signal.signal(signal.SIGUSR1, arm)
    titanic._store._db.set_trace_callback(on_statement)


def arm_kill_after_accept(titanic: patterns.Titanic) -> None:
    """After SIGUSR2, die by SIGKILL right after the next request is stored.

    Committed, and not yet acknowledged: the client's retry then reaches
    the restarted Titanic, which must give it the id already stored
    rather than store it twice (issue 26).  Harness instrumentation: it
    wraps Titanic's store's write (one group commit, of requests among
    other writes).
    """
    armed = False
    store = titanic._store
    write = store.write

    def arm(_signum: int, _frame: object) -> None:
        nonlocal armed
        armed = True

    def write_then_die(ops: Sequence[Any], changes: Any = None) -> list[str | None]:
        given = write(ops, changes)
        if armed and any(isinstance(op, _Accept) for op in ops):
            os.kill(os.getpid(), signal.SIGKILL)
        return given

    signal.signal(signal.SIGUSR2, arm)
    store.write = write_then_die  # type: ignore[method-assign]


async def until_terminated() -> None:
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async for _ in signals:
            return


async def serve(args: argparse.Namespace) -> None:
    ready = args.run / "ready" / args.name
    async with open_node(args) as node:
        if args.role == "worker":
            async with patterns.open_server(
                node,
                recording(echo, args.run / "executed" / f"{args.name}.log"),
                service=SERVICE,
                reply_cache=patterns.ReplyCache(per_client=False),
            ):
                _write(ready, node.uuid.hex)
                await until_terminated()
        elif args.role == "freelance":
            async with patterns.open_server(node, echo, reply_cache=patterns.ReplyCache()):
                _write(ready, node.uuid.hex)
                await until_terminated()
        elif args.role == "titanic":
            async with patterns.open_titanic(
                node, args.run / "titanic.db", policy=RetryPolicy(attempt_timeout=2.0, attempts=3)
            ) as titanic:
                arm_kill_mid_write(titanic)
                arm_kill_after_accept(titanic)
                _write(ready, node.uuid.hex)
                await until_terminated()
        elif args.role == "bstar":
            async with (
                patterns.open_binary_star_server(
                    node,
                    echo,
                    primary=args.primary,
                    partner=args.partner,
                    heartbeat=HEARTBEAT,
                    reply_cache=patterns.ReplyCache(),
                ) as star,
                trio.open_nursery() as nursery,
            ):

                async def publish_state() -> None:
                    async for state in star.state.eventual_values():
                        _write(args.run / "state" / args.name, state.name)

                nursery.start_soon(publish_state)
                _write(ready, node.uuid.hex)
                await until_terminated()
                nursery.cancel_scope.cancel()
        else:
            raise SystemExit(f"unknown server role {args.role!r}")


async def run_client(args: argparse.Namespace) -> None:
    tally = Tally(name=args.name, role=args.role)
    stop = trio.Event()
    drain_until = [float("inf")]
    policy = POLICIES[args.role]
    if args.attempts is not None:
        policy = attrs.evolve(policy, attempts=args.attempts)
    async with open_node(args) as node:
        tally.node = node.uuid.hex
        async with trio.open_nursery() as outer:

            async def watch_signals() -> None:
                await until_terminated()
                drain_until[0] = trio.current_time() + args.drain
                stop.set()

            outer.start_soon(watch_signals)
            loop = _client_loop(args, node, policy, tally, stop, drain_until)
            async with loop as one_request:
                _write(args.run / "ready" / args.name, node.uuid.hex)

                async def sender(lane: int) -> None:
                    seq = 0
                    while not stop.is_set():
                        seq += 1
                        await one_request(f"{args.name}:{lane}:{seq}".encode())
                        with trio.move_on_after(random.expovariate(args.rate / args.lanes)):
                            await stop.wait()

                async with trio.open_nursery() as lanes:
                    for lane in range(args.lanes):
                        lanes.start_soon(sender, lane)
            _write(args.run / "counts" / f"{args.name}.json", json.dumps(asdict(tally)))
            outer.cancel_scope.cancel()


Send = Callable[[bytes], Awaitable[None]]


def _client_loop(
    args: argparse.Namespace,
    node: trizre.Node,
    policy: RetryPolicy,
    tally: Tally,
    stop: trio.Event,
    drain_until: list[float],
) -> AbstractAsyncContextManager[Send]:
    """An async context manager giving the one-request function of this client's pattern."""

    def check(body: bytes, reply: tuple[bytes, ...] | None) -> None:
        if reply is not None and reply != (body,):
            tally.wrong_replies += 1

    @asynccontextmanager
    async def service() -> AsyncIterator[Send]:
        async with patterns.open_service_client(node, policy) as client:
            await client.wait_for_service(SERVICE)

            async def send(body: bytes) -> None:
                check(body, await tally.count(client.request(SERVICE, body)))

            yield send

    @asynccontextmanager
    async def bstar() -> AsyncIterator[Send]:
        async with patterns.open_binary_star_client(
            node, args.primary_name, args.backup_name, policy
        ) as client:

            async def send(body: bytes) -> None:
                check(body, await tally.count(client.request(body)))

            yield send

    @asynccontextmanager
    async def freelance() -> AsyncIterator[Send]:
        async with patterns.open_freelance_client(node, args.servers, policy=policy) as client:

            async def send(body: bytes) -> None:
                check(body, await tally.count(client.request(body)))

            yield send

    @asynccontextmanager
    async def titanic() -> AsyncIterator[Send]:
        async with patterns.open_titanic_client(node, policy) as client:

            async def send(body: bytes) -> None:
                titanic_id = await tally.count(client.submit(SERVICE, body))
                if titanic_id is None:
                    return  # never stored: the client knows, nothing is owed
                tally.titanic_submitted += 1
                tally.titanic_pending += 1
                # Collect the reply; after SIGTERM, for at most --drain seconds.
                while not (stop.is_set() and trio.current_time() > drain_until[0]):
                    try:
                        reply = await tally.count(client.reply(titanic_id))
                    except patterns.TitanicUnknown:
                        tally.titanic_unknown += 1
                        return
                    if reply is not None:
                        check(body, reply)
                        tally.titanic_completed += 1
                        tally.titanic_pending -= 1
                        with contextlib.suppress(patterns.RemoteError):  # counted already
                            await tally.count(client.close(titanic_id))
                        return
                    await trio.sleep(0.2)  # polling Titanic, as 9/TSP's client does

            yield send

    return {
        "client-service": service,
        "client-bstar": bstar,
        "client-freelance": freelance,
        "client-titanic": titanic,
    }[args.role]()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("role")
    parser.add_argument("name")
    parser.add_argument("--interface", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--run", type=Path, required=True)
    parser.add_argument("--primary", action="store_true", help="bstar: the primary half")
    parser.add_argument("--partner", help="bstar: the other half's name")
    parser.add_argument("--primary-name", help="client-bstar: the pair's primary")
    parser.add_argument("--backup-name", help="client-bstar: the pair's backup")
    parser.add_argument("--servers", nargs="*", default=[], help="client-freelance: names")
    parser.add_argument("--rate", type=float, default=10.0, help="clients: requests/s")
    parser.add_argument("--lanes", type=int, default=4, help="clients: requests at once")
    parser.add_argument("--attempts", type=int, help="clients: attempts per request (the role's)")
    parser.add_argument("--drain", type=float, default=60.0, help="titanic client: seconds")
    args = parser.parse_args()
    # trizre's warnings and notes go to logs/<name>.<life>.log: a finding's evidence.
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    if args.role.startswith("client-"):
        trio.run(run_client, args)
    else:
        trio.run(serve, args)


if __name__ == "__main__":
    main()
