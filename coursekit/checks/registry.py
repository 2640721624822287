"""Questions the course knows, and ``check(...)``: the one call a notebook makes.

Each module's checks register their questions here when ``coursekit.checks`` is imported.
Running a question's checks never raises: a stub gives "not attempted", an exception in
the student's code gives an "error" verdict with the exception's one-line message.
"""

from __future__ import annotations

import os
import traceback
from collections.abc import Callable
from dataclasses import dataclass

from coursekit.checks.result import CheckResult, Status

STRICT_ENV = "COURSEKIT_STRICT_CHECKS"


class Failure(Exception):
    """Raised inside a check to stop with a verdict for the student.

    ``mistake`` names a recognised mistake, when the failure matches one.
    """

    def __init__(self, message: str, mistake: str | None = None):
        super().__init__(message)
        self.message = message
        self.mistake = mistake


@dataclass(frozen=True)
class Question:
    """A graded question: its public checks, its points and whether hidden tests exist."""

    name: str
    module: str
    points: int
    cases: tuple[Callable[[Callable], None], ...]
    hidden_tests: bool


QUESTIONS: dict[str, Question] = {}


def question(name: str, module: str, points: int, hidden_tests: bool = True):
    """Register the decorated check cases (a list of callables) as a question's checks."""

    def register(make_cases: Callable[[], list[Callable[[Callable], None]]]):
        if name in QUESTIONS:
            raise ValueError(f"Question {name!r} is registered twice.")
        QUESTIONS[name] = Question(name, module, points, tuple(make_cases()), hidden_tests)
        return make_cases

    return register


def evaluate(name: str, student_fn: Callable) -> CheckResult:
    """Run question ``name``'s public checks on ``student_fn`` and return the verdict."""
    if name not in QUESTIONS:
        known = ", ".join(sorted(QUESTIONS))
        raise KeyError(f"No question named {name!r}. Questions: {known}.")
    spec = QUESTIONS[name]
    if not callable(student_fn):
        return CheckResult(
            name,
            Status.ERROR,
            0,
            len(spec.cases),
            f"Expected your function, got {type(student_fn).__name__}. "
            f"Pass the function itself: check({name!r}, {name}).",
        )
    passed = 0
    for case in spec.cases:
        try:
            case(student_fn)
        except NotImplementedError:
            return CheckResult(name, Status.NOT_ATTEMPTED, 0, len(spec.cases))
        except Failure as failure:
            return CheckResult(
                name, Status.FAILED, passed, len(spec.cases), failure.message, failure.mistake
            )
        except Exception as exc:  # the student's code raised: report it in one line
            where = _student_frame(exc)
            return CheckResult(
                name,
                Status.ERROR,
                passed,
                len(spec.cases),
                f"Your function raised {type(exc).__name__}: {exc}{where}",
            )
        passed += 1
    return CheckResult(name, Status.PASSED, passed, len(spec.cases), hidden_tests=spec.hidden_tests)


def _student_frame(exc: BaseException) -> str:
    """' (line N of your cell)' for the innermost frame outside coursekit, if any."""
    frames = traceback.extract_tb(exc.__traceback__)
    for frame in reversed(frames):
        if "coursekit" not in frame.filename and "torch" not in frame.filename:
            return f" (line {frame.lineno}: {frame.line})" if frame.line else ""
    return ""


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
