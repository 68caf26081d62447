"""How each option of a node is documented and offered on the command line.

Each :class:`~trizre.NodeConfig` field carries an :class:`Option` (its
``metadata``): what it means, its default as shown, its flag.  That is the
options' one declaration; the CLI's node flags (``trizre/cli/_common.py``)
and the options tables of docs/node.md and docs/operations.md
(``tests/support/option_tables.py``) are made from it.
"""

from __future__ import annotations

from typing import Any, Final, Literal, TypeAlias, final

import attrs

__all__ = ["METADATA", "CliFlag", "Option", "Unit", "declare", "show_default"]

Unit: TypeAlias = Literal["", "s", "octets", "port"]
_MIB: Final = 1024 * 1024


@final
@attrs.frozen
class CliFlag:
    """How the networked ``trizre`` commands offer an option.

    ``help`` may hold ``{default}``, replaced by the option's default.
    ``repeat``: the flag may be given several times, each adding a value.
    ``key``: its value may be a Z85 key (40 characters), which begins with
    '-' about 1 time in 82; the command line reads such a word after the
    flag as its value, where argparse alone would take it for an option.
    The command line parses the value by the option's unit (seconds, a
    port) or its default's type (a number), so a bad one is a usage
    error, and passes it to ``open_node``; a flag with a meaning of its own
    (a file to read, gossip mode) is read by ``trizre/cli/_common.py``.
    """

    name: str
    metavar: str
    help: str
    repeat: bool = False
    key: bool = False


@final
@attrs.frozen
class Option:
    """One option of :class:`~trizre.NodeConfig`: its meaning, its default as shown, its flag.

    ``meaning`` is Markdown, for the docs' table; ``shown`` replaces the
    default the table would print from the value itself (for a default
    computed when the node starts); ``unit`` says how a number is shown
    and read on the command line (``"s"``: seconds; ``"port"``: a port);
    ``flag`` is ``None`` when the command line does not offer the option.
    """

    meaning: str
    shown: str | None = None
    unit: Unit = ""
    flag: CliFlag | None = None


METADATA: Final = "trizre.option"


def declare(
    meaning: str, *, shown: str | None = None, unit: Unit = "", flag: CliFlag | None = None
) -> dict[str, Option]:
    """The ``metadata=`` of a :class:`~trizre.NodeConfig` field: its :class:`Option`."""
    return {METADATA: Option(meaning, shown, unit, flag)}


def show_default(value: Any, unit: Unit = "", *, markdown: bool = True) -> str:
    """A default as people read it: ``1 s``, ``16 MiB``, ``10,000``, ``"udp"``.

    With ``markdown=False``, the bare number a ``--help`` line shows
    (``1``, ``5670``); other values are shown as with ``markdown``.
    """
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return f"`{value!r}`".replace("'", '"') if markdown else repr(value)
    if isinstance(value, int | float):
        plain = str(value) if isinstance(value, int) else f"{value:g}"
        if not markdown or unit == "port":
            return plain
        if unit == "octets" and value % _MIB == 0:
            return f"{value // _MIB} MiB"
        text = f"{value:,}" if value >= 10_000 else plain
        return f"{text} s" if unit == "s" else text
    return f"`{value!r}`"
