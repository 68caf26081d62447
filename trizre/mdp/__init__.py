"""A Majordomo (MDP) bridge: existing Majordomo clients and workers meet trizre services.

:func:`open_mdp_bridge` runs a broker endpoint (a ZeroMQ ROUTER) whose
services are trizre services (ZRE groups): MDP clients call trizre
workers, MDP workers serve trizre clients, and ``mmi.service`` is answered
from ZRE membership.  It speaks 18/MDP (MDP/0.2), the dialect of the
``majortomo`` package, and 7/MDP (MDP/0.1); see ``docs/mdp-bridge.md``.
The command line runs one with ``trizre mdp-bridge``.
"""

from ._bridge import MdpBridge, open_mdp_bridge
from ._codec import MdpDecodeError, MdpError

__all__ = ["MdpBridge", "MdpDecodeError", "MdpError", "open_mdp_bridge"]
