"""trizre: a Trio-native ZeroMQ Realtime Exchange (ZRE) implementation.

Start a node with :func:`open_node`, read its events with ``node.events()``,
talk to peers with ``whisper``/``shout``, and to groups with ``join``/``leave``.
The wire codec lives in :mod:`trizre.wire`.

trizre runs on Linux only: it imports ``fcntl`` and reads interfaces with
Linux ioctls.  Elsewhere ``import trizre`` raises ``ImportError`` saying so.
"""

import sys

if sys.platform != "linux":  # pragma: no cover - exercised in a subprocess
    raise ImportError(
        f"trizre runs on Linux only (this is {sys.platform!r}): it uses fcntl and Linux "
        "interface ioctls; zyre (C) or pyre are ZRE implementations for other systems"
    )

from ._errors import (
    ConfigError,
    ConfigTypeError,
    ConfigValueError,
    EventsOverflowed,
    MessageTooLarge,
    NodeError,
    PeerDisconnected,
    TrizreError,
    UnknownPeer,
)
from .node._config import NodeConfig
from .node._fanout import EventsIdle, EventStream
from .node._node import Node, NodeStatistics
from .node._open import open_node
from .sansio._events import (
    Enter,
    Evasive,
    Event,
    Exit,
    Join,
    Leader,
    Leave,
    Shout,
    Silent,
    Stop,
    Whisper,
)
from .transport._curve import CURVE_ALLOW_ANY, Certificate, load_public_keys
from .transport._interfaces import (
    Interface,
    Interface6,
    InterfaceError,
    list_interfaces,
    select_interface,
    select_interface6,
)

__version__ = "0.1.0"

__all__ = [
    "CURVE_ALLOW_ANY",
    "Certificate",
    "ConfigError",
    "ConfigTypeError",
    "ConfigValueError",
    "Enter",
    "Evasive",
    "Event",
    "EventStream",
    "EventsIdle",
    "EventsOverflowed",
    "Exit",
    "Interface",
    "Interface6",
    "InterfaceError",
    "Join",
    "Leader",
    "Leave",
    "MessageTooLarge",
    "Node",
    "NodeConfig",
    "NodeError",
    "NodeStatistics",
    "TrizreError",
    "PeerDisconnected",
    "Shout",
    "Silent",
    "Stop",
    "UnknownPeer",
    "Whisper",
    "__version__",
    "list_interfaces",
    "load_public_keys",
    "open_node",
    "select_interface",
    "select_interface6",
]
