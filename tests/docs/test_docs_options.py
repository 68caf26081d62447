"""The docs' options tables and error tree are what the declarations make.

The node's options are declared once (``NodeConfig``'s fields, each with
its meaning, shown default and flag); ``tests/support/option_tables.py``
makes the tables of docs/node.md and docs/operations.md, and the error tree
of docs/errors.md, from the code.
"""

from __future__ import annotations

import inspect

import attrs
import pytest

from tests.support import option_tables
from trizre import NodeConfig, open_node
from trizre.node._config import options


@pytest.mark.parametrize("name", sorted(option_tables.TABLES))
def test_the_documents_table_is_what_the_declaration_makes(name: str) -> None:
    found = option_tables.in_document(name)
    assert found is not None, f"{name}: no table in {option_tables.TABLES[name][0]}"
    assert found == option_tables.block(name), (
        f"{name} differs from the declaration: run python tests/support/option_tables.py --write"
    )


def test_every_option_is_declared_with_its_meaning() -> None:
    # options() raises KeyError for a field added without metadata=_option(...).
    declared = [name for name, _, _ in options()]
    assert declared == [field.name for field in attrs.fields(NodeConfig)]
    assert all(opt.meaning for _, _, opt in options())


def test_open_node_takes_every_option_with_the_declared_default() -> None:
    # open_node re-types the options as keyword arguments: this keeps the
    # two in step (names and defaults) until it takes a NodeConfig alone.
    parameters = inspect.signature(open_node).parameters
    assert set(parameters) == {name for name, _, _ in options()}
    # local_links: None means "on unless $TRIZRE_LOCAL_LINKS is 0", read
    # when the node starts; NodeConfig holds the answer.
    differing = {
        name: (parameters[name].default, default)
        for name, default, _ in options()
        if parameters[name].default != default and name != "local_links"
    }
    assert not differing, differing


def test_the_table_shows_an_option_missing_from_the_old_hand_made_one() -> None:
    # election_timeout was an option of open_node the hand-typed table left out.
    assert "| `election_timeout` | 5 s |" in option_tables.node_options()
