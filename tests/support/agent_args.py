"""Command lines of the interop agents (tests/interop/*_agent), built rather than re-typed."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

__all__ = ["curve_gossip_args"]


def curve_gossip_args(
    cert: Path, allow: Sequence[str], endpoint: str, hub: str, *, bind: bool
) -> list[str]:
    """A CURVE agent's options: its certificate, whom it allows, its inbox, and its hub.

    ``allow`` is the agent's own spelling (``["--allow-any"]``,
    ``["--curve-allow", "any"]``, ...); with ``bind`` the agent is the hub
    at ``hub``, else it connects there.
    """
    where = "--gossip-bind" if bind else "--gossip-connect"
    return ["--curve-cert", str(cert), *allow, "--endpoint", endpoint, where, hub]
