"""Measured as a hand-in: what its user can read, and which of its processes still run.

:func:`probe` forks a process that becomes a user of the hand-ins' uid range (no groups, so
no capability left either) and tries to read each path, so what the read shield claims is
measured, not assumed. :func:`hand_ins_below` finds the processes of this grader's hand-ins
(the grader is a subreaper: all of them stay below it), which the shield ends before it
gives the course's modes back.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import stat
import time

from coursekit.grading.sandbox.privileges import HAND_IN_ID_BASE


def probe(targets: list[tuple[str, str]]) -> list[str]:
    """The ``targets`` a hand-in's user can read, measured by a process that has become one
    (a uid of the hand-ins' range, no groups, no capabilities). ``whole``: any read of the
    file, a listing of the folder or a look at an entry inside it; ``list``: a listing.
    Needs root; raises OSError when the probe itself fails."""
    if not targets:
        return []
    names = {path: _first_entry(path) for path, kind in targets if kind == "whole"}
    for _ in range(3):  # a probe another thread's sweep of stray children ended is retried
        read, write = os.pipe()
        child = os.fork()
        if child == 0:  # pragma: no cover - runs in the forked process
            status = 3
            try:
                os.close(read)
                uid = HAND_IN_ID_BASE + os.getpid()
                os.setgroups([])
                os.setresgid(uid, uid, uid)
                os.setresuid(uid, uid, uid)
                found = [p for p, kind in targets if _can_read(p, kind, names.get(p))]
                data = json.dumps(found).encode()
                while data:
                    data = data[os.write(write, data) :]
                status = 0
            finally:
                os._exit(status)
        os.close(write)
        chunks = []
        with os.fdopen(read, "rb") as handle:
            while chunk := handle.read(65536):
                chunks.append(chunk)
        try:
            _, status = os.waitpid(child, 0)
        except ChildProcessError:
            continue
        if os.waitstatus_to_exitcode(status) == 0:
            return json.loads(b"".join(chunks))
    raise OSError("the probe of what a hand-in's user can read did not finish")


def _first_entry(path: str) -> str | None:
    with contextlib.suppress(OSError):
        with os.scandir(path) as entries:
            for entry in entries:
                return entry.path
    return None


def _can_read(path: str, kind: str, inside: str | None) -> bool:
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError:
        descriptor = None
    if descriptor is not None:
        try:
            if stat.S_ISDIR(os.fstat(descriptor).st_mode):
                os.listdir(descriptor)
            elif kind == "whole":
                os.read(descriptor, 1)
            return True
        except OSError:
            pass
        finally:
            os.close(descriptor)
    if kind == "whole" and inside is not None:
        try:
            os.lstat(inside)
            return True
        except OSError:
            pass
    return False


def live_processes() -> tuple[dict[int, int], dict[int, int]]:
    """(pid -> parent pid, pid -> effective uid) of every live process, from /proc; zombies,
    which run nothing, are left out."""
    parents, uids = {}, {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/status", "rb") as handle:
                fields = dict(line.split(b":", 1) for line in handle if b":" in line)
            if fields[b"State"].split()[0] in (b"Z", b"X"):
                continue
            parents[int(name)] = int(fields[b"PPid"])
            uids[int(name)] = int(fields[b"Uid"].split()[1])  # effective
        except (OSError, KeyError, ValueError, IndexError):
            continue
    return parents, uids


def hand_ins_below() -> list[int]:
    """Live processes that run as a hand-in's user (the uid range of
    :func:`~.privileges.hand_in_ids`) and descend from this process: the grader is a
    subreaper, so every process of its hand-ins stays below it, however it detaches."""
    parents, uids = live_processes()
    hand_ins = [
        pid for pid, uid in uids.items() if HAND_IN_ID_BASE <= uid < HAND_IN_ID_BASE + 2**22
    ]
    me, found = os.getpid(), []
    for pid in hand_ins:
        ancestor, steps = parents.get(pid, 0), 0
        while ancestor > 1 and ancestor != me and steps < 4096:
            ancestor, steps = parents.get(ancestor, 0), steps + 1
        if ancestor == me:
            found.append(pid)
    return found


def end_hand_ins_below(seconds: float = 10.0) -> bool:
    """SIGKILL every process of a hand-in below this one (:func:`hand_ins_below`) until none
    is left; whether none is."""
    deadline = time.monotonic() + seconds
    while left := hand_ins_below():
        if time.monotonic() > deadline:
            return False
        for pid in left:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.02)
    return True


def listening_tcp() -> list[str]:
    """``address:port`` of every TCP socket listening now in this network namespace (which a
    hand-in without one of its own shares): what it could connect to, ``localhost`` included."""
    import socket

    found = set()
    for name, family in (("/proc/net/tcp", socket.AF_INET), ("/proc/net/tcp6", socket.AF_INET6)):
        try:
            with open(name, encoding="ascii") as handle:
                rows = handle.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            if len(fields) < 4 or fields[3] != "0A":  # 0A: LISTEN
                continue
            address, port = fields[1].split(":")
            # the kernel prints each 32-bit word of the address in host (little-endian) order
            raw = b"".join(
                bytes.fromhex(address[i : i + 8])[::-1] for i in range(0, len(address), 8)
            )
            host = socket.inet_ntop(family, raw)
            found.add(
                f"[{host}]:{int(port, 16)}"
                if family == socket.AF_INET6
                else f"{host}:{int(port, 16)}"
            )
    return sorted(found)


def other_processes() -> list[str]:
    """The names of the processes whose command lines a hand-in without a PID namespace of
    its own could read in /proc: every one with a command line (not a kernel thread) but
    this grader and what it started."""
    parents, names = {}, {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as handle:
                text = handle.read()
            with open(f"/proc/{name}/cmdline", "rb") as handle:
                if not handle.read(1):
                    continue  # a kernel thread (or a zombie): nothing to read
        except OSError:
            continue
        start, end = text.find(b"("), text.rfind(b")")
        fields = text[end + 2 :].split()
        if start < 0 or end < 0 or len(fields) < 2:
            continue
        names[int(name)] = text[start + 1 : end].decode("utf-8", "replace")
        parents[int(name)] = int(fields[1])
    mine = {os.getpid()}
    grew = True
    while grew:  # this process and everything below it
        below = {pid for pid, parent in parents.items() if parent in mine} - mine
        mine |= below
        grew = bool(below)
    return [names[pid] for pid in sorted(names) if pid not in mine]
