"""The read shield (issue 40): where hand-ins share the grader's files with no Landlock, the
course, the hand-ins and the gradebook are closed to them first, checked as a hand-in's user,
and given back afterwards, however grading ends.

Each test builds a small course in a temporary folder and asks the shield what a sandbox
without a root of its own reports (``applied``, as the runner sends it). Reads are measured by
a process that has become a hand-in's user (tests/test_read_shield_docker_like.py grades a
batch end to end in the Docker-like mode without Landlock).
"""

import contextlib
import json
import os
import shutil
import signal
import stat
import sys
import tempfile
import time
from pathlib import Path

import pytest

from coursekit.grading.sandbox import privileges, read_shield, shield_journal, shield_plan
from coursekit.grading.sandbox.as_hand_in import probe
from coursekit.grading.sandbox.modes import unconfined_refusal

pytestmark = [
    pytest.mark.grading,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only"),
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root, as CI has (a hand-in's user)"),
]
# what a runner reports without namespaces, as root, with and without Landlock
SHARED_FILES = {"root_user": True, "hand_in_user": privileges.HAND_IN_ID_BASE + 1, "root": {}}
SHARED_FILES_LANDLOCK = {**SHARED_FILES, "landlock": 4}


def _tree(base: Path) -> dict[str, Path]:
    """A course (with a virtual environment inside it, as an editable install has), two
    batches of hand-ins beside each other and a gradebook, all readable by every user."""
    paths = {
        "course": base / "course",
        "solution": base / "course" / "solutions" / "01_accumulation.ipynb",
        "source": base / "course" / "notebooks" / "01_accumulation.ipynb",
        "readme": base / "course" / "README.md",
        "venv": base / "course" / ".venv",
        "library": base / "course" / ".venv" / "lib.py",
        "package": base / "course" / "coursekit" / "memory.py",  # an editable install's
        "graded": base / "hand-ins" / "week2" / "ada.ipynb",
        "other_batch": base / "hand-ins" / "week1" / "bob.ipynb",
        "gradebook": base / "books" / "gradebook.sqlite",
    }
    for name, path in paths.items():
        if path.suffix:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(name)
    for path in [base, *base.rglob("*")]:
        os.chmod(path, 0o755 if path.is_dir() else 0o644)
    return paths


def _modes(base: Path) -> dict[str, int]:
    return {str(p): stat.S_IMODE(os.lstat(p).st_mode) for p in [base, *base.rglob("*")]}


def _protected(paths) -> shield_plan.Protected:
    return shield_plan.grade_protected(
        paths["course"], [str(paths["graded"].parent)], paths["gradebook"]
    )


@pytest.fixture
def base():
    """A folder every user may pass through (pytest's own temporary folders are root's
    alone, which would hide everything before the shield does)."""
    folder = Path(tempfile.mkdtemp(prefix="coursekit-shield-test-"))
    os.chmod(folder, 0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def needs_venv(monkeypatch):
    """The hand-ins' Python, as the shield sees it: the course's .venv (and the host's own,
    so the probe's process can still run)."""

    def needed(hidden):
        return sorted({shield_plan.real(p) for p in needed.paths})

    needed.paths = []
    monkeypatch.setattr(read_shield, "needed_paths", needed)
    return needed


def _reads_as_hand_in(paths: list[Path]) -> list[str]:
    return probe([(str(p), "whole") for p in paths])


def test_a_hand_ins_user_reads_nothing_protected_and_everything_is_given_back(base, needs_venv):
    paths = _tree(base)
    needs_venv.paths = [paths["venv"], paths["package"].parent]
    before = _modes(base)
    secrets = [paths[n] for n in ("solution", "source", "readme", "graded", "other_batch")]
    secrets.append(paths["gradebook"])
    assert len(_reads_as_hand_in(secrets)) == len(secrets)  # the attack of issue 40, before
    said = []
    protected = _protected(paths)
    with read_shield.shielding(protected, paths["course"], say=said.append):
        assert unconfined_refusal(SHARED_FILES) is None, said
        assert _reads_as_hand_in(secrets) == []
        # its Python stays reachable through the closed course folder, but not listable
        python = [str(paths["library"]), str(paths["package"])]
        assert _reads_as_hand_in(python) == python
        assert probe([(str(paths["course"]), "list")]) == []
        assert list(paths["course"].glob(".coursekit-read-shield-*.json"))  # the journal
    assert _modes(base) == before
    assert not list(paths["course"].glob(".coursekit-read-shield-*"))
    assert any("unreadable to other users" in s for s in said)
    checked = [s for s in said if s.startswith("Checked as a hand-in's user")]
    listed = checked[0].split("nothing in ")[1].split(" but ")[0].split(", ")
    assert str(paths["course"]) in listed and str(paths["gradebook"].parent) in listed
    assert f"but what its Python needs ({paths['venv']}, {paths['package'].parent})" in checked[0]


def test_a_path_it_may_not_change_is_named_with_its_fix_and_grading_refused(base, needs_venv):
    paths = _tree(base)
    solutions = paths["solution"].parent
    os.chown(solutions, 4321, 4321)  # an instructor's folder, graded as root
    link = paths["course"] / "data"
    outside = base / "elsewhere.txt"
    outside.write_text("a copy of the answers")
    os.chmod(outside, 0o644)
    needs_venv.paths = [paths["venv"]]
    link.symlink_to(outside)
    with read_shield.shielding(_protected(paths), paths["course"], say=lambda _: None):
        refusal = unconfined_refusal(SHARED_FILES)
        assert refusal is not None
        assert f"chmod o-rwx {solutions}" in refusal
        assert "uid 4321" in refusal
        assert f"{link}: a link to {outside}" in refusal
        assert "--unconfined" in refusal
        # with Landlock, which keeps reads to its allow list, the same is no refusal
        assert unconfined_refusal(SHARED_FILES_LANDLOCK) is None


def _git(*args: str, cwd: Path) -> None:
    import subprocess

    subprocess.run(
        ["git", "-c", "init.defaultBranch=main", *args],
        cwd=cwd,
        check=True,
        capture_output=True,
        env={"PATH": os.environ.get("PATH", ""), "HOME": str(cwd), "GIT_CONFIG_NOSYSTEM": "1"},
    )


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_a_git_directory_outside_the_course_is_closed_too(base, needs_venv, monkeypatch):
    paths = _tree(base)
    needs_venv.paths = [paths["venv"]]
    store = base / "store"
    store.mkdir(mode=0o755)
    # git clone --separate-git-dir (git init's, here: no remote to clone from)
    _git("init", "-q", "--separate-git-dir", str(store / "course.git"), ".", cwd=paths["course"])
    for path in [store, *store.rglob("*")]:
        os.chmod(path, 0o755 if path.is_dir() else 0o644)  # as a umask of 022 leaves it
    history = store / "course.git" / "HEAD"
    assert _reads_as_hand_in([history]) == [str(history)]
    # the same place as a relative gitdir, read from another working folder than the course's
    (paths["course"] / ".git").write_text("gitdir: ../store/course.git\n")
    monkeypatch.chdir("/")
    protected = _protected(paths)
    assert store / "course.git" in protected.required and not protected.problems
    before = _modes(base)
    with read_shield.shielding(protected, paths["course"], say=lambda _: None):
        assert unconfined_refusal(SHARED_FILES) is None
        assert _reads_as_hand_in([history]) == []
    assert _modes(base) == before


def test_a_git_file_the_grader_cannot_read_is_named_and_grading_refused(base, needs_venv):
    paths = _tree(base)
    needs_venv.paths = [paths["venv"]]
    (paths["course"] / ".git").write_text("not a gitdir line\n")
    with read_shield.shielding(_protected(paths), paths["course"], say=lambda _: None):
        refusal = unconfined_refusal(SHARED_FILES)
    assert refusal is not None and f"{paths['course'] / '.git'}" in refusal
    assert "gitdir" in refusal


def test_unconfined_goes_on_and_says_what_a_hand_in_can_read(base, needs_venv):
    paths = _tree(base)
    os.chown(paths["readme"], 4321, 4321)
    needs_venv.paths = [paths["venv"]]
    said = []
    with read_shield.shielding(_protected(paths), paths["course"], True, said.append):
        refusal = unconfined_refusal(SHARED_FILES)  # the driver goes on with --unconfined
    assert str(paths["readme"]) in refusal
    assert any(s.startswith("--unconfined: grading goes on") and "README.md" in s for s in said)


def test_without_a_shield_or_landlock_hand_ins_sharing_the_files_are_refused():
    assert "coursekit grade" in unconfined_refusal(SHARED_FILES)
    assert unconfined_refusal(SHARED_FILES_LANDLOCK) is None
    # as the grader's own user in a user namespace, with no root of its own: permissions
    # cannot help, so only Landlock can confine reads
    own_user = {"user_namespace": True, "root": {}}
    assert "--unconfined" in unconfined_refusal(own_user)
    assert unconfined_refusal({**own_user, "landlock": 3}) is None
    assert unconfined_refusal({**own_user, "root": {"root": "own"}}) is None


def test_modes_a_killed_grader_left_are_given_back_by_the_next_run(base, needs_venv):
    paths = _tree(base)
    needs_venv.paths = [paths["venv"]]
    before = _modes(base)
    steps = shield_plan.plan(_protected(paths), needs_venv(()))
    dead = os.fork()
    if dead == 0:  # a grader that writes its journal, makes its changes and is killed
        shield_journal.write(paths["course"], steps.changes)
        for change in steps.changes:
            shield_journal.apply(change)
        os.kill(os.getpid(), signal.SIGKILL)
    os.waitpid(dead, 0)
    assert _modes(base) != before
    said = []
    with read_shield.shielding(_protected(paths), paths["course"], say=said.append):
        assert _modes(base) == before
    assert any("killed grading run" in s for s in said)


def test_a_journal_not_written_by_this_user_is_never_followed(tmp_path):
    target = tmp_path / "target"
    target.write_text("")
    os.chmod(target, 0o600)
    status = os.stat(target)
    change = {"path": str(target), "dev": status.st_dev, "ino": status.st_ino}
    planted = tmp_path / f"{shield_journal.PREFIX}1.json"
    planted.write_text(
        json.dumps({"pid": 1, "changes": [{**change, "before": 0o666, "after": 0o600}]})
    )
    os.chown(planted, 4321, 4321)  # a hand-in's, say
    assert shield_journal.restore_leftovers(tmp_path) == ([], [], [], [])
    os.chown(planted, 0, 0)
    os.chmod(planted, 0o666)  # or one anybody could have written
    assert shield_journal.restore_leftovers(tmp_path) == ([], [], [], [])
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o600


def _subreaper(on: int | None = None) -> int:
    """This process's child-subreaper flag (PR_GET_CHILD_SUBREAPER); set it first if ``on``."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if on is not None:
        libc.prctl(36, on, 0, 0, 0)
    flag = ctypes.c_int(0)
    libc.prctl(37, ctypes.byref(flag), 0, 0, 0)
    return flag.value


def _killed_grader_leaves(paths, steps) -> int:
    """A grader that writes its journal, makes its changes, starts a hand-in that becomes a
    daemon, and is killed: the daemon's pid (re-parented to init, as a hand-in's user)."""
    was = _subreaper()
    _subreaper(0)  # so that its orphan goes to init, as it would with no grader above it
    ready, told = os.pipe()
    try:
        dead = os.fork()
        if dead == 0:
            shield_journal.write(paths["course"], steps.changes)
            for change in steps.changes:
                shield_journal.apply(change)
            if os.fork() == 0:  # the hand-in's daemon
                uid = privileges.HAND_IN_ID_BASE + os.getpid()
                os.setgroups([])
                os.setresgid(uid, uid, uid)
                os.setresuid(uid, uid, uid)
                os.write(told, str(os.getpid()).encode())
                time.sleep(60)
                os._exit(0)
            os.kill(os.getpid(), signal.SIGKILL)
        os.close(told)
        os.waitpid(dead, 0)
        daemon = int(os.read(ready, 64).decode())  # once it is a hand-in's user
    finally:
        _subreaper(was)
        os.close(ready)
    return daemon


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def test_a_killed_graders_hand_in_daemon_is_ended_before_its_modes_are_given_back(base, needs_venv):
    paths = _tree(base)
    needs_venv.paths = [paths["venv"]]
    before = _modes(base)
    steps = shield_plan.plan(_protected(paths), needs_venv(()))
    daemon = _killed_grader_leaves(paths, steps)
    assert _running(daemon) and daemon in shield_journal.orphaned_hand_ins()
    try:
        leftovers = shield_journal.restore_leftovers(paths["course"])
        assert leftovers.survivors == [] and leftovers.restored
        assert not _running(daemon)
        assert _modes(base) == before
    finally:
        with contextlib.suppress(OSError):
            os.kill(daemon, signal.SIGKILL)


def test_modes_stay_closed_while_a_killed_graders_hand_in_survives(base, needs_venv, monkeypatch):
    paths = _tree(base)
    needs_venv.paths = [paths["venv"]]
    before = _modes(base)
    steps = shield_plan.plan(_protected(paths), needs_venv(()))
    daemon = _killed_grader_leaves(paths, steps)
    try:
        monkeypatch.setattr(shield_journal, "end_orphaned_hand_ins", lambda: [daemon])
        said = []
        with read_shield.shielding(_protected(paths), paths["course"], say=said.append):
            assert _modes(base) != before  # still closed to the daemon
        assert any("could not be ended" in s and str(daemon) in s for s in said), said
        assert list(paths["course"].glob(f"{shield_journal.PREFIX}*.json"))  # kept, for later
        monkeypatch.undo()
        assert shield_journal.restore_leftovers(paths["course"]).restored  # once it is ended
        assert _modes(base) == before and not _running(daemon)
    finally:
        with contextlib.suppress(OSError):
            os.kill(daemon, signal.SIGKILL)


def test_sigterm_while_grading_gives_the_modes_back(base, needs_venv):
    paths = _tree(base)
    needs_venv.paths = [paths["venv"]]
    before = _modes(base)
    previous = signal.signal(signal.SIGTERM, signal.SIG_DFL)  # as a fresh process has it
    try:
        with pytest.raises(SystemExit) as stopped:
            with read_shield.shielding(_protected(paths), paths["course"], say=lambda _: None):
                unconfined_refusal(SHARED_FILES)
                assert _modes(base) != before
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(30)  # the handler raises here at once
                pytest.fail("SIGTERM did not end the block")
        assert stopped.value.code == 128 + signal.SIGTERM
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert _modes(base) == before


def test_what_grade_protects():
    root = Path("/srv/course")
    protected = shield_plan.grade_protected(
        root, ["/data/hand-ins/week2", "/data/hand-ins/week3/ada.ipynb"], Path("/tmp/g.sqlite")
    )
    assert root in protected.required and Path("/data/hand-ins/week2") in protected.required
    # the batches beside them, where the grader owns their folder
    assert Path("/data/hand-ins") in protected.extra
    assert Path("/data/hand-ins/week3") in protected.extra
    # a gradebook in a folder every user shares: the gradebook and SQLite's files beside it
    assert Path("/tmp/g.sqlite-wal") in protected.required and Path("/tmp") not in [
        *protected.required,
        *protected.extra,
    ]


def test_a_hand_in_still_running_is_ended_before_the_modes_are_given_back(base, needs_venv):
    paths = _tree(base)
    needs_venv.paths = [paths["venv"]]
    before = _modes(base)
    with read_shield.shielding(_protected(paths), paths["course"], say=lambda _: None):
        unconfined_refusal(SHARED_FILES)
        straggler = os.fork()
        if straggler == 0:  # a hand-in's process a stopped worker had not ended yet
            uid = privileges.HAND_IN_ID_BASE + os.getpid()
            os.setgroups([])
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)
            time.sleep(60)
            os._exit(0)
        for _ in range(1000):  # until it has become a hand-in's user
            if straggler in read_shield.hand_ins_below():
                break
            time.sleep(0.01)
    _, status = os.waitpid(straggler, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
    assert _modes(base) == before


def test_a_failure_of_the_shield_itself_refuses_instead_of_grading_open(base, monkeypatch):
    paths = _tree(base)

    def broken(*args):
        raise RuntimeError("a bug")

    monkeypatch.setattr(read_shield, "plan", broken)
    with read_shield.shielding(_protected(paths), paths["course"], say=lambda _: None):
        refusal = unconfined_refusal(SHARED_FILES)
        assert "(the read shield): failed: RuntimeError: a bug" in refusal
        assert "(the read shield)" in unconfined_refusal(SHARED_FILES)  # the next one too


def test_what_a_hand_in_can_reach_besides_files_is_measured_and_said(base, needs_venv):
    import socket

    paths = _tree(base)
    needs_venv.paths = [paths["venv"]]
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        for applied, landlock in ((SHARED_FILES, 0), ({**SHARED_FILES, "landlock": 4}, 4)):
            said = []
            with read_shield.shielding(_protected(paths), paths["course"], say=said.append):
                unconfined_refusal(applied)
            reach = [s for s in said if "can also reach" in s or "keeps hand-ins from" in s]
            if landlock:
                assert reach == [
                    "Landlock keeps hand-ins from other processes' /proc entries and from TCP."
                ]
            else:
                assert f"127.0.0.1:{port}" in reach[0] and "command lines of" in reach[0]
