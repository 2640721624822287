"""Steps no other thread of the process can come between: the GIL held from one to the next.

The memory test (:mod:`coursekit.checks.memory_peak`) compares the harness with its seal and
then forks the child that measures. A thread of the notebook's (or a library's thread that
runs the notebook's code: a ``threading.Timer``, an event loop's callback) that ran between
the two could change a name the child is about to use, or open a file the child would keep.
Two things let a thread run while another holds the GIL: a request to switch, which a
thread that has waited :func:`sys.getswitchinterval` makes, and a call that lets the GIL go
(any I/O: ``os.read``, ``os.listdir``, ``os.pipe``, ``os.urandom``, a torch operation).

:func:`hold` makes the interval :data:`HOLD_S` and lets the GIL go for longer than the old
interval, so that every thread waiting for it starts a new wait of that length: for that
long, no thread asks for the GIL, and the steps that follow give it up only if they let it
go. (The caller checks that they took less; a wait in C, such as ``wait4``, keeps the GIL
however long it takes, since a request is answered only between Python's steps.) The steps
here let nothing go: each is one libc call made through a ``ctypes.PyDLL`` handle, which
keeps the GIL. Pure Python between them keeps it too.

Everything these functions call is bound as a keyword default when this module is imported,
before any hand-in code runs: a notebook that rebinds a name here changes nothing they run.
"""

from __future__ import annotations

import ctypes
import errno
import os
import sys
import time

HOLD_S = 1.0  # a run of held steps takes under a tenth of it, even on a busy machine
LINUX = sys.platform.startswith("linux")
_P_ALL, _WNOHANG, _WSTOPPED, _WEXITED, _WCONTINUED = 0, 1, 2, 4, 8
_WNOWAIT, _WALL = 0x01000000, 0x40000000
_O_RDONLY, _O_CLOEXEC, _O_DIRECTORY = 0, 0o2000000, 0o200000
_NAME_OFFSET = 19  # struct dirent: d_ino (8), d_off (8), d_reclen (2), d_type (1), d_name


def _libc():
    if not LINUX:
        return None
    libc = ctypes.PyDLL(None, use_errno=True)  # PyDLL: the GIL stays held in every call
    table = {
        "getrandom": ([ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint], ctypes.c_ssize_t),
        "pipe2": ([ctypes.POINTER(ctypes.c_int), ctypes.c_int], ctypes.c_int),
        "open": ([ctypes.c_char_p, ctypes.c_int], ctypes.c_int),
        "read": ([ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t], ctypes.c_ssize_t),
        "close": ([ctypes.c_int], ctypes.c_int),
        "fdopendir": ([ctypes.c_int], ctypes.c_void_p),
        "readdir": ([ctypes.c_void_p], ctypes.c_void_p),
        "closedir": ([ctypes.c_void_p], ctypes.c_int),
        "waitid": (
            [ctypes.c_int, ctypes.c_uint, ctypes.c_void_p, ctypes.c_int],
            ctypes.c_int,
        ),
    }
    functions = {}
    for name, (argtypes, restype) in table.items():
        function = getattr(libc, name)
        function.argtypes, function.restype = argtypes, restype
        functions[name] = function
    return functions


_C = _libc() or {}
_GETRANDOM, _PIPE2, _OPEN, _READ, _CLOSE = (
    _C.get(n) for n in ("getrandom", "pipe2", "open", "read", "close")
)
_FDOPENDIR, _READDIR, _CLOSEDIR, _WAITID = (
    _C.get(n) for n in ("fdopendir", "readdir", "closedir", "waitid")
)


_BYTES_16 = ctypes.c_char * 16
_CHUNK = ctypes.c_char * (1 << 16)
_SIGINFO = ctypes.c_char * 128
_PAIR = ctypes.c_int * 2


def hold(
    previous: float,
    *,
    _set=sys.setswitchinterval,
    _sleep=time.sleep,
    _for=HOLD_S,
    _frames=sys._current_frames,
) -> None:
    """For :data:`HOLD_S` from its return (or until :func:`let_go`), no thread asks this one
    for the GIL. ``previous``: the interval until now. The GIL is let go for longer than
    that: every wait a thread began under it ends meanwhile, with the GIL free or taken by
    another thread, and the next is of :data:`HOLD_S` (a wait that ends with no other thread
    having held the GIL asks for it: Python counts a switch only when the holder changes).
    A thread that takes the GIL then, and computes without letting it go, keeps it up to
    :data:`HOLD_S`. Where no other thread runs Python code (none has a frame), nothing is
    let go: none waits for the GIL (a thread that is starting has no frame yet, but the
    thread that started it has, unless it has just ended)."""
    _set(_for)
    if len(_frames()) > 1:
        _sleep(min(previous, _for) + 0.001)


def let_go(previous: float, *, _set=sys.setswitchinterval) -> None:
    _set(previous)


def random_16(*, _getrandom=_GETRANDOM, _new=_BYTES_16, _errno=ctypes.get_errno) -> bytes:
    """16 random bytes, from the kernel."""
    buffer = _new()
    if _getrandom(buffer, 16, 0) != 16:
        raise OSError(_errno(), "getrandom")
    return buffer.raw


def pipe(*, _pipe2=_PIPE2, _new=_PAIR, _flags=_O_CLOEXEC, _errno=ctypes.get_errno):
    """A pipe, both ends close-on-exec: (read end, write end)."""
    ends = _new()
    if _pipe2(ends, _flags) != 0:
        raise OSError(_errno(), "pipe2")
    return ends[0], ends[1]


def close(fd: int, *, _close=_CLOSE) -> None:
    _close(fd)


def read_file(
    path: str,
    *,
    _open=_OPEN,
    _read=_READ,
    _close=_CLOSE,
    _new=_CHUNK,
    _size=1 << 16,
    _flags=_O_RDONLY | _O_CLOEXEC,
    _errno=ctypes.get_errno,
) -> bytes:
    """A file's whole content (a /proc file: read until the end)."""
    fd = _open(path.encode(), _flags)
    if fd < 0:
        raise OSError(_errno(), "open", path)
    chunks, buffer = [], _new()
    try:
        while True:
            n = _read(fd, buffer, _size)
            if n < 0:
                raise OSError(_errno(), "read", path)
            if n == 0:
                return b"".join(chunks)
            chunks.append(buffer.raw[:n])
    finally:
        _close(fd)


def names_in(
    path: str,
    *,
    _open=_OPEN,
    _close=_CLOSE,
    _fdopendir=_FDOPENDIR,
    _readdir=_READDIR,
    _closedir=_CLOSEDIR,
    _at=ctypes.string_at,
    _offset=_NAME_OFFSET,
    _flags=_O_RDONLY | _O_DIRECTORY | _O_CLOEXEC,
    _errno=ctypes.get_errno,
) -> list[str]:
    """The names in a folder, but ``.`` and ``..``. Listing ``/proc/self/fd`` names the
    descriptor the listing itself holds too (closed by the time this returns)."""
    fd = _open(path.encode(), _flags)
    if fd < 0:
        raise OSError(_errno(), "open", path)
    folder = _fdopendir(fd)
    if not folder:
        _close(fd)
        raise OSError(_errno(), "fdopendir", path)
    names = []
    try:
        while entry := _readdir(folder):
            name = _at(entry + _offset).decode("utf-8", "surrogateescape")
            if name != "." and name != "..":
                names.append(name)
    finally:
        _closedir(folder)  # closes fd too
    return names


def no_child_left(
    *,
    _waitid=_WAITID,
    _new=_SIGINFO,
    _all=_P_ALL,
    _flags=_WEXITED | _WSTOPPED | _WCONTINUED | _WNOHANG | _WNOWAIT | _WALL,
    _none=errno.ECHILD,
    _errno=ctypes.get_errno,
) -> bool:
    """Whether this process has no child at all: running, stopped, or ended and not yet
    reaped (``waitid`` with ``WNOWAIT`` reaps none). Children of every thread of the
    process, whatever signal they were made to send their parent (``__WALL``)."""
    if _waitid(_all, 0, _new(), _flags) == 0:
        return False
    return _errno() == _none


def available() -> bool:
    return bool(_C) and hasattr(os, "fork")
