"""Questions the course knows, and ``check(...)``: the one call a notebook makes.

Each module's checks register their questions here when ``coursekit.checks`` is imported.
Running a question's checks never raises: a stub gives "not attempted", an exception in
the student's code gives an "error" verdict with the exception's one-line message.
"""

from __future__ import annotations

import os
import traceback
import warnings
from collections.abc import Callable

from coursekit.checks.question import Failure, Question
from coursekit.checks.result import CheckResult, Status

STRICT_ENV = "COURSEKIT_STRICT_CHECKS"

QUESTIONS: dict[str, Question] = {}


def register(cls: type[Question]) -> type[Question]:
    """Class decorator: make a question known to ``check`` and to the grader."""
    if cls.name in QUESTIONS:
        raise ValueError(f"Question {cls.name!r} is registered twice.")
    QUESTIONS[cls.name] = cls()
    return cls


def questions_of(module: str) -> list[Question]:
    """The questions of one module (its notebook's name), in registration order."""
    return [q for q in QUESTIONS.values() if q.module == module]


def error_message(exc: BaseException) -> str:
    """One line for a student: the exception and, when known, the line of their code."""
    frames = traceback.extract_tb(exc.__traceback__)
    where = ""
    for frame in reversed(frames):
        if "coursekit" not in frame.filename and "torch" not in frame.filename and frame.line:
            where = f" (line {frame.lineno}: {frame.line})"
            break
    text = str(exc)
    if len(text) > 300:
        text = text[:300] + "..."
    return f"Your function raised {type(exc).__name__}: {text}{where}"


def evaluate(name: str, student_fn: Callable) -> CheckResult:
    """Run question ``name``'s public checks on ``student_fn`` and return the verdict."""
    if name not in QUESTIONS:
        known = ", ".join(sorted(QUESTIONS))
        raise KeyError(f"No question named {name!r}. Questions: {known}.")
    with warnings.catch_warnings():
        # The verdict explains what matters; a library warning raised while the checks run
        # (e.g. PyTorch's about scheduler order) would only clutter it.
        warnings.simplefilter("ignore")
        return _evaluate(QUESTIONS[name], student_fn)


def _evaluate(question: Question, student_fn: Callable) -> CheckResult:
    name = question.name
    specs = question.public_specs()
    total = len(specs)
    if not callable(student_fn):
        return CheckResult(
            name,
            Status.ERROR,
            0,
            total,
            f"Expected your function, got {type(student_fn).__name__}. "
            f"Pass the function itself: check({name!r}, {name}).",
        )
    for passed, spec in enumerate(specs):
        try:
            outputs = question.run(student_fn, spec)
        except NotImplementedError as exc:
            if passed == 0:  # the stub, untouched
                return CheckResult(name, Status.NOT_ATTEMPTED, 0, total)
            return CheckResult(name, Status.ERROR, passed, total, error_message(exc))
        except Exception as exc:  # the student's code raised: report it in one line
            return CheckResult(name, Status.ERROR, passed, total, error_message(exc))
        expected = question.run(question.reference(), spec)
        try:
            question.judge(spec, outputs, expected)
        except Failure as failure:
            return CheckResult(name, Status.FAILED, passed, total, failure.message, failure.mistake)
    return CheckResult(name, Status.PASSED, total, total, hidden_tests=question.hidden_tests)


def check(name: str, student_fn: Callable) -> None:
    """Run the public checks of question ``name`` on your function and print the verdict.

    Example (in a notebook):
        >>> check("accumulate_window", accumulate_window)  # doctest: +SKIP
        [passed] accumulate_window: 4 of 4 public checks pass. ...

    With the environment variable ``COURSEKIT_STRICT_CHECKS=1`` any verdict other than
    "passed" also raises ``AssertionError``: the solution notebooks run that way in CI.
    """
    result = evaluate(name, student_fn)
    print(result.render())
    if os.environ.get(STRICT_ENV) == "1" and result.status is not Status.PASSED:
        raise AssertionError(f"{STRICT_ENV} is set and {name!r} did not pass.")
