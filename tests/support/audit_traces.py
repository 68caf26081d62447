"""Build hand-made schema-v1 traces (docs/traces.md) for the audit tests.

A :class:`Traces` collects lines per node and writes them as the recorder
would: one ``<name>-<uuid>.jsonl`` file per node, optionally rotated into
``.1.jsonl``, ``.2.jsonl``... .  Times are given as the monotonic ``m``; the
wall clock ``t`` is derived from it.  Higher-level helpers write the usual
line sequences of a request, a Binary Star state change, presence events.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

WALL_OFFSET = 1_760_000_000.0
"""``t = m + WALL_OFFSET`` on every hand-made line."""


def uuid_of(name: str) -> str:
    """A stable 32-hex-digit node UUID for a name."""
    return hashlib.md5(name.encode()).hexdigest()


def rid(n: int) -> str:
    """Request id number *n* as 16 lowercase hex digits."""
    return f"{n:016x}"


@dataclass(frozen=True)
class Node:
    name: str

    @property
    def uuid(self) -> str:
        return uuid_of(self.name)


@dataclass
class Traces:
    """Lines per node, written by :meth:`write`."""

    lines: dict[Node, list[dict[str, Any]]] = field(default_factory=dict)

    def node(self, name: str, *, start: float | None = None) -> Node:
        node = Node(name)
        self.lines.setdefault(node, [])
        if start is not None:
            self.line(node, "node-start", start, endpoint="tcp://127.0.0.1:5670")
        return node

    def line(self, node: Node, kind: str, m: float, **fields: Any) -> dict[str, Any]:
        entry: dict[str, Any] = {
            "v": 1,
            "t": m + WALL_OFFSET,
            "m": m,
            "node": node.uuid,
            "name": node.name,
            "kind": kind,
        }
        entry.update({k: v for k, v in fields.items() if v is not None})
        self.lines.setdefault(node, []).append(entry)
        return entry

    # -- requests ---------------------------------------------------------

    def sent(
        self,
        client: Node,
        server: Node,
        n: int,
        m: float,
        *,
        attempt: int = 1,
        pattern: str = "lazy-pirate",
        service: str = "",
    ) -> None:
        if attempt > 1:
            self.line(
                client,
                "request-retried",
                m,
                rid=rid(n),
                pattern=pattern,
                service=service,
                attempt=attempt,
            )
        self.line(
            client,
            "request-sent",
            m,
            rid=rid(n),
            pattern=pattern,
            service=service,
            peer=server.uuid,
            peer_name=server.name,
            attempt=attempt,
        )

    def executed(
        self,
        server: Node,
        client: Node,
        n: int,
        m: float,
        *,
        idempotent: bool = False,
        service: str = "",
        status: int = 200,
    ) -> None:
        self.line(server, "request-received", m, rid=rid(n), client=client.uuid, service=service)
        self.line(
            server,
            "request-executed",
            m,
            rid=rid(n),
            client=client.uuid,
            service=service,
            idempotent=idempotent,
        )
        self.line(
            server, "reply-sent", m, rid=rid(n), client=client.uuid, service=service, status=status
        )

    def answered(
        self,
        client: Node,
        server: Node,
        n: int,
        m: float,
        *,
        latency: float,
        attempt: int = 1,
        pattern: str = "lazy-pirate",
        service: str = "",
        status: int = 200,
    ) -> None:
        self.line(
            client,
            "request-answered",
            m,
            rid=rid(n),
            pattern=pattern,
            service=service,
            peer=server.uuid,
            status=status,
            latency=latency,
            attempt=attempt,
        )

    def abandoned(
        self,
        client: Node,
        n: int,
        m: float,
        *,
        attempts: int,
        pattern: str = "lazy-pirate",
        service: str = "",
    ) -> None:
        self.line(
            client,
            "request-abandoned",
            m,
            rid=rid(n),
            pattern=pattern,
            service=service,
            attempt=attempts,
        )

    def request(
        self,
        client: Node,
        server: Node,
        n: int,
        m: float,
        *,
        latency: float = 0.01,
        pattern: str = "lazy-pirate",
        service: str = "",
        idempotent: bool = False,
    ) -> None:
        """A clean request: sent at *m*, executed once, answered at ``m + latency``."""
        kw = {"pattern": pattern, "service": service}
        self.sent(client, server, n, m, **kw)
        self.executed(server, client, n, m + latency / 2, idempotent=idempotent, service=service)
        self.answered(client, server, n, m + latency, latency=latency, **kw)

    # -- Binary Star and presence ------------------------------------------

    def bstar(self, server: Node, m: float, old: str, new: str, event: str = "") -> None:
        self.line(server, "bstar-state", m, old_state=old, state=new, event=event or None)

    def enter(self, observer: Node, peer: Node, m: float) -> None:
        self.line(observer, "enter", m, peer=peer.uuid, peer_name=peer.name)

    def exit(self, observer: Node, peer: Node, m: float, reason: str = "expired") -> None:
        self.line(observer, "exit", m, peer=peer.uuid, peer_name=peer.name, reason=reason)

    def whisper_received(self, observer: Node, peer: Node, m: float, seq: int = 2) -> None:
        self.line(observer, "whisper-received", m, peer=peer.uuid, seq=seq)

    # -- files --------------------------------------------------------------

    def write(self, directory: Path, *, rotate_every: int | None = None) -> Path:
        """Write one file per node (``rotate_every`` lines per file when given)."""
        directory.mkdir(parents=True, exist_ok=True)
        for node, entries in self.lines.items():
            ordered = sorted(entries, key=lambda e: e["m"])
            chunks = _chunks(ordered, rotate_every or max(len(ordered), 1))
            stem = f"{node.name}-{node.uuid}"
            # The live file holds the newest lines; .1 the ones before, and so on.
            for i, chunk in enumerate(reversed(chunks)):
                name = f"{stem}.jsonl" if i == 0 else f"{stem}.{i}.jsonl"
                (directory / name).write_text("".join(json.dumps(e) + "\n" for e in chunk))
        return directory


def _chunks(items: list[dict[str, Any]], size: int) -> list[list[dict[str, Any]]]:
    return [items[i : i + size] for i in range(0, len(items), size)] or [[]]


def flagged_rids(summary: dict[str, Any], flag: str) -> set[str]:
    """The rids listed under one request flag of a (request) summary."""
    flags = summary["requests"]["flags"] if "requests" in summary else summary["flags"]
    return {r["rid"] for r in flags[flag]["requests"]}


def rids(ns: Iterable[int]) -> set[str]:
    return {rid(n) for n in ns}
