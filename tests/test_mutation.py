"""Mutation testing: on every seed of the hidden draw, every plausible wrong answer loses
points, every correct style keeps full marks, no mistake name is attached that is not true,
each rule an exercise states is held by its own tests, and feedback names the mistake
(tests/helpers/mutation.py says how; benchmarks/mutation.py prints the scores)."""

import os
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context

import pytest

from coursekit.checks import QUESTIONS
from tests.corpora import student_code
from tests.helpers import mutation

pytestmark = [pytest.mark.grading, pytest.mark.slow]

# 16 hidden draws per question here; `benchmarks/mutation.py --seeds 50` (its default) prints
# the scores on 50, and COURSEKIT_MUTATION_SEEDS=50 runs this test on as many. This file is
# the suite's largest share of CPU time (about 6 CPU-seconds a draw), and it grows with the
# seeds: 30 draws here put the suite over its 12 minutes, and 20 did once the memory test
# measured six questions (753 s on a fresh clone).
SEEDS = range(int(os.environ.get("COURSEKIT_MUTATION_SEEDS", "16")))
GRADED = sorted(QUESTIONS)


class _Later:
    """A question's score, computed in this process when a test first asks for it."""

    def __init__(self, name: str):
        self.name, self._score = name, None

    def result(self):
        if self._score is None:
            self._score = mutation.score(self.name, SEEDS)
        return self._score


@pytest.fixture(scope="module")
def scores(request):
    """Every question's score, computed on all the cores there are (each question's work is
    independent; results come back as each test asks for its own). In the suite's own test
    processes (pytest-xdist, whole files to one process as scripts/test sends them), which
    already keep every core busy, each is computed in the test's process instead: worker
    processes would only add their imports (some 10 s of CPU)."""
    controller = " ".join(getattr(request.config, "workerinput", {}).get("mainargv", []))
    if "loadfile" in controller or "loadscope" in controller:  # a test process of scripts/test
        yield {name: _Later(name) for name in GRADED}
        return
    workers = max(1, min(len(GRADED), os.cpu_count() or 1))
    with ProcessPoolExecutor(workers, mp_context=get_context("spawn")) as pool:
        yield {name: pool.submit(mutation.score, name, SEEDS) for name in GRADED}


@pytest.mark.parametrize("name", GRADED)
def test_every_mutant_is_killed_and_every_correct_style_passes_on_every_seed(name, scores):
    score = scores[name].result()
    assert not score.crashed, score.crashed
    assert not score.survived, f"mutants that kept full marks (variant: seeds): {score.survived}"
    assert not score.marked_down, f"correct styles marked down (style: seeds): {score.marked_down}"
    assert not score.false_names, f"mistake names that are not true: {score.false_names}"


@pytest.mark.parametrize("name", GRADED)
def test_each_rule_is_broken_by_mutants_its_own_tests_kill_and_feedback_names_mistakes(
    name, scores
):
    """Each rule of the exercise (Question.rules) holds: every mutant that breaks it fails one
    of the rule's own tests on every seed. And the feedback of 95% of the killed mutants, over
    all seeds, names their mistake (benchmarks/mutation.py prints the figure)."""
    score = scores[name].result()
    rules = QUESTIONS[name].rules
    escaped = {
        f"{rules[index].text[:50]!r}: {variant}": seeds
        for (index, variant), seeds in score.rule_missed.items()
    }
    assert not escaped, f"mutants that failed none of their rule's tests (seeds): {escaped}"
    assert score.named_share >= 0.95, f"feedback that does not name it: {score.not_named}"


@pytest.mark.parametrize("name", GRADED)
def test_every_question_has_ten_mutants_and_three_correct_styles(name):
    assert len(mutation.mutants(name)) >= 10, mutation.mutants(name)
    assert len(mutation.correct_styles(name)) >= 3, mutation.correct_styles(name)


@pytest.mark.parametrize("module", sorted({q.module for q in QUESTIONS.values()}))
def test_every_module_has_four_non_textbook_mutants(module):
    questions = {n for n, q in QUESTIONS.items() if q.module == module}
    found = {(q, v) for q, v in student_code.NON_TEXTBOOK if q in questions}
    assert len(found) >= 4, sorted(found)
    assert all(v in student_code.BY_QUESTION[q] for q, v in found)


def test_the_sets_name_existing_mutants():
    for pairs in (student_code.HIDDEN_ONLY, student_code.UNNAMED, student_code.ALSO_NAMED):
        for question, variant in pairs:
            assert variant in student_code.BY_QUESTION[question], (question, variant)
            assert not variant.startswith("correct"), (question, variant)


def test_a_variant_name_means_the_same_mistake_in_every_module():
    """NAMED_AS is keyed by variant name alone: a name that one module maps to a mistake and
    another uses for its own would make ``mistake_of`` wrong for one of them."""
    clashes = {
        (question, variant): (
            module.NAMED_AS.get(variant, variant),
            student_code.mistake_of(variant),
        )
        for module in student_code._MODULES
        for question, variants in module.BY_QUESTION.items()
        for variant in variants
        if module.NAMED_AS.get(variant, variant) != student_code.mistake_of(variant)
    }
    assert clashes == {}, "rename one of each clashing variant (module's own name, merged one)"
