"""Turning what a hand-in's process returned into scores and feedback, in the grader.

Every comparison happens here, against the reference's outputs for the same spec; the
hand-in's process only ever produced plain data. Each spec is one test, worth an equal
share of its question's points.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from coursekit.checks.question import Failure, Question
from coursekit.grading.sandbox.channel import parse_outputs
from coursekit.grading.text import error_feedback

MESSAGE_CHARS = 600  # feedback comes partly from a hand-in's outputs: keep it short


@dataclass
class QuestionResult:
    name: str
    score: float
    max_score: float
    feedback: str
    passed: int = 0
    total: int = 0
    mistakes: list[str] = field(default_factory=list)


def task_outputs(record: dict) -> dict | None:
    """A test's outputs as the runner sent them (JSON text, parsed now), or None."""
    if isinstance(record.get("outputs"), dict):  # already parsed (the reference's)
        return record["outputs"]
    return parse_outputs(record.get("outputs_json"))


def judge_test(
    question: Question, spec: dict, record: dict, expected: dict, task_timeout_s, hidden=True
):
    """(passed, message, mistake) for one test; messages never quote test code, nor (on a
    ``hidden`` test) the text of an exception the student's code raised."""
    status = record.get("status") if isinstance(record, dict) else None
    name = question.name
    outputs = task_outputs(record) if status == "ok" else None
    if outputs is not None:
        try:
            question.judge(spec, outputs, expected)
        except Failure as failure:
            mistake = failure.mistake if isinstance(failure.mistake, str) else None
            return False, str(failure.message)[:MESSAGE_CHARS], mistake
        except Exception:  # outputs of an unexpected shape: the judge trusts nothing
            return False, f"{name} returned something of an unexpected kind.", None
        return True, "", None
    if status == "not_attempted":
        return False, f"{name} is not attempted: it still raises NotImplementedError.", None
    if status == "missing":
        return (
            False,
            f"{name} is not defined in your notebook: was its cell deleted or renamed, or "
            "did an earlier cell stop with an error before it?",
            None,
        )
    if status == "timeout":
        return (
            False,
            f"{name} took too long: one test did not finish within {task_timeout_s:.0f} s of "
            "CPU time, in two tries. It was not judged right or wrong, and an unfinished test "
            "gets no points. Look for a loop that never ends or work repeated in a loop.",
            None,
        )
    if status == "error":
        return False, error_feedback(record.get("message", ""), hidden), None
    return False, f"{name} could not be run.", None


def judge_question(question, specs, records, expected, task_timeout_s) -> QuestionResult:
    """Score one question: an equal share of its points for each test passed."""
    public = question.public_specs()  # the inputs a notebook shows: their errors in full
    verdicts = [
        judge_test(question, spec, record, reference, task_timeout_s, hidden=spec not in public)
        for spec, record, reference in zip(specs, records, expected, strict=True)
    ]
    passed = sum(ok for ok, _, _ in verdicts)
    total = len(verdicts)
    score = round(question.points * passed / total, 4) if total else 0.0
    failures = [(message, mistake) for ok, message, mistake in verdicts if not ok]
    mistakes = sorted({mistake for _, mistake in failures if mistake})
    if not failures:
        feedback = f"All {total} tests pass."
    else:
        first = failures[0][0]
        feedback = f"{passed} of {total} tests pass. {first}"
    return QuestionResult(
        question.name, score, float(question.points), feedback, passed, total, mistakes
    )


def as_dict(result: QuestionResult) -> dict:
    return asdict(result)
