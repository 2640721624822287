"""The tripwires' record of calls to coursekit's answers in the runner
(coursekit/grading/sandbox/runner.py, ``_answer_calls``): a generator, so that what it holds
(the runner's flags, its questions, the question tested now) is reached only through its
frame, which the audit hook reports. The grading runs that attack it, in every mode, are in
tests/test_grading_harness.py (tests/corpora/hostile.py, ``tripwire_reach``)."""

from __future__ import annotations

import pytest

from coursekit.grading.sandbox.runner import CellTimeout, _answer_calls

pytestmark = pytest.mark.grading


def _record(testing: str = "b"):
    reports: list[str] = []
    calls = _answer_calls(reports.append, {"a": "01", "b": "01", "c": "05"}, [testing])
    next(calls)
    return calls, reports


def test_a_call_to_an_answer_of_the_module_tested_now_is_reported_and_an_earlier_is_not():
    calls, reports = _record()
    assert calls.send(("b", "direct")) is None
    assert calls.send(("a", "map")) is None
    assert calls.send(("c", "direct")) is None  # another module's answer: library code
    assert reports == [
        "its b called coursekit's own answer (direct)",
        "its b called coursekit's own answer to a (map)",
    ]


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
