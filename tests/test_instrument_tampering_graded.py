"""Issue 40, item 4a, end to end: the grader's verdict on hand-ins that reach the checks'
instruments through the objects their functions are given, Docker-like without Landlock (the
mode with the least around a hand-in); namespaces mode grades the same hand-ins in the module
1 corpus batch (tests/test_grading_corpus.py).

One small batch of module 1 in a course copied to a temporary folder: the right answers, the
issue's attack (a whole-batch forward, then the record rewritten through what the hooks lead
to), the hooks cleared around a whole-batch forward, and a single backward with the gradient
hooks called and poked by hand to look like one per micro-batch. Each attack loses the
question it attacks; the right answers keep full marks. About 45 s on 2 busy cores (torch
imported once, the reference and four hand-ins): marked slow.
"""

from __future__ import annotations

import json
import os
import shutil
import sys

import pytest

from tests.corpora import instrument_attacks
from tests.helpers import docker_like
from tests.helpers.hand_ins import IMPORTS, REPO, answers, notebook

pytestmark = [pytest.mark.grading, pytest.mark.module1, pytest.mark.slow]
ASSIGNMENT = "01_accumulation"
LIMITS = ["--cell-timeout", "20", "--test-timeout", "10", "--timeout", "150"]

ATTACKS = instrument_attacks.module1_hand_ins(answers)
HAND_INS = {"ada": answers(), **{name: cells for name, _, cells, _ in ATTACKS}}
LOST = {name: (question, words) for name, question, _, words in ATTACKS}


def _course_and_batch(tmp_path):
    os.chmod(tmp_path, 0o755)
    course = tmp_path / "course"
    for folder in ("notebooks", "solutions"):
        (course / folder).mkdir(parents=True)
        shutil.copy(REPO / folder / f"{ASSIGNMENT}.ipynb", course / folder)
    batch = tmp_path / "hand-ins"
    batch.mkdir()
    for name, cells in HAND_INS.items():
        (batch / f"{name}.ipynb").write_text(notebook([IMPORTS, *cells], ASSIGNMENT))
    (tmp_path / "books").mkdir()
    for path in [tmp_path, *tmp_path.rglob("*")]:
        os.chmod(path, 0o755 if path.is_dir() else 0o644)
    command = [sys.executable, "-m", "coursekit.commands.cli", "grade", str(batch), "--json"]
    command += ["--assignment", ASSIGNMENT, "--root", str(course)]
    command += ["--gradebook", str(tmp_path / "books" / "gradebook.sqlite"), *LIMITS]
    return command


@pytest.mark.skipif(docker_like.available() is not None, reason=str(docker_like.available()))
def test_reaching_an_instrument_loses_the_question_it_protects(tmp_path):
    command = _course_and_batch(tmp_path)
    env = {**os.environ, "AS_USER_PATHS": str(tmp_path)}
    done = docker_like.run(command, old=True, capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    results = {
        record["student"]: record
        for record in map(json.loads, filter(None, done.stdout.splitlines()))
    }
    assert results["ada"]["score"] == results["ada"]["max_score"] > 0, results["ada"]
    for name, (question, words) in LOST.items():
        scored = {q["name"]: q for q in results[name]["questions"]}
        lost = scored[question]
        assert lost["score"] < lost["max_score"], (name, lost)
        assert words in lost["feedback"], (name, lost["feedback"])
        others = [q for n, q in scored.items() if n != question]
        assert all(q["score"] == q["max_score"] for q in others), (name, others)
