"""Torch's dispatcher read after the cells in a fork, beside the tests.

After the cells, the runner compares torch's dispatcher with its snapshot
(:func:`coursekit.grading.sandbox.torch_registrations.dispatcher_changes`: every operator's
kernels, some 60 ms). What it must see is the dispatcher as the cells left it, before any
test runs, or a kernel the cells registered and a test took back would go unseen. A fork
holds that state: :func:`start` forks (:mod:`trusted_fork`: no code of the notebook's runs
there), the child reads and reports through a pipe, and the runner goes on with the tests
on its core meanwhile. :func:`finish` waits for the report. The report starts with a number
drawn for that reading, so that nothing else that writes into the pipe (a thread of the
notebook's) can pass for it; a reading that gives no report of its own is None, which the
runner reports as the grader's failure (the hand-in is graded again).
"""

from __future__ import annotations

import json
import os
import select
import signal
import time

from coursekit.grading.sandbox import trusted_fork
from coursekit.grading.sandbox.torch_registrations import dispatcher_changes

FINISH_TIMEOUT_S = 60.0  # a backstop: the reading takes well under a second
_NONCE = 16
# bound as the module is imported: the runner calls a private copy of this module's
# functions, whose names a notebook cannot rebind
_FORK_RUNNING, _CHANGES = trusted_fork.fork_running, dispatcher_changes
_PIPE, _READ, _WRITE, _CLOSE, _RANDOM = os.pipe, os.read, os.write, os.close, os.urandom
_KILL, _WAITPID, _SELECT, _NOW = os.kill, os.waitpid, select.select, time.monotonic
_SIGKILL, _WNOHANG = signal.SIGKILL, os.WNOHANG
_DUMPS, _LOADS = json.dumps, json.loads


def start(snapshot: tuple) -> tuple:
    """Read the dispatcher against ``snapshot`` in a fork: ``(pid, read end, number)`` for
    :func:`finish`. Raises OSError where no fork can be made."""
    nonce = _RANDOM(_NONCE)
    read_end, write_end = _PIPE()
    try:
        pid = _FORK_RUNNING(lambda: _report(snapshot, read_end, write_end, nonce))
    except OSError:
        _CLOSE(read_end)
        raise
    finally:
        _CLOSE(write_end)
    return pid, read_end, nonce


def _report(snapshot: tuple, read_end: int, write_end: int, nonce: bytes) -> None:
    """In the fork: read, and write the number and the flags found."""
    _CLOSE(read_end)
    try:
        found = _CHANGES(snapshot)
    except Exception as error:  # noqa: BLE001 - a notebook's objects, raising when read
        found = [f"it left torch's dispatcher unreadable ({type(error).__name__})"]
    data = memoryview(nonce + _DUMPS(found).encode("utf-8"))
    while data:
        data = data[_WRITE(write_end, data) :]
    _CLOSE(write_end)  # the report is whole: the runner need not wait for this process's end


def finish(reading: tuple, timeout_s: float = FINISH_TIMEOUT_S) -> list[str] | None:
    """The flags of a reading :func:`start` began, once its report is whole; None where it
    gave no report of its own (it was ended, or ran past ``timeout_s`` and is ended now). A
    process still ending is reaped later (the memory test's ``end_children``, or the
    runner's end): its end is some 7 ms of unmapping, for nothing the runner needs."""
    pid, read_end, nonce = reading
    chunks, deadline, ended = [], _NOW() + timeout_s, False
    try:
        while True:
            left = deadline - _NOW()
            if left <= 0 or not _SELECT([read_end], [], [], left)[0]:
                ended = _end(pid)
                break
            chunk = _READ(read_end, 1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        _CLOSE(read_end)
        try:
            _WAITPID(pid, 0 if ended else _WNOHANG)
        except ChildProcessError:  # reaped already (the runner ends its children)
            pass
    data = b"".join(chunks)
    if not data.startswith(nonce):
        return None
    try:
        found = _LOADS(data[_NONCE:].decode("utf-8"))
    except ValueError:
        return None
    if not isinstance(found, list) or not all(isinstance(what, str) for what in found):
        return None
    return found


def _end(pid: int) -> bool:
    try:
        _KILL(pid, _SIGKILL)
    except ProcessLookupError:
        pass
    return True
