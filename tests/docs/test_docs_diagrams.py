"""Diagrams that mirror code agree with it (``tests/support/diagrams.py`` draws them)."""

from __future__ import annotations

import pytest

from tests.support import diagrams
from trizre.patterns._bstar_fsm import TRANSITIONS, State, Verdict


@pytest.mark.parametrize("name", sorted(diagrams.DIAGRAMS))
def test_the_documents_diagram_is_what_the_code_draws(name: str) -> None:
    found = diagrams.in_document(name)
    assert found is not None, f"{name}: no diagram in {diagrams.DIAGRAMS[name][0]}"
    assert found == diagrams.block(name), (
        f"{name} differs from the code: run python tests/support/diagrams.py --write"
    )


def test_the_binary_star_diagram_has_an_arrow_for_every_change_of_state() -> None:
    drawn = diagrams.binary_star()
    for (state, event), rule in TRANSITIONS.items():
        if isinstance(rule, State) and rule is not state:
            assert f"{state.name} --> {rule.name}: " in drawn
            line = next(x for x in drawn.splitlines() if f"{state.name} --> {rule.name}:" in x)
            assert event.name in line
        elif rule is Verdict.VOTE:
            assert f"{state.name} --> ACTIVE: " in drawn
