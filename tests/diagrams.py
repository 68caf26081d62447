"""Diagrams in the docs that mirror code, drawn from the code itself.

``python tests/diagrams.py`` prints each; ``--write`` puts them in their
documents, between the markers ``<!-- diagram: NAME -->`` and
``<!-- /diagram -->``.  ``tests/test_docs_diagrams.py`` fails when a
document's copy differs from what the code draws today.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from pathlib import Path

from trizre.patterns._bstar_fsm import TRANSITIONS, Event, State, Verdict

ROOT = Path(__file__).resolve().parent.parent


def binary_star() -> str:
    """The Binary Star state machine, every arrow from ``TRANSITIONS``.

    A state change is an arrow labelled with the events that cause it; a
    client vote is an arrow to ACTIVE labelled ``vote``; a fatal verdict
    leads to a terminal state named after it.  Ignored and rejected events
    change nothing and are left out (the table beside it lists them).
    """
    arrows: dict[tuple[str, str], list[str]] = {}
    fatal = {
        Verdict.SPLIT_BRAIN: "split_brain",
        Verdict.DUAL_PASSIVE: "dual_passive",
        Verdict.ROLE_CONFLICT: "role_conflict",
    }
    for state in State:
        for event in Event:
            rule = TRANSITIONS[(state, event)]
            label = event.name
            if isinstance(rule, State):
                if rule is state:
                    continue  # accepted, staying ACTIVE
                target = rule.name
            elif rule is Verdict.VOTE:
                target, label = State.ACTIVE.name, "CLIENT_REQUEST, partner silent (vote)"
            elif rule in fatal:
                target = fatal[rule]
            else:
                continue
            arrows.setdefault((state.name, target), []).append(label)
    lines = ["stateDiagram-v2"]
    lines += ["    [*] --> PRIMARY: start as primary", "    [*] --> BACKUP: start as backup"]
    for (source, target), labels in arrows.items():
        lines.append(f"    {source} --> {target}: {' / '.join(labels)}")
    for name in fatal.values():
        lines.append(f"    {name} --> [*]: fatal, the server stops")
    return "\n".join(lines)


DIAGRAMS: dict[str, tuple[str, Callable[[], str]]] = {
    "binary-star-fsm": ("patterns/binary-star.md", binary_star),
}


def block(name: str) -> str:
    """The diagram as it stands in its document: markers and a mermaid fence."""
    _, draw = DIAGRAMS[name]
    return f"<!-- diagram: {name} -->\n```mermaid\n{draw()}\n```\n<!-- /diagram -->"


def _span(name: str) -> re.Pattern[str]:
    return re.compile(rf"<!-- diagram: {re.escape(name)} -->\n.*?<!-- /diagram -->", re.S)


def in_document(name: str) -> str | None:
    """The diagram's copy in its document, or ``None`` if it has none."""
    path, _ = DIAGRAMS[name]
    found = _span(name).search((ROOT / path).read_text())
    return None if found is None else found.group(0)


def write() -> None:
    for name, (path, _) in DIAGRAMS.items():
        text = (ROOT / path).read_text()
        found = _span(name).search(text)
        if found is not None:
            text = text[: found.start()] + block(name) + text[found.end() :]
        updated = text
        (ROOT / path).write_text(updated)


if __name__ == "__main__":
    if sys.argv[1:] == ["--write"]:
        write()
    else:
        for name in DIAGRAMS:
            print(block(name))
