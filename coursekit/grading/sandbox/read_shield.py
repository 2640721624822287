"""Where hand-ins share the grader's files, close the course and the hand-ins to them first.

Without a root file system of its own (Docker, Gradescope, Kubernetes: no mount namespace), a
hand-in runs as a user of its own on the machine's files, and only their permissions (and
Landlock, where the kernel has it) stand between it and the course's ``solutions/`` and
``notebooks/``, other students' hand-ins and the gradebook, which a checkout leaves readable
by every user. So, while grading runs (:func:`shielding`), the first sandbox that reports
such a mode (:func:`refusal`, called by ``modes.unconfined_refusal`` before any of its cells)
makes the protected folders unreadable to other users:

- each protected folder that holds nothing the hand-in's Python needs is closed whole
  (``chmod o-rwx``): no path through it resolves for another user;
- one that holds such a path (the course's folder, with the virtual environment or
  coursekit's package of an editable install) keeps only ``o+x`` (no listing), and each entry
  in it is closed in turn, except the needed paths (left as they are) and the folders on the
  way to them (treated the same way);
- links are not changed (a link has no permissions of its own): each is probed instead.

Only files the grader's own user owns are changed, each recorded first (device, inode, mode:
:mod:`~coursekit.grading.sandbox.shield_journal`) and given back when grading ends, however
it ends. Then a process that has become a hand-in's user (a uid of the same range, no groups)
tries to read every protected path: what it can read is named. Where Landlock confines reads
anyway, that is a warning; without it, grading stops before any hand-in runs, with each
readable path and the command that closes it, unless ``--unconfined`` accepts it.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import stat
import sys
import tempfile
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from coursekit.grading.sandbox import shield_journal
from coursekit.grading.sandbox.privileges import HAND_IN_ID_BASE
from coursekit.grading.sandbox.shield_journal import Change

# Folders every user of a machine shares: never closed whole, as the folder holding a
# hand-in or the gradebook (their own entries are closed instead).
SHARED = (
    "/", "/home", "/tmp", "/var", "/var/tmp", "/dev", "/dev/shm", "/run", "/mnt", "/media",
    "/srv", "/opt", "/usr", "/etc", "/proc", "/sys", "/lib", "/bin", "/sbin", "/boot",
)  # fmt: skip


def _real(path) -> Path:
    return Path(os.path.realpath(path))


def _within(path: Path, folder: Path) -> bool:
    return path == folder or path.is_relative_to(folder)


def too_wide(path: Path) -> bool:
    """A folder other users share (``/``, ``/tmp``, ``/home``...), or one that holds one."""
    shared = [*map(Path, SHARED), _real(tempfile.gettempdir())]
    return any(_within(folder, path) for folder in shared)


@dataclass
class Protected:
    """What to close: ``required`` paths (a failure to close one is named), and ``extra`` ones
    closed where the grader owns them (the folders holding hand-ins: other batches)."""

    required: list[Path] = field(default_factory=list)
    extra: list[Path] = field(default_factory=list)


def grade_protected(
    course: Path, given: Iterable[str], gradebook: Path, hidden: Iterable[str] = ()
) -> Protected:
    """What ``coursekit grade`` protects: the course's folder, the folders the instructor
    named to it (``hidden``), each hand-in path given, the folder holding each (other batches
    beside it), the gradebook's folder (or the gradebook, in a shared folder), and the other
    checkouts of the course's git repository (copies of the course the grader knows of)."""
    course = _real(course)
    required = [course, *map(_real, hidden), *(_real(g) for g in given)]
    required += git_checkouts(course)
    extra = [_real(g).parent for g in given]
    book = _real(gradebook)
    if too_wide(book.parent):
        required += [book.with_name(book.name + s) for s in ("", "-wal", "-shm", "-journal")]
    else:
        required.append(book.parent)
    extra = [p for p in extra if not too_wide(p)]
    return Protected(required, extra)


def git_checkouts(course: Path) -> list[Path]:
    """Other working trees of the course's repository (``git worktree``), and the main one
    where the course is a linked working tree: each holds the course too."""
    dot_git = course / ".git"
    found = []
    try:
        if dot_git.is_file():  # a linked working tree: "gitdir: <main>/.git/worktrees/<name>"
            line = dot_git.read_text(encoding="utf-8").strip()
            own = Path(line.removeprefix("gitdir:").strip())
            common = (own / (own / "commondir").read_text().strip()).resolve()
            dot_git = common
            if common.name == ".git":
                found.append(common.parent)
        for entry in (dot_git / "worktrees").iterdir():
            where = Path((entry / "gitdir").read_text(encoding="utf-8").strip()).parent
            found.append(where)
    except (OSError, ValueError):
        pass
    return [_real(p) for p in found if _real(p) != course and p.exists()]


def needed_paths(hidden: Iterable[Path]) -> list[Path]:
    """What a hand-in's process reads on the host: its Python (interpreter, standard library,
    site-packages, coursekit's package: :func:`~.namespaces.python_paths`) and the folder its
    scratch is made in."""
    from coursekit.grading.sandbox.namespaces import python_paths

    paths = python_paths([str(h) for h in hidden]) + [tempfile.gettempdir()]
    return sorted({_real(p) for p in paths})


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
            target = _real(path)
            if not any(_within(target, n) for n in needed):
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
                        f"changes only its own files: `{fix} {_quoted(path)}`"
                    )
                skipped.append(path)
                return
            result.changes.append(Change(str(path), status.st_dev, status.st_ino, mode, wanted))
        result.probes.append((str(path), probe))

    def walk(path: Path, is_required: bool, top: bool = True) -> None:
        inside = [n for n in needed if _within(n, path)]
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

    required = _outermost(protected.required)
    tops = [*required]
    for top in required:
        walk(top, True)
    for top in _outermost(protected.extra):  # best effort: where the grader owns them
        if not any(_within(top, r) for r in required):
            tops.append(top)
            walk(top, False)
    missed = [*skipped, *map(Path, result.unclosable)]
    whole = [t for t in tops if os.path.lexists(t) and not any(_within(m, t) for m in missed)]
    result.covered = [str(t) for t in _outermost(whole)]
    return result


def _outermost(paths: list[Path]) -> list[Path]:
    ordered = sorted(set(paths), key=lambda p: len(p.parts))
    kept: list[Path] = []
    for path in ordered:
        if not any(_within(path, k) for k in kept):
            kept.append(path)
    return kept


def _quoted(path) -> str:
    import shlex

    return shlex.quote(str(path))


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


class Shield:
    """The protected paths of one grading run, closed at the first sandbox that shares the
    host's files (:meth:`close_up`), and given back when the run ends (:meth:`give_back`)."""

    def __init__(self, protected: Protected, journal_folder: Path, unconfined: bool, say):
        self.protected = protected
        self.journal_folder = Path(journal_folder)
        self.unconfined = unconfined
        self.say = say
        self.done = False
        self.changes: list[Change] = []
        self.readable: dict[str, str] = {}  # path -> why it is readable, and the fix
        self.journal: Path | None = None
        self.covered: list[str] = []  # protected folders closed in full, as measured
        self.kept: list[str] = []  # what the hand-ins' Python needs inside them, left open

    def close_up(self, landlock: bool) -> None:
        """Close the protected paths (once), then measure what a hand-in's user can read."""
        if self.done:
            return
        self.done = True
        hidden = [*self.protected.required, *self.protected.extra]
        steps = plan(self.protected, needed_paths(hidden))
        self.readable.update(steps.unclosable)
        self.covered, self.kept = steps.covered, steps.kept
        live = shield_journal.restore_leftovers(self.journal_folder)[2]
        if live:
            why = (
                f"another grading run (pid {live[0]}) has changed this course's permissions "
                "and will give them back when it ends: grade one run at a time"
            )
            self.readable[str(self.journal_folder)] = why
            steps.changes = []
        if steps.changes:
            try:
                self.journal = shield_journal.write(self.journal_folder, steps.changes)
            except OSError as error:
                why = f"the grader could not record its changes there ({error.strerror})"
                for change in steps.changes:
                    self.readable[change.path] = f"left open: {why}"
                steps.changes = []
        for change in steps.changes:
            if shield_journal.apply(change):
                self.changes.append(change)
        try:
            for path in probe(steps.probes):
                self.readable.setdefault(path, _fix_for(path, steps.probes))
        except OSError as error:
            self.readable["(the probe)"] = str(error)
        self._tell(landlock)

    def _tell(self, landlock: bool) -> None:
        if self.changes:
            shown = ", ".join(str(p) for p in _outermost([Path(c.path) for c in self.changes]))
            self.say(
                f"Hand-ins here run as another user on this machine's files: until grading "
                f"ends, {len(self.changes)} file(s) and folder(s) are unreadable to other "
                f"users (their modes are given back then), in: {shown}."
            )
        if not self.readable:
            but = f" but what its Python needs ({', '.join(self.kept)})" if self.kept else ""
            self.say(
                "Checked as a hand-in's user before the first hand-in: it can read nothing in "
                f"{', '.join(self.covered)}{but}."
            )
        elif landlock:
            self.say(
                "Landlock keeps hand-ins from reading these, which other users can read: "
                + "; ".join(f"{p} ({why})" for p, why in self.readable.items())
            )
        elif self.unconfined:
            self.say(
                "--unconfined: grading goes on though a hand-in can read "
                + "; ".join(f"{p} ({why})" for p, why in self.readable.items())
            )

    def give_back(self) -> None:
        """Give every changed mode back and remove the journal (what cannot be, is named)."""
        left = shield_journal.give_back(self.changes)
        self.changes = []
        if left:
            self.say(
                "These modes were changed by someone while grading ran, so the grader left "
                "them: " + "; ".join(f"chmod {c.before:o} {_quoted(c.path)}" for c in left)
            )
        if self.journal is not None:
            shield_journal.remove(self.journal)
            self.journal = None


def _fix_for(path: str, probes: list[tuple[str, str]]) -> str:
    kind = dict(probes).get(path, "whole")
    if os.path.islink(path):
        return f"a link to {os.path.realpath(path)}: remove the link, or close what it leads to"
    fix = "chmod o-rw" if kind == "list" else "chmod o-rwx"
    return f"readable to other users: `{fix} {_quoted(path)}`"


_LOCK = threading.Lock()
_OPEN: list[Shield] = []  # the shields of the grading runs in progress in this process


def refusal(applied: dict) -> str | None:
    """Why a sandbox that reported ``applied`` must not run hand-ins: they would share this
    machine's files, with no Landlock, while something protected is readable to them (or
    nothing closed it); None when reads are confined or nothing is readable. Closes the open
    shields' paths first, the first time a sandbox shares the host's files."""
    if (applied.get("root") or {}).get("root") == "own":
        return None  # its own root file system: the host's files are not there
    landlock = bool(applied.get("landlock"))
    if not applied.get("hand_in_user"):
        if landlock:
            return None
        return (
            "hand-ins would run as your own user on this machine's files, with no root file "
            "system of their own and no Landlock: nothing would keep them from the course's "
            "solutions/ and notebooks/, the hand-ins and the gradebook. Grade as root, where "
            "mount namespaces or Landlock (Linux 5.13 or newer) can be made; or, for hand-ins "
            "you trust, pass --unconfined."
        )
    with _LOCK:
        shields = list(_OPEN)
        for shield in shields:
            shield.close_up(landlock)
    if landlock:
        return None
    if not shields:
        return (
            "hand-ins would run on this machine's files with no Landlock, and nothing made "
            "the course and the hand-ins unreadable to them: grade with `coursekit grade`, "
            "which does, or pass --unconfined."
        )
    readable = {p: why for shield in shields for p, why in shield.readable.items()}
    if not readable:
        return None
    lines = "\n".join(f"  {path}: {why}" for path, why in readable.items())
    return (
        "hand-ins here would run as another user on this machine's files, with no root file "
        "system of their own and no Landlock, so only file permissions keep them from the "
        "course and other students' work; checked as a hand-in's user, these can be read:\n"
        f"{lines}\nClose them and run grade again (nothing was graded); or grade where mount "
        "namespaces (root outside a container) or Landlock (Linux 5.13 or newer) can be made; "
        "or pass --unconfined to grade anyway, knowing a hand-in can read them."
    )


_STOP_SIGNALS = tuple(getattr(signal, n) for n in ("SIGTERM", "SIGHUP") if hasattr(signal, n))


@contextlib.contextmanager
def shielding(
    protected: Protected,
    journal_folder: Path,
    unconfined: bool = False,
    say: Callable[[str], None] = print,
) -> Iterator[Shield]:
    """While the block runs, the first sandbox that shares the host's files closes
    ``protected`` (see the module's docstring); its modes are given back when the block is
    left. Modes a killed grader left changed (journals in ``journal_folder``) are given back
    first. In the main thread, SIGTERM and SIGHUP end the block as Ctrl-C does (a signal
    this process was started ignoring stays ignored), so they too give the modes back."""
    restored, stuck, _ = shield_journal.restore_leftovers(Path(journal_folder))
    if restored:
        say(f"Gave back the modes a killed grading run left changed ({len(restored)} path(s)).")
    for change in stuck:
        say(f"A killed grading run changed {change.path}: `chmod {change.before:o}` restores it.")
    shield = Shield(protected, journal_folder, unconfined, say)
    previous = {}
    if threading.current_thread() is threading.main_thread():

        def stop(signum, frame):
            raise SystemExit(128 + signum)

        for signum in _STOP_SIGNALS:
            if signal.getsignal(signum) is signal.SIG_DFL:
                previous[signum] = signal.signal(signum, stop)
    with _LOCK:
        _OPEN.append(shield)
    try:
        yield shield
    finally:
        with _LOCK:
            _OPEN.remove(shield)
            shield.give_back()
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def shielded_grade(run_grade):
    """``run_grade`` inside :func:`shielding`, protecting :func:`grade_protected` of its
    arguments (``root``, ``hand_ins``, ``gradebook_path``, ``options``)."""
    import functools
    import inspect

    from coursekit.grading.text import for_terminal_lines

    signature = inspect.signature(run_grade)

    def say(message: str) -> None:
        print(f"coursekit grade: {for_terminal_lines(message)}", file=sys.stderr)

    @functools.wraps(run_grade)
    def wrapper(*args, **kwargs):
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        given = bound.arguments
        options = given.get("options")
        hidden = getattr(options, "hidden", ())
        protected = grade_protected(
            Path(given["root"]), given["hand_ins"], Path(given["gradebook_path"]), hidden
        )
        unconfined = bool(getattr(options, "unconfined", False))
        with shielding(protected, _real(given["root"]), unconfined, say):
            return run_grade(*args, **kwargs)

    return wrapper
