"""The Gradescope bundle, run end to end in a folder laid out like Gradescope's container.

``run_autograder`` runs as Gradescope runs it (a subprocess, from the root, with
AUTOGRADER_ROOT pointing at a temporary root), on module 00 for speed. setup.sh is not run:
it installs Python and torch in Gradescope's image (network, minutes); here the venv's own
python, first on PATH, stands in for what it installs, so setup.sh is only checked for its
syntax (``bash -n``) and for the pinned CPU torch it installs.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import nbformat
import pytest

from coursekit.cli import main
from coursekit.gradescope import (
    CONFIG,
    _NotGraded,
    build_bundle,
    find_submission,
    results_of,
    torch_pin,
)
from coursekit.grading.grader import GradeResult, recorded_demos
from coursekit.grading.sandbox import Limits
from tests.handins import REPO

pytestmark = [pytest.mark.grading, pytest.mark.module0]
ASSIGNMENT = "00_welcome"
CELL_TIMEOUT_S = 2.0  # CPU seconds: module 00's reference cells each take a fraction of it


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("bundle") / "autograder.zip"
    build_bundle(REPO, ASSIGNMENT, out, Limits(cell_timeout_s=CELL_TIMEOUT_S), seed=1234)
    return out


def gradescope_root(bundle: Path, folder: Path) -> Path:
    """``folder`` laid out as Gradescope's /autograder: source/ (the zip, unpacked with its
    files' modes), run_autograder copied beside it, submission/ and results/."""
    with zipfile.ZipFile(bundle) as archive:
        for info in archive.infolist():
            path = archive.extract(info, folder / "source")
            os.chmod(path, (info.external_attr >> 16) & 0o777 or 0o644)
    shutil.copy2(folder / "source" / "run_autograder", folder / "run_autograder")
    (folder / "submission").mkdir()
    (folder / "results").mkdir()
    return folder


def run_autograder(root: Path) -> dict:
    python_folder = Path(sys.executable).parent
    assert (python_folder / "python3").exists(), "run_autograder looks for python3 on PATH"
    env = {
        **os.environ,
        "PATH": f"{python_folder}{os.pathsep}{os.environ.get('PATH', '')}",
        "AUTOGRADER_ROOT": str(root),
    }
    done = subprocess.run(
        [str(root / "run_autograder")],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads((root / "results" / "results.json").read_text(encoding="utf-8"))


# ------------------------------------------------------------------------- the zip itself


def test_the_zip_holds_gradescopes_two_scripts_at_its_root_executable(bundle):
    with zipfile.ZipFile(bundle) as archive:
        modes = {info.filename: (info.external_attr >> 16) & 0o777 for info in archive.infolist()}
        source = archive.read(f"course/notebooks/{ASSIGNMENT}.ipynb")
        settings = json.loads(archive.read(CONFIG))
    assert modes["setup.sh"] == modes["run_autograder"] == 0o755
    # the source notebook (the reference the grader runs) travels as it is, students never
    # see the zip; and so does coursekit's source, which setup.sh installs
    assert source == (REPO / "notebooks" / f"{ASSIGNMENT}.ipynb").read_bytes()
    assert {"coursekit-src/pyproject.toml", "coursekit-src/coursekit/gradescope.py"} <= set(modes)
    assert not any("__pycache__" in name for name in modes)
    assert settings["seed"] == 1234 and settings["limits"]["cell_timeout_s"] == CELL_TIMEOUT_S


def test_the_zip_carries_the_record_of_released_demo_cells_where_the_grader_reads_it(
    bundle, tmp_path
):
    with zipfile.ZipFile(bundle) as archive:
        record = archive.read("course/notebooks/released-demos.json")
    assert record == (REPO / "notebooks" / "released-demos.json").read_bytes()
    course = gradescope_root(bundle, tmp_path) / "source" / "course"
    assert recorded_demos(course, ASSIGNMENT) == recorded_demos(REPO, ASSIGNMENT) != {}


def test_a_corrupt_record_stops_the_bundle_with_what_to_do(tmp_path, capsys):
    course = tmp_path / "course"
    shutil.copytree(REPO / "notebooks", course / "notebooks")
    (course / "notebooks" / "released-demos.json").write_text("{not json")
    with pytest.raises(ValueError, match=r"released-demos.json is not JSON .*git checkout"):
        build_bundle(course, ASSIGNMENT, tmp_path / "autograder.zip", torch_version="2.5.1")


def test_setup_sh_is_valid_bash_and_installs_the_pinned_cpu_torch(bundle, tmp_path):
    with zipfile.ZipFile(bundle) as archive:
        archive.extractall(tmp_path)
    for script in ("setup.sh", "run_autograder"):
        checked = subprocess.run(["bash", "-n", str(tmp_path / script)], capture_output=True)
        assert checked.returncode == 0, checked.stderr
    setup = (tmp_path / "setup.sh").read_text()
    pin = re.search(r"COURSEKIT_TORCH:-([0-9.]+)", (REPO / "scripts" / "setup").read_text())
    assert f'--index-url https://download.pytorch.org/whl/cpu "torch=={pin.group(1)}"' in setup
    torch_line = setup.index(f"torch=={pin.group(1)}")
    assert torch_line < setup.index('pip install "$SOURCE/coursekit-src"')  # torch first


def test_torch_pin_is_read_from_scripts_setup_or_asked_for(tmp_path):
    assert torch_pin(REPO) == re.search(
        r"COURSEKIT_TORCH:-([0-9.]+)", (REPO / "scripts" / "setup").read_text()
    ).group(1)
    with pytest.raises(ValueError, match="--torch"):
        torch_pin(tmp_path)


def test_the_command_refuses_an_unknown_assignment(tmp_path, capsys):
    status = main(
        ["gradescope", "--assignment", "99_nothing", "--out", str(tmp_path / "a.zip")]
        + ["--root", str(REPO)]
    )
    assert status == 2 and not (tmp_path / "a.zip").exists()
    assert "No graded assignment named '99_nothing'" in capsys.readouterr().err


# ------------------------------------------------------------------------ pieces, fast


def test_the_submission_is_the_one_notebook_or_the_one_named_after_the_assignment(tmp_path):
    with pytest.raises(_NotGraded, match="No notebook was found"):
        find_submission(tmp_path, ASSIGNMENT)
    (tmp_path / "notes.ipynb").write_text("{}")
    assert find_submission(tmp_path, ASSIGNMENT).name == "notes.ipynb"
    (tmp_path / "other.ipynb").write_text("{}")
    with pytest.raises(_NotGraded, match="several notebooks"):
        find_submission(tmp_path, ASSIGNMENT)
    (tmp_path / f"ada-{ASSIGNMENT}.coursekit.zip").write_bytes(b"")  # as `submit` names it
    assert find_submission(tmp_path, ASSIGNMENT).name == f"ada-{ASSIGNMENT}.coursekit.zip"
    (tmp_path / f"{ASSIGNMENT}.ipynb").write_text("{}")
    with pytest.raises(_NotGraded, match="several notebooks"):
        find_submission(tmp_path, ASSIGNMENT)


def test_results_name_the_mistakes_and_carry_the_notes():
    result = GradeResult("x.ipynb", "ada", "02_loss_scaling", score=0.5, max_score=2.0)
    result.questions = [
        {"name": "loss_scales", "score": 0.5, "max_score": 1.0, "feedback": "1 of 2 tests pass.",
         "mistakes": ["mean_of_means"]},
        {"name": "amp_window", "score": 0.0, "max_score": 1.0, "feedback": "0 of 2 tests pass.",
         "mistakes": []},
    ]  # fmt: skip
    result.notes = ["Cell 3 took too long: it was stopped at the time limit for one cell."]
    results = results_of(result)
    assert results["score"] == 0.5
    assert [t["output"] for t in results["tests"]] == [
        "1 of 2 tests pass. Mistakes named: mean_of_means.",
        "0 of 2 tests pass.",
    ]
    assert all(t["visibility"] == "visible" for t in results["tests"])
    assert "Score: 0.5 / 2." in results["output"] and "Cell 3 took too long" in results["output"]
    assert "No question was attempted" not in results["output"]


# ---------------------------------------------------------------- end to end, as Gradescope


def test_a_correct_hand_in_gets_full_marks(bundle, tmp_path):
    root = gradescope_root(bundle, tmp_path)
    shutil.copy(REPO / "solutions" / f"{ASSIGNMENT}.ipynb", root / "submission")
    results = run_autograder(root)
    assert results["score"] == 1.0
    assert [(t["name"], t["score"], t["max_score"]) for t in results["tests"]] == [
        ("effective_batch_size", 1.0, 1.0)
    ]
    assert re.fullmatch(r"All \d+ tests pass\.", results["tests"][0]["output"])
    assert results["output"] == "Score: 1 / 1."


def test_a_blank_hand_in_gets_zero_and_is_told_nothing_was_attempted(bundle, tmp_path):
    root = gradescope_root(bundle, tmp_path)
    shutil.copy(REPO / "exercises" / f"{ASSIGNMENT}.ipynb", root / "submission")
    results = run_autograder(root)
    assert results["score"] == 0.0 and results["tests"][0]["max_score"] == 1.0
    assert "not attempted" in results["tests"][0]["output"]
    assert "No question was attempted" in results["output"]


def test_a_broken_file_gets_zero_and_is_told_what_is_wrong(bundle, tmp_path):
    root = gradescope_root(bundle, tmp_path)
    (root / "submission" / f"{ASSIGNMENT}.ipynb").write_text('{"cells": [ not json')
    results = run_autograder(root)
    assert results["score"] == 0.0
    assert [(t["name"], t["score"], t["max_score"]) for t in results["tests"]] == [
        ("effective_batch_size", 0.0, 1.0)
    ]
    assert "not a Jupyter notebook that can be read" in results["output"]


def test_a_cell_that_runs_forever_is_stopped_and_reported(bundle, tmp_path):
    root = gradescope_root(bundle, tmp_path)
    notebook = nbformat.read(REPO / "solutions" / f"{ASSIGNMENT}.ipynb", as_version=4)
    notebook.cells.append(nbformat.v4.new_code_cell("while True:\n    pass"))
    nbformat.write(notebook, root / "submission" / f"{ASSIGNMENT}.ipynb")
    results = run_autograder(root)
    looping = sum(c.cell_type == "code" for c in notebook.cells)  # the last code cell
    assert f"Cell {looping} took too long" in results["output"]
    assert results["score"] == 1.0  # the loop costs only itself: the answer was graded


def test_the_command_writes_the_zip_with_the_limits_given(tmp_path, capsys):
    out = tmp_path / "autograder.zip"
    status = main(
        ["gradescope", "--assignment", ASSIGNMENT, "--out", str(out), "--root", str(REPO)]
        + ["--seed", "7", "--cell-timeout", "5", "--timeout", "100"]
    )
    assert status == 0, capsys.readouterr().err
    with zipfile.ZipFile(out) as archive:
        settings = json.loads(archive.read(CONFIG))
    assert settings["assignment"] == ASSIGNMENT and settings["seed"] == 7
    assert settings["limits"]["cell_timeout_s"] == 5.0
    assert settings["limits"]["hand_in_timeout_s"] == 100.0
    assert settings["limits"]["wall_factor"] == 3.0
    assert "300 s of wall-clock time" in capsys.readouterr().out
