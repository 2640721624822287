"""Host scratch folders: made by the grader under names no one can guess, removed by whoever
outlives their owner.

Where a hand-in has no root of its own (no mount namespace: Docker, Gradescope), its scratch
is a folder in the host's temporary folder; the warm parent keeps its caches (matplotlib's
font cache) in one too. Each is named ``coursekit-hand-in-<grader pid>-<owner pid>-<random>``:
the grader's process, which is the grading run (so a run, and a test of it, can count only its
own while another run works on the same machine), the process the folder belongs to (a runner,
or the warm parent), and 64 random bits (:func:`make`). The folder is made with ``mkdir``,
which fails rather than take an entry that exists, so a hand-in that makes the names it
expects the next hand-ins to get (a folder, a file, a symbolic link) holds nothing anyone
uses: the grader draws another name, and never stops for a clash.

Whoever outlives the owner removes the folder: the grader, once it has reaped a runner or a
warm parent (killed or not); the warm parent, its caches as it ends. A grader killed outright
(SIGKILL) takes its warm parent and runners along (PR_SET_PDEATHSIG) and removes nothing:
the next run's :func:`sweep` does, for the folders whose grader and owner are both gone.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import stat
import tempfile
import time
from pathlib import Path

from coursekit.grading.sandbox.privileges import hand_in_ids
from coursekit.grading.sandbox.reaping import run_owned

# Folders are made only while grading, after this module is loaded: one named after this
# process but changed (ctime, which no one can set) before then is an earlier process's whose
# pid this one has been given again (a restarted container, pids wrapping round).
_LOADED_AT = time.time()

PREFIX = "coursekit-hand-in-"
# grader-owner-random; grader-owner, or one pid, as earlier releases named them
_NAME = re.compile(r"coursekit-hand-in-([0-9]{1,7})(?:-([0-9]{1,7}))?(?:-[0-9a-f]{16})?")
_PID_LIMIT = 2**22  # the kernel's PID_MAX_LIMIT


def make(grader: int, owner: int, parent: str | None = None, uid: int | None = None) -> Path:
    """Make the host scratch folder of ``owner`` (a runner or a warm parent) in ``grader``'s
    run, in ``parent`` (the temporary folder), mode 700, under a name with 64 random bits;
    given to ``uid`` (a hand-in's user) when given. Its path.

    ``mkdir`` makes the entry or fails: an entry that is there already (a hand-in's guess,
    however made) is never used, another name is drawn."""
    while True:
        path = Path(parent or tempfile.gettempdir()) / (
            f"{PREFIX}{grader}-{owner}-{secrets.token_hex(8)}"
        )
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            continue
        if uid is not None:
            os.lchown(path, uid, uid)
        return path


def folders_of(grader: int, owner: int, parent: str | None = None) -> list[Path]:
    """The real folders (never a symbolic link) of ``owner`` in ``grader``'s run in
    ``parent``, owned by this user: what the owner made (:func:`make`), never what a hand-in
    of another user made under a name like it."""
    found = []
    try:
        entries = list(os.scandir(parent or tempfile.gettempdir()))
    except OSError:
        return found
    for entry in entries:
        pids = pids_of(entry.name)
        if pids is None or len(pids) != 2 or pids != (grader, owner):
            continue
        try:
            info = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if stat.S_ISDIR(info.st_mode) and info.st_uid == os.geteuid():
            found.append(Path(entry.path))
    return found


def is_ours(path: str | os.PathLike, uid: int) -> bool:
    """Whether ``path`` is a real folder (not a link) owned by ``uid``, as :func:`make` left
    it: what a runner checks before it enters the folder the grader made for it."""
    try:
        info = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(info.st_mode) and info.st_uid == uid


def pids_of(name: str) -> tuple[int, ...] | None:
    """The process ids a scratch folder's name holds (grader, owner), or None: not one of
    ours."""
    found = _NAME.fullmatch(name)
    if found is None:
        return None
    pids = tuple(int(pid) for pid in found.groups() if pid is not None)
    return pids if all(0 < pid < _PID_LIMIT for pid in pids) else None


def is_dead(pid: int) -> bool:
    """Whether no process has the id ``pid``. Signal 0 asks without sending anything; a
    process that may not be signalled (another user's) answers EPERM, and is alive."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False
    return False


def sweep(parent: str | os.PathLike | None = None) -> list[str]:
    """Remove the scratch folders that grading runs killed outright left in ``parent`` (the
    temporary folder); returns what was removed.

    Only a folder named as ours (:func:`pids_of`) whose every process is gone is removed:
    another run's, live, is left alone, whatever its age. A folder named after this process
    but older than it is an earlier process's that had the same pid: its owner gone, it goes.
    Only a real folder (its entry read with ``lstat``: never a symbolic link, and
    :func:`remove` follows none), owned by this user or, for a root grader, by the hand-in
    user of the runner it is named after. In a sticky temporary folder no other user can
    rename such an entry or put another in its place.
    """
    removed = []
    try:
        entries = list(os.scandir(parent or tempfile.gettempdir()))
    except OSError:
        return removed
    for entry in entries:
        pids = pids_of(entry.name)
        if pids is None:
            continue
        try:
            info = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        grader, owner = pids[0], pids[-1]
        earlier_me = grader == os.getpid() and info.st_ctime < _LOADED_AT
        if not is_dead(owner) or not (is_dead(grader) or earlier_me):
            continue
        if stat.S_ISDIR(info.st_mode) and _ours(info.st_uid, owner=owner):
            remove(entry.path)
            removed.append(entry.path)
    return removed


def _ours(uid: int, owner: int) -> bool:
    """Whether a folder of ``uid`` is this user's to remove: its own, or (as root) that of
    the hand-in user the runner ``owner`` gave its hand-in."""
    me = os.geteuid()
    return uid == me or (me == 0 and uid == hand_in_ids(owner)[0])


def remove(folder: str | os.PathLike) -> None:
    """Remove a scratch folder however deep a hand-in nested it (``rm`` does; ``rmtree``
    recurses, and is the fallback). Neither follows a symbolic link: one given as
    ``folder`` is left alone by ``rmtree`` and removed as a link by ``rm``. An empty folder
    (most are) is removed at once; ``rm`` runs as the calling grading thread's own child."""
    try:
        os.rmdir(folder)
        return
    except OSError:
        pass
    run_owned(["rm", "-rf", "--one-file-system", str(folder)])
    shutil.rmtree(folder, ignore_errors=True)
