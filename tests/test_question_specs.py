"""Questions as the grader uses them: specs and outputs survive JSON, the reference passes
its own hidden specs, the hidden draw depends on its seed alone, the stub as handed out is
never taken for an answer, and every rule an exercise states has tests and mutants."""

import functools
import json
import random
from pathlib import Path

import pytest

from coursekit.checks import QUESTIONS
from coursekit.checks.question import Failure
from tests.helpers import mutation

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"

pytestmark = pytest.mark.grading


def round_trip(value):
    return json.loads(json.dumps(value))


@pytest.mark.slow  # over 4 s: out of the quick run (-m 'not slow')
@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("name", sorted(QUESTIONS))
def test_the_reference_passes_public_and_hidden_specs_after_json(name, seed):
    """A window question's memory test (0.1 s a run, its shape the same on every draw) on
    the first seed's draw only; tests/test_memory_peak.py measures it on others."""
    question = QUESTIONS[name]
    for spec in question.public_specs() + question.hidden_specs(random.Random(seed)):
        if spec.get("memory") and seed > 0:
            continue
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


@functools.cache
def _exercise_text(module: str) -> str:
    """The markdown of a module's source notebook, whitespace collapsed (rules are quoted
    across its line breaks)."""
    notebook = json.loads((NOTEBOOKS / f"{module}.ipynb").read_text(encoding="utf-8"))
    cells = [cell for cell in notebook["cells"] if cell["cell_type"] == "markdown"]
    return " ".join(" ".join("".join(cell["source"]) for cell in cells).split())


@pytest.mark.parametrize("name", sorted(QUESTIONS))
def test_every_rule_is_quoted_from_its_exercise_with_a_test_and_a_mutant(name):
    """Each question lists the rules its exercise states (Question.rules): each quoted word
    for word, with tests that pick out specs of the public set or the hidden draw, and
    mutants of the corpus that break it. That each mutant fails one of its rule's tests on
    every draw is benchmarks/mutation.py's job (it runs them all)."""
    question = QUESTIONS[name]
    assert question.rules, f"{name} lists no rule of its exercise"
    text = _exercise_text(question.module)
    specs = [
        round_trip(spec)
        for spec in question.public_specs() + question.hidden_specs(random.Random(0))
    ]
    corpus = set(mutation.mutants(name))
    for rule in question.rules:
        assert " ".join(rule.text.split()) in text, f"not in the exercise: {rule.text!r}"
        assert rule.specs.strip(), rule.text
        assert rule.mutants and set(rule.mutants) <= corpus, set(rule.mutants) - corpus
        assert any(rule.covers(spec) for spec in specs), f"no test of: {rule.text!r}"
