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
    tests that mostly wait overlap the rest.  Tests on loopback may share
    fixed ports (the ZRE beacon port 5670 among them), so they run one at a
    time on one worker, as before.  Two kinds can run beside them:

    * a ``netns`` test sends only inside namespaces of its own (the chaos
      run's Spark cluster excepted, on 127.0.0.1 at ports the kernel
      picks);
    * a ``kernel_ports`` module (the audit's Spark tests) opens no ZRE
      node and binds only ports the kernel picks.  Its tests stay together
      on one worker, so that its module fixtures (a Spark session, a
      cluster) start once.

    Without xdist the marks do nothing.
    """
    for item in items:
        if item.get_closest_marker("netns") is not None:
            continue
        if item.get_closest_marker("kernel_ports") is not None:
            group = "module " + item.nodeid.split("::", 1)[0]
        else:
            group = "loopback"
        item.add_marker(pytest.mark.xdist_group(group))
