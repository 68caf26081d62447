"""Diagrams in the docs that mirror code, drawn from the code itself.

``python tests/support/diagrams.py`` prints each; ``--write`` puts them in their
documents, between the markers ``<!-- diagram: NAME -->`` and
``<!-- /diagram -->``.  ``tests/docs/test_docs_diagrams.py`` fails when a
document's copy differs from what the code draws today.
"""

from __future__ import annotations

import ast
import re
import sys
from collections.abc import Callable
from pathlib import Path

from trizre.patterns._bstar_fsm import TRANSITIONS, Event, State, Verdict

ROOT = Path(__file__).resolve().parents[2]


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


# The package's rooms, bottom to top: every module of trizre/ belongs to one
# (by path prefix, the longest that matches); the map draws the imports
# between rooms as the code has them today.
LAYERS: dict[str, tuple[str, ...]] = {
    "wire: codecs, errors": ("wire/", "_errors.py"),
    "trace: the contract, its writer": ("trace/",),
    "sansio: peer, presence, elections, gossip, guards": ("sansio/",),
    "concurrency: Trio helpers": ("_concurrency.py",),
    "transport: sockets, links, discovery, CURVE": ("transport/",),
    "node: open_node, options, subscriptions": ("node/", "__init__.py"),
    "patterns": ("patterns/",),
    "mdp bridge": ("mdp/",),
    "conformance suite": ("conformance/",),
    "audit (PySpark)": ("audit/",),
    "watch, metrics, cli": ("metrics.py", "cli/", "__main__.py"),
}
"""Rooms, bottom to top, and the module paths (under ``trizre/``) in each."""


def layer_of(module: str) -> str:
    """The room of a module path under ``trizre/`` (the longest matching prefix)."""
    best = max(
        (
            (prefix, layer)
            for layer, prefixes in LAYERS.items()
            for prefix in prefixes
            if module == prefix or (module.startswith(prefix) and prefix.endswith("/"))
        ),
        key=lambda found: len(found[0]),
        default=None,
    )
    if best is None:
        raise KeyError(f"trizre/{module} is in no layer of tests/support/diagrams.py")
    return best[1]


def _imported(path: Path) -> set[str]:
    """The trizre modules one file imports, as paths under ``trizre/``."""
    package = ROOT / "trizre"
    here = path.parent.relative_to(package).parts
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = list(here[: len(here) - node.level + 1])
            elif node.module and node.module.split(".")[0] == "trizre":
                base = []
            else:
                continue
            parts = base + (node.module.split(".") if node.module else [])
            if parts and parts[0] == "trizre" and not node.level:
                parts = parts[1:]
            # "from . import wire" imports the module wire; "from ._x import y"
            # imports from the module _x.
            modules = set()
            for alias in node.names:
                modules |= _resolve(package, [*parts, alias.name]) if alias.name != "*" else set()
            found |= modules or _resolve(package, parts)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "trizre":
                    found |= _resolve(package, alias.name.split(".")[1:])
    return found


def _resolve(package: Path, parts: list[str]) -> set[str]:
    if not parts:
        return {"__init__.py"}
    stem = package.joinpath(*parts)
    if stem.with_suffix(".py").is_file():
        return {str(stem.with_suffix(".py").relative_to(package))}
    if (stem / "__init__.py").is_file():
        return {str((stem / "__init__.py").relative_to(package))}
    return set()


def layer_map() -> str:
    """The rooms and the imports between them, as the code has them today."""
    package = ROOT / "trizre"
    edges: set[tuple[str, str]] = set()
    for path in sorted(package.rglob("*.py")):
        source = layer_of(str(path.relative_to(package)))
        for module in _imported(path):
            target = layer_of(module)
            if target != source:
                edges.add((source, target))
    names = {layer: f"L{i}" for i, layer in enumerate(LAYERS)}
    order = list(LAYERS)
    lines = ["flowchart BT"]
    lines += [f'    {names[layer]}["{layer}"]' for layer in LAYERS]
    for a, b in sorted(_reduced(edges), key=lambda e: (order.index(e[0]), order.index(e[1]))):
        # An import from a lower room into a higher one is drawn dashed: a
        # layer that leans on one above it.
        arrow = "-. up .->" if order.index(b) > order.index(a) else "-->"
        lines.append(f"    {names[a]} {arrow} {names[b]}")
    return "\n".join(lines)


def _reduced(edges: set[tuple[str, str]]) -> set[tuple[str, str]]:
    """The imports no longer path of imports already implies (a readable map).

    Room A importing room C directly is left out when A imports some B
    that reaches C: the map then shows each room resting on the next,
    not 34 crossing arrows.  An upward import is always drawn.
    """
    after: dict[str, set[str]] = {}
    for a, b in edges:
        after.setdefault(a, set()).add(b)

    def reaches(start: str, goal: str, skip: tuple[str, str]) -> bool:
        seen, todo = set(), [start]
        while todo:
            room = todo.pop()
            for nxt in after.get(room, ()):
                if (room, nxt) == skip or nxt in seen:
                    continue
                if nxt == goal:
                    return True
                seen.add(nxt)
                todo.append(nxt)
        return False

    order = list(LAYERS)
    return {
        (a, b)
        for a, b in edges
        if order.index(b) > order.index(a) or not reaches(a, b, skip=(a, b))
    }


DIAGRAMS: dict[str, tuple[str, Callable[[], str]]] = {
    "binary-star-fsm": ("patterns/binary-star.md", binary_star),
    "layer-map": ("docs/architecture.md", layer_map),
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
