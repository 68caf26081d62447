"""A ZRE conformance suite: point it at any implementation (``trizre conformance``).

The suite acts as one or more ZRE peers (beacons, a DEALER, a ROUTER, a
gossip hub) and checks how the *target* reacts, case by case, each case
citing the clause of 36/ZRE, 43/ZRE, 22/ZRE-DISC, czmq's ZGP or zyre it
checks.  *Passive* cases need only the
target's beacons and mailbox; cases that read what the target reports, and
*active* cases (the target must whisper, shout, join, leave), need an agent:
a program that drives one node of the implementation over JSON lines (see
:mod:`trizre.conformance._agent` for the contract).  See
``docs/conformance.md``.
"""

from ._agent import AgentError
from ._cases import CASES, Case
from ._errors import ConformanceError
from ._harness import Profile
from ._run import Report, Result, SetupError, run_suite

__all__ = [
    "CASES",
    "AgentError",
    "Case",
    "ConformanceError",
    "Profile",
    "Report",
    "Result",
    "SetupError",
    "run_suite",
]
