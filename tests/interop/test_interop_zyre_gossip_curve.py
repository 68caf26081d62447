"""Gossip over CURVE between trizre and zyre, each as the hub, on a veth pair.

zyre's side is czmq's zgossip with its draft security API: a zyre hub
with a certificate binds a CURVE server under it; ``zyre_gossip_connect_curve``
connects with zyre's key pair to a hub whose key it is given.  That API
exists only in a czmq built with drafts (scripts/build-zyre.sh builds one
when it has czmq's source); elsewhere zyre gossips in the clear and these
tests skip, saying so (but for the last, which any zyre can run).  zyre
runs only inside the namespaces a test makes.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

import pytest

import trizre
from tests.interop import zyre_gossip_curve_unavailable, zyre_unavailable
from tests.support import netns
from tests.support.agents import curve_gossip_args
from tests.support.netns import Agent, NetnsPair
from tests.support.zyre_talk import (
    allow_dir,
    assert_no_event,
    expect_log,
    make_certs,
    talk_both_ways,
    trizre_agent,
    zyre_agent,
)


@pytest.fixture
def certs(tmp_path: Path) -> dict[str, Path]:
    """Key files in czmq's zcert format: trizre's, zyre's, and a stranger's."""
    return make_certs(tmp_path)


_reason = netns.netns_available() or zyre_unavailable()
_curve_reason = _reason or zyre_gossip_curve_unavailable()
pytestmark = [
    pytest.mark.netns,
    pytest.mark.skipif(_reason is not None, reason=f"zyre interop: {_reason}"),
]
needs_zyre_gossip_curve = pytest.mark.skipif(
    _curve_reason is not None, reason=f"zyre gossip over CURVE: {_curve_reason}"
)

netns_pair = netns.netns_pair  # the fixture
__all__ = ["certs", "netns_pair"]  # fixtures, used by name


def _key(path: Path) -> str:
    return trizre.Certificate.load(path).public_z85


@contextlib.contextmanager
def curve_agents(
    pair: NetnsPair,
    certs: dict[str, Path],
    n: int,
    *,
    hub: Literal["zyre", "trizre"],
    keyed: bool,
    tmp_path: Path | None = None,
) -> Iterator[tuple[Agent, Agent]]:
    """A CURVE gossip hub and its client, one zyre and one trizre, the hub started first.

    ``keyed``: the client is given the hub's key and each side allows only
    the other's key (zyre's allow-list a directory in ``tmp_path``), both
    in "chat"; otherwise each allows any key and the client has none to
    give.  ``n`` tells the tests' ports and names apart.  Yields (trizre, zyre).
    """
    z_ns, t_ns = pair
    hub_at = f"tcp://{(z_ns if hub == 'zyre' else t_ns).address}:{5673 + n}"
    groups: tuple[str, ...] = ("chat",) if keyed else ()
    if keyed:
        assert tmp_path is not None
        # zauth judges the hub's clients too
        zyre_allow = ["--allow", str(allow_dir(tmp_path, "zyre-allows", certs["trizre"]))]
        trizre_allow = [f"--curve-allow={_key(certs['zyre'])}"]  # the inbox's and the hub's
    else:
        zyre_allow, trizre_allow = ["--allow-any"], ["--curve-allow", "any"]
    zyre_args = curve_gossip_args(
        certs["zyre"], zyre_allow, f"tcp://{z_ns.address}:{5682 + n}", hub_at, bind=hub == "zyre"
    )
    trizre_args = curve_gossip_args(
        certs["trizre"], trizre_allow, f"tcp://{t_ns.address}:*", hub_at, bind=hub == "trizre"
    )
    if keyed and hub == "zyre":
        trizre_args.append(f"--gossip-server-key={_key(certs['zyre'])}")
    if keyed and hub == "trizre":
        zyre_args += ["--gossip-server-key", _key(certs["trizre"])]

    def zyre() -> Agent:
        return zyre_agent(z_ns, f"zyre{9 + n}", *zyre_args, groups=groups)

    def tri() -> Agent:
        return trizre_agent(t_ns, f"tri{9 + n}", *trizre_args, groups=groups)

    first, second = (zyre, tri) if hub == "zyre" else (tri, zyre)
    with first() as a, second() as b:
        yield (b, a) if hub == "zyre" else (a, b)


def _refused_over_curve(tri: Agent, zyre: Agent, logged: str) -> None:
    """trizre logged ``logged`` for CURVE, and neither side has met the other."""
    refusal = expect_log(tri, logged, timeout=15)
    assert "CURVE" in refusal["message"], refusal
    tri.send({"cmd": "peers"})
    assert tri.expect_event("peers")["peers"] == [], tri.describe()
    assert_no_event(zyre, "ENTER")


@needs_zyre_gossip_curve
def test_trizre_joins_a_curve_zyre_hub_with_its_key(
    netns_pair: NetnsPair, certs: dict[str, Path], tmp_path: Path
) -> None:
    with curve_agents(netns_pair, certs, 0, hub="zyre", keyed=True, tmp_path=tmp_path) as (
        tri,
        zyre,
    ):
        talk_both_ways(tri, zyre)
        seen = [e for e in tri.history if e.get("event") == "ENTER"]
        assert seen[0]["headers"]["X-PUBLICKEY"] == _key(certs["zyre"])


@needs_zyre_gossip_curve
def test_a_curve_zyre_hub_refuses_trizre_without_its_key(
    netns_pair: NetnsPair, certs: dict[str, Path]
) -> None:
    """The control for the test above: zyre's hub really is a CURVE server."""
    with curve_agents(netns_pair, certs, 1, hub="zyre", keyed=False) as (tri, zyre):
        # The mismatch, or zyre's hub closing on it first.
        _refused_over_curve(tri, zyre, "refused us:")


@needs_zyre_gossip_curve
def test_curve_zyre_joins_a_curve_trizre_hub_with_its_key(
    netns_pair: NetnsPair, certs: dict[str, Path], tmp_path: Path
) -> None:
    with curve_agents(netns_pair, certs, 2, hub="trizre", keyed=True, tmp_path=tmp_path) as (
        tri,
        zyre,
    ):
        talk_both_ways(tri, zyre)


def test_a_curve_trizre_hub_refuses_zyre_without_its_key(
    netns_pair: NetnsPair, certs: dict[str, Path]
) -> None:
    """The control for the test above: zyre's plain zyre_gossip_connect is turned away.

    Any zyre will do here: without czmq's drafts it connects in the clear too.
    """
    with curve_agents(netns_pair, certs, 3, hub="trizre", keyed=False) as (tri, zyre):
        # The mismatch, or zyre closing on it first.
        _refused_over_curve(tri, zyre, "refused a client:")
