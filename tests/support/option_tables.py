"""Tables in the docs that mirror a declaration, made from it.

The node's options are declared once, in ``trizre/node/_config.py``
(each ``NodeConfig`` field with its meaning, its default as shown and its
command-line flag); the errors once, as classes under ``TrizreError``.
``python tests/support/option_tables.py`` prints each table; ``--write``
puts them in their documents, between ``<!-- generated: NAME -->`` and
``<!-- /generated -->``.  ``tests/docs/test_docs_options.py`` fails when a
document's copy differs from what the declaration makes today.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
import sys
from collections.abc import Callable
from pathlib import Path

import trizre
from trizre import TrizreError
from trizre.cli._common import node_flags
from trizre.node._config import options
from trizre.node._options import show_default

ROOT = Path(__file__).resolve().parents[2]

# Extras a module may need: without one, its modules are left out.
OPTIONAL = {"pyspark", "py4j"}


def _cell(text: str) -> str:
    """Text for a Markdown table cell: a ``|`` would end the cell."""
    return text.replace("|", "\\|")


def node_options() -> str:
    """docs/node.md: every option of ``open_node``, its default, what it means."""
    lines = ["| argument | default | meaning |", "|---|---|---|"]
    for name, default, opt in options():
        shown = opt.shown if opt.shown is not None else show_default(default, opt.unit)
        lines.append(f"| `{name}` | {_cell(shown)} | {_cell(opt.meaning)} |")
    return "\n".join(lines)


def cli_node_options() -> str:
    """docs/operations.md: the node options of every networked command, as ``--help`` says."""
    lines = ["| option | meaning | `open_node` argument |", "|---|---|---|"]
    for name, default, opt, flag in node_flags():
        text = flag.help.format(default=show_default(default, opt.unit, markdown=False))
        # Plain text in --help; in Markdown a lone * would start emphasis.
        text = text.replace("*", "\\*")
        lines.append(f"| `{_cell(f'{flag.name} {flag.metavar}')}` | {_cell(text)} | `{name}` |")
    return "\n".join(lines)


def library_exceptions() -> dict[str, type[BaseException]]:
    """Every exception class trizre defines, by its dotted name.

    Every module of the package is imported, so a class added anywhere is
    found without being named here; a module that needs a missing extra
    (``OPTIONAL``) is left out.
    """
    modules = [trizre]
    for info in pkgutil.walk_packages(trizre.__path__, "trizre."):
        if info.name.rsplit(".", 1)[-1] == "__main__":
            continue  # runs a command when imported
        try:
            modules.append(importlib.import_module(info.name))
        except ModuleNotFoundError as exc:
            if exc.name is None or exc.name.split(".")[0] not in OPTIONAL:
                raise
    found: dict[str, type[BaseException]] = {}
    for module in modules:
        for _, value in inspect.getmembers(module, inspect.isclass):
            if issubclass(value, BaseException) and value.__module__.startswith("trizre."):
                found[f"{value.__module__}.{value.__qualname__}"] = value
    return found


def _public_name(cls: type[BaseException]) -> str:
    """The shortest dotted name without a private part that reaches ``cls``, else its own."""
    names = []
    for module_name, module in sys.modules.items():
        if module_name != "trizre" and not module_name.startswith("trizre."):
            continue
        if any(part.startswith("_") for part in module_name.split(".")):
            continue
        if getattr(module, cls.__name__, None) is cls:
            names.append(f"{module_name}.{cls.__name__}")
    if names:
        return min(names, key=lambda n: (n.count("."), n))
    return f"{cls.__module__}.{cls.__qualname__}"


def _markdown(text: str) -> str:
    """A docstring's reStructuredText roles and literals, as Markdown code."""
    text = re.sub(r":\w+:`~([\w.]+)`", lambda m: f"`{m.group(1).rsplit('.', 1)[-1]}`", text)
    text = re.sub(r":\w+:`([\w.]+)`", r"`\1`", text)
    return text.replace("``", "`")


def error_tree() -> str:
    """docs/errors.md: every exception under ``TrizreError``, with its other bases."""
    classes = [c for c in library_exceptions().values() if issubclass(c, TrizreError)]
    children: dict[type[BaseException], list[type[BaseException]]] = {}
    for cls in classes:
        if cls is TrizreError:
            continue
        # Its parent in the tree: the nearest base that is a trizre error.
        parent = next(b for b in cls.__bases__ if issubclass(b, TrizreError))
        children.setdefault(parent, []).append(cls)
    lines: list[str] = []

    def walk(cls: type[BaseException], depth: int) -> None:
        others = [
            b.__module__ + "." + b.__qualname__ if b.__module__ != "builtins" else b.__qualname__
            for b in cls.__bases__
            if not issubclass(b, TrizreError) and b is not Exception
        ]
        also = f" (also `{'`, `'.join(others)}`)" if others else ""
        doc = _markdown((inspect.getdoc(cls) or "").split("\n\n")[0].replace("\n", " "))
        lines.append(f"{'    ' * depth}- `{_public_name(cls)}`{also}: {doc}")
        for child in sorted(children.get(cls, []), key=lambda c: c.__name__):
            walk(child, depth + 1)

    walk(TrizreError, 0)
    return "\n".join(lines)


TABLES: dict[str, tuple[str, Callable[[], str]]] = {
    "node-options": ("docs/node.md", node_options),
    "cli-node-options": ("docs/operations.md", cli_node_options),
    "error-tree": ("docs/errors.md", error_tree),
}


def block(name: str) -> str:
    """The table as it stands in its document, between its markers."""
    _, make = TABLES[name]
    return f"<!-- generated: {name} -->\n\n{make()}\n\n<!-- /generated -->"


def _span(name: str) -> re.Pattern[str]:
    return re.compile(rf"<!-- generated: {re.escape(name)} -->\n.*?<!-- /generated -->", re.S)


def in_document(name: str) -> str | None:
    """The table's copy in its document, or ``None`` if it has none."""
    path, _ = TABLES[name]
    found = _span(name).search((ROOT / path).read_text())
    return None if found is None else found.group(0)


def write() -> None:
    for name, (path, _) in TABLES.items():
        text = (ROOT / path).read_text()
        found = _span(name).search(text)
        if found is None:
            print(f"{path}: no <!-- generated: {name} --> marker, left alone", file=sys.stderr)
            continue
        (ROOT / path).write_text(text[: found.start()] + block(name) + text[found.end() :])


if __name__ == "__main__":
    if sys.argv[1:] == ["--write"]:
        write()
    else:
        for name in TABLES:
            print(block(name))
            print()
