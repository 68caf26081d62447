"""CURVE security as 43/ZRE and zyre do it: certificates, allow-lists, the ZAP handler.

A CURVE node (``open_node(curve=...)``) has a :class:`Certificate`: a
Curve25519 key pair.  It beacons its public key (the 54-octet version-3
beacon); its inbox is a CURVE server; each link to a peer is a CURVE client
that knows the peer's key from the peer's beacon (or from its HELLO's
``X-PUBLICKEY``).  libzmq encrypts and authenticates every connection and
asks the process's ZAP handler (27/ZAP) whether a client key may connect.

The ZAP handler runs in Trio, one per Trio run, shared by that run's CURVE
nodes (libzmq allows one per context): :func:`open_zap` registers a node's
:class:`CurvePolicy` under its inbox's routing id, which libzmq puts in
each request (the *server's* identity), so each node keeps its own
allow-list and domain.  The answer's user id is the client's key in Z85:
libzmq attaches it to every message of that connection as ``User-Id``,
which is how the node checks that a HELLO's ``X-PUBLICKEY`` and UUID
belong to the key that actually connected.

Certificates are files in czmq's ``zcert`` format (ZPL text: a public file
``NAME`` and a secret file ``NAME_secret``), so the same key files serve
zyre, czmq's ``zauth`` and pyzmq's ``zmq.auth``.
"""

from __future__ import annotations

import datetime
import logging
import os
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Final, TypeAlias, final

import attrs
import trio
import zmq
import zmq.auth

from .. import wire
from .._concurrency import RunLocal, spawn_system_task
from ..sansio._guard import LogLimiter, log_rarely
from ._zsock import ZSocket, context

__all__ = [
    "CURVE_ALLOW_ANY",
    "Certificate",
    "CurveKey",
    "CurvePolicy",
    "allowed_keys",
    "curve_key",
    "load_public_keys",
    "open_zap",
    "z85",
]

log = logging.getLogger("trizre.curve")

CURVE_ALLOW_ANY: Final = "*"
"""``curve_allow`` value that lets any client key connect (czmq's ``CURVE_ALLOW_ANY``).

Connections are still encrypted, but anyone who can reach the node and
learns nothing else can join: use it only where the network itself is trusted.
"""

CurveKey: TypeAlias = "bytes | str | Certificate"
"""A public key: 32 raw bytes, its 40-character Z85 text, or a certificate."""

_KEY_SIZE: Final = 32
_Z85_SIZE: Final = 40


def z85(key: bytes) -> str:
    """The 40-character Z85 text of a 32-byte key."""
    return zmq.utils.z85.encode(key).decode("ascii")


def curve_key(key: CurveKey) -> bytes:
    """The 32 raw bytes of a public key given in any :data:`CurveKey` form.

    Bad input: a ``bytes`` not 32 long, a ``str`` that is not 40 characters
    of Z85, raise ``ValueError``; any other type ``TypeError``.
    """
    if isinstance(key, Certificate):
        return key.public
    if isinstance(key, bytes):
        if len(key) != _KEY_SIZE:
            raise ValueError(f"a raw CURVE key is {_KEY_SIZE} bytes, got {len(key)}")
        return key
    if isinstance(key, str):
        if len(key) != _Z85_SIZE:
            raise ValueError(f"a Z85 CURVE key is {_Z85_SIZE} characters, got {len(key)}: {key!r}")
        try:
            return zmq.utils.z85.decode(key.encode("ascii"))
        except (ValueError, KeyError, UnicodeEncodeError) as exc:
            raise ValueError(f"{key!r} is not a Z85-encoded CURVE key") from exc
    raise TypeError(
        f"a CURVE key is 32 bytes, 40 characters of Z85 or a Certificate, got {type(key).__name__}"
    )


def _z85_field(value: bytes | None, path: Path, what: str) -> bytes | None:
    if value is None:
        return None
    try:
        return curve_key(value.decode("ascii"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: the {what} is not a Z85 CURVE key") from exc


@final
@attrs.frozen(repr=False)
class Certificate:
    """A CURVE key pair (or a peer's public key alone), as czmq's ``zcert``.

    Make one with :meth:`generate`, :meth:`load` or :meth:`from_keys`.
    The secret key never appears in ``repr``.

    Attributes:
        public: the 32-byte public key.
        secret: the 32-byte secret key; ``None`` for a peer's public certificate.
    """

    public: bytes
    secret: bytes | None = None

    def __attrs_post_init__(self) -> None:
        curve_key(self.public)
        if self.secret is not None:
            curve_key(self.secret)

    @classmethod
    def generate(cls) -> Certificate:
        """A new random key pair whose public key zyre can see.

        zyre takes a beacon whose public key starts with a zero octet for
        a beacon without a key and ignores it, so a node with such a key
        (one in 256 random keys) would never be found by zyre.  Such pairs
        are drawn again.
        """
        while True:
            public, secret = zmq.curve_keypair()
            cert = cls(curve_key(public.decode()), curve_key(secret.decode()))
            if not cert.hidden_from_zyre:
                return cert

    @property
    def hidden_from_zyre(self) -> bool:
        """True when the public key starts with a zero octet.

        zyre (``zyre_node.c``, receiving a beacon) reads such a key as
        absent and drops the beacon, so zyre nodes never find a node
        using this certificate over UDP beacons; gossip and trizre or
        pyre peers are not affected.  :meth:`generate` never makes one;
        a loaded certificate can be one, and the node then logs a warning.
        """
        return self.public[0] == 0

    @classmethod
    def from_keys(cls, public: bytes | str, secret: bytes | str | None = None) -> Certificate:
        """A certificate from keys in raw or Z85 form.

        Bad input: malformed keys raise ``ValueError``/``TypeError`` (see
        :func:`curve_key`); a secret key that does not belong to the public
        key raises ``ValueError``.
        """
        cert = cls(curve_key(public), None if secret is None else curve_key(secret))
        if cert.secret is not None:
            derived = zmq.curve_public(z85(cert.secret).encode())
            if derived != z85(cert.public).encode():
                raise ValueError("the secret key does not belong to the public key")
        return cert

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Certificate:
        """Read a czmq ``zcert`` file: ``path``, or ``path_secret`` when it exists.

        As czmq's ``zcert_load``: the secret file holds both keys, the
        public file only the public one (then :attr:`secret` is ``None``).
        Raises ``OSError`` when neither file can be read, ``ValueError``
        when the file has no valid public key or the keys do not match.
        """
        public_path = Path(path)
        secret_path = public_path.with_name(public_path.name + "_secret")
        source = secret_path if secret_path.exists() else public_path
        if not source.exists():
            raise FileNotFoundError(f"no CURVE certificate at {public_path} (nor {secret_path})")
        try:
            public, secret = zmq.auth.load_certificate(source)
        except ValueError as exc:
            raise ValueError(f"{source}: not a CURVE certificate ({exc})") from exc
        raw_public = _z85_field(public, source, "public key")
        assert raw_public is not None  # load_certificate raises without one
        raw_secret = _z85_field(secret, source, "secret key")
        return cls.from_keys(raw_public, raw_secret)

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write ``path`` (public) and, with a secret key, ``path_secret`` (mode 0600).

        The files are czmq's ``zcert`` format: zyre (``zcert_load``), czmq's
        ``zauth`` and pyzmq's ``zmq.auth`` read them.  Raises ``OSError``
        when a file cannot be written.
        """
        public_path = Path(path)
        stamp = datetime.datetime.now().strftime("%Y-%m-%d %H:%M:%S")
        public_text = (
            f"#   ****  Generated on {stamp} by trizre  ****\n"
            "#   ZeroMQ CURVE Public Certificate\n"
            "#   Exchange securely, or use a secure mechanism to verify the contents\n"
            "#   of this file after exchange. Store public certificates in your home\n"
            "#   directory, in the .curve subdirectory.\n"
            "\n"
            "metadata\n"
            "curve\n"
            f'    public-key = "{self.public_z85}"\n'
        )
        public_path.write_text(public_text, encoding="ascii")
        if self.secret is None:
            return
        secret_path = public_path.with_name(public_path.name + "_secret")
        secret_text = (
            f"#   ****  Generated on {stamp} by trizre  ****\n"
            "#   ZeroMQ CURVE **Secret** Certificate\n"
            "#   DO NOT PROVIDE THIS FILE TO OTHER USERS nor change its permissions.\n"
            "\n"
            "metadata\n"
            "curve\n"
            f'    public-key = "{self.public_z85}"\n'
            f'    secret-key = "{z85(self.secret)}"\n'
        )
        # Created 0600 from the start: never readable by others, even briefly.
        fd = os.open(secret_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="ascii") as out:
            out.write(secret_text)

    @property
    def public_z85(self) -> str:
        """The public key as 40 characters of Z85 (zyre's ``X-PUBLICKEY`` form)."""
        return z85(self.public)

    def public_only(self) -> Certificate:
        """This certificate without its secret key: what to give peers."""
        return Certificate(self.public)

    def __repr__(self) -> str:
        kind = "key pair" if self.secret is not None else "public key"
        return f"Certificate({kind} {self.public_z85!r})"


def load_public_keys(directory: str | os.PathLike[str]) -> frozenset[bytes]:
    """The public keys of every certificate file in ``directory`` (czmq's ``zcertstore``).

    Files whose names end in ``_secret`` or begin with ``.`` are skipped.
    Raises ``OSError`` if the directory cannot be read, ``ValueError``
    naming a file that is not a certificate.
    """
    folder = Path(directory)
    if not folder.is_dir():
        raise NotADirectoryError(f"no directory of CURVE certificates at {folder}")
    keys = set()
    for entry in sorted(folder.iterdir()):
        if entry.name.endswith("_secret") or entry.name.startswith(".") or not entry.is_file():
            continue
        public, _ = zmq.auth.load_certificate(entry)
        key = _z85_field(public, entry, "public key")
        assert key is not None
        keys.add(key)
    return frozenset(keys)


@final
@attrs.frozen
class CurvePolicy:
    """Who may connect to one node's inbox.

    Attributes:
        domain: the ZAP domain the inbox announces (zyre's default ``"global"``).
        allowed: the client public keys allowed, or ``None`` for any.
    """

    domain: str
    allowed: frozenset[bytes] | None

    def judge(self, request: wire.ZapRequest) -> wire.ZapReply:
        """The answer to one request made for this node's inbox (no I/O)."""
        key = request.curve_key
        if key is None:
            return wire.ZapReply(request.request_id, 400, "CURVE required")
        if request.domain != self.domain:
            return wire.ZapReply(request.request_id, 400, "wrong ZAP domain")
        if self.allowed is not None and key not in self.allowed:
            return wire.ZapReply(request.request_id, 400, "key not allowed")
        return wire.ZapReply(request.request_id, 200, "OK", z85(key))


def allowed_keys(allow: str | os.PathLike[str] | Iterable[CurveKey]) -> frozenset[bytes] | None:
    """The keys an ``open_node(curve_allow=...)`` value allows; ``None``: any.

    :data:`CURVE_ALLOW_ANY`; a directory of certificates (``str`` or path);
    or an iterable of keys.  Bad input raises ``TypeError`` or ``ValueError``.
    """
    if allow == CURVE_ALLOW_ANY:
        return None
    if isinstance(allow, str | os.PathLike):
        return load_public_keys(allow)
    if isinstance(allow, bytes) or not isinstance(allow, Iterable):
        raise TypeError(
            "curve_allow is trizre.CURVE_ALLOW_ANY, a directory of certificates, "
            f"or an iterable of public keys; got {type(allow).__name__}"
        )
    return frozenset(curve_key(key) for key in allow)


@final
class _Zap:
    """The run's ZAP handler: one socket, each node's policy by inbox routing id."""

    def __init__(self, sock: ZSocket) -> None:
        self.sock = sock
        self.policies: dict[bytes, CurvePolicy] = {}
        self.scope = trio.CancelScope()
        self.logs = LogLimiter()

    async def serve(self) -> None:
        with self.scope:
            try:
                while True:
                    for frames in await self.sock.receive_batch(64):
                        self._answer(frames)
            except trio.ClosedResourceError:
                return

    def _answer(self, frames: list[bytes]) -> None:
        # [client routing id, b"", request...]: libzmq's own envelope.
        if len(frames) < 3 or frames[1] != b"":
            return
        try:
            request = wire.decode_zap_request(frames[2:])
        except wire.DecodeError as exc:
            log_rarely(
                log,
                self.logs,
                "malformed",
                logging.WARNING,
                "malformed ZAP request: %s",
                exc,
                now=trio.current_time(),
            )
            return
        policy = self.policies.get(request.identity)
        if policy is None:
            reply = wire.ZapReply(request.request_id, 400, "unknown server")
        else:
            reply = policy.judge(request)
        if reply.status_code != 200:
            # Anyone who can reach the inbox can knock: rate-limited.
            log_rarely(
                log,
                self.logs,
                "refused",
                logging.INFO,
                "refused a %s client from %s: %s",
                request.mechanism,
                request.address,
                reply.status_text,
                now=trio.current_time(),
            )
        # The handler's queue is libzmq's; a full one means libzmq stopped reading.
        self.sock.send_nowait([frames[0], b"", *wire.encode_zap_reply(reply)])


_ZAP: Final[RunLocal[_Zap | None]] = RunLocal("trizre_zap", lambda: None)


@asynccontextmanager
async def open_zap(routing_id: bytes, policy: CurvePolicy) -> AsyncIterator[None]:
    """Answer ZAP requests for the inbox with ``routing_id`` by ``policy`` while open.

    The first node of a Trio run binds the handler (a system task); the
    last one to leave closes it, so the next run can bind it again.  It is
    bound before the caller binds its inbox: libzmq lets any client in
    when no handler is bound.  Raises ``zmq.ZMQError`` (EADDRINUSE) when
    another Trio run or library of this process already serves ZAP in
    trizre's context.
    """
    zap = _ZAP.get()
    if zap is None:
        raw: zmq.Socket[Any] = context().socket(zmq.ROUTER)
        try:
            raw.bind(wire.ZAP_ENDPOINT)
        except zmq.ZMQError:
            raw.close(linger=0)
            raise
        zap = _Zap(ZSocket(raw))
        _ZAP.set(zap)
        spawn_system_task(zap.serve, name="trizre ZAP handler")
    zap.policies[routing_id] = policy
    try:
        yield
    finally:
        del zap.policies[routing_id]
        if not zap.policies:
            zap.scope.cancel()
            # Unbound at once: closing alone frees the endpoint later, in
            # libzmq's reaper thread, and the next run would find it taken.
            zap.sock.zmq_socket.unbind(wire.ZAP_ENDPOINT)
            zap.sock.close()
            _ZAP.set(None)
