"""Where hand-ins share the grader's files, close the course and the hand-ins to them first.

Without a root file system of its own (Docker, Gradescope, Kubernetes: no mount namespace), a
hand-in runs as a user of its own on the machine's files, and only their permissions (and
Landlock, where the kernel has it) stand between it and the course's ``solutions/`` and
``notebooks/``, other students' hand-ins and the gradebook, which a checkout leaves readable
by every user. So, while grading runs (:func:`shielding`; ``grade`` through
:func:`shielded_grade`), the first sandbox that reports such a mode (:func:`refusal`, called by
``modes.unconfined_refusal`` before any of its cells run) closes them to other users
(:mod:`~coursekit.grading.sandbox.shield_plan` says how), each change written down first
(:mod:`~coursekit.grading.sandbox.shield_journal`) and given back when grading ends, however it
ends. Then a process that has become a hand-in's user tries to read every protected path
(:func:`~coursekit.grading.sandbox.as_hand_in.probe`): what it can read is named. Where Landlock
confines reads anyway, that is a warning; without it, grading stops before any hand-in runs,
with each readable path and the command that closes it, unless ``--unconfined`` accepts it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

from coursekit.grading.sandbox import shield_journal
from coursekit.grading.sandbox.as_hand_in import (
    end_hand_ins_below,
    hand_ins_below,
    listening_tcp,
    other_processes,
    probe,
)
from coursekit.grading.sandbox.shield_journal import Change
from coursekit.grading.sandbox.shield_plan import (
    Protected,
    grade_protected,
    needed_paths,
    outermost,
    plan,
    quoted,
    real,
)

__all__ = ["Protected", "Shield", "hand_ins_below", "refusal", "shielded_grade", "shielding"]


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

    def close_up(self, landlock: int) -> None:
        """Close the protected paths (once), then measure what a hand-in's user can read.
        A failure of its own is named as what cannot be vouched for: it never lets grading
        go on as if the paths were closed."""
        if self.done:
            return
        self.done = True
        try:
            self._close_up()
        except Exception as error:  # noqa: BLE001 - fails closed: named, and refused
            self.readable["(the read shield)"] = f"failed: {type(error).__name__}: {error}"
        self._tell(landlock)

    def _close_up(self) -> None:
        hidden = [*self.protected.required, *self.protected.extra]
        steps = plan(self.protected, needed_paths(hidden))
        self.readable.update(steps.unclosable)
        self.covered, self.kept = steps.covered, steps.kept
        leftovers = shield_journal.restore_leftovers(self.journal_folder)
        live = leftovers.live
        if leftovers.survivors:
            why = (
                f"a killed grading run's hand-in processes (pid {leftovers.survivors[0]}) "
                "could not be ended: end them (`kill -9`), then grade again"
            )
            self.readable[str(self.journal_folder)] = why
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

    def _tell(self, landlock: int) -> None:
        if self.changes:
            shown = ", ".join(str(p) for p in outermost([Path(c.path) for c in self.changes]))
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
        self.say(_beyond_files(landlock))

    def give_back(self) -> None:
        """Give every changed mode back and remove the journal (what cannot be, is named).

        Not while a hand-in of this run still runs (grading stopped by Ctrl-C or an error
        while a worker was still ending one): those are ended first; if one cannot be, the
        modes stay closed and the journal stays, for the next ``grade`` to give them back."""
        if self.changes and not end_hand_ins_below():
            self.say(
                "A hand-in's process of this run could not be ended, so the course and the "
                "hand-ins stay closed to other users; the next `coursekit grade` of this course "
                "gives their modes back."
            )
            return
        left = shield_journal.give_back(self.changes)
        self.changes = []
        if left:
            self.say(
                "These modes were changed by someone while grading ran, so the grader left "
                "them: " + "; ".join(f"chmod {c.before:o} {quoted(c.path)}" for c in left)
            )
        if self.journal is not None:
            shield_journal.remove(self.journal)
            self.journal = None


def _beyond_files(landlock: int) -> str:
    """What a hand-in here can reach besides files, measured now: the command lines of the
    other processes (without Landlock) and the TCP ports listening (without Landlock 4+)."""
    if landlock >= 4:
        return "Landlock keeps hand-ins from other processes' /proc entries and from TCP."
    try:
        names = other_processes()
        ports = listening_tcp()
    except OSError as error:
        return f"What else a hand-in can reach here could not be listed ({error})."
    reach = []
    if not landlock:
        shown = ", ".join(sorted(set(names))[:12])
        reach.append(f"the command lines of {len(names)} other process(es) ({shown})")
    reach.append(
        "TCP connections to what listens here now: " + (", ".join(ports[:12]) or "nothing")
    )
    return (
        "A hand-in here can also reach "
        + "; ".join(reach)
        + " (the README's grading modes say what to do)."
    )


def _fix_for(path: str, probes: list[tuple[str, str]]) -> str:
    kind = dict(probes).get(path, "whole")
    if os.path.islink(path):
        return f"a link to {os.path.realpath(path)}: remove the link, or close what it leads to"
    fix = "chmod o-rw" if kind == "list" else "chmod o-rwx"
    return f"readable to other users: `{fix} {quoted(path)}`"


_LOCK = threading.Lock()
_OPEN: list[Shield] = []  # the shields of the grading runs in progress in this process


def refusal(applied: dict) -> str | None:
    """Why a sandbox that reported ``applied`` must not run hand-ins: they would share this
    machine's files, with no Landlock, while something protected is readable to them (or
    nothing closed it); None when reads are confined or nothing is readable. Closes the open
    shields' paths first, the first time a sandbox shares the host's files."""
    if (applied.get("root") or {}).get("root") == "own":
        return None  # its own root file system: the host's files are not there
    landlock = int(applied.get("landlock") or 0)  # its ABI: TCP is closed from 4
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


def _give_back_whole(shield: Shield) -> None:
    """``shield.give_back()`` without a stop signal cutting it short (in the main thread:
    SIGINT, SIGTERM and SIGHUP wait until it is done, then act as they would have)."""
    if threading.current_thread() is not threading.main_thread():
        shield.give_back()
        return
    pending: list[int] = []
    held = {}
    for signum in (signal.SIGINT, *_STOP_SIGNALS):
        if signal.getsignal(signum) is not signal.SIG_IGN:
            held[signum] = signal.signal(signum, lambda number, frame: pending.append(number))
    try:
        shield.give_back()
    finally:
        for signum, handler in held.items():
            signal.signal(signum, handler)
        for signum in dict.fromkeys(pending):
            os.kill(os.getpid(), signum)


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
    first, once every process its hand-ins left running is ended (if one cannot be, they stay
    closed, and that is said). In the main thread, SIGTERM and SIGHUP end the block as
    Ctrl-C does (a signal this process was started ignoring stays ignored), so they too give
    the modes back."""
    restored, stuck, _, survivors = shield_journal.restore_leftovers(Path(journal_folder))
    if survivors:
        say(
            f"A killed grading run's hand-ins left {len(survivors)} process(es) running that "
            f"could not be ended (pids {', '.join(map(str, survivors[:5]))}): the modes it "
            "changed stay closed until they are ended (`kill -9`) and `coursekit grade` runs "
            "again."
        )
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
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        with _LOCK:
            _OPEN.remove(shield)
            _give_back_whole(shield)


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
        with shielding(protected, real(given["root"]), unconfined, say):
            return run_grade(*args, **kwargs)

    return wrapper
