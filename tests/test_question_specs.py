"""Questions as the grader uses them: specs and outputs survive JSON, the reference passes
its own hidden specs, and every known mistake fails hidden specs whatever the draw."""

import json
import random

import pytest

from coursekit.checks import QUESTIONS
from coursekit.checks.question import Failure
from tests import student_code

pytestmark = pytest.mark.grading


def round_trip(value):
    return json.loads(json.dumps(value))


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("name", sorted(QUESTIONS))
def test_the_reference_passes_public_and_hidden_specs_after_json(name, seed):
    question = QUESTIONS[name]
    for spec in question.public_specs() + question.hidden_specs(random.Random(seed)):
        spec = round_trip(spec)
        outputs = round_trip(question.run(question.reference(), spec))
        question.judge(spec, outputs, question.run(question.reference(), spec))


MISTAKES = [
    (question, variant)
    for question, variants in student_code.BY_QUESTION.items()
    for variant in variants
    if not variant.startswith("correct") and QUESTIONS[question].hidden_tests
]


@pytest.mark.parametrize(("name", "variant"), MISTAKES)
def test_every_mistake_fails_the_hidden_specs_of_any_draw(name, variant):
    question = QUESTIONS[name]
    wrong = student_code.load(name, variant)
    for seed in range(4):
        failures = 0
        for spec in question.hidden_specs(random.Random(seed)):
            expected = question.run(question.reference(), spec)
            try:
                question.judge(spec, round_trip(question.run(wrong, spec)), expected)
            except Failure:
                failures += 1
        assert failures, f"{variant} passed every hidden spec drawn with seed {seed}"


def test_judges_refuse_outputs_of_the_wrong_shape():
    question = QUESTIONS["train_accumulated"]
    spec = question.public_specs()[0]
    expected = question.run(question.reference(), spec)
    for outputs in ({}, {"weights": "lots"}, {"weights": [1.0, "x"]}, {"weights": [1.0]}):
        with pytest.raises(Failure):
            question.judge(spec, outputs, expected)
