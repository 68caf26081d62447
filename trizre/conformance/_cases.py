"""The cases: each checks one rule, cites its clause, and says what it sent.

A case is an async function of a :class:`Harness`; it returns to pass,
raises :class:`Fail` (sent, expected, got) to fail, or
:class:`NotApplicable` when the target cannot be asked (no agent, a
timeout it cannot set).  Cases are independent: each makes its own fake
peers with fresh UUIDs and says goodbye (a port-0 beacon) at its end.
"""

from __future__ import annotations

# The families, in suite order: importing one registers its cases, and
# CASES keeps the order they were registered in.
# isort: off
from . import _cases_beacon, _cases_peer, _cases_presence, _cases_curve  # noqa: F401
from . import _cases_election, _cases_active, _cases_gossip  # noqa: F401

# isort: on
from ._harness import Fail, NotApplicable
from ._registry import CASES, Case, select

__all__ = ["CASES", "Case", "Fail", "NotApplicable", "select"]
