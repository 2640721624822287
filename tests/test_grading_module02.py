"""The batch grader on module 2: the reference runs in the sandbox, a right hand-in gets full
marks, and every mistake a student makes is named in the feedback, as the notebook's checks
name it."""

import contextlib
import io
import json

import pytest

from coursekit.checks import questions_of
from coursekit.cli import main
from tests import student_code
from tests.handins import REPO, notebook

pytestmark = [pytest.mark.grading, pytest.mark.module2]
ASSIGNMENT = "02_loss_scaling"
HAND_INS = {
    "ada": {},
    "ben": {
        "loss_scales": "mean_of_means",
        "accumulate_tokens": "padding_counted",
        "amp_window": "unscale_every_micro_batch",
        "train_scheduled": "scheduler_every_micro_batch",
    },
    "cyd": {
        "loss_scales": "sum_divided_by_count",
        "accumulate_tokens": "mean_of_means",
        "amp_window": "clipped_before_unscale",
        "train_scheduled": "scheduler_never_stepped",
    },
    "dev": {
        "loss_scales": "correct_with_numpy",
        "accumulate_tokens": "correct_with_coursekit_helpers",
        "amp_window": "update_every_micro_batch",
        "train_scheduled": "last_window_scaled_by_n",
    },
}


def cells_of(variants: dict[str, str]) -> list[str]:
    cells = ["import torch\nfrom torch import nn\nimport coursekit"]
    for question in questions_of(ASSIGNMENT):
        variant = variants.get(question.name, "correct")
        cells.append(
            f"# Question: {question.name}\n" + student_code.BY_QUESTION[question.name][variant]
        )
    return cells


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    base = tmp_path_factory.mktemp("grading02")
    for student, variants in HAND_INS.items():
        folder = base / "hand-ins" / student
        folder.mkdir(parents=True)
        (folder / f"{ASSIGNMENT}.ipynb").write_text(notebook(cells_of(variants), ASSIGNMENT))
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        status = main(
            [
                "grade",
                str(base / "hand-ins"),
                "--assignment",
                ASSIGNMENT,
                "--json",
                "--workers",
                "2",
                "--gradebook",
                str(base / "gradebook.sqlite"),
                "--root",
                str(REPO),
            ]
        )
    assert status == 0
    return {
        json.loads(line)["student"]: json.loads(line) for line in stdout.getvalue().splitlines()
    }


def test_a_right_hand_in_gets_full_marks(graded):
    result = graded["ada"]
    assert result["error"] is None
    assert result["score"] == result["max_score"] == sum(q.points for q in questions_of(ASSIGNMENT))


@pytest.mark.parametrize("student", ["ben", "cyd", "dev"])
def test_each_mistake_is_named_and_costs_only_its_question(graded, student):
    result = graded[student]
    by_name = {q["name"]: q for q in result["questions"]}
    for question in questions_of(ASSIGNMENT):
        variant = HAND_INS[student].get(question.name, "correct")
        graded_question = by_name[question.name]
        if variant.startswith("correct"):
            assert graded_question["score"] == question.points, graded_question
        else:
            assert student_code.mistake_of(variant) in graded_question["mistakes"], graded_question
            assert graded_question["score"] < question.points
