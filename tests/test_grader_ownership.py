"""The grader's own failures are never a student's score, and no hand-in can stop the batch.

Every child a grading thread starts is its own: another thread's sweep for strays neither
kills nor reaps it (the cause of honest hand-ins scored 0 in Docker-like mode, issue 40).
A failure of the grader's machinery is tried again, then stored as *not graded*, with the
reason: no score in the gradebook, exports or certificates, and ``grade`` exits 1 naming it.
Scratch folders carry random names made with ``mkdir``, so a name a hand-in squats is never
used. All cheap: no sandbox is started here (the batch in tests/test_grading_harness.py has a
hand-in that squats names, graded beside the others in every mode).
"""

import os
import signal
import stat
import threading
import time

import pytest

from coursekit.commands.cli import main
from coursekit.grading import grader
from coursekit.grading.grader import GradeResult, Plan, grade_all, grade_with_retries
from coursekit.grading.records import exports
from coursekit.grading.records.gradebook import Gradebook
from coursekit.grading.sandbox import reaping, scratch
from coursekit.grading.sandbox.driver import Limits, SandboxSetupError, kill_new_children
from coursekit.grading.sandbox.errors import GraderFault, RunnerSetupError
from coursekit.grading.sandbox.warm_parent import WarmParent

pytestmark = pytest.mark.grading
linux_only = pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="reads /proc")


@linux_only
def test_a_sweep_never_kills_or_reaps_a_child_another_thread_started():
    warm = WarmParent()  # never started: its strays() reads this process's children
    before = reaping.children()
    helpers_ended, stop = [], threading.Event()

    def start_helpers():  # what end_processes_of and scratch.remove do, again and again
        for _ in range(20):
            helpers_ended.append(reaping.fork_owned(lambda: time.sleep(0.03)))

    def sweep():  # what another worker's close does, as fast as it can
        while not stop.is_set():
            kill_new_children(lambda: warm.strays(before), seconds=1)

    sweeper = threading.Thread(target=sweep)
    sweeper.start()
    try:
        stray = os.fork()
        if stray == 0:  # a process nobody in the grader started: the sweep's to end
            time.sleep(30)
            os._exit(0)
        start_helpers()
        deadline = time.monotonic() + 30
        while os.path.exists(f"/proc/{stray}") and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        stop.set()
        sweeper.join()
    # every helper ran to its end and was reaped by its own thread: none killed, none lost
    assert helpers_ended == [0] * 20
    assert not os.path.exists(f"/proc/{stray}")  # the stray was killed and reaped


@linux_only
@pytest.mark.skipif(os.geteuid() != 0, reason="a process of another user needs root")
def test_graded_as_root_a_sweep_takes_only_its_own_hand_in_users_strays():
    warm = WarmParent()
    before = reaping.children()
    mine, others = 0x70000000 + 4_000_001, 0x70000000 + 4_000_002
    pids = {}
    for uid in (mine, others, 0):  # 0: root, in a session of its own (as a runner's init is)
        pid = os.fork()
        if pid == 0:
            os.setsid()
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)
            time.sleep(30)
            os._exit(0)
        pids[uid] = pid
    try:
        deadline = time.monotonic() + 10
        while reaping.session_of(pids[0]) != pids[0] and time.monotonic() < deadline:
            time.sleep(0.01)
        while reaping.uid_of(pids[others]) != others and time.monotonic() < deadline:
            time.sleep(0.01)
        assert warm.strays(before, mine) == {pids[mine]}
        # its runner's session: a root process of that session is its hand-in's too
        assert warm.strays(before, mine, session=pids[0]) == {pids[mine], pids[0]}
        kill_new_children(lambda: warm.strays(before, mine, session=pids[0]))
        assert reaping.uid_of(pids[mine]) is None and reaping.uid_of(pids[0]) is None
        assert reaping.uid_of(pids[others]) == others  # another hand-in's: left to its thread
    finally:
        os.kill(pids[others], signal.SIGKILL)
        os.waitpid(pids[others], 0)


class _Warm:
    """What grading needs of a warm parent, without one: nothing is forked here."""

    def __init__(self):
        self.stopped = threading.Event()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None

    def launch(self):  # grade launches it, prepare() waits for it, and it is closed
        return None

    def start(self):
        return None

    def close(self):
        return None

    def stop(self):
        self.stopped.set()


def _plan() -> Plan:
    return Plan("01_accumulation", specs={}, expected={}, limits=Limits())


def _graded(path, student, plan, warm=None) -> GradeResult:
    return GradeResult(path, student, plan.assignment, sha256="f" * 64, score=7.0, max_score=10.0)


def test_a_failure_of_the_graders_machinery_is_tried_again_on_a_fresh_attempt(monkeypatch):
    calls = []

    def fails_twice(path, student, plan, warm=None):
        calls.append(path)
        if len(calls) == 1:
            raise GraderFault("the runner was reaped elsewhere")
        if len(calls) == 2:
            raise RunnerSetupError("not ready")
        return _graded(path, student, plan)

    monkeypatch.setattr(grader, "grade_path", fails_twice)
    result = grade_with_retries("ada.ipynb", "ada", _plan(), _Warm())
    assert len(calls) == 3 and result.score == 7.0 and result.not_graded is None


def test_a_failure_that_persists_is_not_graded_with_the_reason_never_a_score(monkeypatch):
    def always_fails(path, student, plan, warm=None):
        raise ChildProcessError(10, "No child processes")

    monkeypatch.setattr(grader, "grade_path", always_fails)
    result = grade_with_retries("ada.ipynb", "ada", _plan(), _Warm())
    assert "ChildProcessError" in result.not_graded and "3 tries" in result.not_graded
    assert result.questions == []  # no zeros per question either
    public = result.public()
    assert public["score"] is None and public["not_graded"] == result.not_graded


def test_a_warm_parent_that_fails_still_stops_the_batch(monkeypatch):
    def parent_failed(path, student, plan, warm=None):
        raise SandboxSetupError("the grading sandbox's parent failed: test")

    monkeypatch.setattr(grader, "grade_path", parent_failed)
    with pytest.raises(SandboxSetupError):
        grade_with_retries("ada.ipynb", "ada", _plan(), _Warm())


def test_hand_in_after_hand_in_failing_stops_the_batch_as_the_machines_fault(monkeypatch):
    monkeypatch.setattr(grader, "grade_path", lambda *a, **k: 1 / 0)
    seen = []
    hand_ins = [(f"{n}.ipynb", n) for n in "abcdefgh"]
    with pytest.raises(SandboxSetupError, match="4 hand-ins in a row"):
        grade_all(hand_ins, _plan(), 1, seen.append, _Warm())
    assert len(seen) == grader.FAILING_IN_A_ROW and all(r.not_graded for r in seen)


def test_grade_stores_not_graded_names_it_and_exits_1_and_a_rerun_grades_it(
    tmp_path, monkeypatch, capsys
):
    from coursekit.commands import grade as grade_command
    from coursekit.commands.grade import run_grade

    for name in ("ann", "bob"):
        (tmp_path / "hand-ins").mkdir(exist_ok=True)
        (tmp_path / "hand-ins" / f"{name}.ipynb").write_text(f'{{"name": "{name}"}}')
    broken = {"bob"}

    def grade_path(path, student, plan, warm=None):
        if student in broken:
            raise ChildProcessError(10, "No child processes")
        result = _graded(path, student, plan)
        result.sha256 = grader.file_sha256(path)
        return result

    monkeypatch.setattr(grader, "grade_path", grade_path)
    monkeypatch.setattr(grade_command, "prepare", lambda *a, **k: _plan())
    gradebook = tmp_path / "g.sqlite"

    def grade() -> int:
        return run_grade(
            tmp_path,
            [str(tmp_path / "hand-ins")],
            "01_accumulation",
            gradebook,
            workers=2,
            as_json=False,
            limits=Limits(),
            warm=_Warm(),
        )

    assert grade() == 1
    err = capsys.readouterr().err
    assert "the grader failed on 1 hand-in(s)" in err and "bob (" in err
    assert "Run the same command again: it grades only those." in err
    with Gradebook(gradebook) as book:
        by_student = {g.student: g for g in book.current_grades()}
    assert by_student["ann"].score == 7.0
    assert by_student["bob"].score is None and "ChildProcessError" in by_student["bob"].not_graded
    broken.clear()  # the machine is well again: the same command grades bob alone
    assert grade() == 0
    assert "1 hand-in(s) already graded" in capsys.readouterr().err
    with Gradebook(gradebook) as book:
        assert {g.student: g.score for g in book.current_grades()} == {"ann": 7.0, "bob": 7.0}


def _not_graded_result(student: str, sha: str) -> GradeResult:
    result = grader.not_graded(f"{student}.ipynb", student, _plan(), "GraderFault: lost (3 tries)")
    result.sha256, result.max_score = sha, 10.0
    return result


def test_a_not_graded_hand_in_is_never_exported_or_certified_as_a_score(
    tmp_path, capsys, outside_the_course
):
    path = tmp_path / "g.sqlite"
    with Gradebook(path) as book:
        book.record(_graded("ann.ipynb", "ann", _plan()), None)
        book.record(_not_graded_result("bob", "b" * 64), None)
        # a file graded before keeps that grade when a regrading of it fails
        book.record(_graded("cat.ipynb", "cat", _plan()), None)
        book.record(_not_graded_result("cat", "f" * 64), None)
        grades = {g.student: g for g in book.current_grades()}
        assert not book.is_graded("01_accumulation", "bob", "b" * 64)  # the next run grades it
        assert book.is_graded("01_accumulation", "cat", "f" * 64)
    assert grades["bob"].score is None and grades["cat"].score == 7.0
    rows = exports.write_csv(list(grades.values()), tmp_path / "g.csv").read_text().splitlines()
    bob = next(row for row in rows if row.startswith("bob,"))
    assert bob.split(",")[2:5] == ["", "10", ""] and "Not graded" in bob
    written = exports.write_gradescope(list(grades.values()), tmp_path / "gs")
    assert sorted(p.name for p in written) == [
        "ann_01_accumulation.json",
        "cat_01_accumulation.json",
    ]
    with pytest.raises(ValueError, match="not graded"):
        exports.gradescope_results(grades["bob"])
    page = exports.feedback_page(grades["bob"])
    assert "Not graded yet" in page and " / 10 points" not in page
    assert (
        main(["export", "--gradebook", str(path), "--format", "lms", "--out", str(tmp_path)]) == 0
    )
    lms = (tmp_path / "grades-lms.csv").read_text()
    assert "bob" not in lms and "ann" in lms  # left out, never given a 0
    assert "not graded" in capsys.readouterr().err
    key = tmp_path / "key"
    argv = ["certificate", "bob", "--gradebook", str(path), "--key", str(key)]
    assert main([*argv, "--modules", "01_accumulation"]) == 1
    assert "bob has no grade for 01_accumulation" in capsys.readouterr().err
    assert not key.exists()


def test_a_scratch_folder_never_takes_a_name_that_exists(tmp_path, monkeypatch):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    draws = iter(["0" * 16, "1" * 16, "2" * 16, "3" * 16])
    monkeypatch.setattr(scratch.secrets, "token_hex", lambda n: next(draws))
    parent = tmp_path / "tmp"
    parent.mkdir()
    squatted = [parent / f"coursekit-hand-in-1-2-{c * 16}" for c in "012"]
    squatted[0].mkdir()  # a folder, a file and a link to elsewhere, under the names drawn
    squatted[1].write_text("x")
    squatted[2].symlink_to(elsewhere)
    made = scratch.make(1, 2, parent=str(parent))
    assert made == parent / f"coursekit-hand-in-1-2-{'3' * 16}"
    assert stat.S_IMODE(made.stat().st_mode) == 0o700 and scratch.is_ours(made, os.geteuid())
    assert not scratch.is_ours(squatted[2], os.geteuid())  # a link is never entered
    assert squatted[1].read_text() == "x" and os.listdir(elsewhere) == []
    assert set(scratch.folders_of(1, 2, parent=str(parent))) == {squatted[0], made}
