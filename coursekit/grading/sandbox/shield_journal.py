"""Permissions the grader changed, written down before the change, so they are always given back.

The read shield (:mod:`coursekit.grading.sandbox.read_shield`) takes other users' permissions
off the instructor's folders while hand-ins run beside them. Before it changes anything it
writes a journal, ``.coursekit-read-shield-<pid>.json`` (mode 600) in the course's folder:
each path with its device and inode, its mode before and the mode it is given. Leaving
grading in any way Python sees (the end, an error, Ctrl-C, SIGTERM or SIGHUP) gives the modes
back and removes the journal; a grader killed outright (SIGKILL, a lost container) leaves the
journal, and the next ``grade`` on that course gives them back first (:func:`restore_leftovers`),
after ending any process a killed grader's hand-ins left running (none may read them open).

A mode is given back only to the very file it was taken from (same device and inode, not a
link) and only if it still has the mode the grader gave it: a mode the instructor changed
meanwhile is theirs, and is left as it is. A journal is trusted only if this user owns it
and no one else may write it (a hand-in cannot plant one for root to follow).
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import NamedTuple

PREFIX = ".coursekit-read-shield-"


@dataclass(frozen=True)
class Change:
    """One mode the shield changes: ``path`` (device ``dev``, inode ``ino``) from ``before``
    to ``after`` (permission bits only)."""

    path: str
    dev: int
    ino: int
    before: int
    after: int


def journal_path(folder: Path, pid: int | None = None) -> Path:
    return Path(folder) / f"{PREFIX}{pid or os.getpid()}.json"


def _start_time(pid: int) -> str:
    """When process ``pid`` started (clock ticks since boot, /proc/<pid>/stat's 22nd field):
    with the pid, it tells a live grader from a later process given the same pid."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    return text.rsplit(")", 1)[-1].split()[19]


def write(folder: Path, changes: list[Change]) -> Path:
    """Write the journal of ``changes`` (atomically, mode 600, synced) before any is made."""
    path = journal_path(folder)
    record = {
        "pid": os.getpid(),
        "started": _start_time(os.getpid()),
        "changes": [asdict(c) for c in changes],
    }
    partial = path.with_name(path.name + ".partial")
    with contextlib.suppress(FileNotFoundError):
        partial.unlink()
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    descriptor = os.open(partial, flags, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
        json.dump(record, handle)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(partial, path)
    return path


def _set_mode(change: Change, expected: int, wanted: int) -> bool:
    """Give ``change.path`` the permission bits ``wanted`` if it is still the same file (not
    a link) with the bits ``expected``; whether it now has ``wanted``."""
    try:
        descriptor = os.open(change.path, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        status = os.fstat(descriptor)
        if (status.st_dev, status.st_ino) != (change.dev, change.ino):
            return False
        if stat.S_ISLNK(status.st_mode):
            return False
        mode = stat.S_IMODE(status.st_mode)
        if mode == wanted:
            return True
        if mode != expected:
            return False
        # the descriptor's own inode, whatever now has its name (an O_PATH descriptor
        # cannot be fchmod-ed; its /proc link can be chmod-ed)
        os.chmod(f"/proc/self/fd/{descriptor}", wanted)
        return True
    except OSError:
        return False
    finally:
        os.close(descriptor)


def apply(change: Change) -> bool:
    """Make one change (only if the file still has its mode from before); whether it holds."""
    return _set_mode(change, change.before, change.after)


def give_back(changes: list[Change]) -> list[Change]:
    """Give every changed path its mode from before; the changes that could not be given
    back (the file is gone or replaced, or its mode was changed by someone meanwhile)."""
    left = []
    for change in reversed(changes):  # inner paths first, as they were changed last
        if not _set_mode(change, change.after, change.before):
            try:
                status = os.lstat(change.path)
            except OSError:
                continue  # removed meanwhile: nothing to give back
            if (status.st_dev, status.st_ino) == (change.dev, change.ino):
                left.append(change)
    return left


def _trusted(path: Path) -> bool:
    try:
        status = os.lstat(path)
    except OSError:
        return False
    return (
        stat.S_ISREG(status.st_mode)
        and status.st_uid == os.geteuid()
        and not status.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
    )


def read(path: Path) -> tuple[dict, list[Change]] | None:
    """A trusted journal's record and its changes; None for one that is not ours or is
    unreadable."""
    if not _trusted(path):
        return None
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
        changes = [Change(**c) for c in record["changes"]]
    except (OSError, ValueError, TypeError, KeyError):
        return None
    return record, changes


def is_live(record: dict) -> bool:
    """Whether the grader that wrote ``record`` is still running (same pid, same start)."""
    pid = int(record.get("pid") or 0)
    return pid > 0 and bool(record.get("started")) and _start_time(pid) == record["started"]


class Leftovers(NamedTuple):
    """What :func:`restore_leftovers` did."""

    restored: list[Change]  # given back
    stuck: list[Change]  # could not be given back (changed or replaced meanwhile)
    live: list[int]  # pids of graders still running with their own journal here
    survivors: list[int]  # orphaned hand-in processes that could not be ended: kept closed


def orphaned_hand_ins() -> list[int]:
    """Live processes of a hand-in's user (:func:`~.privileges.hand_in_ids`' range) whose
    grader is gone. A grader is a subreaper, so each of its hand-ins' processes, however it
    detaches, stays below it: the first ancestor that is not a hand-in's is its grader, a
    process of this user. A hand-in process whose first such ancestor is init (pid 1, unless
    this process is pid 1), none, or a process of another user outlived its grader. Limit: a
    subreaper of this user above a killed grader adopts its orphans, and is taken for a live
    grader."""
    from coursekit.grading.sandbox.as_hand_in import live_processes
    from coursekit.grading.sandbox.privileges import HAND_IN_ID_BASE

    def is_hand_in(uid: int) -> bool:
        return HAND_IN_ID_BASE <= uid < HAND_IN_ID_BASE + 2**22

    parents, uids = live_processes()
    me, found = os.getpid(), []
    for pid, uid in uids.items():
        if not is_hand_in(uid):
            continue
        ancestor, steps = parents.get(pid, 0), 0
        while is_hand_in(uids.get(ancestor, -1)) and steps < 4096:
            ancestor, steps = parents.get(ancestor, 0), steps + 1
        if ancestor == me:
            continue  # this run's own
        if ancestor <= 1 or uids.get(ancestor) != os.geteuid():
            found.append(pid)
    return found


def end_orphaned_hand_ins(seconds: float = 10.0) -> list[int]:
    """SIGKILL every :func:`orphaned_hand_ins` process (as root: only root runs hand-ins as
    their own users) until none is left; those still there after ``seconds``."""
    if os.geteuid() != 0:
        return []
    import signal
    import time

    deadline = time.monotonic() + seconds
    while left := orphaned_hand_ins():
        if time.monotonic() > deadline:
            return left
        for pid in left:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.02)
    return []


def restore_leftovers(folder: Path) -> Leftovers:
    """Give back what graders killed outright changed (their journals in ``folder``).

    A killed grader's hand-ins may have left processes that outlived it (a double-forked
    daemon, re-parented to init, still running as its hand-in's user): each is ended first
    (:func:`end_orphaned_hand_ins`), and if any cannot be, no mode is given back and the
    journals stay, for a later run. Each journal done with is removed."""
    restored, stuck, live = [], [], []
    result = Leftovers(restored, stuck, live, [])
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        return result
    ended = False
    for name in names:
        if not (name.startswith(PREFIX) and name.endswith(".json")):
            continue
        path = Path(folder) / name
        found = read(path)
        if found is None:
            continue
        record, changes = found
        if record.get("pid") == os.getpid():
            continue
        if is_live(record):
            live.append(int(record["pid"]))
            continue
        if not ended:  # before the first mode is given back: no hand-in of its is left
            ended = True
            result.survivors.extend(end_orphaned_hand_ins())
        if result.survivors:
            continue  # kept closed, and the journal kept: a later run gives them back
        left = give_back(changes)
        stuck += left
        restored += [c for c in changes if c not in left]
        with contextlib.suppress(OSError):
            path.unlink()
    return result


def remove(path: Path) -> None:
    with contextlib.suppress(OSError):
        path.unlink()
