"""`coursekit --version`, the grade command's examples, the LMS export and hub links."""

from __future__ import annotations

import shlex
import sys
from importlib import metadata
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

from coursekit import course
from coursekit.checks import questions_of
from coursekit.commands.cli import GRADE_EXAMPLES, _source_version, main, parser
from coursekit.grading.grader import GradeResult
from coursekit.grading.records.exports import points
from coursekit.grading.records.gradebook import Gradebook

REPO = Path(__file__).resolve().parents[1]


def test_version_prints_the_installed_version(capsys):
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out == f"coursekit {metadata.version('coursekit')}\n"


def test_version_of_a_checkout_that_is_not_installed_comes_from_pyproject(monkeypatch, capsys):
    def not_installed(name):
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "version", not_installed)
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    tomllib = pytest.importorskip("tomllib")
    stated = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    assert capsys.readouterr().out == f"coursekit {stated}\n"


def test_the_pyproject_version_is_read_without_tomllib_too(monkeypatch, tmp_path):
    """Python 3.10 has no tomllib: the [project] table's version is found by hand."""
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text(
        '[tool.other]\nversion = "9.9.9"\n\n[project]\nname = "coursekit"\nversion = "1.2.3"\n'
        '\n[tool.later]\nversion = "8.8.8"\n'
    )
    assert _source_version(pyproject) == "1.2.3"
    monkeypatch.setitem(sys.modules, "tomllib", None)  # import tomllib now fails
    assert _source_version(pyproject) == "1.2.3"
    assert _source_version(tmp_path / "missing.toml") == "unknown"


def test_grade_help_shows_each_example_on_a_line_of_its_own(capsys):
    with pytest.raises(SystemExit):
        main(["grade", "--help"])
    lines = [line.strip() for line in capsys.readouterr().out.splitlines()]
    first = "coursekit grade hand-ins/01 --assignment 01_accumulation --gradebook grades.sqlite"
    assert first in GRADE_EXAMPLES
    for example in GRADE_EXAMPLES:
        assert example in lines


@pytest.mark.parametrize("example", GRADE_EXAMPLES)
def test_every_example_in_the_grade_help_parses(example):
    words = shlex.split(example)
    assert words[0] == "coursekit"
    args = parser().parse_args(words[1:])
    assert args.gradebook == "grades.sqlite" or "--gradebook" not in words


def test_an_example_with_a_flag_that_does_not_exist_would_fail_to_parse():
    words = shlex.split("coursekit grade hand-ins/01 --assignment 01_accumulation --gradbook g")
    with pytest.raises(SystemExit):
        parser().parse_args(words[1:])


def _result(student, assignment, score, max_score):
    return GradeResult(
        path=f"{student}.ipynb",
        student=student,
        assignment=assignment,
        sha256=f"{student}-{assignment}-{score}",
        score=score,
        max_score=max_score,
        error=None,
        questions=[],
    )


@pytest.fixture
def gradebook(tmp_path):
    path = tmp_path / "g.sqlite"
    with Gradebook(path) as book:
        book.record(_result("ada", "01_accumulation", 8.0, 10.0), None)
        book.record(_result("zoë", "01_accumulation", 7.5, 10.0), None)
        book.record(_result("=cmd", "01_accumulation", 2 / 3, 10.0), None)
        book.record(_result("ada", "02_loss_scaling", 5.0, 12.0), None)
    return path


@pytest.mark.grading
def test_the_lms_export_of_one_assignment_is_student_score_out_of(gradebook, tmp_path, capsys):
    out = tmp_path / "lms.csv"
    argv = ["export", "--format", "lms", "--assignment", "01_accumulation", "--out", str(out)]
    assert main([*argv, "--gradebook", str(gradebook)]) == 0
    assert f"wrote {out}: 3 students" in capsys.readouterr().out
    assert out.read_bytes() == (
        "student,score,out of\r\n'=cmd,0.67,10\r\nada,8,10\r\nzoë,7.5,10\r\n".encode()
    )


@pytest.mark.grading
def test_the_lms_export_without_an_assignment_is_the_course_total(gradebook, tmp_path):
    out = tmp_path / "lms"
    assert (
        main(["export", "--format", "lms", "--out", str(out), "--gradebook", str(gradebook)]) == 0
    )
    graded = [m.name for m in course.MODULES if questions_of(m.name)]
    assert {"01_accumulation", "02_loss_scaling"} <= set(graded)
    total = sum(q.points for name in graded for q in questions_of(name))
    rows = (out / "grades-lms.csv").read_text(encoding="utf-8").splitlines()
    assert rows == [
        "student,score,out of",
        f"'=cmd,0.67,{points(total)}",
        f"ada,13,{points(total)}",
        f"zoë,7.5,{points(total)}",
    ]


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (8.0, "8"),
        (100.0, "100"),
        (7.5, "7.5"),
        (0.1 + 0.2, "0.3"),
        (2 / 3, "0.67"),
        (52 / 7, "7.43"),
        (-1e-9, "0"),
        (0.0, "0"),
    ],
)
def test_points_have_no_trailing_zeros(value, text):
    assert points(value) == text


def test_links_prints_the_nbgitpuller_link_of_each_module(monkeypatch, capsys):
    monkeypatch.setattr(course, "REPOSITORY", "ada-lab/grad-accum")
    monkeypatch.setattr(course, "BRANCH", "spring/2025")
    monkeypatch.setattr(course, "MODULES", (course.module("01_accumulation"),))
    assert main(["links", "--hub", "https://hub.example.org/"]) == 0
    captured = capsys.readouterr()
    # not the placeholder: no warning, only where the links take the course from, and to
    assert captured.err == (
        "coursekit links: these links clone https://github.com/ada-lab/grad-accum (branch "
        "spring/2025) into the folder grad-accum/ of each student's home on the hub (under "
        "NBGITPULLER_PARENTPATH where the hub sets one), and open the module there.\n"
    )
    name, link = captured.out.splitlines()
    assert name == "01_accumulation  Accumulating gradients"
    assert link == (
        "    https://hub.example.org/hub/user-redirect/git-pull"
        "?repo=https%3A%2F%2Fgithub.com%2Fada-lab%2Fgrad-accum"
        "&branch=spring%2F2025"
        "&targetpath=grad-accum"
        "&app=lab"
        "&subpath=exercises/01_accumulation.ipynb"
    )
    query = parse_qs(urlsplit(link.strip()).query)
    assert query == {
        "repo": ["https://github.com/ada-lab/grad-accum"],
        "branch": ["spring/2025"],
        "targetpath": ["grad-accum"],
        "app": ["lab"],
        "subpath": ["exercises/01_accumulation.ipynb"],
    }


@pytest.mark.parametrize(
    ("repository", "folder"),
    [
        # nbgitpuller alone would clone this one into "grad-accum.git" (its handlers.py)
        ("https://gitlab.example.org/ada/grad-accum.git", "grad-accum"),
        ("https://gitlab.example.org/ada/grad-accum/", "grad-accum"),
        ("git@gitlab.example.org:ada/grad-accum.git", "grad-accum"),
        ("gitlab.example.org:ada/grad-accum.git", "grad-accum"),
        ("gitlab.example.org:/srv/grad-accum.git", "grad-accum"),
        ("ssh://git@example.org:2222/srv/grad-accum.git", "grad-accum"),
        ("file:///srv/courses/grad-accum", "grad-accum"),
        ("/srv/courses/grad-accum.git", "grad-accum"),
        ("/srv/courses/grad-accum/.git", "grad-accum"),
        ("my_host:courses/grad-accum", "grad-accum"),  # an ssh alias
        # nbgitpuller's status page redirects to the folder's name as it is: "%" would break it
        ("https://example.org/git/ml%20course", "ml-20course"),
        ("https://example.org/git/.course.git", "course"),  # JupyterLab hides dot-folders
    ],
)
def test_links_to_any_repository_name_the_folder_they_open(repository, folder, capsys):
    assert main(["links", "--hub", "https://hub.example.org", "--repository", repository]) == 0
    captured = capsys.readouterr()
    assert "warning" not in captured.err  # --repository: the placeholder does not matter
    assert f"into the folder {folder}/" in captured.err
    for link in captured.out.splitlines()[1::2]:
        query = parse_qs(urlsplit(link.strip()).query)
        assert query["repo"] == [repository]
        assert query["targetpath"] == [folder]  # where the clone lands...
        assert query["app"] == ["lab"] and query["subpath"][0].startswith("exercises/")
        assert "urlpath" not in query  # ...and what opens, relative to it (parent folder too)


def test_links_take_a_branch(capsys):
    assert main(["links", "--hub", "https://hub.example.org", "--branch", "week-2"]) == 0
    links = capsys.readouterr().out.splitlines()[1::2]
    assert all(parse_qs(urlsplit(link.strip()).query)["branch"] == ["week-2"] for link in links)


@pytest.mark.parametrize(
    ("repository", "said"),
    [
        ("courses/grad-accum", "relative path"),
        ("", "empty"),
        ("https://ada:s3cret@gitlab.example.org/ada/grad-accum.git", "password or token"),
        ("https://s3cret@github.com/ada-lab/grad-accum", "password or token"),  # a token
        ("ftp://example.org/grad-accum", "not an address git can clone"),
        ("https://gitlab.example.org/", "names no folder"),
        ("https://example.org/grad-accum?ref=x", "query or fragment"),
        ("/srv/my course", "space"),
    ],
)
def test_links_refuse_a_repository_a_hub_cannot_clone(repository, said, capsys):
    assert main(["links", "--hub", "https://hub.example.org", "--repository", repository]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and said in captured.err and "Traceback" not in captured.err
    assert "s3cret" not in captured.err


@pytest.mark.parametrize(
    ("branch", "said"),
    [(" ", "branch is empty"), ("spring 2025", "not a name git allows"), ("a..b", "not a name")],
)
def test_links_refuse_a_branch_git_would_refuse(branch, said, capsys):
    assert main(["links", "--hub", "https://hub.example.org", "--branch", branch]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and said in captured.err


def test_links_names_each_module_beside_its_link(monkeypatch, capsys):
    monkeypatch.setattr(course, "REPOSITORY", "ada-lab/grad-accum")
    extra = course.Module("07_more", "One more module", "More.", 30)
    monkeypatch.setattr(course, "MODULES", (*course.MODULES, extra))  # follows course.py
    assert main(["links", "--hub", "http://localhost:8000/jupyter"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 * len(course.MODULES)
    pairs = zip(lines[::2], lines[1::2], strict=True)
    for (name, link), module in zip(pairs, course.MODULES, strict=True):
        assert name == f"{module.name}  {module.title}"
        assert link.startswith("    http://localhost:8000/jupyter/hub/user-redirect/git-pull?")
        assert link.endswith(f"&subpath=exercises/{module.name}.ipynb")


def test_links_to_the_placeholder_repository_come_with_a_warning(monkeypatch, capsys):
    monkeypatch.setattr(course, "REPOSITORY", course.PLACEHOLDER_REPOSITORY)
    assert main(["links", "--hub", "https://hub.example.org"]) == 0
    captured = capsys.readouterr()
    assert captured.err.startswith("coursekit links: warning: these links pull https://github")
    assert "placeholder" in captured.err and "REPOSITORY in coursekit/course.py" in captured.err
    assert captured.out.count("git-pull?") == len(course.MODULES)  # the links still come


@pytest.mark.parametrize("hub", ["hub.example.org", "ftp://hub.example.org", "https://"])
def test_links_needs_a_web_address(hub, capsys):
    assert main(["links", "--hub", hub]) == 2
    err = capsys.readouterr().err
    assert "coursekit links:" in err and "http:// or https://" in err
    assert "Traceback" not in err
