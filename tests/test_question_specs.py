"""Questions as the grader uses them: specs and outputs survive JSON, the reference passes
its own hidden specs, and the hidden draw depends on its seed alone."""

import json
import random

import pytest

from coursekit.checks import QUESTIONS
from coursekit.checks.question import Failure

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


@pytest.mark.parametrize("name", sorted(QUESTIONS))
def test_the_hidden_draw_depends_on_the_seed_alone(name):
    question = QUESTIONS[name]
    for seed in (0, 1, 2**63 - 1):
        first = round_trip(question.hidden_specs(random.Random(seed)))
        random.seed(12345)  # the global generator must play no part
        assert round_trip(question.hidden_specs(random.Random(seed))) == first


# That every mistake loses points on every draw is tests/test_mutation.py's job.


def test_judges_refuse_outputs_of_the_wrong_shape():
    question = QUESTIONS["train_accumulated"]
    spec = question.public_specs()[0]
    expected = question.run(question.reference(), spec)
    for outputs in ({}, {"weights": "lots"}, {"weights": [1.0, "x"]}, {"weights": [1.0]}):
        with pytest.raises(Failure):
            question.judge(spec, outputs, expected)


def _stub(*args, **kwargs):
    raise NotImplementedError  # the exercise as handed out


@pytest.mark.parametrize("name", sorted(QUESTIONS))
def test_the_stub_as_handed_out_is_not_attempted_on_every_spec(name):
    """Every test of the untouched stub raises NotImplementedError out of ``run`` (the
    grader's "not attempted", 0 points): no spec, a refusal included, may take the stub's
    error for an answer."""
    question = QUESTIONS[name]
    for spec in question.public_specs() + question.hidden_specs(random.Random(0)):
        with pytest.raises(NotImplementedError):
            question.run(_stub, round_trip(spec))
