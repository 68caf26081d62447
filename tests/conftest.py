"""Test-suite wide fixtures, above all the loopback network guard."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests import _netguard

pytest_plugins = ["pytester"]

_netguard.install()


@pytest.fixture(autouse=True)
def loopback_guard(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fail any test that sends outside loopback, unless it is marked ``netns``.

    A ``netns`` test promises to send only inside network namespaces it
    created itself (see shared/DESIGN.md section 3).
    """
    in_own_namespace = request.node.get_closest_marker("netns") is not None
    _netguard.state.armed = not in_own_namespace
    _netguard.state.violations.clear()
    try:
        yield
        violations = list(_netguard.state.violations)
        if violations:
            pytest.fail(
                "network guard: this test tried to send outside loopback: " + "; ".join(violations)
            )
    finally:
        _netguard.state.armed = False
        _netguard.state.violations.clear()
