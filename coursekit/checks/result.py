"""The verdict of one question's checks, and how it reads to a student."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Status(str, Enum):
    PASSED = "passed"
    FAILED = "failed"
    NOT_ATTEMPTED = "not attempted"
    ERROR = "error"


@dataclass(frozen=True)
class CheckResult:
    """What ``check(...)`` found for one question.

    ``mistake`` is a short identifier of a recognised mistake (e.g. ``"loss_not_divided"``)
    so tests and the grader can act on it; ``message`` is the sentence the student reads.
    """

    question: str
    status: Status
    passed: int
    total: int
    message: str = ""
    mistake: str | None = None
    hidden_tests: bool = False

    def render(self) -> str:
        if self.status is Status.NOT_ATTEMPTED:
            return (
                f"[not attempted] {self.question}: the function still raises "
                "NotImplementedError. Replace the stub with your code, run its cell, then "
                "check again."
            )
        if self.status is Status.PASSED:
            text = f"[passed] {self.question}: {self.passed} of {self.total} public checks pass."
            if self.hidden_tests:
                text += (
                    " Hidden tests run when your notebook is graded, so this is not yet a score."
                )
            return text
        label = "[error]" if self.status is Status.ERROR else "[failed]"
        return (
            f"{label} {self.question}: public check {self.passed + 1} of {self.total} "
            f"fails.\n  {self.message}"
        )

    def __str__(self) -> str:
        return self.render()
