"""The warm parent: imports once, forks a fresh runner per hand-in that re-parents to the
grader, and hands a hand-in nothing of the grader's nor of another hand-in's."""

import os
import threading
import time

import pytest

from coursekit.grading.sandbox import driver as sandbox
from coursekit.grading.sandbox import scratch
from coursekit.grading.sandbox.driver import Limits, Options, SandboxSetupError, run_hand_in
from coursekit.grading.sandbox.fork_server import wait_until_reparented
from coursekit.grading.sandbox.reaping import Child, become_subreaper, children
from coursekit.grading.sandbox.warm_parent import WarmParent
from tests.helpers.docker_like import in_docker_like
from tests.helpers.hand_ins import runners_left

pytestmark = pytest.mark.grading
LIMITS = Limits(hand_in_timeout_s=120)
GRADERS_SECRET = "grader-secret-" + os.urandom(8).hex()


@pytest.fixture(scope="module")
def warm():
    os.environ["COURSEKIT_TEST_SECRET"] = GRADERS_SECRET
    try:
        with WarmParent() as parent:
            yield parent
    finally:
        del os.environ["COURSEKIT_TEST_SECRET"]


def _printed(run) -> str:
    assert run.failure is None, run.failure
    assert all(cell["status"] == "ok" for cell in run.cells), run.cells
    return run.output_tail


def test_a_runner_is_forked_as_the_graders_own_child(warm):
    ends = [os.pipe() for _ in range(3)]
    child = warm.fork((ends[0][0], ends[1][1], ends[2][1]))
    try:
        with open(f"/proc/{child.pid}/stat") as handle:
            parent = int(handle.read().rsplit(")", 1)[1].split()[1])
        assert parent == os.getpid()
        assert runners_left() >= 2  # the parent and this runner, as the tests count them
    finally:
        for read, write in ends:
            os.close(read)
            os.close(write)
    assert child.wait(timeout=60) is not None  # no job came: it ends, and we reap it
    warm.forget(child)


def test_each_hand_in_starts_fresh_and_holds_nothing_of_the_graders(warm):
    leave_marks = (
        "import torch, pathlib\ntorch._left_by_a = 1\npathlib.Path('/tmp/a.txt').write_text('a')"
    )
    _printed(run_hand_in([leave_marks], [], LIMITS, warm=warm))
    look = (
        "import os, pathlib, torch\n"
        "print('marks', hasattr(torch, '_left_by_a'), pathlib.Path('/tmp/a.txt').exists())\n"
        "print('env', 'COURSEKIT_TEST_SECRET' in os.environ)\n"
        "def target(fd):\n"
        "    try:\n"
        "        return os.readlink(f'/proc/self/fd/{fd}')\n"
        "    except OSError:  # the folder's own descriptor, closed by now\n"
        "        return ''\n"
        "print('sockets', sum('socket:' in target(fd) for fd in os.listdir('/proc/self/fd')))"
    )
    printed = _printed(run_hand_in([look], [], LIMITS, warm=warm))
    assert "marks False False" in printed
    # the warm parent is started afresh from a clean environment, never forked from the grader
    assert "env False" in printed
    assert "sockets 0" in printed  # not the warm parent's: no way to ask it for a fork


def test_the_warm_parent_starts_once_and_serves_every_try(warm):
    started = time.monotonic()
    for _ in range(3):
        _printed(run_hand_in(["import torch\nprint(torch.ones(1))"], [], LIMITS, warm=warm))
    # three sandboxes in far less than three cold starts would take (a loose backstop: the
    # figures are in benchmarks/grading.py)
    assert time.monotonic() - started < 3 * warm.seconds_to_start + 60


def test_stopping_ends_running_hand_ins_and_refuses_new_ones():
    with WarmParent() as parent:
        outcome = {}

        def grade() -> None:
            try:
                sleeps = ["import time\ntime.sleep(600)"]
                outcome["run"] = run_hand_in(sleeps, [], LIMITS, warm=parent)
            except SystemExit as stopped:
                outcome["stopped"] = str(stopped)

        thread = threading.Thread(target=grade)
        thread.start()
        deadline = time.monotonic() + 120
        while not parent._live and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(1)
        parent.stop()
        thread.join(timeout=120)
        assert not thread.is_alive()
        assert outcome.get("stopped") == "grading was stopped", outcome
        with pytest.raises(SystemExit):
            run_hand_in(["x = 1"], [], LIMITS, Options(isolation="none"), warm=parent)


def test_a_warm_parent_that_died_is_started_again(warm):
    os.kill(warm.process.pid, 9)
    warm.process.wait()
    before = warm.restarts
    _printed(run_hand_in(["print('after a restart')"], [], LIMITS, warm=warm))
    assert warm.restarts == before + 1


@in_docker_like
def test_without_a_pid_namespace_detached_processes_are_still_ended():
    detach = (
        "import os, subprocess\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        "        os.execvp('sleep', ['sleep', '2998.5'])\n"
        "    os._exit(0)\n"
        "os.wait()"
    )
    _printed(run_hand_in([detach], [], LIMITS, Options(isolation="none")))
    assert _descendants_running("2998.5") == 0
    # and nothing is left to reap: the runner's own processes (its init, root, in its
    # session) that re-parented to the grader are its sweep's, as its user's are
    zombies = [pid for pid in children() if _state(pid) == "Z"]
    assert zombies == []


def _state(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "gone"


def _descendants_running(marker: str) -> int:
    from tests.helpers.hand_ins import processes_below_me

    return sum(marker in line for line in processes_below_me())


def test_a_runner_whose_middle_process_ended_before_it_ran_does_not_wait_forever():
    """The race a loaded machine lost: the middle process wrote the runner's pid and ended
    before the runner first ran, so the runner's parent was already the grader. A runner that
    then asked for its parent's pid to learn the middle one waited for it to change forever."""
    become_subreaper()  # as the grader is
    grader = os.getpid()
    read_pid, write_pid = os.pipe()
    middle = os.fork()
    if middle == 0:  # the middle process: fork the runner, say its pid, end at once
        try:
            middle_pid = os.getpid()
            runner = os.fork()
            if runner == 0:
                try:
                    while os.getppid() == middle_pid:  # let the middle process end first
                        time.sleep(0.001)
                    os._exit(0 if wait_until_reparented(middle_pid, grader) else 1)
                finally:
                    os._exit(2)
            os.write(write_pid, runner.to_bytes(8, "big"))
        finally:
            os._exit(0)
    os.close(write_pid)
    runner = int.from_bytes(os.read(read_pid, 8), "big")
    os.close(read_pid)
    os.waitpid(middle, 0)
    deadline = time.monotonic() + 60
    while (ended := os.waitpid(runner, os.WNOHANG))[0] == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    if ended[0] == 0:
        os.kill(runner, 9)
        os.waitpid(runner, 0)
        raise AssertionError("the runner still waited to be re-parented after 60 s")
    assert os.waitstatus_to_exitcode(ended[1]) == 0


class _StuckParent:
    """A warm parent whose runners hold their channel open and never say they are ready."""

    def __init__(self):
        self.stopped = threading.Event()
        self.children = []

    def fork(self, fds, spare=False):
        pid = os.fork()
        if pid == 0:
            os.setsid()
            time.sleep(600)
            os._exit(0)
        self.children.append(pid)
        return Child(pid)

    def forget(self, child):
        child.release()

    def strays(self, before):
        return set()

    def died_during(self, child):
        return False


def test_a_runner_that_never_gets_ready_stops_the_batch_with_that_said(monkeypatch):
    monkeypatch.setattr(sandbox, "READY_TIMEOUT_S", 1.0)
    stuck = _StuckParent()
    with pytest.raises(SandboxSetupError, match="not ready within 1 s"):
        # with the hand-in's own backstop at 30 s, should the ready one be missing
        run_hand_in(["print(1)"], [], Limits(hand_in_timeout_s=10, wall_factor=3), warm=stuck)
    for pid in stuck.children:  # killed, and reaped by the grader
        with pytest.raises(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)


def test_a_parent_that_dies_while_one_hand_in_alone_runs_costs_that_hand_in_not_the_batch(
    warm,
):
    """A hand-in cannot signal the warm parent (it runs as another user), but if the parent
    dies while a hand-in runs alone, that hand-in is charged: it loses its points, is
    flagged, and the next hand-in is graded by a new parent."""
    from coursekit.grading.sandbox.driver import PARENT_DIED_FLAG

    def kill_when_running():
        deadline = time.monotonic() + 120
        while not warm._live and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(0.5)
        os.kill(warm.process.pid, 9)

    killed = warm.process.pid
    killer = threading.Thread(target=kill_when_running)
    killer.start()
    run = run_hand_in(["import time\ntime.sleep(3)", "x = 1"], [], LIMITS, warm=warm)
    killer.join()
    assert run.failure and "parent process died" in run.failure
    assert PARENT_DIED_FLAG in run.flags
    _printed(run_hand_in(["print('the next one')"], [], LIMITS, warm=warm))
    # what the killed parent left (its font cache) is removed by the grader, which outlived it
    assert scratch.folders_of(os.getpid(), killed) == []
    assert len(scratch.folders_of(os.getpid(), warm.process.pid)) == 1  # the new parent's: in use


def test_a_spare_forked_while_a_hand_in_runs_leaves_it_alone_in_use(warm):
    """The next hand-in's runner, forked while this one runs, runs no hand-in code until it is
    taken: a parent's death then is still this hand-in's alone to have caused."""
    from coursekit.grading.sandbox.driver import PARENT_DIED_FLAG

    def kill_once_the_spare_is_forked():
        deadline = time.monotonic() + 120
        while len(warm._live) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(0.3)
        os.kill(warm.process.pid, 9)

    sandbox.keep_spares(True)
    try:
        killer = threading.Thread(target=kill_once_the_spare_is_forked)
        killer.start()
        run = run_hand_in(["import time\ntime.sleep(3)", "x = 1"], [], LIMITS, warm=warm)
        killer.join()
    finally:
        sandbox.keep_spares(False)
    assert run.failure and "parent process died" in run.failure
    assert PARENT_DIED_FLAG in run.flags


def test_a_parent_that_dies_as_it_forks_a_spare_costs_no_hand_in(warm, monkeypatch):
    """A death while the grader's own request (a spare's fork) is in the parent's hands is
    the grader's: the hand-in that runs meanwhile keeps its run; a new parent forks the
    spare."""
    real, died = warm._fork_locked, []

    def dies_as_it_forks_a_spare(fds, spare):
        if spare and not died:
            died.append(warm.process.pid)
            os.kill(warm.process.pid, 9)
            warm.process.wait()
        return real(fds, spare)

    monkeypatch.setattr(warm, "_fork_locked", dies_as_it_forks_a_spare)
    sandbox.keep_spares(True)
    try:
        run = run_hand_in(["import time\ntime.sleep(1)", "print('kept')"], [], LIMITS, warm=warm)
        assert died and warm.process.pid != died[0]  # replaced, as the spare was forked
        assert "kept" in _printed(run) and not run.flags
    finally:
        sandbox.keep_spares(False)


def _counted_forks(warm, monkeypatch, events: list | None = None) -> list:
    forked = []
    real = warm.fork

    def fork(fds, spare=False):
        child = real(fds, spare=spare)
        forked.append(child.pid)
        if events is not None:
            events.append("spare forked" if spare else "forked")
        return child

    monkeypatch.setattr(warm, "fork", fork)
    return forked


def test_a_batch_thread_starts_the_next_runner_while_its_hand_in_runs(warm, monkeypatch):
    events: list = []
    forked = _counted_forks(warm, monkeypatch, events)
    expect = sandbox.Session.expect

    def logged(self, kind, *args, **kwargs):
        events.append(f"waits for {kind}")
        return expect(self, kind, *args, **kwargs)

    monkeypatch.setattr(sandbox.Session, "expect", logged)
    before = runners_left()
    sandbox.keep_spares(True)
    try:
        _printed(run_hand_in(["print('one')", "print('more')"], [], LIMITS, warm=warm))
        # its runner; the next one's while a command of this one's is in flight (the first
        # that outlasts session.PATIENCE_S: the check after the cells, if no cell does), to
        # build on another core while this one works
        assert events[:2] == ["forked", "waits for ready"]
        assert events.count("spare forked") == 1
        at = events.index("spare forked")
        assert events[at + 1] in ("waits for cell", "waits for check"), events
        assert len(forked) == 2
        spare = sandbox._SPARES.runner[0]
        assert spare.process.pid == forked[1]
        assert "two" in _printed(run_hand_in(["print('two')"], [], LIMITS, warm=warm))
        assert len(forked) == 3  # the second ran in the spare; a third is the next spare
        assert not os.path.exists(f"/proc/{forked[0]}")  # each hand-in's ended with it
    finally:
        sandbox.keep_spares(False)  # the last spare, never used, is closed
    assert not os.path.exists(f"/proc/{forked[2]}")
    assert not os.path.exists(spare.scratch)
    assert runners_left() == before


def test_a_spare_from_a_parent_since_replaced_is_not_used(warm, monkeypatch):
    forked = _counted_forks(warm, monkeypatch)
    sandbox.keep_spares(True)
    try:
        _printed(run_hand_in(["print('one')"], [], LIMITS, warm=warm))
        spare = sandbox._SPARES.runner[0]
        spare.process.generation -= 1  # as if forked by a parent that has died since
        sandbox.keep_spares(False)  # (no next spare: this one is the test's)
        sandbox._SPARES.runner = (spare, (Options(), LIMITS))
        assert "two" in _printed(run_hand_in(["print('two')"], [], LIMITS, warm=warm))
    finally:
        sandbox.keep_spares(False)
    assert len(forked) == 3  # the spare was closed and the hand-in got a fresh runner
    assert not os.path.exists(f"/proc/{spare.process.pid}")
    assert not os.path.exists(spare.scratch)


def test_a_parent_whose_python_imports_threading_as_it_starts_refuses_to_serve(
    tmp_path, monkeypatch
):
    """threading's fork hook calls methods of every Thread a notebook made: registered before
    the grader's, it would run them in the memory test's fork. A Python that imports it as it
    starts (here through a sitecustomize) is refused, with what to do."""
    (tmp_path / "sitecustomize.py").write_text("import threading\n")
    paths = [str(tmp_path), *filter(None, [os.environ.get("PYTHONPATH")])]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(paths))
    parent = WarmParent(start_timeout_s=120)
    with pytest.raises(SandboxSetupError, match="imported threading.* as it started"):
        parent.start()
    parent.close()
