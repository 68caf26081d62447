"""The requesting side: Lazy Pirate, services over groups, Binary Star and Freelance clients.

Each client is a module of its pattern (``_lazy_pirate.py``,
``_service_client.py``, ``_bstar_client.py``, ``_freelance.py``) over one
shared request loop (``_attempts.py``); this module hands their names on.
"""

from __future__ import annotations

from ._bstar_client import BinaryStarClient, open_binary_star_client
from ._freelance import Candidate, FreelanceClient, freelance_choice, open_freelance_client
from ._lazy_pirate import LazyPirateClient, open_lazy_pirate_client
from ._service_client import ServiceClient, open_service_client

__all__ = [
    "BinaryStarClient",
    "Candidate",
    "FreelanceClient",
    "LazyPirateClient",
    "ServiceClient",
    "freelance_choice",
    "open_binary_star_client",
    "open_freelance_client",
    "open_lazy_pirate_client",
    "open_service_client",
]
