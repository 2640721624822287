"""Issue 40 (speed): the reading of torch's dispatcher before the tests, made while the
memory test's fork measures.

The runner reads the dispatcher before the first test and after the last (50 to 90 ms each,
a fifth of a hand-in). The grader now runs the memory tests first, and the runner begins
the first reading once the memory test's child is forked, while the child measures on
another core (``memory_peak.measured_in_child``'s ``during``), with the GIL held: each step
is one call of torch's from C, begun only before the time the held section allows, and what
is left is read as soon as the child has ended. Here: the steps let no thread run, a reading
begun and finished names what a whole one names, the callback runs while the child lives
and takes the child with it when it raises, and the grader's order puts the memory tests
first with each test's record in its own place. The whole path, a kernel left by the cells
for the first test only, is graded in tests/test_grading_harness.py.
"""

from __future__ import annotations

import sys
import threading
import time
import warnings

import pytest
import torch

from coursekit.checks import memory_peak
from coursekit.checks.window_memory import measurement, memory_spec
from coursekit.grading.sandbox import held_gil, torch_registrations
from coursekit.grading.sandbox.driver import execution_order
from coursekit.grading.sandbox.reaping import children
from tests.test_memory_peak import honest

pytestmark = pytest.mark.grading
C = torch._C
forks = pytest.mark.skipif(not memory_peak.MEASURED, reason="measures in a fork (Linux)")


@pytest.fixture(scope="module")
def snapshot():
    return torch_registrations.dispatcher_snapshot()


@pytest.fixture
def aten_handle():
    handle = C._dispatch_library("IMPL", "aten", "", "<cell>", 1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch warns when a kernel is overridden
        yield handle
    handle.reset()


def test_a_reading_begun_then_finished_names_what_a_whole_one_names(snapshot, aten_handle):
    aten_handle.impl("logit", C.DispatchKey.CPU, lambda *args: args[0])
    whole = torch_registrations.dispatcher_changes(snapshot)
    assert len(whole) == 1 and "aten::logit" in whole[0], whole
    for until in (0.0, time.monotonic() + 60):  # nothing read yet; all of it read
        digests, marks = torch_registrations.read_until(snapshot, until)
        assert marks is not None and len(digests) in (0, len(snapshot[2]))
        finished = torch_registrations.dispatcher_reading(snapshot, digests, marks)
        assert torch_registrations.dispatcher_changes(snapshot, finished) == whole
    aten_handle.reset()
    assert torch_registrations.dispatcher_changes(snapshot) == []


def test_an_operator_gone_since_the_snapshot_is_named():
    library = torch.library.Library("coursekit_test_gone", "DEF")
    library.define("twice(Tensor x) -> Tensor")
    snapshot = torch_registrations.dispatcher_snapshot()
    library._destroy()
    found = torch_registrations.dispatcher_changes(snapshot)
    assert found and "coursekit_test_gone::twice" in found[0], found


def test_an_operator_torch_cannot_print_any_more_is_read_as_gone(snapshot):
    """Where torch raises for one operator, the others of its step are still read."""
    dump, has_fallback, names, keys, digests, marks = snapshot
    missing = names[1]

    def dump_but_one(name):
        if name == missing:
            raise RuntimeError("operator does not exist")
        return dump(name)

    broken = (dump_but_one, has_fallback, names, keys, digests, marks)
    read = torch_registrations.read_part(broken, 0, 3)
    assert read == [digests[0], torch_registrations.GONE, digests[2]]
    found = torch_registrations.dispatcher_changes(broken)
    assert found and missing in found[0] and "and" not in found[0].split(missing)[1][:5]


def test_no_thread_runs_while_the_reading_steps(snapshot):
    """What memory_peak's held GIL relies on: a step of the reading is one call from C, so
    a thread that asks for the GIL meanwhile waits until the step is over."""
    count, stop = [0], [False]

    def spin():
        while not stop[0]:
            count[0] += 1

    thread = threading.Thread(target=spin)
    thread.start()
    previous = sys.getswitchinterval()
    try:
        time.sleep(0.02)
        held_gil.hold(previous)
        before = count[0]
        digests, _ = torch_registrations.read_until(snapshot, time.monotonic() + 0.4)
        after = count[0]
    finally:
        held_gil.let_go(previous)
        stop[0] = True
        thread.join()
    assert len(digests) == len(snapshot[2])  # read whole, well within the time
    assert after == before


def _measured_with(during) -> dict:
    return memory_peak.measured_in_child(lambda: measurement(memory_spec(5), honest), during=during)


@forks
def test_the_callback_runs_while_the_child_measures_and_the_measure_is_whole():
    before, seen = children(), []

    def during(until: float) -> None:
        seen.append((children() - before, until - time.monotonic()))

    outputs = _measured_with(during)
    assert "grad_projection" in outputs and "peak_above_warm_up" in outputs, outputs
    assert len(seen) == 1
    measured, time_left = seen[0]
    assert len(measured) == 1  # the child was there (running, or ended and not reaped)
    assert 0 < time_left <= held_gil.HOLD_S / 2
    assert not children() & measured  # and it was reaped


@forks
def test_a_callback_that_outlasts_the_held_time_ends_the_child_and_all_is_taken_again(
    monkeypatch,
):
    """Past the time for which no thread asks for the GIL, a thread may have run while the
    child measured: that child is ended, and the hold, the fork and the callback start again."""
    monkeypatch.setattr(memory_peak, "_HOLD_S", 0.05)
    before, seen = children(), []

    def during(until: float) -> None:
        seen.append(children() - before)
        if len(seen) == 1:
            time.sleep(0.1)

    outputs = _measured_with(during)
    assert [len(measured) for measured in seen] == [1, 1] and seen[0] != seen[1]
    assert "grad_projection" in outputs and "peak_above_warm_up" in outputs, outputs
    assert not children() & (seen[0] | seen[1])


@forks
def test_a_callback_that_raises_takes_the_child_with_it():
    before, seen = children(), []

    def during(until: float) -> None:
        seen.append(children() - before)
        raise KeyboardInterrupt("a timer's exception, say")

    with pytest.raises(KeyboardInterrupt):
        _measured_with(during)
    assert len(seen) == 1 and len(seen[0]) == 1
    assert not children() & seen[0]


def test_the_memory_tests_run_first_each_record_in_its_place():
    tasks = [
        {"question": "a", "spec": {"n": 1}},
        {"question": "a", "spec": {"memory": True, "n": 2}},
        {"question": "b", "spec": {"n": 3}},
        {"question": "c", "spec": {"memory": True, "n": 4}},
        {"question": "c", "spec": {"memory": "yes"}},  # only True makes a memory test
    ]
    assert execution_order(tasks) == [1, 3, 0, 2, 4]
    assert execution_order([t for t in tasks if t["spec"].get("memory") is not True]) == [0, 1, 2]
    assert execution_order([]) == []
