"""Test-suite wide fixtures, above all the loopback network guard."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support import _netguard

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


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--links",
        choices=("local", "tcp"),
        default="local",
        help="how nodes of one process reach each other: in-memory links "
        "(the default, as users get it) or TCP only (as zyre and pyre do); "
        "make test runs the node and pattern tests both ways",
    )


@pytest.fixture(autouse=True)
def links_mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """``--links tcp`` makes TCP the default link, as ``TRIZRE_LOCAL_LINKS=0`` does for users.

    A test that passes ``local_links=True`` itself still gets in-memory links.
    """
    mode: str = request.config.getoption("--links")
    monkeypatch.setenv("TRIZRE_LOCAL_LINKS", "1" if mode == "local" else "0")
    return mode


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Keep the tests on this machine's loopback to one xdist worker, one at a time.

    ``make test`` runs two workers (``-n 2 --dist loadgroup``) so that the
    namespace tests, which mostly wait, overlap the rest.  Tests on loopback
    may share fixed ports (the ZRE beacon port 5670 among them), so they run
    one at a time on one worker, as before.  A ``netns`` test sends only
    inside namespaces of its own (the chaos run's Spark cluster excepted,
    on 127.0.0.1 at ports the kernel picks), so it can run beside them.
    Without xdist the mark does nothing.
    """
    for item in items:
        if item.get_closest_marker("netns") is None:
            item.add_marker(pytest.mark.xdist_group("loopback"))
