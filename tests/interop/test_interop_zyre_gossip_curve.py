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

from pathlib import Path

import pytest

import trizre
from tests.interop import zyre_gossip_curve_unavailable, zyre_unavailable
from tests.interop.test_interop_zyre import (
    _allow_dir,
    _log,
    _no_event,
    _talk_both_ways,
    _trizre,
    _zyre,
    certs,
)
from tests.support import netns
from tests.support.agents import curve_gossip_args
from tests.support.netns import NetnsPair

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


@needs_zyre_gossip_curve
def test_trizre_joins_a_curve_zyre_hub_with_its_key(
    netns_pair: NetnsPair, certs: dict[str, Path], tmp_path: Path
) -> None:
    z_ns, t_ns = netns_pair
    hub = f"tcp://{z_ns.address}:5673"
    zyre_allows = _allow_dir(tmp_path, "zyre-allows", certs["trizre"])
    with (
        _zyre(
            z_ns,
            "zyre9",
            *curve_gossip_args(
                certs["zyre"],
                ["--allow", str(zyre_allows)],  # zauth judges the hub's clients too
                f"tcp://{z_ns.address}:5682",
                hub,
                bind=True,
            ),
            groups=("chat",),
        ) as zyre,
        _trizre(
            t_ns,
            "tri9",
            *curve_gossip_args(
                certs["trizre"],
                [f"--curve-allow={_key(certs['zyre'])}"],
                f"tcp://{t_ns.address}:*",
                hub,
                bind=False,
            ),
            f"--gossip-server-key={_key(certs['zyre'])}",
            groups=("chat",),
        ) as tri,
    ):
        _talk_both_ways(tri, zyre)
        seen = [e for e in tri.history if e.get("event") == "ENTER"]
        assert seen[0]["headers"]["X-PUBLICKEY"] == _key(certs["zyre"])


@needs_zyre_gossip_curve
def test_a_curve_zyre_hub_refuses_trizre_without_its_key(
    netns_pair: NetnsPair, certs: dict[str, Path]
) -> None:
    """The control for the test above: zyre's hub really is a CURVE server."""
    z_ns, t_ns = netns_pair
    hub = f"tcp://{z_ns.address}:5674"
    with (
        _zyre(
            z_ns,
            "zyre10",
            *curve_gossip_args(
                certs["zyre"],
                ["--allow-any"],
                f"tcp://{z_ns.address}:5683",
                hub,
                bind=True,
            ),
        ) as zyre,
        _trizre(
            t_ns,
            "tri10",
            *curve_gossip_args(
                certs["trizre"],
                ["--curve-allow", "any"],
                f"tcp://{t_ns.address}:*",
                hub,
                bind=False,
            ),
        ) as tri,
    ):
        # The mismatch, or zyre's hub closing on it first.
        refusal = _log(tri, "refused us:", timeout=15)
        assert "CURVE" in refusal["message"], refusal
        tri.send({"cmd": "peers"})
        assert tri.expect_event("peers")["peers"] == [], tri.describe()
        _no_event(zyre, "ENTER")


@needs_zyre_gossip_curve
def test_curve_zyre_joins_a_curve_trizre_hub_with_its_key(
    netns_pair: NetnsPair, certs: dict[str, Path], tmp_path: Path
) -> None:
    z_ns, t_ns = netns_pair
    hub = f"tcp://{t_ns.address}:5675"
    zyre_allows = _allow_dir(tmp_path, "zyre-allows", certs["trizre"])
    with (
        _trizre(
            t_ns,
            "tri11",
            *curve_gossip_args(
                certs["trizre"],
                [f"--curve-allow={_key(certs['zyre'])}"],  # the inbox's and the hub's clients
                f"tcp://{t_ns.address}:*",
                hub,
                bind=True,
            ),
            groups=("chat",),
        ) as tri,
        _zyre(
            z_ns,
            "zyre11",
            *curve_gossip_args(
                certs["zyre"],
                ["--allow", str(zyre_allows)],
                f"tcp://{z_ns.address}:5684",
                hub,
                bind=False,
            ),
            "--gossip-server-key",
            _key(certs["trizre"]),
            groups=("chat",),
        ) as zyre,
    ):
        _talk_both_ways(tri, zyre)


def test_a_curve_trizre_hub_refuses_zyre_without_its_key(
    netns_pair: NetnsPair, certs: dict[str, Path]
) -> None:
    """The control for the test above: zyre's plain zyre_gossip_connect is turned away.

    Any zyre will do here: without czmq's drafts it connects in the clear too.
    """
    z_ns, t_ns = netns_pair
    hub = f"tcp://{t_ns.address}:5676"
    with (
        _trizre(
            t_ns,
            "tri12",
            *curve_gossip_args(
                certs["trizre"],
                ["--curve-allow", "any"],
                f"tcp://{t_ns.address}:*",
                hub,
                bind=True,
            ),
        ) as tri,
        _zyre(
            z_ns,
            "zyre12",
            *curve_gossip_args(
                certs["zyre"],
                ["--allow-any"],
                f"tcp://{z_ns.address}:5685",
                hub,
                bind=False,
            ),
        ) as zyre,
    ):
        # The mismatch, or zyre closing on it first.
        refusal = _log(tri, "refused a client:", timeout=15)
        assert "CURVE" in refusal["message"], refusal
        tri.send({"cmd": "peers"})
        assert tri.expect_event("peers")["peers"] == [], tri.describe()
        _no_event(zyre, "ENTER")
