"""The gradebook, exports, feedback pages, certificates and hand-in reading (no sandbox)."""

import contextlib
import csv
import multiprocessing
import re
import stat
from pathlib import Path

import nbformat
import pytest

from coursekit.checks import questions_of
from coursekit.commands.cli import main
from coursekit.course import MODULES
from coursekit.grading.grader import GradeResult
from coursekit.grading.handin import HandInError, read_hand_in
from coursekit.grading.records import certificates
from coursekit.grading.records.exports import feedback_page, gradescope_results
from coursekit.grading.records.gradebook import Gradebook

# certificate and verify look for certificates/ from the current folder up: not this tree's
pytestmark = [pytest.mark.grading, pytest.mark.usefixtures("outside_the_course")]
REPO = Path(__file__).resolve().parents[1]


def result(student, score, sha, assignment="01_accumulation", error=None, feedback="ok"):
    return GradeResult(
        path=f"{student}.ipynb",
        student=student,
        assignment=assignment,
        sha256=sha,
        score=score,
        max_score=10.0,
        error=error,
        questions=[
            {
                "name": "accumulate_window",
                "score": min(score, 3.0),
                "max_score": 3.0,
                "feedback": feedback,
            }
        ],
    )


def test_every_attempt_is_kept_and_the_newest_hand_in_counts(tmp_path):
    with Gradebook(tmp_path / "g.sqlite") as book:
        book.record(result("ada", 4.0, "aaa"), None)
        book.record(result("ada", 9.0, "bbb"), None)
        book.record(result("bob", 7.0, "ccc"), None)
        assert book.attempts("ada", "01_accumulation") == 2
        assert book.is_graded("01_accumulation", "ada", "aaa")
        assert not book.is_graded("01_accumulation", "ada", "zzz")
        grades = {g.student: g.score for g in book.current_grades()}
        assert grades == {"ada": 9.0, "bob": 7.0}
        assert book.integrity() == "ok"


def _writer(path, prefix):
    with Gradebook(path) as book:
        for i in range(40):
            book.record(result(f"{prefix}{i}", 5.0, f"{prefix}{i}"), None)


@pytest.mark.slow  # over 4 s: out of the quick run (-m 'not slow')
def test_concurrent_writers_lose_nothing(tmp_path):
    path = tmp_path / "g.sqlite"
    Gradebook(path).close()
    context = multiprocessing.get_context("spawn")
    writers = [context.Process(target=_writer, args=(path, p)) for p in "xyz"]
    for w in writers:
        w.start()
    for w in writers:
        w.join(60)
    with Gradebook(path) as book:
        assert len(book.current_grades()) == 120
        assert book.integrity() == "ok"


def export(gradebook, fmt: str, out) -> int:
    return main(["export", "--gradebook", str(gradebook), "--format", fmt, "--out", str(out)])


def test_csv_gradescope_and_html_exports(tmp_path, capsys):
    path = tmp_path / "g.sqlite"
    with Gradebook(path) as book:
        book.record(result("<script>x</script>", 8.0, "a", feedback="use <= not <"), None)
        book.record(result("eve", 0.0, "b", error="This file is not a Jupyter notebook."), None)
        grades = book.current_grades()
    assert export(path, "csv", str(tmp_path / "grades.csv")) == 0
    rows = list(csv.DictReader(open(tmp_path / "grades.csv")))
    assert [r["student"] for r in rows] == ["<script>x</script>", "eve"]
    assert rows[0]["percent"] == "80.0" and rows[1]["error"].startswith("This file")

    results = gradescope_results(grades[0])
    assert results["score"] == 8.0
    assert results["tests"][0] == {
        "name": "accumulate_window",
        "score": 3.0,
        "max_score": 3.0,
        "output": "use <= not <",
        "visibility": "visible",
    }
    assert export(path, "gradescope", str(tmp_path / "gs")) == 0
    assert len(list((tmp_path / "gs").glob("*.json"))) == 2

    page = feedback_page(grades[0])
    assert "<script>x</script>" not in page and "&lt;script&gt;" in page
    assert "use &lt;= not &lt;" in page and "8 / 10 points" in page
    assert export(path, "html", str(tmp_path / "html")) == 0
    assert len(list((tmp_path / "html").glob("*.html"))) == 2


def test_exports_show_two_decimals_and_the_gradebook_keeps_the_exact_score(tmp_path):
    exact = 52 / 7  # 7.428571...
    graded = result("ada", exact, "a")
    graded.questions = [
        {"name": "q_full", "score": 3.0, "max_score": 3.0, "feedback": "ok"},
        {"name": "q_part", "score": 4.428571, "max_score": 5.0, "feedback": "some"},
        {"name": "q_none", "score": 0.0, "max_score": 2.0, "feedback": "none"},
    ]
    path = tmp_path / "g.sqlite"
    with Gradebook(path) as book:
        book.record(graded, None)
        (grade,) = book.current_grades()
    assert grade.score == exact  # stored as graded
    assert export(path, "csv", str(tmp_path / "grades.csv")) == 0
    (row,) = csv.DictReader(open(tmp_path / "grades.csv", encoding="utf-8"))
    assert (row["score"], row["max_score"], row["percent"]) == ("7.43", "10", "74.3")
    results = gradescope_results(grade)
    assert results["score"] == 7.43
    assert [t["score"] for t in results["tests"]] == [3.0, 4.43, 0.0]
    page = feedback_page(grade)
    assert "7.43 / 10 points" in page and "7.4286" not in page and "7.42857" not in page
    styles = dict(re.findall(r'<div class="question (\w+)"><h2>(\w+):', page))
    assert styles == {"full": "q_full", "partial": "q_part", "zero": "q_none"}
    assert ".zero {" in page and "q_part: 4.43 / 5" in page


def test_a_failing_cell_is_named_as_the_student_counts_it_with_its_first_line(tmp_path):
    from types import SimpleNamespace

    from coursekit.commands.class_report import _CELL_NOTE
    from coursekit.grading.grader import _cell_notes

    nb = nbformat.v4.new_notebook()
    nb.metadata["coursekit"] = {"assignment": "01_accumulation"}
    nb.cells = [
        nbformat.v4.new_markdown_cell("# Module 1"),
        nbformat.v4.new_code_cell("import torch"),
        nbformat.v4.new_markdown_cell("Some text"),
        nbformat.v4.new_markdown_cell("More text"),
        nbformat.v4.new_code_cell("\n   \n  print(total)  # the sum\nmore()"),
        nbformat.v4.new_code_cell("while True:\n    pass"),
        nbformat.v4.new_code_cell(""),
        nbformat.v4.new_code_cell("x = '" + "y" * 100 + "'"),
    ]
    path = tmp_path / "ada.ipynb"
    path.write_text(nbformat.writes(nb))
    hand_in = read_hand_in(path, "01_accumulation", "ada")
    assert hand_in.cell_positions == (2, 5, 6, 7, 8)
    run = SimpleNamespace(
        killed_cells={3: "it ended the grading process"},
        cells=[
            {"index": 1, "status": "error", "error": "NameError: name 'total' is not defined"},
            {"index": 2, "status": "timeout"},
            {"index": 4, "status": "error", "error": "E" * 1000},
        ],
    )
    skipped, raised, slow, long = _cell_notes(run, hand_in)
    counted = "(cells counted from the top, text cells too)."
    assert raised == (
        "Cell 5 raised NameError: name 'total' is not defined. "
        f'That cell starts "print(total)  # the sum" {counted}'
    )
    assert slow.startswith("Cell 6 took too long: ") and 'starts "while True:"' in slow
    assert skipped.startswith("Cell 7 was skipped: it ended") and "That cell is empty" in skipped
    assert long.startswith("Cell 8 raised EEE") and long.endswith(f'yyy…" {counted}')
    assert len(long) < 500  # notes are capped at 500 characters: the cell's line survives
    kinds = [_CELL_NOTE.match(note).group(1) for note in (skipped, raised, slow, long)]
    assert kinds == ["was skipped", "raised", "took too long", "raised"]


def test_export_without_a_gradebook_says_so(tmp_path, capsys):
    assert main(["export", "--gradebook", str(tmp_path / "none.sqlite")]) == 2
    assert "grade first" in capsys.readouterr().err


def certify(gradebook, student: str, key, out) -> int:
    return main(
        [
            "certificate",
            student,
            "--gradebook",
            str(gradebook),
            "--key",
            str(key),
            "--out",
            str(out),
            "--allow-placeholder",  # the template's repository address: a trial certificate
        ]
    )


@pytest.fixture
def passed_gradebook(tmp_path):
    path = tmp_path / "g.sqlite"
    with Gradebook(path) as book:
        # ada: every graded module, one point short of full marks in module 1; bob: one module.
        for module in MODULES:
            points = sum(q.points for q in questions_of(module.name))
            if points:
                lost = 1.0 if module.name == "01_accumulation" else 0.0
                book.record(result("ada", points - lost, module.name, module.name), None)
        book.record(result("bob", 2.0, "c"), None)
    return path


def test_a_certificate_needs_the_pass_mark(passed_gradebook, tmp_path, capsys):
    key = tmp_path / "key"
    argv = ["certificate", "--gradebook", str(passed_gradebook), "--key", str(key)]
    assert main([*argv, "ada", "--pass-mark", "99"]) == 1
    err = capsys.readouterr().err
    total = sum(q.points for m in MODULES for q in questions_of(m.name))
    assert f"ada has {total - 1:g} of {total:g} points (" in err  # 1 short in module 1
    assert "below the pass mark of 99%" in err
    assert main([*argv, "bob"]) == 1  # bob handed in module 1 alone: named, not scored
    assert "bob has no grade for 00_welcome, 02_loss_scaling" in capsys.readouterr().err
    assert not key.exists()  # nothing signed, no key made


def test_certificates_verify_and_any_edit_is_rejected(passed_gradebook, tmp_path, capsys):
    key, page = tmp_path / "keys" / "instructor.key", tmp_path / "ada.html"
    assert certify(passed_gradebook, "ada", key, page) == 0
    out = capsys.readouterr()
    secret = key.read_text().strip()
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert secret not in out.out + out.err + page.read_text()
    assert "PRIVATE" not in page.read_text() + (tmp_path / "ada.jwt").read_text()
    assert main(["verify", str(page), "--key", str(key)]) == 0
    assert "Genuine: ada" in capsys.readouterr().out

    text = page.read_text()
    shown = dict(re.findall(r'<span data-field="(\w+)">(.*?)</span>', text))
    for field, forged in [
        ("name", "Mallory"),
        ("score", "100.0%"),
        ("date", "2020-01-01"),
        ("id", "CK-0000-0000-0000-0000"),
    ]:
        edited = text.replace(
            f'data-field="{field}">{shown[field]}<', f'data-field="{field}">{forged}<'
        )
        assert edited != text
        forged_page = tmp_path / f"{field}.html"
        forged_page.write_text(edited)
        assert main(["verify", str(forged_page), "--key", str(key)]) == 1, field
        assert "NOT genuine" in capsys.readouterr().out
    # the signed data, edited in place: tests/test_certificates.py edits every signed field


def test_another_key_does_not_verify(passed_gradebook, tmp_path, capsys):
    page = tmp_path / "ada.html"
    certify(passed_gradebook, "ada", tmp_path / "k1", page)
    assert main(["verify", str(page), "--key", str(tmp_path / "k1")]) == 0
    certify(passed_gradebook, "ada", tmp_path / "k2", tmp_path / "other.html")
    assert main(["verify", str(page), "--key", str(tmp_path / "k2")]) == 1
    assert "the signature does not match" in capsys.readouterr().out
    assert main(["verify", str(page), "--key", str(tmp_path / "none")]) == 2
    assert "cannot read the key file" in capsys.readouterr().err
    assert certificates.verify("<html>nothing</html>", b"k" * 32).genuine is False


def write_notebook(path, metadata=None, cells=("x = 1",)):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(c) for c in cells]
    nb.metadata.update(metadata or {})
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)
    return path


def test_the_student_is_named_by_folder_or_file_never_by_the_notebook(tmp_path):
    a = write_notebook(tmp_path / "ada" / "01_accumulation.ipynb")
    assert read_hand_in(a, "01_accumulation").student == "ada"
    b = write_notebook(tmp_path / "bob.ipynb")
    assert read_hand_in(b, "01_accumulation").student == "bob"
    claims = write_notebook(tmp_path / "mallory.ipynb", {"coursekit": {"student": "ada"}})
    assert read_hand_in(claims, "01_accumulation").student == "mallory"


@pytest.mark.parametrize(
    "notebook",
    [
        '{"cells": [], "metadata": {"coursekit": "x"}}',
        '{"cells": [{"source": "x = 1"}, 7, {"cell_type": "code", "source": 5}], "metadata": []}',
    ],
)
def test_odd_but_readable_notebooks_are_graded_not_fatal(tmp_path, notebook):
    path = tmp_path / "odd.ipynb"
    path.write_text(notebook)
    assert read_hand_in(path, "01_accumulation").student == "odd"


def test_a_hand_in_for_another_assignment_is_named(tmp_path):
    tagged = write_notebook(tmp_path / "a.ipynb", {"coursekit": {"assignment": "00_welcome"}})
    with pytest.raises(HandInError, match="is the 00_welcome assignment"):
        read_hand_in(tagged, "01_accumulation")
    untagged = write_notebook(tmp_path / "b.ipynb", cells=["# Question: effective_batch_size\n"])
    with pytest.raises(HandInError, match="00_welcome"):
        read_hand_in(untagged, "01_accumulation")


def test_a_huge_hand_in_is_refused_with_what_to_do(tmp_path):
    big = tmp_path / "big.ipynb"
    big.write_bytes(b" " * (21 * 2**20))
    with pytest.raises(HandInError, match="Clear All Outputs"):
        read_hand_in(big, "01_accumulation")


def test_code_that_reaches_into_the_graders_instruments_is_flagged():
    from coursekit.grading.grader import suspicious

    tamper = (
        "for h in list(model._forward_pre_hooks.values()):\n"
        "    w = getattr(h, '__self__', None)\n"
        "    w.backward_passes = n"
    )
    assert suspicious([tamper]) == ["__self__", "_forward_pre_hooks"]
    assert suspicious(["import coursekit\ncoursekit.activation_bytes(model, x)"]) == []


def test_grading_an_unknown_assignment_lists_the_graded_ones(tmp_path, capsys):
    hand_in = write_notebook(tmp_path / "ada" / "02_loss_scalin.ipynb")
    status = main(["grade", str(hand_in), "--assignment", "02_loss_scalin", "--root", str(REPO)])
    assert status == 2
    err = capsys.readouterr().err
    assert "no graded assignment named '02_loss_scalin'" in err
    assert "02_loss_scaling" in err and "Running the reference" not in err


# ------------------------------------------------------------------ odd text, odd names


@pytest.mark.parametrize("name", ["ada\rlovelace", "ada\r\nlovelace", "Zoë <b>&</b>", "\tada"])
def test_a_certificate_for_an_odd_name_verifies(tmp_path, capsys, name):
    path = tmp_path / "g.sqlite"
    with Gradebook(path) as book:
        for module in MODULES:
            points = sum(q.points for q in questions_of(module.name))
            if points:
                book.record(result(name, points, module.name, module.name), None)
    key, page = tmp_path / "key", tmp_path / "cert.html"
    assert certify(path, name, key, page) == 0
    capsys.readouterr()
    assert main(["verify", str(page), "--key", str(key)]) == 0, capsys.readouterr().out


def test_text_a_hand_in_shapes_is_stored_and_exported_losslessly(tmp_path):
    odd = result(
        "\udcff\udcfeodd", 3.0, "aaa", error="ValueError: \ud800", feedback="bad \udc80 byte"
    )
    odd.path = "hand-ins/\udcff\udcfeodd.ipynb"
    odd.notes = ["Cell 2 raised ValueError: \ud800."]
    gradebook = tmp_path / "g.sqlite"
    with Gradebook(gradebook) as book:
        book.record(odd, None)
        (grade,) = book.current_grades()
        assert book.integrity() == "ok"
    assert grade.student == "\\udcff\\udcfeodd" and grade.error == "ValueError: \\ud800"
    assert grade.result["notes"] == ["Cell 2 raised ValueError: \\ud800."]
    for fmt in ("csv", "gradescope", "html"):
        out = str(tmp_path / fmt)
        assert main(["export", "--format", fmt, "--out", out, "--gradebook", str(gradebook)]) == 0
    (page,) = (tmp_path / "html").iterdir()
    assert "\\udc80" in page.read_text(encoding="utf-8")


def test_every_student_exports_to_a_file_of_their_own():
    from coursekit.grading.records.exports import file_stem

    names = ["ada", "ada.", "Ada", "ADA", "a d a", "a_d_a", "ada-", "\\udcffada", "ada/..", ".ada"]
    names += [file_stem("Ada"), file_stem("Ada").lower(), file_stem(file_stem("Ada"))]
    stems = [file_stem(n).casefold() for n in names]
    assert len(set(stems)) == len(names)  # apart even on a file system that ignores case
    assert file_stem("ada") == "ada"


def test_students_graded_in_different_runs_still_export_to_files_of_their_own(tmp_path):
    from coursekit.grading.records.exports import file_stem

    gradebook = tmp_path / "g.sqlite"
    with Gradebook(gradebook) as book:  # "Ada", then a student who named a file after Ada's
        book.record(result("Ada", 9.0, "aaa"), None)
        book.record(result(file_stem("Ada").lower(), 2.0, "bbb"), None)
    for fmt in ("gradescope", "html"):
        out = tmp_path / fmt
        assert (
            main(["export", "--format", fmt, "--out", str(out), "--gradebook", str(gradebook)]) == 0
        )
        assert len(list(out.iterdir())) == 2


def test_a_gradebook_that_cannot_be_written_stops_grading_and_keeps_what_it_has(
    tmp_path, monkeypatch, capsys
):
    from coursekit.commands import grade as command
    from tests.helpers.hand_ins import gradebook_full_after

    folder = tmp_path / "hand-ins"
    for name in ("ann", "ben", "cat", "dan"):
        write_notebook(folder / f"{name}.ipynb", {"coursekit": {"assignment": "01_accumulation"}})
    gradebook = tmp_path / "g.sqlite"
    real = Gradebook.record
    monkeypatch.setattr(command, "grade_all", _grade_in_order)  # this test is about storing
    monkeypatch.setattr(command, "prepare", _no_reference)
    monkeypatch.setattr(command, "WarmParent", contextlib.nullcontext)  # nothing is run
    monkeypatch.setattr(command, "describe_confinement", lambda applied: (["test"], []))
    monkeypatch.setattr(Gradebook, "record", gradebook_full_after(2))
    args = ["grade", str(folder), "--assignment", "01_accumulation", "--gradebook", str(gradebook)]
    assert main([*args, "--root", str(REPO)]) == 1
    err = capsys.readouterr().err
    assert "could not be written: database or disk is full" in err
    assert "2 result(s) recorded before are kept; 2 hand-in(s) were not recorded" in err
    with Gradebook(gradebook) as book:
        assert book.integrity() == "ok"
        assert sorted(g.student for g in book.current_grades()) == ["ann", "ben"]
    monkeypatch.setattr(Gradebook, "record", real)
    assert main([*args, "--root", str(REPO)]) == 0  # the same command grades the rest
    with Gradebook(gradebook) as book:
        assert sorted(g.student for g in book.current_grades()) == ["ann", "ben", "cat", "dan"]


def _grade_in_order(hand_ins, plan, workers, on_result, warm=None):
    from coursekit.grading.grader import file_sha256

    for path, student in hand_ins:  # a stand-in for the sandbox: this test is about storing
        on_result(GradeResult(path, student, plan.assignment, file_sha256(path), max_score=10.0))


def _no_reference(root, assignment, limits, seed=None, options=None, warm=None):
    from coursekit.grading.grader import Plan
    from coursekit.grading.sandbox.driver import Limits

    return Plan(assignment, {}, {}, Limits(), seed=seed)
