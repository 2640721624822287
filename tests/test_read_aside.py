"""Issue 40: torch's dispatcher read after the cells in a fork, beside the tests.

The reading is of the dispatcher as it was when the fork was taken: a kernel the cells
registered and a test took back is still named, and one registered after is the next
reading's. A reading that gives no report of its own (ended, or written by something else)
is None, which the runner reports as the grader's failure. In process, with torch's own
functions: some 0.1 s a reading.
"""

from __future__ import annotations

import os
import signal
import time
import warnings

import pytest
import torch

from coursekit.grading.sandbox import driver, read_aside, torch_registrations, trusted_fork
from coursekit.grading.sandbox.driver import Limits, Options, run_hand_in

pytestmark = [
    pytest.mark.grading,
    pytest.mark.skipif(not trusted_fork.FORKS, reason="Linux only (fork)"),
]
C = torch._C


@pytest.fixture(scope="module")
def snapshot():
    return torch_registrations.dispatcher_snapshot()


@pytest.fixture
def aten():
    """A handle of the dispatcher's own, made without torch.library; reset after the test."""
    handle = C._dispatch_library("IMPL", "aten", "", "<cell>", 1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch warns when a kernel is overridden
        yield handle
    handle.reset()


def test_a_kernel_taken_back_after_the_fork_is_still_named(snapshot, aten):
    aten.impl("logit", C.DispatchKey.CPU, lambda *args: args[0])
    reading = read_aside.start(snapshot)
    aten.reset()  # as a test could, before the reading is done
    found = read_aside.finish(reading)
    assert found and "aten::logit" in found[0] and "cannot be taken back" in found[0], found
    assert torch_registrations.dispatcher_changes(snapshot) == []


def test_a_kernel_registered_after_the_fork_is_the_next_readings(snapshot, aten):
    reading = read_aside.start(snapshot)
    aten.impl("logit", C.DispatchKey.CPU, lambda *args: args[0])
    assert read_aside.finish(reading) == []
    assert "aten::logit" in torch_registrations.dispatcher_changes(snapshot)[0]


def _child_pipe(writes: bytes | None) -> tuple:
    """(pid, read end) of a plain child that writes ``writes`` into the pipe and ends, or
    (with None) waits to be ended."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - ends with os._exit
        try:
            if writes is None:
                time.sleep(600)
            os.write(write_end, writes)
        finally:
            os._exit(0)
    os.close(write_end)
    return pid, read_end


def test_a_report_without_the_readings_number_is_none():
    """What a thread of the notebook's could write into the pipe: a report of its own."""
    pid, read_end = _child_pipe(os.urandom(16) + b"[]")
    assert read_aside.finish((pid, read_end, os.urandom(16))) is None


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:
        pass


def test_a_reading_that_was_ended_or_never_ends_is_none_and_reaped():
    pid, read_end = _child_pipe(None)
    os.kill(pid, signal.SIGKILL)
    assert read_aside.finish((pid, read_end, os.urandom(16))) is None
    _reap(pid)  # (ended as it is reported: reaped by whoever comes next)
    pid, read_end = _child_pipe(None)
    assert read_aside.finish((pid, read_end, os.urandom(16)), timeout_s=0.2) is None
    with pytest.raises(ChildProcessError):  # ended and reaped by finish
        os.waitpid(pid, os.WNOHANG)


_TAKEN_BACK_IN_A_TEST = """
import torch
_cells = torch._C._dispatch_library.__closure__ or ()
_real = next(c.cell_contents for c in _cells if callable(c.cell_contents)
             and getattr(c.cell_contents, "__name__", "") == "_dispatch_library")
_handle = _real("IMPL", "aten", "", "<cell>", 1)
_handle.impl("logit", torch._C.DispatchKey.CPU, lambda *args: args[0])

def effective_batch_size(micro_batch_size, accum_steps, world_size=1):
    _handle.reset()  # the kernel the tests ran with, gone before the last reading
    return micro_batch_size * accum_steps * world_size
"""


@pytest.mark.parametrize("cores", [64, 1], ids=["aside", "every-core-busy"])
def test_a_kernel_the_cells_registered_and_a_test_took_back_is_named(monkeypatch, cores):
    """Read aside where a core would otherwise idle; in the runner's own process where every
    core runs a hand-in (a fork would only cost time there): named either way."""
    from coursekit.checks import QUESTIONS

    monkeypatch.setattr(driver, "_cores", lambda: cores)
    sent, command = [], driver.Session.command

    def noted(self, kind, *args, **fields):
        sent.append((kind, fields.get("aside")))
        return command(self, kind, *args, **fields)

    monkeypatch.setattr(driver.Session, "command", noted)
    question = QUESTIONS["effective_batch_size"]
    tasks = [{"question": question.name, "spec": spec} for spec in question.public_specs()]
    run = run_hand_in([_TAKEN_BACK_IN_A_TEST], tasks, Limits(hand_in_timeout_s=120), Options())
    assert ("check", cores > 1) in sent, sent
    assert run.failure is None and all(t["status"] == "ok" for t in run.tasks), run.tasks
    flags = " ".join(run.flags)
    assert "aten::logit" in flags and "cannot be taken back" in flags, run.flags
