"""Names and text a hand-in shapes, on the terminal and in every export: control characters
(CR, ESC), bidirectional controls (U+202E) and invisible characters (U+200B, U+FEFF) are
written as visible escapes (``\\u202e``), the same way everywhere; letters of any script are
kept; the gradebook keeps each name as it is; names that had to be escaped are named once on
the terminal, and names that would read the same once escaped are said to."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import nbformat
import pytest

from coursekit.checks import questions_of
from coursekit.commands import grade as command
from coursekit.commands.cli import main
from coursekit.course import MODULES
from coursekit.grading.grader import GradeResult
from coursekit.grading.records.exports import feedback_page, gradescope_results, name_warnings
from coursekit.grading.records.gradebook import Gradebook
from coursekit.grading.sandbox.driver import Limits
from coursekit.grading.text import INVISIBLE, for_terminal, look_alikes, text_for_page, visible

# certificate and verify look for certificates/ from the current folder up: not this tree's
pytestmark = [pytest.mark.grading, pytest.mark.usefixtures("outside_the_course")]
REPO = Path(__file__).resolve().parents[1]
ASSIGNMENT = "01_accumulation"

BIDI = "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f\u061c"
ZERO_WIDTH = "\u200b\u200c\u200d\u2060\u2061\u2062\u2063\u2064\ufeff\u180e\u00ad"
# name -> how every export and the terminal write it
ODD_NAMES = {
    "cr\rada": "cr\\rada",
    "ev\x1b[2J\x1b[31mil": "ev\\x1b[2J\\x1b[31mil",
    "ada\u202egpj.exe": "ada\\u202egpj.exe",
    "a\u200bda": "a\\u200bda",
    "\ufeffbom": "\\ufeffbom",
}
# every raw character the odd names hold that must never reach a terminal or an export
RAW = ("\r", "\x1b", "\u202e", "\u200b", "\ufeff")


def _must_be_absent(text: str) -> None:
    found = [hex(ord(ch)) for ch in RAW if ch in text]
    assert not found, found


# ------------------------------------------------------------------ the escaping itself


@pytest.mark.parametrize("ch", ["\r", "\n", "\x1b", "\x00", "\x7f", "\x85", "\x9b"])
def test_control_characters_are_escaped(ch):
    shown = for_terminal(f"a{ch}b")
    assert shown == "a" + ch.encode("unicode_escape").decode("ascii") + "b"
    assert shown.isprintable()


@pytest.mark.parametrize("ch", list(BIDI + ZERO_WIDTH))
def test_bidirectional_and_invisible_characters_are_escaped(ch):
    assert ch in INVISIBLE
    escape = "\\xad" if ch == "\u00ad" else f"\\u{ord(ch):04x}"  # Python's own spelling
    assert for_terminal(f"a{ch}b") == f"a{escape}b"
    assert visible(f"a{ch}b") == for_terminal(f"a{ch}b")
    assert ch not in text_for_page(f"line one{ch}\nline two")


@pytest.mark.parametrize(
    "name", ["José", "李小龙", "Zoë Ångström", "Мария", "دانا", "ada lovelace"]
)
def test_letters_of_any_script_are_kept(name):
    assert for_terminal(name) == visible(name) == text_for_page(name) == name


def test_escaping_is_idempotent_and_free_text_keeps_its_lines():
    for name, shown in ODD_NAMES.items():
        assert for_terminal(name) == shown
        assert for_terminal(shown) == shown
    assert text_for_page("a\u202eb\n\tc\u00a0d\re") == "a\\u202eb\n\tc\u00a0d\\re"
    assert for_terminal("\udcff") == "\\udcff"  # a lone surrogate, as lossless writes it


def test_names_that_read_the_same_once_escaped_are_found():
    assert look_alikes(["a\u200bb", "a\\u200bb", "ab", "José"]) == [["a\\u200bb", "a\u200bb"]]
    assert look_alikes(["ab", "a\u200bb"]) == []  # escaped, they differ
    lines, groups = name_warnings(["ab", "a\u200bb", "José"], "so.")
    assert groups == [] and len(lines) == 1 and "'a\\u200bb'" in lines[0]
    assert "José" not in lines[0] and "'ab'" not in lines[0]
    assert name_warnings(["ada", "José"], "so.") == ([], [])


# ------------------------------------------------------------------ gradebooks


def result(student, score=8.0, sha="a", assignment=ASSIGNMENT, feedback="ok", notes=()):
    graded = GradeResult(
        path=f"{student}.ipynb",
        student=student,
        assignment=assignment,
        sha256=sha,
        score=score,
        max_score=10.0,
        error=None,
        questions=[
            {
                "name": "accumulate_window",
                "score": min(score, 3.0),
                "max_score": 3.0,
                "feedback": feedback,
                "mistakes": ["loss_not_divided"] if score < 3 else [],
            }
        ],
    )
    graded.notes = list(notes)
    return graded


def _passing(path: Path, names) -> Path:
    """A gradebook where each of ``names`` has full marks in every graded module."""
    with Gradebook(path) as book:
        for name in names:
            for module in MODULES:
                points = sum(q.points for q in questions_of(module.name))
                if points:
                    book.record(result(name, points, module.name, module.name), None)
    return path


@pytest.fixture
def odd_gradebook(tmp_path) -> Path:
    path = tmp_path / "g.sqlite"
    with Gradebook(path) as book:
        for index, name in enumerate([*ODD_NAMES, "José", "李"]):
            book.record(
                result(
                    name,
                    2.0 + index,
                    f"sha{index}",
                    feedback="use <= \u202enot <\u200b",
                    notes=["Cell 2 raised ValueError: \u202eboom\ufeff."],
                ),
                None,
            )
    return path


def _students(gradebook: Path) -> list[str]:
    with Gradebook(gradebook) as book:
        return sorted(g.student for g in book.current_grades())


# ------------------------------------------------------------------ the terminal


@pytest.mark.parametrize("name", list(ODD_NAMES))
def test_a_certificate_names_the_student_escaped(tmp_path, capsys, name):
    gradebook = _passing(tmp_path / "g.sqlite", [name])
    key, page = tmp_path / "key", tmp_path / "cert.html"
    argv = ["certificate", name, "--gradebook", str(gradebook), "--key", str(key)]
    assert main([*argv, "--out", str(page), "--allow-placeholder"]) == 0  # the template's URL
    out, err = capsys.readouterr()
    _must_be_absent(out + err)
    assert f": {ODD_NAMES[name]}, 100.0%, ID CK-" in out
    assert err.count("warning") == 1 and ODD_NAMES[name] in err
    text = page.read_text(encoding="utf-8")  # shown escaped on the page too, signed as given
    _must_be_absent(text)
    assert f'<span data-field="name">{ODD_NAMES[name]}</span>' in text.replace("&#x27;", "'")
    assert main(["verify", str(page), "--key", str(key)]) == 0  # the page holds the name
    out, err = capsys.readouterr()
    _must_be_absent(out + err)
    assert out.startswith(f"Genuine: {ODD_NAMES[name]}, ")


@pytest.mark.parametrize("name", list(ODD_NAMES))
def test_a_student_below_the_pass_mark_is_named_escaped(tmp_path, capsys, name):
    gradebook = _passing(tmp_path / "g.sqlite", ["ada"])
    key = tmp_path / "key"
    assert main(["certificate", name, "--gradebook", str(gradebook), "--key", str(key)]) == 1
    out, err = capsys.readouterr()
    _must_be_absent(out + err)
    assert f"coursekit certificate: {ODD_NAMES[name]} has no grade for 00_welcome, " in err


def test_a_plain_name_gets_no_warning(tmp_path, capsys):
    gradebook = _passing(tmp_path / "g.sqlite", ["José"])
    argv = ["certificate", "José", "--gradebook", str(gradebook), "--key", str(tmp_path / "k")]
    assert main([*argv, "--out", str(tmp_path / "c.html"), "--allow-placeholder"]) == 0
    out, err = capsys.readouterr()
    assert ": José, 100.0%" in out and err == ""


def test_the_grade_table_names_each_student_escaped(odd_gradebook, capsys):
    with Gradebook(odd_gradebook) as book:
        command._print_table(book, ASSIGNMENT)
    out = capsys.readouterr().out
    _must_be_absent(out)
    lines = out.splitlines()
    assert lines[0].startswith("student") and len(lines) == 1 + len(ODD_NAMES) + 2
    for shown in [*ODD_NAMES.values(), "José", "李"]:
        assert any(line.startswith(shown + " ") for line in lines[1:]), shown


def _write_notebook(path: Path) -> Path:
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell("x = 1")]
    notebook.metadata["coursekit"] = {"assignment": ASSIGNMENT}
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(notebook, path)
    return path


def _grade_in_order(hand_ins, plan, workers, on_result, warm=None):
    from coursekit.grading.grader import file_sha256

    for path, student in hand_ins:  # a stand-in for the sandbox: this is about printing
        on_result(result(student, 2.0, file_sha256(path), notes=["Flagged for review: odd."]))


def _no_reference(root, assignment, limits, seed=None, options=None, warm=None):
    from coursekit.grading.grader import Plan

    return Plan(assignment, {}, {}, Limits(), seed=seed)


class _NoWarmParent:
    """A warm parent that starts nothing (prepare() is replaced: nothing runs)."""

    def launch(self):
        return None

    def close(self):
        return None


def test_grading_hand_ins_with_odd_file_names_prints_them_escaped(tmp_path, monkeypatch, capsys):
    folder = tmp_path / "hand-ins"
    for name in ODD_NAMES:
        _write_notebook(folder / f"{name}.ipynb")
    monkeypatch.setattr(command, "grade_all", _grade_in_order)  # nothing is run
    monkeypatch.setattr(command, "prepare", _no_reference)
    monkeypatch.setattr(command, "WarmParent", _NoWarmParent)
    monkeypatch.setattr(command, "describe_confinement", lambda applied: (["test"], []))
    gradebook = tmp_path / "g.sqlite"
    status = command.run_grade(REPO, [str(folder)], ASSIGNMENT, gradebook, 1, False, Limits())
    assert status == 0
    out, err = capsys.readouterr()
    _must_be_absent(out + err)
    for shown in ODD_NAMES.values():
        assert any(line.startswith(shown + " ") for line in out.splitlines()), shown
        assert f"\n  {shown}: odd.\n" in err  # the flagged list: each one, and why
    assert _students(gradebook) == sorted(ODD_NAMES)  # stored as they are


# ------------------------------------------------------------------ exports


def export(gradebook: Path, fmt: str, out: Path, *more: str) -> int:
    return main(
        ["export", "--gradebook", str(gradebook), "--format", fmt, "--out", str(out), *more]
    )


def _one_warning(err: str, command_name: str = "export") -> str:
    warnings = [line for line in err.splitlines() if "warning" in line]
    assert len(warnings) == 1, warnings
    assert warnings[0].startswith(f"coursekit {command_name}: warning: {len(ODD_NAMES)} student")
    for shown in ODD_NAMES.values():
        assert f"'{shown}'" in warnings[0]
    assert "José" not in warnings[0] and "李" not in warnings[0]
    return warnings[0]


def test_the_csv_export_writes_names_escaped_and_says_so_once(odd_gradebook, tmp_path, capsys):
    before = _students(odd_gradebook)
    out = tmp_path / "grades.csv"
    assert export(odd_gradebook, "csv", out) == 0
    _, err = capsys.readouterr()
    _must_be_absent(err)
    _one_warning(err)
    text = out.read_text(encoding="utf-8")
    _must_be_absent(text.replace("\r\n", "\n"))  # the CSV's own line ends are CRLF
    students = [row["student"] for row in csv.DictReader(io.StringIO(text))]
    assert sorted(students) == sorted([*ODD_NAMES.values(), "José", "李"])
    assert _students(odd_gradebook) == before  # the gradebook's keys are as they were


def test_the_lms_export_writes_names_escaped(odd_gradebook, tmp_path, capsys):
    out = tmp_path / "lms.csv"
    assert export(odd_gradebook, "lms", out, "--assignment", ASSIGNMENT) == 0
    _, err = capsys.readouterr()
    _one_warning(err)
    text = out.read_text(encoding="utf-8")
    _must_be_absent(text.replace("\r\n", "\n"))
    rows = list(csv.reader(io.StringIO(text)))
    assert rows[0] == ["student", "score", "out of"]
    assert sorted(r[0] for r in rows[1:]) == sorted([*ODD_NAMES.values(), "José", "李"])


def test_escaped_names_keep_their_formula_protection(tmp_path, capsys):
    gradebook = tmp_path / "g.sqlite"
    with Gradebook(gradebook) as book:
        book.record(result("=HYPERLINK(\u202e)", sha="a"), None)
        book.record(result("\t@sum", sha="b"), None)
    out = tmp_path / "lms.csv"
    assert export(gradebook, "lms", out, "--assignment", ASSIGNMENT) == 0
    rows = list(csv.reader(io.StringIO(out.read_text(encoding="utf-8"))))[1:]
    assert sorted(r[0] for r in rows) == ["'=HYPERLINK(\\u202e)", "\\t@sum"]
    assert export(gradebook, "csv", tmp_path / "all.csv") == 0
    rows = list(csv.DictReader(open(tmp_path / "all.csv", encoding="utf-8")))
    assert sorted(r["student"] for r in rows) == ["'=HYPERLINK(\\u202e)", "\\t@sum"]


def test_feedback_pages_and_gradescope_results_show_every_character(odd_gradebook, tmp_path):
    with Gradebook(odd_gradebook) as book:
        grades = {g.student: g for g in book.current_grades()}
    for name, shown in ODD_NAMES.items():
        page = feedback_page(grades[name])
        _must_be_absent(page)
        assert f"Feedback for <b>{shown}</b>" in page
        assert "use &lt;= \\u202enot &lt;\\u200b" in page  # HTML-escaped and made visible
        assert "ValueError: \\u202eboom\\ufeff." in page
        results = gradescope_results(grades[name])
        assert results["tests"][0]["output"] == "use <= \\u202enot <\\u200b"
    assert "Feedback for <b>José</b>" in feedback_page(grades["José"])


@pytest.mark.parametrize("fmt", ["html", "gradescope"])
def test_page_exports_name_the_escaped_students_once(odd_gradebook, tmp_path, capsys, fmt):
    out = tmp_path / fmt
    assert export(odd_gradebook, fmt, out) == 0
    out_text, err = capsys.readouterr()
    _one_warning(err)
    _must_be_absent(out_text + err)
    files = list(out.iterdir())
    assert len(files) == len(ODD_NAMES) + 2  # one each: no two students share a file
    for path in files:
        _must_be_absent(path.read_text(encoding="utf-8"))


def test_the_class_report_shows_names_escaped_and_the_command_names_them(
    odd_gradebook, tmp_path, capsys
):
    out = tmp_path / "report.html"
    assert main(["report", "--gradebook", str(odd_gradebook), "--out", str(out)]) == 0
    _, err = capsys.readouterr()
    _one_warning(err, "report")
    page = out.read_text(encoding="utf-8")
    _must_be_absent(page)
    for shown in ODD_NAMES.values():
        assert shown.replace("<", "&lt;") in page
    assert "José" in page and "李" in page
    assert "\\u202eboom\\ufeff" in page  # the notes of the cells that failed


# ------------------------------------------------------------------ names that would merge


@pytest.fixture
def look_alike_gradebook(tmp_path) -> Path:
    path = tmp_path / "g.sqlite"
    with Gradebook(path) as book:
        book.record(result("a\u200bb", 9.0, "a"), None)  # a zero-width space
        book.record(result("a\\u200bb", 1.0, "b"), None)  # its escape, spelt out
        book.record(result("ab", 5.0, "c"), None)  # without: apart once escaped
    return path


def test_a_csv_with_names_that_read_the_same_says_so(look_alike_gradebook, tmp_path, capsys):
    out = tmp_path / "grades.csv"
    assert export(look_alike_gradebook, "csv", out) == 1
    err = capsys.readouterr().err
    assert "are different students whose names read the same once escaped" in err
    assert "a_b-" in err and "a_u200bb-" in err  # each named by its own files
    rows = list(csv.DictReader(open(out, encoding="utf-8")))
    assert sorted((r["student"], r["score"]) for r in rows) == [
        ("a\\u200bb", "1"),  # scores as points() writes them
        ("a\\u200bb", "9"),
        ("ab", "5"),
    ]
    assert _students(look_alike_gradebook) == sorted(["a\\u200bb", "a\u200bb", "ab"])


def test_an_lms_csv_leaves_out_names_that_read_the_same(look_alike_gradebook, tmp_path, capsys):
    out = tmp_path / "lms.csv"
    assert export(look_alike_gradebook, "lms", out, "--assignment", ASSIGNMENT) == 1
    err = capsys.readouterr().err
    assert "not written (a grade import would give both grades to one name)" in err
    assert out.read_text(encoding="utf-8").splitlines() == ["student,score,out of", "ab,5,10"]
