"""One trace holding every request case the audit judges, under distinct request ids.

Shared by the audit's local tests and its test on a Spark cluster.
"""

from __future__ import annotations

from tests.support.audit_traces import Node, Traces

C1, C2 = Node("client-1"), Node("client-2")
W1, W2 = Node("worker-1"), Node("worker-2")

CLEAN, LOST, DUP_IDEM, REEXEC, DOUBLE, EARLY, AFTER_ABANDON, ABANDONED, ORPHAN, RETRIED, CROSS = (
    range(1, 12)
)


def request_cases() -> Traces:
    tr = Traces()
    for node in (C1, C2, W1, W2):
        tr.node(node.name, start=0.0)
    # A clean request; the same rid from another client is another request.
    tr.request(C1, W1, CLEAN, 1.0)
    tr.request(C2, W1, CLEAN, 1.1)
    # Lost: executed, but the client never logged an answer nor gave up.
    tr.sent(C1, W1, LOST, 2.0)
    tr.executed(W1, C1, LOST, 2.01)
    # Executed twice by an idempotent server: flagged.
    tr.sent(C1, W1, DUP_IDEM, 3.0)
    tr.executed(W1, C1, DUP_IDEM, 3.01, idempotent=True)
    tr.sent(C1, W1, DUP_IDEM, 3.5, attempt=2)
    tr.executed(W1, C1, DUP_IDEM, 3.51, idempotent=True)
    tr.answered(C1, W1, DUP_IDEM, 3.52, latency=0.52, attempt=2)
    # Run by two servers, each with a reply cache (a worker died mid-request):
    # each cache kept its promise; at-least-once across servers, allowed.
    tr.sent(C1, W1, CROSS, 3.6)
    tr.executed(W1, C1, CROSS, 3.61, idempotent=True)
    tr.sent(C1, W2, CROSS, 3.8, attempt=2)
    tr.executed(W2, C1, CROSS, 3.81, idempotent=True)
    tr.answered(C1, W2, CROSS, 3.82, latency=0.22, attempt=2)
    # Executed twice without a reply cache: at-least-once, allowed.
    tr.sent(C1, W1, REEXEC, 4.0)
    tr.executed(W1, C1, REEXEC, 4.01)
    tr.sent(C1, W2, REEXEC, 4.5, attempt=2)
    tr.executed(W2, C1, REEXEC, 4.51)
    tr.answered(C1, W2, REEXEC, 4.52, latency=0.52, attempt=2)
    # Answered twice.
    tr.request(C1, W1, DOUBLE, 5.0)
    tr.answered(C1, W1, DOUBLE, 5.2, latency=0.2)
    # An answer logged before the request was sent.
    tr.answered(C1, W1, EARLY, 5.9, latency=0.01)
    tr.sent(C1, W1, EARLY, 6.0)
    tr.executed(W1, C1, EARLY, 6.0)
    # Answered after the client had given up.
    tr.sent(C1, W1, AFTER_ABANDON, 7.0)
    tr.abandoned(C1, AFTER_ABANDON, 8.0, attempts=1)
    tr.executed(W1, C1, AFTER_ABANDON, 8.4)
    tr.answered(C1, W1, AFTER_ABANDON, 8.5, latency=1.5)
    # Abandoned after three attempts: not lost.
    tr.sent(C2, W1, ABANDONED, 9.0)
    tr.sent(C2, W1, ABANDONED, 9.5, attempt=2)
    tr.sent(C2, W1, ABANDONED, 10.0, attempt=3)
    tr.abandoned(C2, ABANDONED, 10.5, attempts=3)
    # Only the server saw it (the client's trace was not collected).
    tr.executed(W2, C2, ORPHAN, 11.0)
    # Retried once, then answered.
    tr.sent(C2, W1, RETRIED, 12.0)
    tr.sent(C2, W2, RETRIED, 12.5, attempt=2)
    tr.executed(W2, C2, RETRIED, 12.51)
    tr.answered(C2, W2, RETRIED, 12.52, latency=0.52, attempt=2)
    # The clients stopped cleanly: what they never heard back about is lost.
    for client in (C1, C2):
        tr.line(client, "node-stop", 20.0)
    return tr
