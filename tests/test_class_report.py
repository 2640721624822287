"""The class report (`coursekit report`): from a gradebook of real module 1 hand-ins graded in
the sandbox, with known mistakes, a flag, a failing cell and a cell that times out; and from
small hand-made gradebooks, for the ranking rule, several assignments and the errors."""

from __future__ import annotations

import base64
import contextlib
import io
import re
from html.parser import HTMLParser
from pathlib import Path

import nbformat
import pytest

from coursekit.commands.class_report import REEXPLAIN_RULE, load_summaries, write_report
from coursekit.commands.cli import main
from coursekit.grading.grader import GradeResult
from coursekit.grading.records.gradebook import Gradebook
from tests.helpers.hand_ins import ASSIGNMENT, IMPORTS, REPO, answers, notebook

pytestmark = pytest.mark.grading

# student -> the hand-in's cells; "<script>" checks that names are escaped on the page.
HAND_INS = {
    "ada": [IMPORTS, *answers()],
    "ben": [
        IMPORTS,
        *answers(accumulate_window="loss_not_divided", train_accumulated="step_every_micro_batch"),
    ],
    "cyd": [
        IMPORTS,
        *answers(accumulate_window="loss_not_divided", plan_micro_batch="not_largest"),
        "raise ValueError('boom')",
    ],
    "<script>": [
        IMPORTS,
        "# peeking at coursekit.checks",
        *answers(accumulate_window="loss_not_divided"),
    ],
    "dev": [IMPORTS, "while True:\n    pass", *answers(train_accumulated="step_every_micro_batch")],
}


@pytest.fixture(scope="module")
def graded(tmp_path_factory) -> Path:
    """A gradebook of the hand-ins above, graded as `coursekit grade` grades."""
    base = tmp_path_factory.mktemp("class-report")
    for student, cells in HAND_INS.items():
        folder = base / "hand-ins" / student
        folder.mkdir(parents=True)
        text = notebook(cells)
        if student == "cyd":  # text cells count where the student looks for a cell
            nb = nbformat.reads(text, as_version=4)
            nb.cells.insert(0, nbformat.v4.new_markdown_cell("# My answers"))
            nb.cells.insert(len(nb.cells) - 1, nbformat.v4.new_markdown_cell("Now a test:"))
            text = nbformat.writes(nb)
        (folder / f"{ASSIGNMENT}.ipynb").write_text(text)
    gradebook = base / "gradebook.sqlite"
    with contextlib.redirect_stdout(io.StringIO()):
        status = main(
            ["grade", str(base / "hand-ins"), "--assignment", ASSIGNMENT, "--workers", "2"]
            + ["--cell-timeout", "2", "--gradebook", str(gradebook), "--root", str(REPO)]
        )
    assert status == 0
    return gradebook


@pytest.fixture(scope="module")
def page(graded, tmp_path_factory) -> str:
    out = tmp_path_factory.mktemp("report") / "report.html"
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(["report", "--gradebook", str(graded), "--out", str(out)]) == 0
    return out.read_text(encoding="utf-8")


def table_rows(page: str, heading: str) -> list[list[str]]:
    """The cells' text of each row of the table under ``heading`` (header row left out)."""
    section = page.split(f"<h3>{heading}</h3>", 1)[1].split("<h3>", 1)[0]
    rows = re.findall(r"<tr>(.*?)</tr>", section, re.S)[1:]
    return [
        [re.sub(r"<[^>]+>", "", c) for c in re.findall(r"<td[^>]*>(.*?)</td>", r)] for r in rows
    ]


@pytest.mark.slow  # over 4 s: out of the quick run (-m 'not slow')
def test_each_mistake_is_counted_with_the_students_who_made_it(page):
    rows = table_rows(page, "The most common named mistakes")
    assert [row[:4] for row in rows] == [
        ["loss_not_divided", "accumulate_window", "3", "&lt;script&gt;, ben, cyd"],
        ["step_every_micro_batch", "train_accumulated", "2", "ben, dev"],
        ["not_largest", "plan_micro_batch", "1", "cyd"],
    ]
    assert "not divided" in rows[0][4]  # one instance's feedback describes it


def test_flags_and_failed_or_timed_out_cells_are_listed_per_student(page):
    flagged = table_rows(page, "Hand-ins flagged for review, or not graded")
    assert [row[:2] for row in flagged] == [["&lt;script&gt;", "flagged"]]
    assert "coursekit.checks" in flagged[0][2]
    cells = table_rows(page, "Cells that failed or timed out")
    assert [row[:2] for row in cells] == [["cyd", "failed"], ["dev", "timed out"]]
    assert cells[0][2] == (
        "Cell 7 raised ValueError: boom. That cell starts &quot;raise ValueError(&#x27;boom&#x27;)"
        "&quot; (cells counted from the top, text cells too)."
    )
    assert cells[1][2].startswith("Cell 2 took too long")
    assert "That cell starts &quot;while True:&quot;" in cells[1][2]


def test_the_question_most_students_lost_points_on_comes_first(graded, page):
    (summary,) = load_summaries(graded, ASSIGNMENT)
    assert summary.class_size == 5
    assert summary.max_score == 10
    firsts = summary.reexplain_first()
    assert [p.question.name for p in firsts] == [
        "accumulate_window",
        "train_accumulated",
        "plan_micro_batch",
    ]
    assert firsts[0].mistakes[0].name == "loss_not_divided"
    assert REEXPLAIN_RULE.split("(")[0].strip() in page.replace("&#x27;", "'")
    section = page.split("<h3>What to re-explain first</h3>")[1]
    assert section.index("accumulate_window") < section.index("train_accumulated")


def test_the_class_totals_are_on_the_page(graded, page):
    with Gradebook(graded) as book:
        totals = sorted(g.score for g in book.current_grades(ASSIGNMENT))
    mean = f"{sum(totals) / 5:.2f}".rstrip("0").rstrip(".")
    assert "<b>5</b> students" in page
    assert f"mean total\n<b>{mean}</b>" in page
    assert f"median total <b>{f'{totals[2]:.2f}'.rstrip('0').rstrip('.')}</b>" in page


class Tags(HTMLParser):
    """Every start tag's name and attributes, and whether end tags matched start tags."""

    VOID = {"meta", "img", "br", "hr", "link", "input"}

    def __init__(self):
        super().__init__()
        self.tags: list[tuple[str, dict]] = []
        self.open: list[str] = []
        self.mismatched: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        if tag not in self.VOID:
            self.open.append(tag)

    def handle_endtag(self, tag):
        if not self.open or self.open.pop() != tag:
            self.mismatched.append(tag)


def test_the_page_is_valid_self_contained_html_with_names_escaped(page):
    parser = Tags()
    parser.feed(page)
    parser.close()
    assert page.startswith("<!doctype html>")
    assert not parser.mismatched and not parser.open
    assert "<script" not in page.lower()  # the student <script> is text, and no script runs
    assert "&lt;script&gt;" in page
    assert "http://" not in page and "https://" not in page
    images = [attrs for tag, attrs in parser.tags if tag == "img"]
    assert len(images) == 4  # the totals and each of the three questions
    for attrs in images:
        assert attrs["src"].startswith("data:image/png;base64,")
        assert base64.b64decode(attrs["src"].split(",", 1)[1])[:8] == b"\x89PNG\r\n\x1a\n"
    sources = [attrs.get("src") or attrs.get("href") for _, attrs in parser.tags]
    assert all(s is None or s.startswith("data:") for s in sources)


# Hand-made gradebooks: no sandbox, for the rule, several assignments and the errors.


def grade(student, assignment, questions, notes=(), error=None) -> GradeResult:
    """A grading: ``questions`` is ``[(name, score, max_score, mistakes), ...]``."""
    return GradeResult(
        path=f"{student}.ipynb",
        student=student,
        assignment=assignment,
        sha256=f"{student}-{assignment}",
        score=sum(q[1] for q in questions),
        max_score=sum(q[2] for q in questions),
        questions=[
            {
                "name": n,
                "score": s,
                "max_score": m,
                "feedback": f"1 of 2 tests pass. {n} off.",
                "mistakes": list(k),
            }
            for n, s, m, k in questions
        ],
        notes=list(notes),
        error=error,
    )


def sample_gradebook(path: Path) -> Path:
    """Two assignments; on "02_x", q2 and q3 have the same mean and q3 more students below."""
    with Gradebook(path) as book:
        for result in (
            grade("ada", "01_y", [("q1", 1, 1, ())]),
            grade(
                "ada", "02_x", [("q1", 2, 2, ()), ("q2", 0, 2, ("m_a",)), ("q3", 1, 2, ("m_b",))]
            ),
            grade("bob", "02_x", [("q1", 2, 2, ()), ("q2", 2, 2, ()), ("q3", 1, 2, ("m_b",))]),
            grade(
                "cat",
                "02_x",
                [("q1", 0, 2, ()), ("q2", 0, 2, ()), ("q3", 0, 2, ())],
                error="This file is not a Jupyter notebook.",
            ),
        ):
            book.record(result, None)
    return path


def test_ties_go_to_the_question_more_students_lost_points_on(tmp_path):
    (summary,) = load_summaries(sample_gradebook(tmp_path / "g.sqlite"), "02_x")
    firsts = summary.reexplain_first()
    assert [(p.question.name, p.question.below_full) for p in firsts] == [("q3", 2), ("q2", 1)]
    assert [m.name for m in firsts[0].mistakes] == ["m_b"]
    assert summary.flagged[0].student == "cat" and summary.flagged[0].kind == "not graded"
    # cat's hand-in was never graded: its zeros are no scores, so no number counts them
    assert summary.not_graded == ("cat",) and summary.class_size == 3
    assert summary.mean_total == 4 and summary.median_total == 4
    assert [len(q.scores) for q in summary.questions] == [2, 2, 2]


def test_a_hand_in_never_graded_is_named_and_counted_in_no_number(tmp_path):
    page = write_report(sample_gradebook(tmp_path / "g.sqlite"), tmp_path / "r.html", "02_x")
    page = page.read_text(encoding="utf-8")
    assert "Every cell of every hand-in ran" not in page
    assert "Every cell of the 2 graded hand-ins ran; 1 hand-in was not graded (listed above)." in (
        page
    )
    assert "<b>1</b> not graded" in page and "the mean and median are of the 2 graded" in page
    assert "mean total\n<b>4</b>" in page and "median total <b>4</b>" in page


def test_a_class_none_of_whose_hand_ins_was_graded_says_so(tmp_path):
    with Gradebook(tmp_path / "g.sqlite") as book:
        for student in ("ada", "bob"):
            book.record(grade(student, "01_y", [("q1", 0, 1, ())], error="Not a notebook."), None)
    (summary,) = load_summaries(tmp_path / "g.sqlite", "01_y")
    assert summary.mean_total is None and summary.questions == ()
    page = write_report(tmp_path / "g.sqlite", tmp_path / "r.html").read_text(encoding="utf-8")
    assert "no hand-in was graded" in page and "No hand-in was graded (2 listed above)" in page
    assert "Every student got full marks" not in page and "Every cell" not in page


def test_without_an_assignment_each_graded_one_has_a_section(tmp_path):
    out = write_report(sample_gradebook(tmp_path / "g.sqlite"), tmp_path / "r.html")
    page = out.read_text(encoding="utf-8")
    assert re.findall(r'<section class="assignment" id="([^"]+)">', page) == ["01_y", "02_x"]
    assert "Every student got full marks on every question." in page  # 01_y


def report(*args: str) -> tuple[int, str]:
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
        status = main(["report", *args])
    return status, stderr.getvalue()


def test_a_missing_gradebook_an_empty_one_and_an_unknown_assignment_are_named(tmp_path):
    missing = tmp_path / "none.sqlite"
    status, message = report("--gradebook", str(missing), "--out", str(tmp_path / "r.html"))
    assert status == 2 and "no gradebook at" in message and "coursekit grade" in message
    assert not missing.exists()  # reading a report never makes a gradebook

    Gradebook(tmp_path / "empty.sqlite").close()
    status, message = report("--gradebook", str(tmp_path / "empty.sqlite"))
    assert status == 2 and "holds no grades yet" in message

    book = sample_gradebook(tmp_path / "g.sqlite")
    status, message = report("--gradebook", str(book), "--assignment", "03_z")
    assert status == 2 and "'03_z'" in message and "01_y, 02_x" in message
    assert not (tmp_path / "r.html").exists()


def test_a_file_that_is_no_gradebook_is_named(tmp_path):
    (tmp_path / "notes.txt").write_text("not sqlite " * 100)
    status, message = report("--gradebook", str(tmp_path / "notes.txt"))
    assert status == 2 and "cannot be opened" in message
