"""In-notebook checks: ``check(name, fn)`` prints a verdict; ``evaluate`` returns it."""

from coursekit.checks import (  # noqa: F401, I001  (importing registers, in this order)
    module00,
    module01,
    module02,
    module03,
    module04,
    module05,
    module06,
    module07,
    module08,
)
from coursekit.checks.question import Failure, Question
from coursekit.checks.registry import QUESTIONS, check, evaluate, questions_of
from coursekit.checks.result import CheckResult, Status

__all__ = [
    "QUESTIONS",
    "CheckResult",
    "Failure",
    "Question",
    "Status",
    "check",
    "evaluate",
    "questions_of",
]
