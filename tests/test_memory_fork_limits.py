"""Issue 40: what the measured fork of a memory test cannot do, whatever the function tries
(:mod:`coursekit.checks.memory_peak`): start a process, reach a pipe of its parent's, outrun
its CPU limit, outlive a signal that ends its parent's wait, leave orphans behind, or lower
its peak through ``clear_refs``; and a measurement that fails is the grader's fault, never a
score. What it measures is tests/test_memory_peak.py's.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import sys

import pytest

from coursekit.checks import memory_peak
from coursekit.checks.window_memory import memory_spec, run_measured
from coursekit.grading.sandbox import trusted_fork
from coursekit.grading.sandbox.driver import raise_a_grader_fault
from coursekit.grading.sandbox.errors import GraderFault
from tests.test_memory_peak import _python, honest

pytestmark = pytest.mark.skipif(not memory_peak.MEASURED, reason="Linux only (fork, wait4)")
SPEC = memory_spec(5)


def test_the_measured_call_can_start_no_process():
    def starts(kind):
        def fn(model, loss_fn, micro_batches):
            if kind == "fork":  # (run once unmeasured first, in this process: see _prime)
                pid = os.fork()
                if pid == 0:
                    os._exit(0)
                os.waitpid(pid, 0)
            else:
                subprocess.run(["true"])

        return fn

    for kind in ("fork", "subprocess"):
        outputs = run_measured(SPEC, starts(kind))
        assert "PermissionError" in outputs["error"], outputs


def test_the_measured_call_inherits_no_pipe_of_its_parents():
    read_end, write_end = os.pipe()
    try:

        def writes(model, loss_fn, micro_batches):
            os.write(write_end, b"x")

        outputs = run_measured(SPEC, writes)
        assert "Bad file descriptor" in outputs["error"], outputs
    finally:
        os.close(read_end)
        os.close(write_end)


def test_a_call_past_its_cpu_limit_is_ended():
    def spins(*_):
        while True:
            pass

    outputs = memory_peak.measured(lambda: spins() or {}, lambda: None, limit_s=1)
    assert "CPU time ran out" in outputs["died"]


def test_a_signal_ends_the_wait_and_the_child_with_it():
    class Interrupted(Exception):
        pass

    def on_alarm(*_):
        raise Interrupted

    before = set(memory_peak._children())
    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, 0.5)
    try:
        with pytest.raises(Interrupted):
            memory_peak.measured(lambda: __import__("time").sleep(120) or {}, lambda: None)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert set(memory_peak._children()) <= before  # killed and reaped: nothing left behind


_SUBREAPER = """
import os, time
from coursekit.checks import memory_peak
assert memory_peak.set_subreaper()
child = os.fork()
if child == 0:  # leaves an orphan behind, then waits
    if os.fork() == 0:
        time.sleep(120)
        os._exit(0)
    time.sleep(120)
    os._exit(0)
time.sleep(0.3)
assert len(memory_peak._children()) == 1
print("ended", memory_peak.end_children(), "left", memory_peak._children())
"""


def test_end_children_ends_the_children_and_the_orphans_they_leave():
    done = subprocess.run(
        [sys.executable, "-c", _SUBREAPER], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    ended, left = done.stdout.split()[1], done.stdout.split("left")[1].strip()
    assert int(ended) >= 2 and left == "[]"


_CLEAR_REFS = """
import os
from coursekit.checks.window_memory import memory_spec, run_measured
from tests.test_memory_peak import whole

def whole_then_reset(model, loss_fn, micro_batches):
    whole(model, loss_fn, micro_batches)
    with open("/proc/self/clear_refs", "w") as handle:
        handle.write("5")

if os.getuid() == 0:
    os.setgid(65534)
    os.setuid(65534)
print(run_measured(memory_spec(5), whole_then_reset))
"""


def test_the_measured_call_cannot_reset_the_peak_through_clear_refs():
    """As a hand-in runs (never as root): its process is not dumpable, so ``clear_refs`` is
    root's. (Root could write it; the grader never runs a hand-in as root.)"""
    done = _python(_CLEAR_REFS)
    assert done.returncode == 0, done.stderr
    assert "PermissionError" in done.stdout and "clear_refs" in done.stdout, done.stdout


def test_a_failed_measurement_is_the_graders_fault_not_the_functions(monkeypatch):
    """A fork refused, or a child that ends before the function is called, raises
    MeasurementFailed; the runner reports it as ``grader_fault``, which the driver turns into
    a GraderFault: the hand-in is graded again, never scored by it."""

    def boom():
        raise RuntimeError("the warm-up's own failure")

    with pytest.raises(memory_peak.MeasurementFailed):
        memory_peak.measured(lambda: {}, boom)

    def no_fork():  # as libc's fork answers when there is no room for a process
        ctypes.set_errno(11)
        return -1

    monkeypatch.setitem(trusted_fork.fork_running.__kwdefaults__, "_fork", no_fork)
    with pytest.raises(memory_peak.MeasurementFailed, match="could not fork"):
        memory_peak.measured(lambda: {}, lambda: None)

    from coursekit.grading.sandbox.runner import run_task

    class Measured:
        def run(self, fn, spec):
            return memory_peak.measured(lambda: {}, lambda: None)

    reply = run_task({"fn": honest}, {"fn": Measured()}, {"question": "fn", "spec": {}}, 30, 10)
    assert reply["status"] == "grader_fault" and "could not fork" in reply["why"]
    with pytest.raises(GraderFault, match="could not fork"):
        raise_a_grader_fault(reply)
    raise_a_grader_fault({"status": "error", "message": "the function's own"})  # no fault


_FORK_HOOKS = """
import os
from coursekit.checks.window_memory import LINE, memory_spec, run_measured, window_bytes
from tests.test_memory_peak import whole

ran = []


def inflate():  # in the child, before the warm-up: raise the peak, then give it back
    block = bytearray(b"x") * (300 * 2**20)
    del block


def unconfine():
    from coursekit.grading.sandbox import seccomp_measured
    seccomp_measured.install_measured_fork_filter = lambda: None


os.register_at_fork(
    before=lambda: ran.append("before"),
    after_in_parent=lambda: ran.append("after_in_parent"),
    after_in_child=inflate,
)
os.register_at_fork(after_in_child=unconfine)
spec = memory_spec(5)
print(run_measured(spec, whole)["peak_above_warm_up"], int(LINE * window_bytes(spec)), ran)
pid = os.fork()  # the hooks are real: a plain fork runs them
if pid == 0:
    os._exit(0)
os.waitpid(pid, 0)
print(ran)
"""


def test_the_notebooks_fork_hooks_do_not_run_around_the_measured_fork():
    """A hook of ``os.register_at_fork`` in the child ran before the warm-up's peak was read:
    one that touched 300 MiB and gave it back made a whole-window forward rise 0 bytes above
    it (and one could undo the confinement). None of the notebook's hooks runs, in the child
    or in the parent; a plain fork in the same process still runs them all."""
    done = _python(_FORK_HOOKS)
    assert done.returncode == 0, done.stderr[-2000:]
    first, second = done.stdout.strip().splitlines()[-2:]
    rise, line, ran = first.split(" ", 2)
    assert int(rise) > 2 * int(line) and ran == "[]", done.stdout
    assert second == "['before', 'after_in_parent']", done.stdout


def test_a_report_the_measured_child_did_not_write_is_refused(monkeypatch):
    """What a thread of the notebook's could do in the parent: write a report of its own
    into the pipe before the child's (a peak as high as it likes, a gradient it chose). The
    child's report starts with a number drawn for that measurement; this one does not."""
    real = memory_peak._FORK_RUNNING

    def after_a_forged_report(work):
        job = work.__defaults__[0]  # (make, in_child, read end, write end, ...)
        forged = {"grad_projection": [0.0], "passes": 16, "largest_forward": 16}
        os.write(job[3], (2**40).to_bytes(8, "little") + json.dumps(forged).encode())
        return real(work)

    monkeypatch.setattr(memory_peak, "_FORK_RUNNING", after_a_forged_report)
    outputs = run_measured(SPEC, honest)
    assert set(outputs) == {"error"} and "wrote the memory test's report" in outputs["error"]


_STANDARD_HOOKS = """
from coursekit.grading.sandbox import trusted_fork  # first, as the warm parent imports it

assert trusted_fork.FIRST
import logging, random, threading
from coursekit.checks.window_memory import LINE, memory_spec, run_measured, window_bytes
from tests.test_memory_peak import whole


def inflate(*args):  # raise the peak, then give it back, before the warm-up
    block = bytearray(b"x") * (300 * 2**20)
    del block


class Thread(threading.Thread):  # made, never started: threading's hook still calls it
    _reset_internal_locks = _stop = inflate


class Handler(logging.Handler):  # logging's hook calls every handler's
    _at_fork_reinit = inflate


class Random(random.Random):  # random's hook reseeds its generator, whose class this is now
    def __setattr__(self, name, value):
        inflate()
        super().__setattr__(name, value)


made = Thread(), Handler()
random._inst.__class__ = Random
spec = memory_spec(5)
print(run_measured(spec, whole)["peak_above_warm_up"], int(LINE * window_bytes(spec)))
"""


def test_the_standard_librarys_fork_hooks_run_no_code_of_the_notebooks_in_the_measured_fork():
    """threading's, logging's and random's own fork hooks call methods of objects a notebook
    can make (a Thread subclass never started, a handler, the generator's class changed):
    registered after the grader's, they never run in the measured fork."""
    done = _python(_STANDARD_HOOKS)
    assert done.returncode == 0, done.stderr[-2000:]
    rise, line = done.stdout.split()[-2:]
    assert int(rise) > 2 * int(line), done.stdout


def test_a_fork_hook_registered_before_the_graders_is_said():
    done = _python(
        "import threading\nfrom coursekit.grading.sandbox import trusted_fork\n"
        "print(trusted_fork.FIRST)"
    )
    assert done.stdout.split() == ["False"], (done.stdout, done.stderr[-2000:])
