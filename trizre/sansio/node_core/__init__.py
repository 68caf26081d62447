"""The node's rules as one pure object: who is a peer, for how long, what the node owes it.

:class:`NodeCore` (``_core``) owns the peer table (by UUID and by route),
the pending-handshake bookkeeping and back-off, the pending bound and the
leaving-beacon checks; it asks :class:`Admission` (``_admission``: the
beacon, gossip, HELLO, CURVE-key and budget rules) whom to link to, and
keeps our groups and their elections in :class:`Membership` (``_groups``:
a :class:`Group` record per group).  It composes the other sans-I/O rules
(:class:`~trizre.sansio._peer.PeerProtocol`, :mod:`~trizre.sansio._guard`,
:class:`~trizre.sansio._election.Elections`) and rewrites none of them.

Every input carries the time; every output is an action (``_actions``) the
node's shell carries out, in order (the convention of
:mod:`~trizre.sansio._election`):

* :class:`Connect`: link to a peer (the shell makes the link, asks
  :meth:`NodeCore.admit`, then hands the new session to :meth:`NodeCore.add`);
* :class:`Flush`: messages were queued on a peer's protocol, send them;
* :class:`Publish`: report an event to subscribers (``peer``: who caused it);
* :class:`Drop`: the peer is out of every table already; close its link;
* :class:`WakeAt`: call :meth:`NodeCore.poll` (or look at the peers) by then;
* :class:`Trim`: hand freed socket memory back to the OS.

It never calls the shell.  The table holds the shell's own per-peer objects
(any :class:`Held`: the node's ``PeerSession``), so the shell needs no
second table.  Nothing here imports trio or zmq (``make lint`` checks it).
"""

from ._actions import Action, Connect, Drop, Flush, Held, Publish, Trim, WakeAt
from ._admission import BEACONS_IGNORED, SOURCE_BURST, Admission, CoreRules, endpoint_host
from ._core import CROWD, MISSES_KEPT, NodeCore
from ._groups import Group, Membership

__all__ = [
    "BEACONS_IGNORED",
    "CROWD",
    "MISSES_KEPT",
    "SOURCE_BURST",
    "Action",
    "Admission",
    "Connect",
    "CoreRules",
    "Drop",
    "Flush",
    "Group",
    "Held",
    "Membership",
    "NodeCore",
    "Publish",
    "Trim",
    "WakeAt",
    "endpoint_host",
]
