"""The set-up cell for each install source: the GitHub repository, a wheel URL, a Drive path."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import types
from pathlib import Path

import pytest

from coursekit import course
from coursekit.authoring import build
from coursekit.authoring.publication import Publication
from coursekit.authoring.setup_cell import add_setup_cell, setup_source
from coursekit.commands.cli import main

pytestmark = pytest.mark.authoring
GOLDEN = Path(__file__).parent / "corpora" / "golden"
WHEEL_URL = "https://course.example.org/files/coursekit-0.1.0-py3-none-any.whl"
DRIVE_WHEEL = "/content/drive/MyDrive/grad-accum/coursekit-0.1.0-py3-none-any.whl"
HEAD = [
    "# Set-up: installs coursekit where it is missing (e.g. on Colab, keeping Colab's",
    "# own torch); does nothing where it is already installed.",
    "import importlib.util",
    "import subprocess",
    "import sys",
    "",
]
PIP = [
    '    subprocess.run([sys.executable, "-m", "pip", "install", "-q", COURSEKIT], check=True)',
    "    importlib.invalidate_caches()  # lets the next cell import the new package",
]
MISSING = 'if importlib.util.find_spec("coursekit") is None:'


def test_from_git_the_cell_is_unchanged():
    requirement = "coursekit @ git+https://github.com/ada-lab/grad-accum@main"
    source = setup_source(Publication("ada-lab/grad-accum", "main"))
    assert source.splitlines() == [*HEAD, f'COURSEKIT = "{requirement}"', MISSING, *PIP]
    compile(source, "<set-up cell>", "exec")


def test_from_a_wheel_url_only_the_target_changes():
    source = setup_source(install_from=WHEEL_URL)
    assert source.splitlines() == [*HEAD, f'COURSEKIT = "{WHEEL_URL}"', MISSING, *PIP]
    compile(source, "<set-up cell>", "exec")


def test_from_drive_the_cell_mounts_drive_before_installing():
    source = setup_source(install_from=DRIVE_WHEEL)
    assert source.splitlines() == [
        *HEAD,
        f'COURSEKIT = "{DRIVE_WHEEL}"',
        MISSING,
        "    from google.colab import drive  # coursekit is in Google Drive: allow access",
        '    drive.mount("/content/drive")',
        *PIP,
    ]
    compile(source, "<set-up cell>", "exec")


def test_a_path_with_quotes_stays_one_python_string():
    path = '/content/drive/MyDrive/Ada "course"/coursekit-0.1.0-py3-none-any.whl'
    namespace: dict = {}
    exec(setup_source(install_from=path).split(MISSING)[0], namespace)
    assert namespace["COURSEKIT"] == path


def run_cell(source: str, monkeypatch) -> list:
    """Run the cell where coursekit is missing, recording mounts and pip calls in order."""
    calls = []
    monkeypatch.setattr(subprocess, "run", lambda command, **kw: calls.append(("pip", command)))
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "coursekit" else real(name)
    )
    colab = types.ModuleType("google.colab")
    colab.drive = types.SimpleNamespace(mount=lambda folder: calls.append(("mount", folder)))
    monkeypatch.setitem(sys.modules, "google", types.ModuleType("google"))
    monkeypatch.setitem(sys.modules, "google.colab", colab)
    exec(source, {})
    return calls


def test_the_wheel_url_is_what_pip_installs(monkeypatch):
    ((kind, command),) = run_cell(setup_source(install_from=WHEEL_URL), monkeypatch)
    assert kind == "pip" and command[1:4] == ["-m", "pip", "install"]
    assert command[-1] == WHEEL_URL


def test_drive_is_mounted_then_the_drive_path_installed(monkeypatch):
    calls = run_cell(setup_source(install_from=DRIVE_WHEEL), monkeypatch)
    assert [kind for kind, _ in calls] == ["mount", "pip"]
    assert calls[0][1] == "/content/drive" and calls[1][1][-1] == DRIVE_WHEEL


@pytest.mark.parametrize(
    "value",
    [
        "ftp://course.example.org/coursekit-0.1.0-py3-none-any.whl",
        "https://course.example.org/coursekit-0.1.0.tar.gz",
        "/content/coursekit-0.1.0-py3-none-any.whl",
        "~/coursekit-0.1.0-py3-none-any.whl",
        "coursekit==0.1.0",
    ],
)
def test_other_install_sources_are_refused_with_what_to_use(value):
    with pytest.raises(ValueError, match="an https URL ending in .whl, or a path under /content"):
        setup_source(install_from=value)


def test_install_from_in_course_py_reaches_the_built_notebooks(tmp_path, monkeypatch, capsys):
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "notebooks" / "demo.ipynb").write_text(
        (GOLDEN / "notebooks" / "demo.ipynb").read_text()
    )
    monkeypatch.setattr(course, "INSTALL_FROM", DRIVE_WHEEL, raising=False)
    build(tmp_path)
    for folder in ("exercises", "solutions"):
        assert DRIVE_WHEEL in (tmp_path / folder / "demo.ipynb").read_text()
    nb = add_setup_cell({"cells": []}, "demo")
    assert DRIVE_WHEEL in nb["cells"][0]["source"]
    monkeypatch.setattr(course, "INSTALL_FROM", "coursekit.whl")
    assert main(["build", "--root", str(tmp_path)]) == 2
    assert "INSTALL_FROM in coursekit/course.py is 'coursekit.whl'" in capsys.readouterr().err
