"""Feedback on a test where the student's code raised: what it may show.

The message comes from the hand-in's own process, so on a hidden test it could quote the
test's inputs (a student's ``raise ValueError(repr(batch))``, or torch's shapes of them);
there the grader keeps only the exception's type (a name Python or torch defines). Public
tests, whose inputs the notebook shows, keep the message's first line.
"""

from __future__ import annotations

import random

import pytest

from coursekit.checks import QUESTIONS
from coursekit.grading.judging import judge_question
from coursekit.grading.text import error_feedback

pytestmark = pytest.mark.grading

SECRET = "micro_batch_size=37, accum_steps=11"


def _raised(text: str, line: str = "line 4: raise ValueError(repr(spec))") -> dict:
    return {"status": "error", "message": f"Your function raised ValueError: {text} ({line})"}


def test_a_hidden_tests_exception_text_never_reaches_the_feedback():
    question = QUESTIONS["plan_micro_batch"]
    public = question.public_specs()
    hidden = question.hidden_specs(random.Random(1))
    assert hidden, "the question must have hidden tests for this test to mean anything"
    specs = public + hidden
    expected = [question.run(question.reference(), spec) for spec in specs]
    records = [{"status": "ok", "outputs": outputs} for outputs in expected[: len(public)]]
    records += [_raised(f"{SECRET}\nsecond line {SECRET}") for _ in hidden]
    graded = judge_question(question, specs, records, expected, 1.0)
    assert SECRET not in graded.feedback and "37" not in graded.feedback
    assert graded.passed == len(public)  # the public tests were judged as usual
    assert "ValueError on a hidden test" in graded.feedback
    assert "line" not in graded.feedback.split("hidden test")[0]


def test_a_public_tests_error_shows_its_first_line_only():
    text = error_feedback(f"Your function raised ValueError: bad\n{SECRET}", hidden=False)
    assert text == "Your function raised ValueError: bad"
    assert error_feedback("x" * 1000, hidden=False) == "x" * 300 + "..."


@pytest.mark.parametrize(
    "forged",
    [
        f"Your function raised {SECRET}",  # no type where a type stands
        f"Your function raised ValueError{SECRET.replace(' ', '')}: x",
        f"{SECRET} (line 12: {SECRET})",
        "Your function raised KeyError: x (line 3701: y)",  # a line number chosen to leak
        f"Your function raised E{SECRET.replace(' ', '').replace(',', '_').replace('=', '_')}: x",
        "Your function raised A" + "b" * 500 + ": x",  # a 'type' too long to be one
        "\udcff" + SECRET,
        "",
    ],
)
def test_a_forged_error_message_cannot_carry_text_through(forged):
    """The runner is in the hand-in's process: its whole message may be forged."""
    text = error_feedback(forged, hidden=True)
    assert SECRET not in text and "37" not in text
    assert "bbbb" not in text and "micro" not in text and "3701" not in text
    assert text.startswith(("Your function raised an error on", "Your function raised KeyError on"))
