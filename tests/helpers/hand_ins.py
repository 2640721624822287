"""Building hand-ins in tests: notebooks of chosen answers, and what a grading run leaves.

The answers come from ``tests/corpora/student_code`` (the right one and each known mistake,
per question); these helpers only put them in cells and notebooks.
"""

from __future__ import annotations

import os
from pathlib import Path

import nbformat

from coursekit.checks import questions_of
from tests.corpora import student_code

REPO = Path(__file__).resolve().parents[2]
ASSIGNMENT = "01_accumulation"
IMPORTS = "import torch\nfrom torch import nn\nimport coursekit"


def answers(**variants: str) -> list[str]:
    """The three answers as cells; ``question=variant`` swaps one for a mistake."""
    cells = []
    for question in ("accumulate_window", "train_accumulated", "plan_micro_batch"):
        variant = variants.get(question, "correct")
        cells.append(f"# Question: {question}\n" + student_code.BY_QUESTION[question][variant])
    return cells


def notebook(cells: list[str], assignment: str = ASSIGNMENT) -> str:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(source) for source in cells]
    nb.metadata["coursekit"] = {"assignment": assignment}
    return nbformat.writes(nb)


def cells_of(assignment: str, variants: dict[str, str]) -> list[str]:
    """Every question of ``assignment`` as a cell: ``variants`` (question -> variant) swaps
    answers for mistakes; the others are right."""
    cells = ["import torch\nfrom torch import nn\nimport coursekit"]
    for question in questions_of(assignment):
        variant = variants.get(question.name, "correct")
        source = student_code.BY_QUESTION[question.name][variant]
        cells.append(f"# Question: {question.name}\n{source}")
    return cells


def gradebook_full_after(count: int):
    """A stand-in for ``Gradebook.record`` that fails, with SQLite's own error raised where
    SQLite raises it, once the gradebook holds ``count`` gradings (a disk that filled up)."""
    import sqlite3

    from coursekit.grading.records.gradebook import Gradebook

    real = Gradebook.record

    def record(self, graded, run_id):
        with self._writing():
            if self._db.execute("SELECT COUNT(*) FROM gradings").fetchone()[0] >= count:
                raise sqlite3.OperationalError("database or disk is full")
        real(self, graded, run_id)

    return record


def processes_below_me() -> list[str]:
    """Command lines of the live processes below this test process. The grader is a
    subreaper, so whatever a grading run left behind that outlived its parent is here, while
    another test run's processes on the machine are not."""
    parents: dict[int, int] = {}
    lines: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ")
        except (OSError, IndexError):
            continue
        if fields[0] == "Z":  # a zombie has ended: only its parent has yet to reap it
            continue
        parents[int(entry.name)] = int(fields[1])
        lines[int(entry.name)] = command.decode("utf-8", "replace")
    me = os.getpid()

    def below_me(pid: int) -> bool:
        seen = set()
        while pid not in (0, 1) and pid not in seen:
            seen.add(pid)
            pid = parents.get(pid, 0)
            if pid == me:
                return True
        return False

    return [line for pid, line in lines.items() if below_me(pid)]


def runners_left() -> int:
    """Grading processes (warm parents, runners, their forks) still alive below this test:
    forks of the warm parent carry its command line, which names its entry module."""
    from coursekit.grading.sandbox.warm_parent import ENTRY_MODULE

    return sum(ENTRY_MODULE in line for line in processes_below_me())
