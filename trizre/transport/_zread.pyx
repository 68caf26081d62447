# cython: language_level=3, boundscheck=False, wraparound=False
"""ZSocket's inbox read (``receive_batch``) and its sends, compiled (issue 28).

Optional: built from this file by ``scripts/build_ext.py`` (``make``
runs it); without it, or with ``TRIZRE_PURE_PYTHON=1``, the pure-Python
loops in ``_zsock.py`` read, and pyzmq sends, instead; they behave the
same.

Why: in Python every frame read costs a pyzmq ``Frame`` object (the only
way to learn RCVMORE without pyzmq building an enum per call), about
3-4 us a message; here it is libzmq's ``zmq_msg_recv`` and one ``bytes``
copy a frame, about 0.5 us.  A send through pyzmq checks the socket,
takes the frame's buffer, gives up and retakes the GIL and checks for
signals three times, about 0.8 us a frame; :func:`write` and
:func:`send` call libzmq's ``zmq_send`` (which copies the frame, as
pyzmq's copying send does), about 0.15 us.

libzmq's functions are looked up through pyzmq's own compiled module
(``dlopen(RTLD_NOLOAD)``, then ``dlsym``, which searches that module and
the libraries it loaded): a socket must only be handed to the library
that made it, and nothing here links against a file whose name changes
with every pyzmq release.  Anything unexpected (another pyzmq layout, a
function missing, a libzmq other than 4.x) raises ``ImportError`` at
import, and the pure-Python loop is used.

What it makes is untracked by the cyclic garbage collector, as are the
events made from it (:func:`untrack_events`): a message's frames and a
Whisper's or Shout's fields hold only ``bytes``, ``str`` and a ``UUID``,
so none can be part of a reference cycle.  Left tracked, each one still
queued at a collection is traversed, promoted and traversed again, and a
flood's worth of them brings full collections of the whole heap: about a
tenth of a receiving thread's time in a fan-out (docs/benchmarks.md).
"""

import os

import zmq

from cpython.bytes cimport (
    PyBytes_AS_STRING,
    PyBytes_Check,
    PyBytes_CheckExact,
    PyBytes_FromStringAndSize,
    PyBytes_GET_SIZE,
)
from cpython.tuple cimport PyTuple_CheckExact
from libc.errno cimport EAGAIN, EINTR
from libc.stddef cimport size_t
from libc.string cimport memcmp

cdef extern from "Python.h":
    void PyObject_GC_UnTrack(object)  # safe on an object already untracked

cdef extern from "<dlfcn.h>" nogil:
    void *dlopen(const char *, int)
    void *dlsym(void *, const char *)
    enum:
        RTLD_NOW
        RTLD_NOLOAD


cdef extern from *:
    """
    /* libzmq 4's zmq_msg_t: 64 opaque octets, aligned as its zmq.h has it. */
    typedef struct { unsigned char _[64]; } __attribute__((aligned(sizeof(void *)))) trizre_msg_t;
    """
    ctypedef struct trizre_msg_t:
        pass

ctypedef int (*msg_fn)(trizre_msg_t *) noexcept nogil
ctypedef int (*get_fn)(trizre_msg_t *, int) noexcept nogil
ctypedef int (*recv_fn)(trizre_msg_t *, void *, int) noexcept nogil
ctypedef void *(*data_fn)(trizre_msg_t *) noexcept nogil
ctypedef size_t (*size_fn)(trizre_msg_t *) noexcept nogil
ctypedef int (*errno_fn)() noexcept nogil
ctypedef int (*getsockopt_fn)(void *, int, void *, size_t *) noexcept nogil
ctypedef int (*send_fn)(void *, const void *, size_t, int) noexcept nogil

cdef msg_fn _init = NULL
cdef msg_fn _close = NULL
cdef msg_fn _more = NULL
cdef get_fn _get = NULL
cdef recv_fn _recv = NULL
cdef data_fn _data = NULL
cdef size_fn _size = NULL
cdef errno_fn _errno = NULL
cdef getsockopt_fn _getsockopt = NULL
cdef send_fn _send = NULL

cdef int _DONTWAIT = 1  # ZMQ_DONTWAIT
cdef int _SNDMORE = 2  # ZMQ_SNDMORE
cdef int _EVENTS = 15  # ZMQ_EVENTS
cdef int _POLLIN = 1  # ZMQ_POLLIN
cdef int _SRCFD = 2  # ZMQ_SRCFD: the descriptor of the connection a message came on


def _pyzmq_backend():
    """The file of pyzmq's compiled backend, the module that calls libzmq."""
    from zmq.backend.cython import _zmq  # pyzmq 26 and later

    return _zmq.__file__


cdef void *_symbol(void *library, bytes name) except NULL:
    cdef void *found = dlsym(library, name)
    if found == NULL:
        raise ImportError(f"libzmq has no {name.decode()}")
    return found


cdef _bind():
    global _init, _close, _more, _get, _recv, _data, _size, _errno, _getsockopt, _send
    if zmq.zmq_version_info()[0] != 4:
        raise ImportError(f"built for libzmq 4, pyzmq has {zmq.zmq_version()}")
    # Looked up through pyzmq's own module: dlsym searches it and the
    # libraries it loaded, so this is the libzmq pyzmq calls (its own
    # library or the system's; or, linked into the module, if exported).
    cdef bytes path = os.fsencode(_pyzmq_backend())
    cdef void *library = dlopen(path, RTLD_NOW | RTLD_NOLOAD)
    if library == NULL:
        raise ImportError(f"pyzmq's backend {path!r} is not loaded")
    _init = <msg_fn>_symbol(library, b"zmq_msg_init")
    _close = <msg_fn>_symbol(library, b"zmq_msg_close")
    _more = <msg_fn>_symbol(library, b"zmq_msg_more")
    _get = <get_fn>_symbol(library, b"zmq_msg_get")
    _recv = <recv_fn>_symbol(library, b"zmq_msg_recv")
    _data = <data_fn>_symbol(library, b"zmq_msg_data")
    _size = <size_fn>_symbol(library, b"zmq_msg_size")
    _errno = <errno_fn>_symbol(library, b"zmq_errno")
    _getsockopt = <getsockopt_fn>_symbol(library, b"zmq_getsockopt")
    _send = <send_fn>_symbol(library, b"zmq_send")


_bind()


cdef bytes _copy(trizre_msg_t *msg, void *socket, int more):
    """The frame's octets, the frame closed.  If the copy fails (no memory),
    the message's other frames are dropped too: the next read starts at a
    message, never inside one (where a frame would pass for an identity)."""
    cdef trizre_msg_t rest
    try:
        return PyBytes_FromStringAndSize(<char *>_data(msg), <Py_ssize_t>_size(msg))
    except BaseException:
        while more:
            _init(&rest)
            _recv(&rest, socket, _DONTWAIT)
            more = _more(&rest)
            _close(&rest)
        raise
    finally:
        _close(msg)


def read(size_t handle, list batch, Py_ssize_t max_messages, bint router,
         unsigned long long limit, object oversize, dict sources=None, bytes prefix=b""):
    """Append every message ready on the socket at ``handle`` to ``batch``, while
    ``len(batch) < max_messages``; return ``(octets, errno)``.

    Each message is a list of ``bytes``, one a frame.  A ROUTER's (``router``)
    starts with the sender's identity; if its other frames total more than
    ``limit`` octets, they are not copied and the list is
    ``[identity, oversize]``; ``octets`` sums a ROUTER's frames after the
    identity (copied or not), and is 0 for other sockets.  With
    ``sources``, a ROUTER's message whose frame after the identity starts
    with ``prefix`` sets ``sources[identity]`` to the descriptor of the
    connection it came on (libzmq's ``ZMQ_SRCFD``).  ``errno`` is 0
    when ``batch`` is full; ``EAGAIN`` when nothing more is ready, which
    ``EVENTS`` said last (no zmq call on the socket since: its descriptor
    will signal the next message, as ``_zsock.py``'s Rule 1 needs); else
    libzmq's error from the first read of a message (nothing was taken
    then).  ``handle`` must be an open socket's ``underlying``.
    """
    cdef trizre_msg_t msg
    cdef void *socket = <void *>handle
    cdef unsigned long long octets = 0, size
    cdef int more, events = 0
    cdef size_t events_size = sizeof(int)
    cdef list frames
    cdef int error
    cdef bint first
    cdef int source
    cdef size_t prefix_size = len(prefix)
    while len(batch) < max_messages:
        _init(&msg)
        if _recv(&msg, socket, _DONTWAIT) < 0:
            _close(&msg)
            error = _errno()
            if error == EINTR:
                continue  # as pyzmq's recv does: nothing was taken
            if error != EAGAIN:
                return octets, error
            # A message may have come since that read: EVENTS says, last.
            if _getsockopt(socket, _EVENTS, &events, &events_size) < 0:
                return octets, _errno()
            if events & _POLLIN:
                continue
            return octets, EAGAIN
        more = _more(&msg)
        frames = [_copy(&msg, socket, more)]
        size = 0
        first = router and sources is not None
        source = -1
        # libzmq hands over a message whole: once its first frame is read,
        # every other one is ready, so these reads cannot fail.
        while more:
            _init(&msg)
            _recv(&msg, socket, _DONTWAIT)
            size += <unsigned long long>_size(&msg)
            more = _more(&msg)
            if first:
                first = False
                if _size(&msg) >= prefix_size and memcmp(_data(&msg), <char *>prefix, prefix_size) == 0:
                    source = _get(&msg, _SRCFD)  # noted once the message is whole
            if not router or size <= limit:  # an oversize message costs libzmq's memory only
                frames.append(_copy(&msg, socket, more))
            else:
                _close(&msg)
        if router:
            if size > limit:
                frames[1:] = [oversize]
            octets += size
            if source >= 0:
                sources[frames[0]] = source
        PyObject_GC_UnTrack(frames)  # bytes only: see the module docstring
        batch.append(frames)
    return octets, 0


def untrack_events(events, tuple kinds):
    """Untrack from the cyclic GC each event of ``events`` that cannot be in a cycle.

    That is an event whose type is one of ``kinds`` (the caller's word that
    its other fields hold no container: Whisper and Shout) and whose
    ``frames`` is a tuple of ``bytes``; the event and that tuple are
    untracked.  Any other item is left as it is.  Untracking changes no
    value and no lifetime: reference counting frees each event as before.
    """
    cdef object event, frames, frame
    for event in events:
        if type(event) not in kinds:
            continue
        frames = event.frames
        if not PyTuple_CheckExact(frames):
            continue
        for frame in <tuple>frames:
            if not PyBytes_CheckExact(frame):
                break
        else:
            PyObject_GC_UnTrack(frames)
            PyObject_GC_UnTrack(event)


cdef tuple _frames(object message):
    """``message``'s frames as a tuple of ``bytes``, checked before any is sent.

    Frames that are other bytes-like objects are copied to ``bytes``
    (rare: the node sends ``bytes``); anything else raises ``TypeError``,
    and an empty message ``ValueError``, as the pure-Python send does.
    """
    cdef tuple frames = message if PyTuple_CheckExact(message) else tuple(message)
    cdef object frame
    if not frames:
        raise ValueError("a zmq message needs at least one frame")
    for frame in frames:
        if not PyBytes_Check(frame):
            return tuple([f if PyBytes_Check(f) else bytes(memoryview(f)) for f in frames])
    return frames


cdef int _put(void *socket, tuple frames) noexcept:
    """Hand one message, its frames ``bytes``, to libzmq; 0 or libzmq's errno.

    Only the first frame can meet the high water mark (libzmq counts whole
    messages; once it takes the first, it takes the rest), so an EAGAIN
    means nothing was taken.
    """
    cdef Py_ssize_t i, last = len(frames) - 1
    cdef object frame
    cdef int error
    for i in range(last + 1):
        frame = frames[i]
        while _send(socket, PyBytes_AS_STRING(frame), <size_t>PyBytes_GET_SIZE(frame),
                    _DONTWAIT | _SNDMORE if i < last else _DONTWAIT) < 0:
            error = _errno()
            if error != EINTR:  # as pyzmq's send: retried, nothing was taken
                return error
    return 0


def send(size_t handle, object message):
    """Hand ``message`` (a sequence of frames) to libzmq without waiting; return
    0 when it took it, ``EAGAIN`` when it would not (at the high water mark,
    or no peer to send to), else libzmq's error.

    Frames are ``bytes`` or other bytes-like objects, each copied by
    libzmq; anything else raises ``TypeError``, an empty message
    ``ValueError``, before a frame is sent.  ``handle`` must be an open
    socket's ``underlying``.
    """
    return _put(<void *>handle, _frames(message))


def write(size_t handle, object held):
    """Hand the messages of ``held`` (a ``deque``) to libzmq, oldest first, while
    it takes them; return 0 when all went, ``EAGAIN`` when libzmq would
    take no more, else libzmq's error (the message it failed on stays).

    Each message is removed from ``held`` once libzmq took it.  Messages
    are as :func:`send` has them; a bad one raises there, with the
    messages before it sent and removed.  ``handle`` as for :func:`send`.
    """
    cdef void *socket = <void *>handle
    cdef int error
    popleft = held.popleft
    while held:
        error = _put(socket, _frames(held[0]))
        if error:
            return error
        popleft()
    return 0
