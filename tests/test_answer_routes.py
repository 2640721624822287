"""Coursekit's answers under other names are watched where they answer.

A hand-in whose function calls coursekit's own answer while that question is tested is
flagged. The answer has more names than the library function of the question's name: the
check's reference, an earlier module's answer that answers this one too (module 1's
``train_accumulated`` takes a scheduler), the checks' own loops, a memory test's warm-up.
tests/helpers/answer_routes.py finds them all the way a student could: every coursekit
function that passes a question's public checks when the notebook's function calls it with
the question's own arguments, by name; it runs in a process of its own, where it wraps
coursekit's answers as the warm parent does, and judges each call as the runner counts it.
(The grader's end-to-end flag for such calls: tests/test_grading_modules.py.)
"""

import json
import subprocess
import sys

import pytest

from tests.helpers.hand_ins import REPO


@pytest.fixture(scope="module")
def found() -> list[dict]:
    run = subprocess.run(
        [sys.executable, "-m", "tests.helpers.answer_routes"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    return [json.loads(line) for line in run.stdout.splitlines()]


@pytest.fixture(scope="module")
def routes(found) -> list[dict]:
    return [line for line in found if "route" in line]


def test_the_search_finds_the_answers_it_must(routes):
    """Not an empty search: the library's answers, the checks' references, and the routes
    that were once unwatched are among what it finds."""
    found = {(r["question"], r["route"].rpartition(".")[2]) for r in routes}
    for wanted in [
        ("train_accumulated", "train_accumulated"),
        ("train_accumulated", "run_loop"),
        ("train_scheduled", "train_accumulated"),
        ("train_scheduled", "run_loop"),
        ("ddp_window", "right_window"),
        ("accumulate_window", "_accumulate"),  # given False for the argument it adds
        ("accumulate_window", "_honest_warm_up"),  # given an empty spec
        ("noise_scale", "estimate_from_micro_batches"),  # read through its as_dict()
        ("plan_accumulation", "_reference_plan"),
        ("ramp_plan", "ramp_plan"),
    ]:
        assert wanted in found, wanted
    assert len({r["question"] for r in routes}) >= 20


def test_every_route_to_an_answer_is_reported_under_its_question(routes):
    unwatched = [r for r in routes if not r["reported"]]
    assert unwatched == []


def test_no_coursekit_function_or_class_still_holds_an_unwatched_answer(found):
    """Found by review: ``train_recipe`` took ``recipe_window`` as a default when it was
    defined, so the unwatched answer was there for any cell to read; the tripwires are now
    put in its place, in defaults and closure cells too."""
    assert [line["held"] for line in found if "held" in line] == []
