"""What the read shield closes, and how: a plan made before any mode is changed.

The protected paths (:class:`Protected`: for ``grade``, :func:`grade_protected`) are made
unreadable to other users while the paths a hand-in's Python needs (:func:`needed_paths`)
stay reachable. :func:`plan` walks them:

- a protected path that holds nothing needed is closed whole (``chmod o-rwx``): for another
  user, no path through it resolves;
- one that holds a needed path (the course's folder with the virtual environment or
  coursekit's package of an editable install in it) keeps only ``o+x`` (it can be passed
  through, not listed), and each entry in it is planned the same way; the needed paths
  themselves are left as they are;
- a link is never changed (it has no permissions of its own): it is probed, unless it leads
  into a needed path.

Only files the grader's own user owns are changed. A required path it may not change is
named with the command that closes it; an extra one (a folder holding hand-ins, for the
batches beside them) is closed only where the grader owns it.
"""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from coursekit.grading.sandbox.shield_journal import Change

# Folders every user of a machine shares: never closed whole, as the folder holding a
# hand-in or the gradebook (their own entries are closed instead).
SHARED = (
    "/", "/home", "/tmp", "/var", "/var/tmp", "/dev", "/dev/shm", "/run", "/mnt", "/media",
    "/srv", "/opt", "/usr", "/etc", "/proc", "/sys", "/lib", "/bin", "/sbin", "/boot",
)  # fmt: skip


def real(path) -> Path:
    return Path(os.path.realpath(path))


def within(path: Path, folder: Path) -> bool:
    return path == folder or path.is_relative_to(folder)


def too_wide(path: Path) -> bool:
    """A folder other users share (``/``, ``/tmp``, ``/home``...), or one that holds one."""
    shared = [*map(Path, SHARED), real(tempfile.gettempdir())]
    return any(within(folder, path) for folder in shared)


@dataclass
class Protected:
    """What to close: ``required`` paths (a failure to close one is named), and ``extra`` ones
    closed where the grader owns them (the folders holding hand-ins: other batches)."""

    required: list[Path] = field(default_factory=list)
    extra: list[Path] = field(default_factory=list)
    problems: dict[str, str] = field(default_factory=dict)  # path -> why it cannot be closed


def grade_protected(
    course: Path, given: Iterable[str], gradebook: Path, hidden: Iterable[str] = ()
) -> Protected:
    """What ``coursekit grade`` protects: the course's folder, the folders the instructor
    named to it (``hidden``), each hand-in path given, the folder holding each (other batches
    beside it), the gradebook's folder (or the gradebook, in a shared folder), and the other
    checkouts of the course's git repository and its git directories wherever they are
    (copies of the course the grader knows of: :func:`git_paths`)."""
    course = real(course)
    required = [course, *map(real, hidden), *(real(g) for g in given)]
    git, problems = git_paths(course)
    required += git
    extra = [real(g).parent for g in given]
    book = real(gradebook)
    if too_wide(book.parent):
        required += [book.with_name(book.name + s) for s in ("", "-wal", "-shm", "-journal")]
    else:
        required.append(book.parent)
    extra = [p for p in extra if not too_wide(p)]
    return Protected(required, extra, problems)


def git_paths(course: Path) -> tuple[list[Path], dict[str, str]]:
    """What holds the course's history or another copy of it, outside its folder, and what
    could not be read: (paths, {path: why}).

    Where ``course/.git`` is a file (a linked working tree, a submodule, ``git clone
    --separate-git-dir``), it names the git directory (``gitdir: <path>``, relative to the
    course): that directory, and the common one its ``commondir`` names (a linked working
    tree's), hold every committed version of the course, ``solutions/`` included. The
    repository's other working trees (``worktrees/*/gitdir``) and the main one (the folder
    holding a common ``.git``) hold the course too. A ``.git`` file or ``commondir`` that
    cannot be read is named: the grader cannot say what it leaves open."""
    dot_git = course / ".git"
    found: list[Path] = []
    problems: dict[str, str] = {}
    common = dot_git
    if dot_git.is_file():
        try:
            line = dot_git.read_text(encoding="utf-8").strip()
        except (OSError, ValueError) as error:
            problems[str(dot_git)] = f"cannot be read by the grader ({error})"
            return found, problems
        if not line.startswith("gitdir:") or not line.removeprefix("gitdir:").strip():
            problems[str(dot_git)] = (
                "is a .git file the grader cannot read as `gitdir: <path>`, so it cannot say "
                "where the course's history is: fix or remove it"
            )
            return found, problems
        own = (course / line.removeprefix("gitdir:").strip()).resolve()
        found.append(own)
        common = own
        commondir = own / "commondir"
        if commondir.exists():
            try:
                common = (own / commondir.read_text(encoding="utf-8").strip()).resolve()
            except (OSError, ValueError) as error:
                problems[str(commondir)] = f"cannot be read by the grader ({error})"
                return found, problems
            found.append(common)
            if common.name == ".git":
                found.append(common.parent)  # the main working tree
    try:
        entries = list((common / "worktrees").iterdir())
    except OSError:  # no other working trees
        entries = []
    for entry in entries:
        try:
            text = (entry / "gitdir").read_text(encoding="utf-8").strip()
        except (OSError, ValueError):
            continue  # a working tree being made or removed: its folder is the common one's
        found.append((entry / text).parent if text else entry)
    kept = [real(p) for p in found if os.path.lexists(p)]
    return [p for p in dict.fromkeys(kept) if p != course], problems


def needed_paths(hidden: Iterable[Path]) -> list[Path]:
    """What a hand-in's process reads on the host: its Python (interpreter, standard library,
    site-packages, coursekit's package: :func:`~.namespaces.python_paths`) and the folder its
    scratch is made in."""
    from coursekit.grading.sandbox.namespaces import python_paths

    paths = python_paths([str(h) for h in hidden]) + [tempfile.gettempdir()]
    return sorted({real(p) for p in paths})


@dataclass
class Plan:
    """The changes to make, the paths to probe as a hand-in's user, what cannot be closed."""

    changes: list[Change] = field(default_factory=list)
    probes: list[tuple[str, str]] = field(default_factory=list)  # (path, "whole" or "list")
    unclosable: dict[str, str] = field(default_factory=dict)  # path -> why, and the fix
    covered: list[str] = field(default_factory=list)  # protected folders closed in full
    kept: list[str] = field(default_factory=list)  # what the hand-ins' Python needs, in them


def plan(protected: Protected, needed: list[Path]) -> Plan:
    """How to make ``protected`` unreadable to other users while keeping ``needed`` reachable."""
    result = Plan()
    result.unclosable.update(protected.problems)
    me = os.geteuid()
    seen: set[Path] = set()
    skipped: list[Path] = []  # the grader's to close only where it owns them, and it does not

    def close(path: Path, keep: int, is_required: bool) -> None:
        """Take other users' bits off ``path`` except ``keep``."""
        if path in seen:
            return
        seen.add(path)
        try:
            status = os.lstat(path)
        except FileNotFoundError:
            return
        except OSError as error:
            result.unclosable[str(path)] = f"cannot be read by the grader ({error.strerror})"
            return
        probe = "list" if keep else "whole"
        if stat.S_ISLNK(status.st_mode):
            target = real(path)
            if not any(within(target, n) for n in needed):
                result.probes.append((str(path), "whole"))
            return
        mode = stat.S_IMODE(status.st_mode)
        wanted = mode & ~(0o007 & ~keep)
        if wanted != mode:
            if status.st_uid != me:
                if is_required:
                    fix = "chmod o-rw" if keep else "chmod o-rwx"
                    result.unclosable[str(path)] = (
                        f"belongs to uid {status.st_uid}, not to the grader (uid {me}), which "
                        f"changes only its own files: `{fix} {quoted(path)}`"
                    )
                skipped.append(path)
                return
            result.changes.append(Change(str(path), status.st_dev, status.st_ino, mode, wanted))
        result.probes.append((str(path), probe))

    def walk(path: Path, is_required: bool, top: bool = True) -> None:
        inside = [n for n in needed if within(n, path)]
        if not inside:
            close(path, 0, is_required)
            return
        if path in inside:  # an entry the hand-ins' Python needs: left as it is
            result.kept.append(str(path))
            if top and is_required:
                result.unclosable[str(path)] = (
                    "is a folder the hand-ins' Python needs (their interpreter or packages): "
                    "keep the course, hand-ins and gradebook out of it"
                )
            return
        if too_wide(path) or not path.is_dir():
            skipped.append(path)
            if is_required:
                result.unclosable[str(path)] = "is a folder every user shares, too wide to close"
            return
        close(path, 0o001, is_required)  # passable, not listable: only known names resolve
        try:
            entries = sorted(os.scandir(path), key=lambda e: e.name)
        except OSError as error:
            skipped.append(path)
            if is_required:
                result.unclosable[str(path)] = f"cannot be listed by the grader ({error.strerror})"
            return
        for entry in entries:
            walk(Path(entry.path), is_required, top=False)

    required = outermost(protected.required)
    tops = [*required]
    for top in required:
        walk(top, True)
    for top in outermost(protected.extra):  # best effort: where the grader owns them
        if not any(within(top, r) for r in required):
            tops.append(top)
            walk(top, False)
    missed = [*skipped, *map(Path, result.unclosable)]
    whole = [t for t in tops if os.path.lexists(t) and not any(within(m, t) for m in missed)]
    result.covered = [str(t) for t in outermost(whole)]
    return result


def outermost(paths: list[Path]) -> list[Path]:
    ordered = sorted(set(paths), key=lambda p: (len(p.parts), str(p)))
    kept: list[Path] = []
    for path in ordered:
        if not any(within(path, k) for k in kept):
            kept.append(path)
    return kept


def quoted(path) -> str:
    import shlex

    return shlex.quote(str(path))
