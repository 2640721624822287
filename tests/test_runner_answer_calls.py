"""The tripwires' record of calls to coursekit's answers in the runner
(coursekit/grading/sandbox/runner.py, ``_answer_calls``): a generator, so that what it holds
(the runner's flags, its questions, the question tested now) is reached only through its
frame, which the audit hook reports. The grading runs that attack it, in every mode, are in
tests/test_grading_harness.py (tests/corpora/hostile.py, ``tripwire_reach``)."""

from __future__ import annotations

import pytest

from coursekit.grading.sandbox.runner import CellTimeout, _answer_calls
from coursekit.grading.sandbox.tampering import READ_OUT

pytestmark = pytest.mark.grading


def _record(testing: str = "b"):
    reports: list[str] = []
    modules = {"z": "01_first", "a": "02_second", "b": "02_second", "c": "05_fifth"}
    calls = _answer_calls(reports.append, modules, [testing])
    next(calls)
    return calls, reports


def test_which_calls_to_an_answer_count_while_a_question_is_tested():
    """The module tested now's answers count, and so do a later module's (not yet taught)
    and the checks' own code, wherever it answers; an earlier module's library answer is
    library code (module 7's tuner may plan with module 5's planner). Found by review: a
    later module's warm-up answered module 1's question unreported, and module 1's
    reference answered module 4's."""
    calls, reports = _record()
    for sent in [
        ("b", "direct"),
        ("a", "map"),
        ("z", "coursekit.training.train_accumulated"),  # earlier, the library's: passes
        ("z", "coursekit.checks.loop_variants.run_loop"),
        ("z", "the check's reference for z"),
        ("c", "coursekit.workers.distributed.reference_ddp_window"),  # later
    ]:
        assert calls.send(sent) is None
    assert reports == [
        "its b called coursekit's own answer (direct)",
        "its b called coursekit's own answer to a (map)",
        "its b called coursekit's own answer to z (coursekit.checks.loop_variants.run_loop)",
        "its b called coursekit's own answer to z (the check's reference for z)",
        "its b called coursekit's own answer to c "
        "(coursekit.workers.distributed.reference_ddp_window)",
    ]


def test_between_tests_only_an_answer_read_out_of_its_tripwire_counts():
    calls, reports = _record(testing="")
    calls.send(("b", "direct"))
    calls.send(("z", "the check's reference for z"))
    calls.send(("z", READ_OUT))
    assert reports == [f"a cell took coursekit's own answer to z {READ_OUT}"]


def test_only_plain_strings_are_read():
    class Loud(str):
        def __eq__(self, other):  # noqa: D105 - would run in the generator's frame
            raise AssertionError("ran the notebook's method")

        __hash__ = str.__hash__

    calls, reports = _record()
    for sent in (None, ("b",), ["b", "x"], (Loud("b"), "x"), ("b", 1)):
        assert calls.send(sent) is None
    assert reports == []


def test_a_timer_met_inside_is_handed_back_and_the_record_goes_on():
    """A timer's CellTimeout (or anything thrown in) once ended the generator: every later
    call to an answer raised StopIteration, and the runner flagged the tripwires changed."""
    calls, reports = _record()
    raised = calls.throw(CellTimeout("time limit reached"))
    assert isinstance(raised, CellTimeout) and raised.__traceback__ is None
    assert calls.send(None) is None  # still whole
    calls.send(("b", "direct"))
    assert reports == ["its b called coursekit's own answer (direct)"]


def test_a_thrown_exception_sets_nothing_through_its_own_class():
    """The traceback is dropped by BaseException's own method: no __setattr__ of a
    notebook's exception class runs in the generator's frame."""
    ran = []

    class Loud(Exception):
        def __setattr__(self, name, value):
            ran.append(name)
            super().__setattr__(name, value)

    calls, _ = _record()
    raised = calls.throw(Loud("thrown in"))
    assert isinstance(raised, Loud) and raised.__traceback__ is None
    assert ran == []


def test_a_closed_record_is_seen():
    calls, _ = _record()
    calls.close()
    with pytest.raises(StopIteration):
        calls.send(None)
