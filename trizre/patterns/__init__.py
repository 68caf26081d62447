"""Reliable request-reply over ZRE: the ZeroMQ Guide's chapter 4, rebuilt.

A server is a peer found by name, a service is a ZRE group, presence comes
from ZRE, and every pattern message travels inside WHISPER frames (the
envelope is specified in ``patterns/README.md``).  Every timeout is a Trio
cancel scope; retry behaviour is a :class:`RetryPolicy`.

* Lazy Pirate: :func:`open_lazy_pirate_client` + :func:`open_server`.
* Services over groups (Majordomo-style, brokerless, with MMI):
  :func:`open_service_client` + :func:`open_server` with ``service=``.
* Idempotent services: :class:`ReplyCache`.
* Binary Star: :func:`open_binary_star_server` + :func:`open_binary_star_client`.
* Freelance (brokerless, several servers, failover or shotgun):
  :func:`open_freelance_client` + :func:`open_server`.
* Titanic (disconnected, disk-backed requests): :func:`open_titanic` +
  :func:`open_titanic_client`, workers as for services.
"""

from ._bstar import BinaryStarServer, DuplicateServer, open_binary_star_server
from ._bstar_fsm import (
    BinaryStarError,
    BinaryStarFSM,
    DualPassive,
    RoleConflict,
    SplitBrain,
    State,
    Transition,
)
from ._clients import (
    BinaryStarClient,
    FreelanceClient,
    LazyPirateClient,
    ServiceClient,
    freelance_choice,
    open_binary_star_client,
    open_freelance_client,
    open_lazy_pirate_client,
    open_service_client,
)
from ._common import PatternError, RemoteError, RequestAbandoned, RetryPolicy
from ._open_server import open_server
from ._protocol import PatternDecodeError, Reply, Request, Status
from ._server import Handler, IncomingRequest, ReplyCache, ReplyWith, Server
from ._titanic import (
    Titanic,
    TitanicClient,
    TitanicStoreDamaged,
    TitanicUnknown,
    open_titanic,
    open_titanic_client,
)

__all__ = [
    "BinaryStarClient",
    "BinaryStarError",
    "BinaryStarFSM",
    "BinaryStarServer",
    "DualPassive",
    "DuplicateServer",
    "FreelanceClient",
    "Handler",
    "IncomingRequest",
    "LazyPirateClient",
    "PatternDecodeError",
    "PatternError",
    "RemoteError",
    "Reply",
    "ReplyCache",
    "ReplyWith",
    "Request",
    "RequestAbandoned",
    "RetryPolicy",
    "RoleConflict",
    "Server",
    "ServiceClient",
    "SplitBrain",
    "State",
    "Status",
    "Titanic",
    "TitanicClient",
    "TitanicStoreDamaged",
    "TitanicUnknown",
    "Transition",
    "freelance_choice",
    "open_binary_star_client",
    "open_binary_star_server",
    "open_freelance_client",
    "open_lazy_pirate_client",
    "open_server",
    "open_service_client",
    "open_titanic",
    "open_titanic_client",
]
