"""Mutation testing of the graded questions, shared by tests/test_mutation.py and
benchmarks/mutation.py.

A *mutant* is a plausible wrong implementation of a question (``tests/student_code*.py``,
every variant whose name does not start with ``correct``); a *correct style* is a right one
written another way. For one seed, a question's tests are what the grader runs: its public
specs plus ``hidden_specs(random.Random(seed))``. A mutant is *killed* on a seed when at least
one of those tests fails (so it loses points); a correct style must pass them all. Every
mistake name a judge attaches to a mutant's failure must be true of it: the one
``student_code.mistake_of`` gives, or one listed in ``student_code.ALSO_NAMED``; a mutant in
``student_code.UNNAMED`` must get no name at all.

Each rule a question states (``Question.rules``) names mutants that break it: on every seed,
each of them must fail one of the rule's own tests (``Rule.where``), not merely some test.
And the feedback a killed mutant gets (its first failing test's message, as the grader shows
it) *names the mistake* when it carries a mistake name true of the mutant, or, for a mutant
with no true name (``UNNAMED``), when it says what ``student_code.DESCRIBED`` says it must.
"""

from __future__ import annotations

import json
import random
import re
import warnings
from dataclasses import dataclass, field

from coursekit.checks import QUESTIONS
from coursekit.checks.question import Failure
from tests.corpora import student_code


def _round_trip(value):
    return json.loads(json.dumps(value))


def specs_for(name: str, seed: int) -> list[dict]:
    """The grader's tests of a question for one seed: public specs, then the hidden draw."""
    question = QUESTIONS[name]
    specs = question.public_specs()
    if question.hidden_tests:
        specs = specs + question.hidden_specs(random.Random(seed))
    return [_round_trip(spec) for spec in specs]


def mutants(name: str) -> list[str]:
    return [v for v in student_code.BY_QUESTION.get(name, {}) if not v.startswith("correct")]


def correct_styles(name: str) -> list[str]:
    return [v for v in student_code.BY_QUESTION.get(name, {}) if v.startswith("correct")]


def allowed_names(name: str, variant: str) -> set[str | None]:
    """The mistake names that are true of a mutant (None: a failure with no name)."""
    if (name, variant) in student_code.UNNAMED:
        return {None}
    return {
        None,
        student_code.mistake_of(variant),
        *student_code.ALSO_NAMED.get((name, variant), ()),
    }


@dataclass
class Score:
    """What the seeds showed for one question."""

    question: str
    seeds: int
    survived: dict[str, list[int]] = field(default_factory=dict)  # mutant -> seeds it passed
    false_names: dict[str, set[str]] = field(default_factory=dict)  # mutant -> untrue names
    marked_down: dict[str, list[int]] = field(default_factory=dict)  # correct style -> seeds
    crashed: dict[str, str] = field(default_factory=dict)  # variant -> an unexpected error
    # (rule's index, mutant) -> seeds where it failed none of the rule's own tests
    rule_missed: dict[tuple[int, str], list[int]] = field(default_factory=dict)
    kills: int = 0  # (killed mutant, seed) pairs
    named: int = 0  # of those, how many got feedback that names the mistake
    not_named: dict[str, str] = field(default_factory=dict)  # mutant -> a message that did not

    @property
    def named_share(self) -> float:
        return self.named / self.kills if self.kills else 1.0

    @property
    def mutants(self) -> int:
        return len(mutants(self.question))

    @property
    def killed(self) -> int:
        return self.mutants - len(self.survived)

    @property
    def styles(self) -> int:
        return len(correct_styles(self.question))

    @property
    def styles_passed(self) -> int:
        return self.styles - len(self.marked_down)


def names_the_mistake(name: str, variant: str, failure: Failure) -> bool:
    """Whether a killed mutant's feedback names its mistake (see the module's docstring)."""
    if (name, variant) in student_code.UNNAMED:
        said = student_code.DESCRIBED.get((name, variant))
        return said is not None and re.search(said, failure.message) is not None
    return failure.mistake is not None and failure.mistake in allowed_names(name, variant)


def _verdicts(question, fn, specs, expected, memory=None) -> list[Failure | None]:
    """One verdict per spec: None when it passed; an exception in ``fn`` is a failed test.
    ``memory``: the variant's verdict on a memory test (``window_memory``) already run, for
    a memory spec of another seed: that test measures what the function does to memory,
    which the seed does not change, and at 0.1 s a run it would double this file's time."""
    verdicts = []
    for spec, reference in zip(specs, expected, strict=True):
        if spec.get("memory") and memory:
            verdicts.append(memory[0])
            continue
        try:
            outputs = _round_trip(question.run(fn, spec))
            question.judge(spec, outputs, reference)
            verdicts.append(None)
        except Failure as failure:
            verdicts.append(failure)
        except Exception as error:  # the grader records it as an error: the test fails
            verdicts.append(Failure(f"{type(error).__name__}: {error}"))
    return verdicts


def score(name: str, seeds: range) -> Score:
    """See :func:`_score`; torch's warning for a scheduler stepped before its optimizer is the
    point of some mutants (scheduler_before_optimizer, ...), not news: it is not shown."""
    with warnings.catch_warnings():
        before = r"Detected call of `lr_scheduler.step\(\)` before"
        warnings.filterwarnings("ignore", message=before, category=UserWarning)
        return _score(name, seeds)


def _score(name: str, seeds: range) -> Score:
    """Run every mutant and correct style of ``name`` on the tests of every seed.

    The public specs do not depend on the seed, so each variant runs them once, freshly
    loaded, and those verdicts count for every seed. Each seed's hidden specs run on another
    fresh copy of the variant, as a new hand-in would: state a variant keeps between calls
    carries over within a seed's hidden specs, never from one seed to the next.
    """
    question = QUESTIONS[name]
    result = Score(name, len(seeds))
    reference = question.reference()
    public = [_round_trip(spec) for spec in question.public_specs()]
    public_expected = [_round_trip(question.run(reference, spec)) for spec in public]
    public_verdicts = {}
    for variant in mutants(name) + correct_styles(name):
        try:
            fn = student_code.load(name, variant)
        except Exception as error:  # a fixture that does not even load is a test bug
            result.crashed[variant] = f"does not load: {error!r}"
            continue
        public_verdicts[variant] = _verdicts(question, fn, public, public_expected)
    rules = list(enumerate(question.rules))
    memory: dict[str, list] = {}  # variant -> [its verdict on the first seed's memory test]
    for seed in seeds:
        hidden = specs_for(name, seed)[len(public) :]
        expected = [
            {} if spec.get("memory") and memory else _round_trip(question.run(reference, spec))
            for spec in hidden
        ]
        covered = [
            [at for at, spec in enumerate(public + hidden) if rule.covers(spec)]
            for _, rule in rules
        ]
        for variant, verdicts_public in public_verdicts.items():
            fn = student_code.load(name, variant)
            known = memory.get(variant)
            verdicts = verdicts_public + _verdicts(question, fn, hidden, expected, known)
            if known is None:
                memory[variant] = [
                    v
                    for s, v in zip(hidden, verdicts[len(public) :], strict=True)
                    if s.get("memory")
                ]
            if variant.startswith("correct"):
                if any(verdicts):
                    result.marked_down.setdefault(variant, []).append(seed)
                continue
            for (index, rule), tests in zip(rules, covered, strict=True):
                if variant in rule.mutants and not any(verdicts[at] for at in tests):
                    result.rule_missed.setdefault((index, variant), []).append(seed)
            failures = [f for f in verdicts if f]
            if not failures:
                result.survived.setdefault(variant, []).append(seed)
                continue
            result.kills += 1
            if names_the_mistake(name, variant, failures[0]):
                result.named += 1
            else:
                result.not_named.setdefault(variant, failures[0].message[:300])
            untrue = {f.mistake for f in failures} - allowed_names(name, variant)
            if untrue:
                result.false_names.setdefault(variant, set()).update(untrue)
    return result
