"""The notebooks/ -> exercises/ + solutions/ pipeline: markup, transforms, golden outputs, sync."""

import json
import re
import shutil
import subprocess
from pathlib import Path

import nbformat
import pytest

from coursekit.authoring import MarkupError, build
from coursekit.authoring.demo_cells import released_demos, source_sha256
from coursekit.authoring.hidden_tests import drop_hidden_tests
from coursekit.authoring.markup import validate
from coursekit.authoring.outputs import clear_outputs
from coursekit.authoring.released_demos import RECORD, read_record, rebuild_from_git
from coursekit.authoring.setup_cell import SETUP_CELL_ID, add_setup_cell, setup_source
from coursekit.authoring.solutions import STUB, stub_solutions, unmark_solutions
from coursekit.commands.cli import main
from coursekit.course import install_spec

pytestmark = pytest.mark.authoring
REPO = Path(__file__).resolve().parents[1]
GOLDEN = Path(__file__).parent / "corpora" / "golden"
needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


def notebook(*sources, markdown=()):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(s) for s in sources]
    nb.cells += [nbformat.v4.new_markdown_cell(m) for m in markdown]
    return nb


QUESTION = (
    "# Question: double\ndef double(x):\n    ### BEGIN SOLUTION\n    return 2 * x\n"
    "    ### END SOLUTION"
)


# ------------------------------------------------------------------ markup errors


@pytest.mark.parametrize(
    ("sources", "message"),
    [
        (
            ["x = 1\n### BEGIN SOLUTION\ny = 2"],
            "cell 1: '### BEGIN SOLUTION' on line 2 is never closed",
        ),
        (["a = 1", "### END SOLUTION"], "cell 2: '### END SOLUTION' on line 1 has no"),
        (
            ["### BEGIN SOLUTION\n### BEGIN SOLUTION\n### END SOLUTION\n### END SOLUTION"],
            "opens inside the region opened on line 1",
        ),
        ([QUESTION, QUESTION], "cell 2: question 'double' is declared twice (first in cell 1)"),
        (["# Question: half\nhalf = 0.5"], "question 'half' has no '### BEGIN SOLUTION'"),
        (
            [QUESTION, "### BEGIN HIDDEN TESTS\nassert True\n### END HIDDEN TESTS"],
            "must name its question",
        ),
        (
            ["### BEGIN HIDDEN TESTS triple\n### END HIDDEN TESTS"],
            "no cell above declares '# Question: triple'",
        ),
        (
            ["### BEGIN HIDDEN TESTS double\n### END HIDDEN TESTS", QUESTION],
            "come before the question",
        ),
        (["# Question: 2x\n### BEGIN SOLUTION\n### END SOLUTION"], "is not a Python name"),
    ],
)
def test_bad_markup_is_an_error_naming_notebook_and_cell(sources, message):
    with pytest.raises(MarkupError) as error:
        validate(notebook(*sources), "notebooks/99_demo.ipynb")
    assert str(error.value).startswith("notebooks/99_demo.ipynb, cell")
    assert message in str(error.value)


@pytest.mark.parametrize(
    "marker", ["### BEGIN SOLUTION", "### END SOLUTION", "### END HIDDEN TESTS"]
)
def test_markers_in_markdown_are_an_error(marker):
    with pytest.raises(MarkupError, match="belong in code cells"):
        validate(notebook(markdown=[marker]), "n.ipynb")


def test_validate_returns_the_questions_in_order():
    second = QUESTION.replace("double", "twice")
    assert validate(notebook(QUESTION, second), "n.ipynb") == {"double": 0, "twice": 1}


# ------------------------------------------------------------------ transforms, one at a time


def test_stub_keeps_the_indentation_of_the_begin_marker():
    nb = stub_solutions(notebook(QUESTION), "n")
    assert nb.cells[0].source == f"# Question: double\ndef double(x):\n    {STUB}"


def test_unmark_keeps_the_code_and_drops_only_the_marker_lines():
    nb = unmark_solutions(notebook(QUESTION), "n")
    assert nb.cells[0].source == "# Question: double\ndef double(x):\n    return 2 * x"


def test_hidden_tests_are_dropped_and_an_emptied_cell_disappears():
    nb = notebook(
        "check()\n### BEGIN HIDDEN TESTS double\nassert secret\n### END HIDDEN TESTS\n",
        "### BEGIN HIDDEN TESTS double\nassert other_secret\n### END HIDDEN TESTS",
        "after = 1",
    )
    nb = drop_hidden_tests(nb, "n")
    assert [c.source for c in nb.cells] == ["check()", "after = 1"]


def test_outputs_counts_and_stray_metadata_are_cleared():
    nb = notebook("print(1)")
    nb.cells[0].outputs = [nbformat.v4.new_output("stream", text="1\n")]
    nb.cells[0].execution_count = 3
    nb.cells[0].metadata = {"tags": ["t"], "scrolled": True}
    nb.metadata["widgets"] = {"state": {}}
    nb = clear_outputs(nb, "n")
    assert nb.cells[0].outputs == [] and nb.cells[0].execution_count is None
    assert nb.cells[0].metadata == {"tags": ["t"]}
    assert set(nb.metadata) == {"kernelspec", "language_info"}


def test_the_setup_cell_comes_first_once():
    nb = add_setup_cell(add_setup_cell(notebook("x = 1"), "n"), "n")
    assert [c.get("id") for c in nb.cells][0] == SETUP_CELL_ID
    assert sum(c.get("id") == SETUP_CELL_ID for c in nb.cells) == 1


# ------------------------------------------------------------------ the set-up cell's logic


def run_setup_cell(monkeypatch, installed: bool):
    import importlib.util
    import subprocess

    calls = []
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: calls.append((a, k)))
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: (
            (real(name, *a) if installed else None) if name == "coursekit" else real(name, *a)
        ),
    )
    exec(setup_source(), {})
    return calls


def test_setup_cell_does_nothing_where_coursekit_is_installed(monkeypatch):
    assert run_setup_cell(monkeypatch, installed=True) == []


def test_setup_cell_installs_coursekit_from_the_repository_without_touching_torch(monkeypatch):
    ((args, kwargs),) = run_setup_cell(monkeypatch, installed=False)
    command = args[0]
    assert command[1:4] == ["-m", "pip", "install"] and command[-1] == install_spec()
    assert kwargs == {"check": True}
    assert not any("torch" in part for part in command)


# ------------------------------------------------------------------ the whole build


@pytest.fixture
def course(tmp_path):
    shutil.copytree(GOLDEN / "notebooks", tmp_path / "notebooks")
    return tmp_path


def test_golden_source_gives_exactly_the_expected_outputs(course):
    build(course)
    for folder in ("exercises", "solutions"):
        expected = (GOLDEN / "expected" / folder / "demo.ipynb").read_text()
        assert (course / folder / "demo.ipynb").read_text() == expected, folder


def test_check_names_each_file_that_would_change_and_exits_non_zero(course, capsys):
    assert main(["build", "--root", str(course)]) == 0
    assert main(["build", "--check", "--root", str(course)]) == 0
    edited = course / "exercises" / "demo.ipynb"
    edited.write_text(edited.read_text().replace("Twice x.", "Thrice x."))
    (course / "solutions" / "orphan.ipynb").write_text("{}")
    capsys.readouterr()
    assert main(["build", "--check", "--root", str(course)]) == 1
    err = capsys.readouterr().err
    assert "exercises/demo.ipynb" in err and "solutions/orphan.ipynb" in err
    assert "solutions/demo.ipynb" not in err
    build(course)
    assert not (course / "solutions" / "orphan.ipynb").exists()
    assert main(["build", "--check", "--root", str(course)]) == 0


def test_bad_markup_through_the_cli_is_one_clear_line(course, capsys):
    source = course / "notebooks" / "demo.ipynb"
    source.write_text(source.read_text().replace("### END SOLUTION", "### END SOLUTON", 1))
    assert main(["build", "--root", str(course)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("coursekit build: notebooks/demo.ipynb, cell 3:")
    assert "never closed" in err and "Traceback" not in err


def test_a_corrupt_source_notebook_is_named(course, capsys):
    (course / "notebooks" / "broken.ipynb").write_text("{not json")
    assert main(["build", "--root", str(course)]) == 2
    assert "notebooks/broken.ipynb: not a readable notebook" in capsys.readouterr().err


def test_the_same_question_in_two_notebooks_is_an_error(course, capsys):
    shutil.copy(course / "notebooks" / "demo.ipynb", course / "notebooks" / "demo2.ipynb")
    assert main(["build", "--root", str(course)]) == 2
    err = capsys.readouterr().err
    assert "notebooks/demo2.ipynb, cell 3: question 'double' is also declared in" in err
    assert "unique across the course" in err


def test_the_repository_is_in_sync_with_its_sources():
    assert build(REPO, check=True) == []


def test_generated_notebooks_carry_no_markers_hidden_tests_or_outputs():
    paths = sorted((REPO / "exercises").glob("*.ipynb")) + sorted(
        (REPO / "solutions").glob("*.ipynb")
    )
    assert len(paths) >= 4
    for path in paths:
        nb = nbformat.read(path, as_version=4)
        text = "\n".join(c.source for c in nb.cells)
        assert "BEGIN SOLUTION" not in text and "HIDDEN TESTS" not in text, path
        assert nb.cells[0].id == SETUP_CELL_ID
        assert all(not c.get("outputs") and not c.get("execution_count") for c in nb.cells)


def test_a_student_copy_holds_no_solutions_and_refuses_to_overwrite(tmp_path, capsys):
    from coursekit.commands.cli import find_course_root, main

    copy = tmp_path / "student-course"
    assert main(["student-copy", str(copy), "--root", str(REPO)]) == 0
    assert not (copy / "solutions").exists() and not (copy / "notebooks").exists()
    assert not (copy / "tests").exists()
    exercises = sorted(p.name for p in (copy / "exercises").glob("*.ipynb"))
    assert exercises == sorted(p.name for p in (REPO / "exercises").glob("*.ipynb"))
    for notebook in copy.rglob("*.ipynb"):
        assert "BEGIN SOLUTION" not in notebook.read_text(encoding="utf-8")
    assert find_course_root(copy / "exercises", marker="exercises") == copy
    assert main(["student-copy", str(copy), "--root", str(REPO)]) == 2
    assert "is not empty" in capsys.readouterr().err


def test_a_student_copy_has_a_readme_of_its_own_that_names_only_what_it_holds(
    tmp_path, monkeypatch
):
    from coursekit import course
    from coursekit.authoring.student_copy import make_student_copy, student_readme

    extra = course.Module("07_more", "One | more module", "Something new.", 30)
    monkeypatch.setattr(course, "MODULES", (*course.MODULES, extra))  # follows course.py
    copy = tmp_path / "student-course"
    make_student_copy(REPO, copy)
    readme = (copy / "README.md").read_text(encoding="utf-8")
    assert readme == student_readme() != (REPO / "README.md").read_text(encoding="utf-8")
    for gone in ("solutions/", "notebooks/", "instructor-guide", "scripts/test", "gradebook"):
        assert gone not in readme, gone
    table = [line for line in readme.splitlines() if line.startswith("| ")][1:]
    assert len(table) == len(course.MODULES)
    for row, module in zip(table, course.MODULES, strict=True):
        assert f"[exercises/{module.name}.ipynb](exercises/{module.name}.ipynb)" in row
        assert f" | {module.minutes} | " in row
    assert "One \\| more module" in table[-1]  # a title's pipe does not break the table
    # every file the README points a student to is in the copy (the extra module aside)
    linked = re.findall(r"\]\(([^)#:]+)\)", readme)
    mentioned = re.findall(r"`(\./scripts/\w+|docs/[\w.]+)", readme)
    assert "./scripts/start" in mentioned and "docs/colab.md" in linked
    for target in {*linked, *mentioned} - {"exercises/07_more.ipynb"}:
        assert (copy / target).exists(), target


# ------------------------------------------------------- the record of released demo cells


def _with_demo_cell(course: Path, source: str) -> None:
    """Give the course's source notebook a demo cell (id demo-plot) holding ``source``."""
    path = course / "notebooks" / "demo.ipynb"
    nb = nbformat.read(path, as_version=4)
    cells = [c for c in nb.cells if c.get("id") != "demo-plot"]
    cell = nbformat.v4.new_code_cell(source)
    cell.id = "demo-plot"
    cell.metadata["tags"] = ["demo"]
    nb.cells = [*cells, cell]
    nbformat.write(nb, path)


def test_build_records_each_released_demo_source_and_keeps_the_earlier_ones(course):
    assert build(course) and not (course / RECORD).exists()  # no demo cell: nothing to record
    _with_demo_cell(course, "print(double(3))")
    build(course)
    first = source_sha256("print(double(3))")
    assert read_record(course) == {"demo": {"demo-plot": [first]}}
    _with_demo_cell(course, "print(double(4))")
    assert course / RECORD in build(course, check=True)  # out of date until built
    build(course)
    second = source_sha256("print(double(4))")
    assert read_record(course) == {"demo": {"demo-plot": sorted([first, second])}}
    text = (course / RECORD).read_text()
    assert text == json.dumps(read_record(course), indent=2, sort_keys=True) + "\n"
    assert build(course, check=True) == []


def test_build_check_flags_a_record_that_lacks_the_current_demo_sources(course, capsys):
    _with_demo_cell(course, "print(double(3))")
    build(course)
    old = {"demo": {"demo-plot": [source_sha256("an earlier release's source")]}}
    (course / RECORD).write_text(json.dumps(old))
    capsys.readouterr()
    assert main(["build", "--check", "--root", str(course)]) == 1
    err = capsys.readouterr().err
    assert "notebooks/released-demos.json" in err and "exercises/" not in err
    build(course)
    hashes = read_record(course)["demo"]["demo-plot"]
    assert set(hashes) == {old["demo"]["demo-plot"][0], source_sha256("print(double(3))")}


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("{not json", "is not JSON"),
        ('["demo"]', "is not an object of assignments"),
        ('{"demo": {"demo-plot": ["abc"]}}', "is not a record: demo, cell 'demo-plot' holds no"),
    ],
)
def test_a_corrupt_record_is_an_error_that_says_what_to_do(course, capsys, text, why):
    _with_demo_cell(course, "print(double(3))")
    build(course)
    (course / RECORD).write_text(text)
    for args in (["build"], ["build", "--check"]):
        assert main([*args, "--root", str(course)]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"coursekit build: notebooks/released-demos.json {why}"), err
        assert "git checkout -- notebooks/released-demos.json" in err
        assert "scripts/record-released-demos" in err and "Traceback" not in err
    assert (course / RECORD).read_text() == text  # left for the instructor to restore


def test_a_missing_record_once_exercises_are_released_is_an_error(course, capsys):
    _with_demo_cell(course, "print(double(3))")
    build(course)  # the first build of a course writes its record
    (course / RECORD).unlink()
    assert main(["build", "--root", str(course)]) == 2
    err = capsys.readouterr().err
    assert "notebooks/released-demos.json is missing, and exercises/ holds released demo" in err
    assert "scripts/record-released-demos" in err and not (course / RECORD).exists()


@needs_git
def test_the_record_is_rebuilt_from_every_release_in_git_history(course):
    _with_demo_cell(course, "print(double(3))")
    build(course)
    (course / RECORD).unlink()
    git = ["git", "-C", str(course), "-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "exercises"], check=True)
    subprocess.run([*git, "commit", "-qm", "first release"], check=True)
    _with_demo_cell(course, "print(double(4))")
    (course / RECORD).write_text("{}")  # an empty record, so build may run
    build(course)
    subprocess.run([*git, "commit", "-qam", "second release"], check=True)
    (course / RECORD).unlink()
    assert rebuild_from_git(course) == course / RECORD
    expected = sorted(source_sha256(f"print(double({n}))") for n in (3, 4))
    assert read_record(course) == {"demo": {"demo-plot": expected}}
    assert build(course, check=True) == []


def test_the_committed_record_holds_the_current_exercises_demo_cells():
    record = read_record(REPO)
    for path in sorted((REPO / "exercises").glob("*.ipynb")):
        demos = released_demos(nbformat.read(path, as_version=4))
        assert demos, path
        for cell_id, source in demos.items():
            assert source_sha256(source) in record[path.stem][cell_id], (path.name, cell_id)
