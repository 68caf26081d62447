"""Write a large synthetic trace directory (schema v1, docs/traces.md).

A fleet of clients sends requests over three patterns — ``service`` to a
pool of workers (half of them idempotent), ``lazy-pirate`` to direct
servers, ``binary-star`` to a primary/backup pair — with every line a real
fleet would write: the request lines on both sides, the WHISPERs carrying
them, ENTER/JOIN at start, and a Binary Star failover half way: the primary
goes silent (killed), the backup takes over 2 s later, the clients retry
and see the primary EXIT when it expires.  About 2 % of requests lose an
attempt and are retried, 0.1 % are abandoned after three.

Nothing is lost, answered twice or out of order.  The audit does flag
what a real failover causes: a Binary Star request whose reply was lost
just before the primary died is run again by the backup (both servers say
``idempotent``, but reply caches are not shared) — a handful of *duplicate
executions* per 10 M lines, and exit code 1.  Non-idempotent workers that
re-run a retried request are counted as *re-executed* (allowed).

Lines are built with plain string formatting (no ``json.dumps`` per line),
one file per node, rotated at ``--rotate-mb`` like the recorder does::

    .venv/bin/python benchmarks/gen_traces.py --events 10000000 --out /tmp/trizre-traces-10M
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import time
from pathlib import Path

WALL_OFFSET = 1_763_000_000.0
MARKER = "_generated.json"  # Spark and the audit skip names starting with "_"


class NodeFile:
    """One node's trace file, buffered, rotated at *rotate_bytes*."""

    def __init__(self, directory: Path, name: str, uuid: str, rotate_bytes: int) -> None:
        self.name = name
        self.uuid = uuid
        self.stem = directory / f"{name}-{uuid}"
        self.rotate_bytes = rotate_bytes
        self.buffer: list[str] = []
        self.buffered = 0
        self.written = 0
        self.rotations = 0
        self.count = 0
        self.file = open(f"{self.stem}.jsonl", "w", encoding="ascii")  # noqa: SIM115
        # Everything between the clocks and the kind, fixed per node.
        self.mid = f',"node":"{uuid}","name":"{name}","kind":"'

    def add(self, m: float, rest: str) -> None:
        """Append a line; *rest* is the kind and its fields, e.g. ``'enter","peer":"..."'``."""
        line = f'{{"v":1,"t":{m + WALL_OFFSET:.6f},"m":{m:.6f}{self.mid}{rest}}}\n'
        self.buffer.append(line)
        self.buffered += len(line)
        self.count += 1
        if self.buffered > 1 << 20:
            self.flush()

    def flush(self) -> None:
        if not self.buffer:
            return
        self.file.write("".join(self.buffer))
        self.written += self.buffered
        self.buffer.clear()
        self.buffered = 0
        if self.written >= self.rotate_bytes:
            self.file.close()
            self.rotations += 1
            os.replace(f"{self.stem}.jsonl", f"{self.stem}.{self.rotations}.jsonl")
            self.file = open(f"{self.stem}.jsonl", "w", encoding="ascii")  # noqa: SIM115
            self.written = 0

    def close(self) -> None:
        self.flush()
        self.file.close()


def generate(
    out: Path,
    events: int,
    *,
    clients: int = 64,
    workers: int = 16,
    direct: int = 4,
    seed: int = 1,
    rotate_mb: int = 64,
    span: float = 600.0,
) -> dict[str, object]:
    """Write about *events* lines under *out*; return what was written."""
    rng = random.Random(seed)
    rand = rng.random
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("*.jsonl"):
        old.unlink()
    rotate = rotate_mb << 20

    def make(name: str) -> NodeFile:
        return NodeFile(out, name, f"{rng.getrandbits(128):032x}", rotate)

    cl = [make(f"client-{i:03d}") for i in range(clients)]
    wk = [make(f"worker-{i:02d}") for i in range(workers)]
    idem = {w.uuid: i % 2 == 0 for i, w in enumerate(wk)}
    ds = [make(f"direct-{i}") for i in range(direct)]
    primary, backup = make("bstar-primary"), make("bstar-backup")
    servers = [*wk, *ds, primary, backup]
    nodes = [*cl, *servers]

    m = 1000.0
    for n in nodes:
        n.add(m, f'node-start","endpoint":"tcp://127.0.0.1:{5670 + len(n.name)}"')
    m += 0.05
    for c in cl:  # each client sees every server, and joins happen
        for s in servers:
            c.add(m, f'enter","peer":"{s.uuid}","peer_name":"{s.name}"')
            s.add(m, f'enter","peer":"{c.uuid}","peer_name":"{c.name}"')
        for w in wk:
            c.add(m, f'join","peer":"{w.uuid}","peer_name":"{w.name}","group":"echo"')
    primary.add(
        m + 0.5, 'bstar-state","old_state":"PRIMARY","state":"ACTIVE","event":"PEER_BACKUP"'
    )
    backup.add(m + 0.6, 'bstar-state","old_state":"BACKUP","state":"PASSIVE","event":"PEER_ACTIVE"')
    m += 1.0

    # Lines so far, and per request about 9.2: plan the time line so that the
    # failover lands half way.
    written = sum(n.count for n in nodes)
    per_request = 9.25
    n_requests = max(1, int((events - written) / per_request))
    step = span / n_requests  # mean time between two requests of the fleet
    fail_at = m + n_requests * step / 2
    takeover = fail_at + 2.0
    primary_dead = False
    seq: dict[tuple[str, str], int] = {}
    counts = {"requests": 0, "retried": 0, "abandoned": 0}
    lines = written

    switched: set[str] = set()

    def seq_next(src: NodeFile, dst: NodeFile) -> int:
        key = (src.uuid, dst.uuid)
        s = (seq.get(key, 1) + 1) & 0xFFFF
        seq[key] = s
        return s

    def whisper(src: NodeFile, dst: NodeFile, at: float) -> None:
        s = seq_next(src, dst)
        src.add(at, f'whisper-sent","peer":"{dst.uuid}","seq":{s}')
        dst.add(at + 5e-5, f'whisper-received","peer":"{src.uuid}","seq":{s}')

    rid_n = 0
    while lines < events:
        m += -math.log(1.0 - rand()) * step
        if not primary_dead and m >= fail_at:
            primary_dead = True  # killed: it writes nothing more
            backup.add(
                takeover,
                'bstar-state","old_state":"PASSIVE","state":"ACTIVE","event":"PEER_EXPIRED"',
            )
            gone = f'exit","peer":"{primary.uuid}","peer_name":"bstar-primary","reason":"expired"'
            for c in cl:
                c.add(takeover + 3.0, gone)
            lines += 1 + clients
        rid_n += 1
        rid = f"{rid_n:016x}"
        c = cl[int(rand() * clients)]
        r = rand()
        if r < 0.5:
            pattern, service = "service", "echo"
        elif r < 0.8:
            pattern, service = "lazy-pirate", ""
        else:
            pattern, service = "binary-star", "bstar"
        head = f'","rid":"{rid}","pattern":"{pattern}","service":"{service}"'
        fate = rand()
        attempts_lost = 0 if fate >= 0.021 else (3 if fate < 0.001 else 1)
        t = m
        attempt = 1
        executed_on: set[str] = set()
        while True:
            if pattern == "service":
                server = wk[rid_n % workers]  # a retry goes back to the same worker
                c.add(
                    t,
                    f'worker-chosen","rid":"{rid}","service":"echo",'
                    f'"peer":"{server.uuid}","peer_name":"{server.name}"',
                )
                lines += 1
            elif pattern == "lazy-pirate":
                server = ds[rid_n % direct]
            else:  # a client sticks to the primary until it failed to answer once
                server = backup if c.uuid in switched else primary
            if attempt > 1:
                c.add(t, f'request-retried{head},"attempt":{attempt}')
                lines += 1
            c.add(
                t,
                f'request-sent{head},"peer":"{server.uuid}","peer_name":"{server.name}",'
                f'"attempt":{attempt}',
            )
            lines += 1
            srv_t = t + 1e-4
            if server is primary and t >= fail_at:  # dead: nobody reads it
                c.add(t, f'whisper-sent","peer":"{server.uuid}","seq":{seq_next(c, server)}')
                lines += 1
                switched.add(c.uuid)
                attempt += 1
                t += 1.0
                continue
            whisper(c, server, t)
            lines += 2
            if server is backup and t < takeover:  # still passive: refuses
                server.add(
                    srv_t, f'request-refused","rid":"{rid}","client":"{c.uuid}","status":503'
                )
                lines += 1
                attempt += 1
                t += 1.0
                continue
            lose = attempt <= attempts_lost
            key = f'","rid":"{rid}","client":"{c.uuid}","service":"{service}"'
            server.add(srv_t, f"request-received{key}")
            idempotent = idem.get(server.uuid, True)
            if idempotent and server.uuid in executed_on:
                server.add(srv_t, f"dedupe-hit{key}")  # answered from the reply cache
            else:
                flag = "true" if idempotent else "false"
                server.add(srv_t, f'request-executed{key},"idempotent":{flag}')
                executed_on.add(server.uuid)
            lines += 2
            if lose and attempt == 3:  # the third reply is lost too: the client gives up
                c.add(t + 1.0, f'request-abandoned{head},"attempt":3')
                lines += 1
                counts["abandoned"] += 1
                break
            if lose:  # the reply is lost on the way back
                attempt += 1
                t += 0.25
                continue
            svc_time = 2e-4 - math.log(1.0 - rand()) * 8e-4
            server.add(srv_t + svc_time, f'reply-sent{key},"status":200')
            whisper(server, c, srv_t + svc_time)
            done = srv_t + svc_time + 1e-4
            c.add(
                done,
                f'request-answered{head},"peer":"{server.uuid}","status":200,'
                f'"latency":{done - m:.6f},"attempt":{attempt}',
            )
            lines += 4
            break
        counts["requests"] += 1
        if attempt > 1:
            counts["retried"] += 1
    end = max(m, takeover + 3.0) + 5.0  # after the last retry or abandon
    for n in nodes:
        if n is not primary:
            n.add(end, 'node-stop"')
            lines += 1
    for n in nodes:
        n.close()
    lines = sum(n.count for n in nodes)
    info = {
        "events": events,
        "lines": lines,
        "seed": seed,
        "clients": clients,
        "workers": workers,
        "direct": direct,
        "span": span,
        "failover_at": fail_at,
        "takeover_at": takeover,
        "files": len(list(out.glob("*.jsonl"))),
        "bytes": sum(p.stat().st_size for p in out.glob("*.jsonl")),
        **counts,
    }
    (out / MARKER).write_text(json.dumps(info, indent=2) + "\n")
    return info


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--events", type=int, default=10_000_000, help="lines to write (about)")
    p.add_argument("--out", type=Path, default=Path("/tmp/trizre-traces"), help="directory")
    p.add_argument("--clients", type=int, default=64)
    p.add_argument("--workers", type=int, default=16)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--rotate-mb", type=int, default=64)
    p.add_argument("--span", type=float, default=600.0, help="seconds of traffic (default 600)")
    args = p.parse_args()
    started = time.perf_counter()
    info = generate(
        args.out,
        args.events,
        clients=args.clients,
        workers=args.workers,
        seed=args.seed,
        rotate_mb=args.rotate_mb,
        span=args.span,
    )
    elapsed = time.perf_counter() - started
    print(
        f"wrote {info['lines']:,} lines ({int(info['bytes']) / 1e9:.2f} GB, {info['files']} files)"
        f" to {args.out} in {elapsed:.1f} s ({int(info['lines']) / elapsed:,.0f} lines/s)"
    )


if __name__ == "__main__":
    main()
