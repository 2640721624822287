"""What a graded question is: specs, a run, an oracle and a judge, kept apart on purpose.

The same question is checked in two places. In a student's notebook, ``check(...)`` runs
everything in the student's kernel. In the batch grader, only :meth:`Question.run` happens in
the hand-in's (sandboxed) process; its plain-data outputs travel to the grader, where
:meth:`Question.judge` compares them with the reference's outputs for the same spec. So the
run must return plain JSON data, and the judge must trust nothing about it.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Spec = dict[str, Any]
Outputs = dict[str, Any]


class Failure(Exception):
    """Raised by a judge to give a verdict; ``mistake`` names a recognised mistake."""

    def __init__(self, message: str, mistake: str | None = None):
        super().__init__(message)
        self.message = message
        self.mistake = mistake


@dataclass(frozen=True)
class Rule:
    """One rule the exercise's text states, and what holds an answer to it.

    ``text`` is quoted word for word from the exercise (tests/test_question_specs.py finds it
    there). ``specs`` says in words which tests an answer that breaks the rule fails, and
    ``where`` picks those tests out of the public specs and the hidden draw (None: every
    test); ``mutants`` are hand-ins of the mutation corpus that break this rule
    (tests/corpora/student_code/). benchmarks/mutation.py shows each of them failing one of
    the rule's tests on every draw: a rule no test can fail is a rule the grade ignores.
    """

    text: str
    specs: str
    mutants: tuple[str, ...]
    where: Callable[[Spec], bool] | None = None

    def covers(self, spec: Spec) -> bool:
        return self.where is None or bool(self.where(spec))


class Question:
    """A graded question. Subclasses set the class attributes and the four methods."""

    name: str
    module: str
    points: int
    hidden_tests: bool = True  # does the grader draw specs of its own (hidden_specs)?
    #: Library functions that answer the question under another name ("module.function"):
    #: the grader flags a hand-in that calls one while its answer is tested.
    library_answers: tuple[str, ...] = ()
    #: The rules its exercise states (see :class:`Rule`): every one tested, none unstated.
    rules: tuple[Rule, ...] = ()

    def public_specs(self) -> list[Spec]:
        """Fixed inputs that ``check(...)`` uses in the notebook."""
        raise NotImplementedError

    def hidden_specs(self, rng: random.Random) -> list[Spec]:
        """Inputs the grader draws at grading time; students never see them in advance."""
        return []

    def run(self, fn: Callable, spec: Spec) -> Outputs:
        """Call ``fn`` on inputs built from ``spec``; return plain data (lists, numbers, str).

        Exceptions from ``fn`` propagate: the caller reports them.
        """
        raise NotImplementedError

    def reference(self) -> Callable:
        """coursekit's own correct implementation: the oracle for ``check(...)``."""
        raise NotImplementedError

    def judge(self, spec: Spec, outputs: Outputs, expected: Outputs) -> None:
        """Return if ``outputs`` are right for ``spec``; else raise :class:`Failure`."""
        raise NotImplementedError


# ----------------------------------------------------------------- reading untrusted outputs


def number_list(outputs: Outputs, key: str, what: str) -> list[float]:
    """``outputs[key]`` as a list of finite-or-not floats, or a Failure that says what is wrong."""
    value = outputs.get(key)
    if not isinstance(value, list) or not all(
        isinstance(v, (int, float)) and not isinstance(v, bool) for v in value
    ):
        raise Failure(f"Your function did not produce {what}.")
    return [float(v) for v in value]


def says_something(message: object) -> bool:
    """Whether a refusal's message is there to read: five characters or more, not blank (what
    it says, a check cannot weigh; that it says nothing, it can)."""
    return len(str(message or "").strip()) >= 5


def empty_message(setting: str) -> Failure:
    """The failure for a ValueError raised with no message, where the exercise asks for one."""
    return Failure(
        f"Right to raise ValueError {setting}, but its message is empty or nearly: say what is "
        "wrong (and what would help), as the exercise asks.",
        "message_too_short",
    )


def relative_gap(actual: list[float], expected: list[float]) -> float:
    """``max|a - e| / max|e|`` on plain lists; inf when lengths differ or values are not finite."""
    if len(actual) != len(expected):
        return math.inf
    if not all(math.isfinite(v) for v in actual):
        return math.inf
    scale = max((abs(v) for v in expected), default=0.0) or 1e-300
    return max((abs(a - e) for a, e in zip(actual, expected, strict=True)), default=0.0) / scale


def flipped_sign(k: float, wanted: str) -> Failure:
    """The failure for a gradient ``k`` times ``wanted`` with ``k < 0``: the loss's sign, not
    its scale, is what went wrong, and saying "check what you divide by" would mislead."""
    return Failure(
        f"Your gradient points the opposite way: it is {k:.3g} times {wanted}. The loss's sign "
        "is flipped somewhere (a minus sign, or a loss subtracted instead of added), so the "
        "optimizer would climb the loss instead of descending it.",
        "wrong_sign",
    )


def scale_of(actual: list[float], expected: list[float]) -> float | None:
    """k when ``actual`` is k times ``expected`` (to 1e-6 relative), else None."""
    denominator = sum(e * e for e in expected)
    if len(actual) != len(expected) or denominator == 0.0:
        return None
    k = sum(a * e for a, e in zip(actual, expected, strict=True)) / denominator
    if k == 0.0 or relative_gap(actual, [k * e for e in expected]) > 1e-6:
        return None
    return k
