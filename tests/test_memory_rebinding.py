"""Issue 40: a memory test that no change of the hand-in's process can blind.

The grader's runner measures on a path of its own (``runner.py``'s ``measure``,
:func:`coursekit.checks.memory_peak.measured_in_child`): the function is primed on a problem
of a seed it is not told; the harness is compared with its seal with the GIL held until the
fork; torch's state is put back first thing in the child; the measured problem is made only
there; and a process alive beside the child fails the test. Graded end to end: hand-ins
whose wrong answer (a whole-window forward, passes for show) each try to hide it by a change
made for the moment (tests/corpora/memory_rebinding.py) lose the memory test, and were
measured as full marks before. Then each part on its own.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import pytest

from coursekit.checks import QUESTIONS, memory_peak
from coursekit.checks.window_memory import measurement, memory_spec, prime
from coursekit.grading.sandbox import held_gil
from tests.corpora.memory_rebinding import ATTACKS
from tests.helpers import docker_like
from tests.helpers.hand_ins import ASSIGNMENT, IMPORTS, REPO, answers, notebook
from tests.test_memory_peak import _python, honest

pytestmark = pytest.mark.skipif(not memory_peak.MEASURED, reason="Linux only (fork, wait4)")
SPEC = memory_spec(5)


@pytest.fixture(scope="module")
def graded(tmp_path_factory) -> dict:
    if docker_like.available() is not None:
        pytest.skip(str(docker_like.available()))
    base = tmp_path_factory.mktemp("rebinding")
    os.chmod(base, 0o755)
    folder = base / "hand-ins"
    folder.mkdir()
    rest = answers()[1:]
    for name, source in ATTACKS.items():
        cells = [IMPORTS, "# Question: accumulate_window\n" + source, *rest]
        (folder / f"{name}.ipynb").write_text(notebook(cells))
    (folder / "right.ipynb").write_text(notebook([IMPORTS, *answers()]))
    command = [sys.executable, "-m", "coursekit.commands.cli", "grade", str(folder)]
    command += ["--assignment", ASSIGNMENT, "--json", "--workers", "2"]
    command += ["--gradebook", str(base / "gradebook.sqlite")]
    env = {**os.environ, "AS_USER_PATHS": str(base)}
    done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=REPO)
    records = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert {r["student"] for r in records} == {*ATTACKS, "right"}, done.stderr[-3000:]
    return {r["student"]: r for r in records}


@pytest.mark.slow  # over 4 s: out of the quick run (-m 'not slow')
@pytest.mark.grading
@pytest.mark.module1
@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_a_change_made_for_the_moment_does_not_save_a_whole_window_forward(graded, attack):
    """Before this, each of these scored full marks: the stand-in measured nothing, the
    changed torch function or global hook raised the warm-up's peak in the child by 300 MiB,
    the priming call was handed the measured model (a finalizer meant to run as the grader
    puts the state back in the child is new with that step: what is taken off is held now,
    so it never runs). Now the memory test fails, and every other test passes."""
    window = next(q for q in graded[attack]["questions"] if q["name"] == "accumulate_window")
    assert window["score"] < window["max_score"], window
    assert window["feedback"].startswith("8 of 9 tests pass."), window
    assert "(the memory test:" in window["feedback"], window
    others = [q for q in graded[attack]["questions"] if q["name"] != "accumulate_window"]
    assert all(q["score"] == q["max_score"] for q in others), others


@pytest.mark.grading
@pytest.mark.module1
def test_a_right_hand_in_keeps_full_marks_unflagged(graded):
    right = graded["right"]
    assert right["score"] == right["max_score"], right
    assert not [n for n in right["notes"] if n.startswith("Flagged")], right["notes"]


@pytest.mark.grading
@pytest.mark.module1
@pytest.mark.parametrize(
    ("attack", "flag", "feedback"),
    [
        ("raised_warm_up", "changed torch.nn.functional.linear", "was not measured"),
        ("stand_in_measure", "changed coursekit.checks.window_memory.measured", "not measured"),
        # a cell's change, flagged when the cells ended; put back in the fork, so measured
        ("cell_rebound", "changed torch.nn.functional.linear", "forward pass on the whole"),
        # taken off in the child and held there, so its finalizer never runs: measured as it
        # is, and its whole-window forward fails the memory test
        ("finalized_hook", "a global hook in torch.nn.modules", "forward pass on the whole"),
        # a handler would be handed the measure's frame: none can be set, so it is measured
        # as it is, and its whole-window forward fails the memory test (nothing to flag)
        ("signalled", None, "forward pass on the whole"),
        # put back in the child, so measured: the whole-window forward is what fails
        ("hooked_warm_up", "a global hook in torch.nn.modules", "forward pass on the whole"),
    ],
)
def test_what_the_seal_and_the_state_check_find_is_flagged_and_said(graded, attack, flag, feedback):
    notes = " ".join(graded[attack]["notes"])
    assert flag is None or flag in notes, notes
    window = next(q for q in graded[attack]["questions"] if q["name"] == "accumulate_window")
    assert feedback in window["feedback"], window


# ------------------------------------------------------------------ the parts, one at a time


def _spinning():
    """A thread that counts as fast as it can, and a function to stop it."""
    count, stop = [0], threading.Event()

    def spin():
        while not stop.is_set():
            count[0] += 1

    thread = threading.Thread(target=spin, daemon=True)
    thread.start()
    while count[0] < 1000:
        time.sleep(0.001)

    def stopped():
        stop.set()
        thread.join()

    return count, stopped


def test_no_thread_runs_from_the_seal_to_the_end_of_the_child(monkeypatch):
    """A thread of the notebook's (or a library's, running the notebook's code) that ran
    between the seal's comparison and the fork could change what the child runs, or start
    a process to work beside it; one that ran while the child did could write into its
    pipe. A thread counting all along counts nothing from the comparison until the child
    has ended, and goes on after."""
    count, stopped = _spinning()
    seen = {}
    real_fork, real_wait = memory_peak._FORK_RUNNING, memory_peak._wait

    def fork(work):
        seen["fork"] = count[0]
        return real_fork(work)

    def wait(pid):
        ended = real_wait(pid)
        seen["ended"], seen["held_s"] = count[0], time.monotonic() - seen["since"]
        return ended

    monkeypatch.setattr(memory_peak, "_FORK_RUNNING", fork)
    monkeypatch.setattr(memory_peak, "_wait", wait)

    def sealed():
        seen["sealed"], seen["since"] = count[0], time.monotonic()
        return []

    try:
        outputs = memory_peak.measured_in_child(lambda: measurement(SPEC, honest), sealed=sealed)
        time.sleep(0.05)
        after = count[0]
    finally:
        stopped()
    assert "grad_projection" in outputs, outputs
    assert seen["sealed"] == seen["fork"], seen
    # the spinning thread asks for the GIL once it has waited the hold's interval: only
    # past it may it run as soon as the wait returns (seen once, on a machine running three
    # test suites on two cores: the child alone took longer than the hold)
    if seen["held_s"] < 0.95 * held_gil.HOLD_S:
        assert seen["ended"] == seen["sealed"], seen
    assert after > seen["ended"], (after, seen)
    assert sys.getswitchinterval() == pytest.approx(0.005)  # let go again


def test_the_held_steps_keep_the_gil():
    """Each step between the seal and the fork is a libc call that keeps the GIL, where
    os.listdir, os.pipe or os.urandom would let it go."""
    count, stopped = _spinning()
    try:
        previous = sys.getswitchinterval()
        held_gil.hold(previous)
        try:
            before = count[0]
            for _ in range(50):
                held_gil.names_in("/proc/self/fd")
                held_gil.read_file("/proc/self/maps")
                read_end, write_end = held_gil.pipe()
                held_gil.close(read_end)
                held_gil.close(write_end)
                held_gil.random_16()
            during = count[0] - before
        finally:
            held_gil.let_go(previous)
        before = count[0]
        time.sleep(0.02)
        let_go = count[0] - before
    finally:
        stopped()
    assert during == 0
    assert let_go > 0  # the thread was there to run


def test_what_the_seal_finds_stops_the_measure_before_any_fork(monkeypatch):
    def no_fork(work):
        raise AssertionError("forked")

    monkeypatch.setattr(memory_peak, "_FORK_RUNNING", no_fork)
    outputs = memory_peak.measured_in_child(
        lambda: measurement(SPEC, honest), sealed=lambda: ["it changed x"]
    )
    assert outputs == {"error": memory_peak._TAMPERED_TEXT, "tampered": ["it changed x"]}


def test_the_child_puts_the_state_back_before_the_function_is_made(tmp_path):
    """in_child() runs first in the child; what it put back is reported, and the measure
    goes on, on the state put back; what it found changed stops the child before
    ``make()``, as the seal's findings stop the fork."""
    order = tmp_path / "order"

    def in_child(changed=()):
        def check():
            order.write_text("in_child ")
            return ["it left a global hook"], list(changed)

        return check

    def make():
        with order.open("a") as handle:
            handle.write("make")
        return measurement(SPEC, honest)

    outputs = memory_peak.measured_in_child(make, in_child=in_child())
    assert outputs["put_back"] == ["it left a global hook"], outputs
    assert "grad_projection" in outputs and "peak_above_warm_up" in outputs, outputs
    assert order.read_text() == "in_child make"
    stopped = memory_peak.measured_in_child(make, in_child=in_child(["it changed x"]))
    assert stopped == {
        "error": memory_peak._TAMPERED_TEXT,
        "tampered": ["it changed x"],
        "put_back": ["it left a global hook"],
    }
    assert order.read_text() == "in_child "
    clean = memory_peak.measured_in_child(make, in_child=lambda: ([], []))
    assert "put_back" not in clean and "grad_projection" in clean, clean


_BESIDE = """
import json, os, time
from coursekit.checks import memory_peak
from coursekit.checks.window_memory import measurement, memory_spec
from tests.test_memory_peak import _python, honest

def measure(alone=True):
    outputs = memory_peak.measured_in_child(
        lambda: measurement(memory_spec(5), honest), alone=alone
    )
    return "measured" if "grad_projection" in outputs else outputs.get("error", outputs)

seen = {"alone": measure()}
pid = os.fork()
if pid == 0:
    time.sleep(30)
    os._exit(0)
seen["running"], seen["running, not asked"] = measure(), measure(alone=False)
os.kill(pid, 9)
time.sleep(0.3)
seen["ended, not reaped"] = measure()
os.waitpid(pid, 0)
seen["reaped"] = measure()
print(json.dumps(seen))
"""


def test_a_process_alive_at_the_fork_fails_the_measure():
    """A process of the notebook's that ran while the child did could do the window's work
    in memory the test does not count. Found running, or ended and not yet reaped; none can
    start later (the child cannot start one, and no thread of its parent runs meanwhile).
    In a fresh interpreter: a test process may have children of its own."""
    done = _python(_BESIDE)
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    beside = memory_peak._BESIDE_TEXT
    assert seen == {
        "alone": "measured",
        "running": beside,
        "running, not asked": "measured",
        "ended, not reaped": beside,
        "reaped": "measured",
    }


_STREAMS = """
import os, tempfile
from coursekit.checks import memory_peak
from coursekit.checks.window_memory import measurement, memory_spec
from tests.test_memory_peak import honest

store = tempfile.TemporaryFile()
os.dup2(store.fileno(), 0)  # a file where the child's standard input was

def keeps(model, loss_fn, micro_batches):
    honest(model, loss_fn, micro_batches)
    os.pwrite(0, b"x" * 4096, 0)  # would keep data in the page cache, not in its memory
    return None

outputs = memory_peak.measured_in_child(lambda: measurement(memory_spec(5), keeps))
print("measured" if "grad_projection" in outputs else outputs, os.fstat(0).st_size)
"""


def test_the_measured_child_keeps_nothing_in_its_standard_streams():
    """Descriptors 0, 1 and 2 are /dev/null's in the child: a file the notebook put there
    (where the child's other inherited descriptors are closed) would hold data out of its
    memory. In a fresh interpreter: a test process's own streams are its runner's."""
    done = _python(_STREAMS)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "measured 0", done.stdout


def test_a_hold_that_took_too_long_is_taken_again(monkeypatch):
    """Past half the hold, a waiting thread may have asked for the GIL: the steps are taken
    again, and after three tries the measure is the grader's failure, never a score."""
    clock = iter(range(0, 1000, 10))  # each step ten seconds on
    monkeypatch.setattr(memory_peak, "_MONOTONIC", lambda: next(clock))
    calls = []

    def sealed():
        calls.append(1)
        return []

    with pytest.raises(memory_peak.MeasurementFailed, match="too busy"):
        memory_peak.measured_in_child(lambda: measurement(SPEC, honest), sealed=sealed)
    assert len(calls) == 3


def test_the_priming_call_is_handed_nothing_of_the_measured_problem():
    """Primed on the same kind and size of problem, but of a seed drawn then, and called
    with the spec's seed taken out, as the runner calls it."""
    primed = []

    def keeps(model, loss_fn, micro_batches):
        primed.append(([p.detach().clone() for p in model.parameters()], micro_batches))
        honest(model, loss_fn, micro_batches)

    prime({k: v for k, v in SPEC.items() if k != "seed"}, keeps)
    prime(SPEC, keeps)
    _, warm_up = measurement(SPEC, honest)
    measured_problem = []

    def seen(model, loss_fn, micro_batches):
        measured_problem.append([p.detach() for p in model.parameters()])

    call_and_read, _ = measurement(SPEC, seen)
    call_and_read()  # unmeasured, here: the problem it is handed
    for weights, micro_batches in primed:
        assert len(micro_batches) == 2
        assert weights[0].shape == measured_problem[0][0].shape
        assert not any(w.equal(m) for w, m in zip(weights, measured_problem[0], strict=True))


def test_every_question_with_a_memory_test_says_how_it_is_called():
    """The runner measures through ``memory_call``; a question whose specs hold a memory
    test must have one, and its ``run`` must measure what ``memory_call`` gives."""
    import random

    for name, question in QUESTIONS.items():
        specs = question.hidden_specs(random.Random(1)) + question.public_specs()
        if any(spec.get("memory") for spec in specs):
            call, warm_up_with = question.memory_call(question.reference())
            assert callable(call), name
            assert warm_up_with is None or callable(warm_up_with), name


def test_the_runner_reports_a_failed_measure_as_the_graders():
    from coursekit.grading.sandbox.runner import run_memory_task

    class Measured:
        def memory_call(self, fn):
            return (lambda model, loss_fn, micro_batches: None), None

    def measure(question, fn, spec):
        raise memory_peak.MeasurementFailed("the memory test could not fork (test)")

    task = {"question": "fn", "spec": SPEC}
    reply = run_memory_task({"fn": honest}, {"fn": Measured()}, task, 30, 10, measure)
    assert reply == {"status": "grader_fault", "why": "the memory test could not fork (test)"}
    missing = run_memory_task({}, {"fn": Measured()}, task, 30, 10, measure)
    assert missing == {"status": "missing"}
