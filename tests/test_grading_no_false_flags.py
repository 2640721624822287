"""No false flags (issue 29): every correct style and every mistake the test suite knows, for
every graded question, goes through the real grader and is never flagged for review.

A mistake is not tampering, and a flag an instructor learns to ignore protects nothing. The
variants come from tests/student_code*.py (those tests/test_mutation.py runs against the
checks); hand-in ``i`` of a module answers each question with its ``i``-th variant (modulo
their number), so every variant of every question is graded once, in as few hand-ins as
the question with the most variants needs.
"""

import json
import subprocess
import sys

import pytest

from coursekit.checks import questions_of
from coursekit.course import MODULES
from tests.corpora import student_code
from tests.helpers.hand_ins import REPO, cells_of, notebook

pytestmark = [pytest.mark.grading, pytest.mark.slow]
GRADED = [m.name for m in MODULES if questions_of(m.name)]
LIMITS = ["--cell-timeout", "20", "--test-timeout", "10", "--timeout", "300", "--wall-factor", "3"]


def hand_ins(assignment: str) -> dict[str, dict[str, str]]:
    """student -> {question: variant}: every variant of every question, once."""
    variants = {q.name: sorted(student_code.BY_QUESTION[q.name]) for q in questions_of(assignment)}
    count = max(len(v) for v in variants.values())
    return {f"v{i:02d}": {q: v[i % len(v)] for q, v in variants.items()} for i in range(count)}


@pytest.mark.parametrize("assignment", GRADED)
def test_no_correct_style_and_no_mistake_is_flagged(assignment, tmp_path):
    planned = hand_ins(assignment)
    folder = tmp_path / "hand-ins"
    folder.mkdir()
    for student, variants in planned.items():
        (folder / f"{student}.ipynb").write_text(
            notebook(cells_of(assignment, variants), assignment)
        )
    command = [sys.executable, "-m", "coursekit.commands.cli", "grade", str(folder), "--json"]
    command += ["--assignment", assignment, "--workers", "2", "--root", str(REPO), *LIMITS]
    command += ["--gradebook", str(tmp_path / "gradebook.sqlite")]
    done = subprocess.run(command, capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 0, done.stderr[-3000:]
    results = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert len(results) == len(planned)
    flagged = {
        r["student"]: (planned[r["student"]], [n for n in r["notes"] if "Flagged" in n])
        for r in results
        if any("Flagged" in n for n in r["notes"])
    }
    assert flagged == {}
