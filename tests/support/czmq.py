"""czmq (libczmq) in this process through ctypes: its zgossip service, for interop tests."""

from __future__ import annotations

import ctypes
import ctypes.util
import random
import socket
from pathlib import Path


def _czmq() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("czmq")
    if name is None:
        return None
    try:
        return ctypes.CDLL(name)
    except OSError:
        return None


CZMQ = _czmq()
CZMQ_MISSING = "libczmq is not installed (scripts/build-zyre.sh installs it)"


def free_tcp_port() -> int:
    """A TCP port on loopback that nothing holds now, below the kernel's ephemeral range.

    The port ``bind(0)`` hands out comes from the ephemeral range, where any
    other test's outgoing connection may take it before the caller binds it
    (CI saw "Address already in use" so once); below that range only
    explicit binds compete, and each probe picks at random.
    """
    try:
        text = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text()
        ephemeral = int(text.split()[0])
    except (OSError, ValueError, IndexError):
        ephemeral = 32768  # Linux's default
    for _ in range(100):
        port = random.randrange(10000, max(ephemeral, 10001))
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue  # taken: another
            return port
    raise RuntimeError("no free TCP port below the ephemeral range on 127.0.0.1")


class ZGossip:
    """czmq's zgossip actor, driven through its string commands."""

    def __init__(self, lib: ctypes.CDLL) -> None:
        self.lib = lib
        lib.zactor_new.restype = ctypes.c_void_p
        lib.zactor_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
        lib.zstr_recv.restype = ctypes.c_void_p
        lib.zstr_recv.argtypes = [ctypes.c_void_p]
        lib.zstr_free.argtypes = [ctypes.POINTER(ctypes.c_void_p)]
        lib.zactor_destroy.argtypes = [ctypes.POINTER(ctypes.c_void_p)]
        lib.zsock_set_rcvtimeo.argtypes = [ctypes.c_void_p, ctypes.c_int]
        lib.zsock_set_rcvtimeo.restype = None
        actor_fn = ctypes.cast(lib.zgossip, ctypes.c_void_p)
        self.actor = ctypes.c_void_p(lib.zactor_new(actor_fn.value, b"czmq"))
        assert self.actor.value, "zactor_new(zgossip) failed"
        lib.zsock_set_rcvtimeo(self.actor, 5000)  # a test must not hang on a missing reply

    def send(self, *words: bytes) -> None:
        args = [ctypes.c_char_p(w) for w in words]
        rc = self.lib.zstr_sendx(self.actor, *args, ctypes.c_char_p(None))
        assert rc == 0

    def recv(self) -> str:
        raw = self.lib.zstr_recv(self.actor)
        assert raw, "no reply from zgossip within 5 s"
        text = ctypes.string_at(raw).decode()
        self.lib.zstr_free(ctypes.byref(ctypes.c_void_p(raw)))
        return text

    def close(self) -> None:
        self.lib.zactor_destroy(ctypes.byref(self.actor))


def czmq_with_drafts(lib_dir: Path) -> ctypes.CDLL | None:
    """The libczmq in ``lib_dir`` when it was built with the DRAFT API (zgossip's CURVE).

    scripts/build-zyre.sh puts one beside zyre when it has czmq's source;
    the system's (Debian's) has no drafts.  Loaded by path, apart from the
    system's: each keeps its own globals.
    """
    path = lib_dir / "libczmq.so.4"
    if not path.is_file() or b"SET PUBLICKEY" not in path.read_bytes():
        return None
    try:
        return ctypes.CDLL(str(path))
    except OSError:
        return None
