"""Majordomo (MDP) messages as a broker sees them, sans I/O.

Three dialects reach a broker, and the bridge answers each in its own:

* **18/MDP (MDP/0.2)**: no delimiter frame; clients send REQUEST ``0x01``
  and get PARTIAL ``0x02`` / FINAL ``0x03`` with the service name;
* **majortomo 0.2** (the ``majortomo`` package): every message starts with
  an empty frame, and clients use the *worker's* numbers, REQUEST ``0x02``
  and PARTIAL ``0x03`` / FINAL ``0x04``, with no service name in replies;
* **7/MDP (MDP/0.1)**: ``MDPC01`` clients (the reply repeats the service),
  ``MDPW01`` workers (REPLY ``0x03``, HEARTBEAT ``0x04``, DISCONNECT ``0x05``);
  an empty first frame (a REQ socket's) is kept as it came.

Workers of 0.2 speak one numbering (READY 1, REQUEST 2, PARTIAL 3,
FINAL 4, HEARTBEAT 5, DISCONNECT 6), with or without the empty frame.
Frames here never include the ROUTER's identity frame.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final, TypeAlias

import attrs

from .._errors import TrizreError

CLIENT_V1: Final = b"MDPC01"
CLIENT_V2: Final = b"MDPC02"
WORKER_V1: Final = b"MDPW01"
WORKER_V2: Final = b"MDPW02"


class MdpError(TrizreError):
    """Base class of the errors of the Majordomo bridge."""


class MdpDecodeError(MdpError, ValueError):
    """Frames that are not an MDP message a broker accepts."""


@attrs.frozen
class Dialect:
    """How a peer frames MDP, to answer it the same way."""

    version: int  # 1 (7/MDP) or 2 (18/MDP)
    delimiter: bool = False  # an empty frame before the header
    majortomo: bool = False  # a 0.2 client numbering commands as workers do


SPEC_V2: Final = Dialect(2)
MAJORTOMO: Final = Dialect(2, delimiter=True, majortomo=True)


@attrs.frozen
class ClientRequest:
    dialect: Dialect
    service: bytes
    body: tuple[bytes, ...]


@attrs.frozen
class WorkerReady:
    dialect: Dialect
    service: bytes


@attrs.frozen
class WorkerReply:
    """PARTIAL (``final=False``) or FINAL/REPLY for the request ``token``."""

    dialect: Dialect
    token: bytes
    body: tuple[bytes, ...]
    final: bool


@attrs.frozen
class WorkerHeartbeat:
    dialect: Dialect


@attrs.frozen
class WorkerDisconnect:
    dialect: Dialect


Message: TypeAlias = ClientRequest | WorkerReady | WorkerReply | WorkerHeartbeat | WorkerDisconnect

# (header, command) -> what it is, for workers
_V2_WORKER = {b"\x01": "ready", b"\x03": "partial", b"\x04": "final", b"\x05": "hb", b"\x06": "bye"}
_V1_WORKER = {b"\x01": "ready", b"\x03": "final", b"\x04": "hb", b"\x05": "bye"}


def decode(frames: Sequence[bytes]) -> Message:
    """The message in ``frames`` (after the ROUTER's identity frame).

    Raises:
        MdpDecodeError: no MDP header, an unknown command, or frames missing.
    """
    delimiter = bool(frames) and frames[0] == b""
    rest = list(frames[1:] if delimiter else frames)
    if not rest:
        raise MdpDecodeError("an empty message")
    header = rest[0]
    if header == CLIENT_V1:
        if len(rest) < 2:
            raise MdpDecodeError("an MDP/0.1 request without a service")
        return ClientRequest(Dialect(1, delimiter), rest[1], tuple(rest[2:]))
    if header == CLIENT_V2:
        if len(rest) < 3:
            raise MdpDecodeError("an MDP/0.2 request without a command and a service")
        if rest[1] == b"\x01":
            return ClientRequest(Dialect(2, delimiter), rest[2], tuple(rest[3:]))
        if rest[1] == b"\x02":  # majortomo's numbering
            return ClientRequest(Dialect(2, delimiter, True), rest[2], tuple(rest[3:]))
        raise MdpDecodeError(f"unknown client command {rest[1]!r}")
    if header in (WORKER_V1, WORKER_V2):
        version = 1 if header == WORKER_V1 else 2
        dialect = Dialect(version, delimiter)
        if len(rest) < 2:
            raise MdpDecodeError("a worker message without a command")
        kind = (_V1_WORKER if version == 1 else _V2_WORKER).get(rest[1])
        args = rest[2:]
        if kind == "ready":
            if len(args) != 1 or not args[0]:
                raise MdpDecodeError("READY names one service")
            return WorkerReady(dialect, args[0])
        if kind in ("partial", "final"):
            if len(args) < 2 or args[1] != b"":
                raise MdpDecodeError("a reply needs the client address and an empty frame")
            return WorkerReply(dialect, args[0], tuple(args[2:]), final=kind == "final")
        if kind == "hb":
            return WorkerHeartbeat(dialect)
        if kind == "bye":
            return WorkerDisconnect(dialect)
        raise MdpDecodeError(f"unknown worker command {rest[1]!r}")
    raise MdpDecodeError(f"not an MDP header: {header[:16]!r}")


def _framed(dialect: Dialect, frames: list[bytes]) -> list[bytes]:
    return [b"", *frames] if dialect.delimiter else frames


def client_reply(
    dialect: Dialect, service: bytes, body: Sequence[bytes], *, final: bool = True
) -> list[bytes]:
    """A reply to a client, in its dialect (MDP/0.1 has only final replies)."""
    if dialect.version == 1:
        return _framed(dialect, [CLIENT_V1, service, *body])
    if dialect.majortomo:
        return _framed(dialect, [CLIENT_V2, b"\x04" if final else b"\x03", *body])
    return _framed(dialect, [CLIENT_V2, b"\x03" if final else b"\x02", service, *body])


def worker_request(dialect: Dialect, token: bytes, body: Sequence[bytes]) -> list[bytes]:
    """A REQUEST to a worker; ``token`` comes back in its reply as the client address."""
    header = WORKER_V1 if dialect.version == 1 else WORKER_V2
    return _framed(dialect, [header, b"\x02", token, b"", *body])


def worker_heartbeat(dialect: Dialect) -> list[bytes]:
    """A HEARTBEAT to a worker."""
    if dialect.version == 1:
        return _framed(dialect, [WORKER_V1, b"\x04"])
    return _framed(dialect, [WORKER_V2, b"\x05"])


def worker_disconnect(dialect: Dialect) -> list[bytes]:
    """A DISCONNECT to a worker (it should reconnect and say READY again)."""
    if dialect.version == 1:
        return _framed(dialect, [WORKER_V1, b"\x05"])
    return _framed(dialect, [WORKER_V2, b"\x06"])
