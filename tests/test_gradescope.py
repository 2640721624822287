"""The Gradescope bundle, run end to end in a folder laid out like Gradescope's container.

``run_autograder`` runs as Gradescope runs it (a subprocess, from the root, with
AUTOGRADER_ROOT pointing at a temporary root), on module 00 for speed. setup.sh is not run:
it installs Python and torch in Gradescope's image (network, minutes); here the venv's own
python, first on PATH, stands in for what it installs, so setup.sh is only checked for its
syntax (``bash -n``) and for the pinned CPU torch it installs.

Grading is slow on few cores, so two graded runs are shared (module-scoped fixtures): a
correct hand-in as uploaded (one notebook), and a folder zipped whole whose notebook loops
forever in its last cell and names the grader's machinery (a flag). Each other end-to-end
test grades one submission of its own.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import stat
import subprocess
import sys
import zipfile
from pathlib import Path

import nbformat
import pytest

from coursekit.commands.cli import main, parser
from coursekit.commands.gradescope import (
    CONFIG,
    FLAG_TAG,
    MAX_NAMES,
    _NotGraded,
    build_bundle,
    find_submission,
    results_of,
    torch_pin,
)
from coursekit.grading.grader import GradeResult, recorded_demos
from coursekit.grading.sandbox.driver import Limits
from tests.helpers.hand_ins import REPO

pytestmark = [pytest.mark.grading, pytest.mark.module0]
ASSIGNMENT = "00_welcome"
CELL_TIMEOUT_S = 2.0  # CPU seconds: module 00's reference cells each take a fraction of it


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("bundle") / "autograder.zip"
    build_bundle(REPO, ASSIGNMENT, out, Limits(cell_timeout_s=CELL_TIMEOUT_S))
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


def run_script(root: Path, path_first: Path | None = None) -> subprocess.CompletedProcess:
    """``root/run_autograder`` as Gradescope runs it, with ``path_first`` (or the folder of
    the venv's python, which stands in for setup.sh's) first on PATH."""
    python_folder = Path(sys.executable).parent
    assert (python_folder / "python3").exists(), "run_autograder looks for python3 on PATH"
    first = f"{path_first}{os.pathsep}" if path_first else ""
    env = {
        **os.environ,
        "PATH": f"{first}{python_folder}{os.pathsep}{os.environ.get('PATH', '')}",
        "AUTOGRADER_ROOT": str(root),
    }
    return subprocess.run(
        [str(root / "run_autograder")],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def graded(root: Path) -> tuple[dict, str]:
    """The results of one run of ``run_autograder``, and its stdout (the instructor's)."""
    done = run_script(root)
    assert done.returncode == 0, done.stdout + done.stderr
    results = json.loads((root / "results" / "results.json").read_text(encoding="utf-8"))
    return results, done.stdout


def run_autograder(root: Path) -> dict:
    return graded(root)[0]


def student_visible(results: dict) -> str:
    """Everything in ``results`` a student sees: the output and each visible test's."""
    return "\n".join(
        [results.get("output", "")]
        + [t["output"] for t in results["tests"] if t.get("visibility") != "hidden"]
    )


def seed_printed(stdout: str) -> int:
    found = re.findall(r"Seed of this submission's hidden tests: (\d+)", stdout)
    assert len(found) == 1, stdout
    return int(found[0])


@pytest.fixture(scope="module")
def correct_run(bundle, tmp_path_factory) -> tuple[dict, str]:
    """A correct hand-in, uploaded as one notebook; ``venv/`` is a link to this Python's
    environment, as the guide's local run makes it (it stands in for setup.sh's venv)."""
    root = gradescope_root(bundle, tmp_path_factory.mktemp("correct"))
    (root / "venv").symlink_to(sys.prefix, target_is_directory=True)
    shutil.copy(REPO / "solutions" / f"{ASSIGNMENT}.ipynb", root / "submission")
    return graded(root)


OLD_SEED = 1234  # what an older zip's settings hold, and no run may use
FLAGGING = "# coursekit.grading"  # names the grader's machinery: graded, and flagged


@pytest.fixture(scope="module")
def zipped_run(bundle, tmp_path_factory) -> tuple[dict, str, int]:
    """A folder zipped whole, as Gradescope unpacks it: ``hw/00_welcome.ipynb`` (the solution,
    with a last cell that loops forever and names the grader's machinery), beside a scratch
    notebook, a Jupyter checkpoint and macOS's ``__MACOSX`` copy. Its zip's settings hold a
    ``seed``, as those of a zip built before seeds were drawn per submission do. Also: the
    number of the looping cell, as the student counts it (from the top, text cells too)."""
    root = gradescope_root(bundle, tmp_path_factory.mktemp("zipped"))
    config = root / "source" / CONFIG
    config.write_text(json.dumps({**json.loads(config.read_text()), "seed": OLD_SEED}))
    notebook = nbformat.read(REPO / "solutions" / f"{ASSIGNMENT}.ipynb", as_version=4)
    notebook.cells.append(nbformat.v4.new_code_cell(f"{FLAGGING}\nwhile True:\n    pass"))
    hw = root / "submission" / "hw"
    (hw / ".ipynb_checkpoints").mkdir(parents=True)
    nbformat.write(notebook, hw / f"{ASSIGNMENT}.ipynb")
    # each of these would be graded 0 (or make several candidates) if it were picked
    shutil.copy(REPO / "exercises" / f"{ASSIGNMENT}.ipynb", hw / "scratch.ipynb")
    (hw / ".ipynb_checkpoints" / f"{ASSIGNMENT}-checkpoint.ipynb").write_text("{not json")
    (root / "submission" / "__MACOSX" / "hw").mkdir(parents=True)
    (root / "submission" / "__MACOSX" / "hw" / f"{ASSIGNMENT}.ipynb").write_bytes(b"\0\5\26\7")
    results, stdout = graded(root)
    return results, stdout, len(notebook.cells)


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
    source_files = {"pyproject.toml", "coursekit/commands/gradescope.py"}
    source_files = {f"coursekit-src/{name}" for name in source_files}
    assert source_files <= set(modes)
    assert not any("__pycache__" in name for name in modes)
    assert settings["limits"]["cell_timeout_s"] == CELL_TIMEOUT_S
    assert "seed" not in settings  # each submission draws its own


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


def test_a_submission_zipped_as_a_folder_is_found_as_grade_finds_hand_ins(tmp_path):
    hw = tmp_path / "hw" / "week 1"
    (hw / ".ipynb_checkpoints").mkdir(parents=True)
    (hw / ".ipynb_checkpoints" / f"{ASSIGNMENT}-checkpoint.ipynb").write_text("{}")
    (tmp_path / "__MACOSX" / "hw" / "week 1").mkdir(parents=True)
    (tmp_path / "__MACOSX" / "hw" / "week 1" / f"{ASSIGNMENT}.ipynb").write_text("{}")
    (tmp_path / "__MACOSX" / "hw" / "week 1" / f"._{ASSIGNMENT}.ipynb").write_text("{}")
    (tmp_path / ".hidden").mkdir()
    (tmp_path / ".hidden" / f"{ASSIGNMENT}.ipynb").write_text("{}")
    with pytest.raises(_NotGraded, match="No notebook was found"):
        find_submission(tmp_path, ASSIGNMENT)
    (hw / f"{ASSIGNMENT}.ipynb").write_text("{}")
    assert find_submission(tmp_path, ASSIGNMENT) == hw / f"{ASSIGNMENT}.ipynb"
    (hw / "scratch.ipynb").write_text("{}")  # the one named after the assignment wins
    assert find_submission(tmp_path, ASSIGNMENT) == hw / f"{ASSIGNMENT}.ipynb"
    (tmp_path / f"{ASSIGNMENT}.ipynb").write_text("{}")  # two named so: the student is asked
    with pytest.raises(_NotGraded, match="several notebooks") as refused:
        find_submission(tmp_path, ASSIGNMENT)
    assert f"({ASSIGNMENT}.ipynb, hw/week 1/{ASSIGNMENT}.ipynb)" in str(refused.value)


def test_a_submission_of_many_notebooks_names_a_few_and_counts_the_rest(tmp_path):
    for n in range(MAX_NAMES + 3):
        (tmp_path / f"n{n:02d}.ipynb").write_text("{}")
    with pytest.raises(_NotGraded, match="several notebooks") as refused:
        find_submission(tmp_path, ASSIGNMENT)
    assert f"n{MAX_NAMES - 1:02d}.ipynb and 3 more)" in str(refused.value)
    assert f"n{MAX_NAMES:02d}.ipynb" not in str(refused.value)


def test_a_flagged_result_gets_a_hidden_tagged_test_for_the_instructor():
    result = GradeResult("x.ipynb", "ada", ASSIGNMENT, score=1.0, max_score=1.0)
    result.questions = [
        {"name": "effective_batch_size", "score": 1.0, "max_score": 1.0,
         "feedback": "All 4 tests pass.", "mistakes": []},
    ]  # fmt: skip
    flag = "Flagged for review: the notebook uses the grader's own machinery (QUESTIONS)."
    result.notes = [flag, "Cell 3 raised NameError: name 'x' is not defined."]
    results = results_of(result)
    flagged = [t for t in results["tests"] if t["name"] == "Flagged for review"]
    assert len(flagged) == 1 and flagged[0]["tags"] == [FLAG_TAG] == ["flagged-for-review"]
    assert (flagged[0]["score"], flagged[0]["max_score"]) == (0.0, 0.0)
    assert flagged[0]["visibility"] == "hidden" and flag in flagged[0]["output"]
    assert "Cell 3" not in flagged[0]["output"]  # a failed cell is no flag
    assert results["score"] == 1.0
    # the student is still told the hand-in was flagged, among the notes, as before
    assert flag in results["output"]
    result.notes = result.notes[1:]
    assert [t["name"] for t in results_of(result)["tests"]] == ["effective_batch_size"]


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


def test_a_correct_hand_in_gets_full_marks(correct_run):
    results, stdout = correct_run
    # venv/ is a link: graded all the same, in the sandbox the grader reports
    assert re.search(r"^Mode: .+\n^Sandbox: .+", stdout, re.M), stdout
    assert results["score"] == 1.0
    assert [(t["name"], t["score"], t["max_score"]) for t in results["tests"]] == [
        ("effective_batch_size", 1.0, 1.0)
    ]
    assert re.fullmatch(r"All \d+ tests pass\.", results["tests"][0]["output"])
    assert results["output"] == "Score: 1 / 1."
    assert results["extra_data"]["submission"] == f"{ASSIGNMENT}.ipynb"
    assert "flags" not in results["extra_data"]


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


def test_a_cell_that_runs_forever_is_stopped_and_reported(zipped_run):
    results, _, looping = zipped_run
    assert f"Cell {looping} took too long" in results["output"]
    assert results["score"] == 1.0  # the loop costs only itself: the answer was graded


def test_a_folder_zipped_whole_is_graded_from_its_notebook_not_the_copies_beside_it(zipped_run):
    results, stdout, _ = zipped_run
    # the scratch notebook, the checkpoint or the __MACOSX copy would each have scored 0
    assert results["score"] == 1.0, results["output"]
    assert results["extra_data"]["submission"] == f"hw/{ASSIGNMENT}.ipynb"
    assert "several notebooks" not in results["output"]


def test_a_flagged_hand_in_gets_the_hidden_flagged_for_review_test(zipped_run, correct_run):
    results, _, _ = zipped_run
    flagged = [t for t in results["tests"] if FLAG_TAG in t.get("tags", [])]
    assert [(t["name"], t["score"], t["max_score"], t["visibility"]) for t in flagged] == [
        ("Flagged for review", 0.0, 0.0, "hidden")
    ]
    assert "coursekit.grading" in flagged[0]["output"]
    assert results["extra_data"]["flags"] == [
        line[2:] for line in flagged[0]["output"].splitlines() if line.startswith("- ")
    ]
    assert any("coursekit.grading" in flag for flag in results["extra_data"]["flags"])
    # the student still sees that the hand-in was flagged, as with `coursekit grade`
    assert "Flagged for review: the notebook uses the grader's own machinery" in results["output"]
    assert not any(FLAG_TAG in t.get("tags", []) for t in correct_run[0]["tests"])


def test_each_submission_draws_its_own_seed_shown_to_the_instructor_only(zipped_run, correct_run):
    seeds = []
    for results, stdout in ((zipped_run[0], zipped_run[1]), correct_run):
        seed = seed_printed(stdout)
        assert results["extra_data"]["seed"] == seed and 0 <= seed < 2**63
        assert results["extra_data"]["seed_text"] == str(seed)
        assert results["stdout_visibility"] == "hidden"
        assert str(seed) not in student_visible(results)
        assert "seed" not in student_visible(results).lower()
        seeds.append(seed)
    assert seeds[0] != seeds[1]  # 63 random bits each: equal once in 2**63
    # the zipped run's settings hold an older zip's seed: read, and not used for the draw
    assert OLD_SEED not in seeds
    # the grade printed for the instructor records the seed its draw used
    assert re.findall(r'"seed": (\d+)', zipped_run[1]) == [str(seeds[0])]
    # the command printed grades the submission again on the same hidden tests
    command = next(line.strip() for line in zipped_run[1].splitlines() if "--seed" in line)
    words = shlex.split(command)
    args = parser().parse_args(words[1:])
    assert words[1] == "grade"
    assert args.hand_ins == [f"{ASSIGNMENT}.ipynb"] and args.assignment == ASSIGNMENT
    assert args.seed == seeds[0] and args.regrade
    assert (args.cell_timeout, args.test_timeout, args.timeout) == (CELL_TIMEOUT_S, 30, 300)
    assert (args.wall_factor, args.memory_mb) == (10, 3072)  # the bundle's, as built above


# ------------------------------------------------------------- run_autograder's permissions


STUB_PYTHON = """#!/bin/sh
# stands in for setup.sh's python: records the modes it finds, then writes a result
for path in "$AUTOGRADER_ROOT" "$AUTOGRADER_ROOT/source" "$AUTOGRADER_ROOT/results" \\
    "$AUTOGRADER_ROOT/submission" "$AUTOGRADER_ROOT/run_autograder" "$AUTOGRADER_ROOT/venv" \\
    "$AUTOGRADER_ROOT/venv/bin/python" "$AUTOGRADER_ROOT/submission_metadata.json"; do
  stat -c '%a %n' "$path"
done >"$AUTOGRADER_ROOT/venv/modes"
echo '{"score": 0.0, "tests": []}' >"$AUTOGRADER_ROOT/results/results.json"
"""


def stub_root(bundle: Path, folder: Path) -> Path:
    root = gradescope_root(bundle, folder)
    (root / "venv" / "bin").mkdir(parents=True)
    (root / "venv" / "bin" / "python").write_text(STUB_PYTHON)
    for path in (root, root / "source", root / "results", root / "submission", root / "venv"):
        path.chmod(0o755)
    (root / "venv" / "bin" / "python").chmod(0o755)
    (root / "submission_metadata.json").write_text('{"previous_submissions": []}')
    (root / "submission_metadata.json").chmod(0o755)
    return root


def modes_seen(root: Path) -> dict[str, str]:
    lines = (root / "venv" / "modes").read_text().splitlines()
    return {Path(name).relative_to(root).as_posix(): mode for mode, name in map(str.split, lines)}


@pytest.mark.skipif(os.geteuid() != 0, reason="the permissions are set only as root")
def test_as_root_run_autograder_locks_its_inputs_before_python_starts(bundle, tmp_path):
    root = stub_root(bundle, tmp_path / "autograder")
    done = run_script(root)
    assert done.returncode == 0, done.stdout + done.stderr
    assert modes_seen(root) == {
        ".": "711",  # the hand-in's user may pass through, to the venv
        "source": "700",
        "results": "700",
        "submission": "700",
        "run_autograder": "700",
        "venv": "755",  # left readable: the hand-in runs its python
        "venv/bin/python": "755",
        "submission_metadata.json": "600",  # who submitted, and earlier results
    }
    assert stat.S_IMODE((root / "run_autograder").stat().st_mode) == 0o700


def test_as_another_user_run_autograder_leaves_the_modes_quietly(bundle, tmp_path):
    root = stub_root(bundle, tmp_path / "autograder")
    not_root = tmp_path / "bin"
    not_root.mkdir()
    (not_root / "id").write_text("#!/bin/sh\necho 1000\n")  # `id -u` says: not root
    (not_root / "id").chmod(0o755)
    done = run_script(root, path_first=not_root)
    assert done.returncode == 0 and done.stderr == "", done.stdout + done.stderr
    assert set(modes_seen(root).values()) == {"755"}


def test_the_command_writes_the_zip_with_the_limits_given(tmp_path, capsys):
    out = tmp_path / "autograder.zip"
    status = main(
        ["gradescope", "--assignment", ASSIGNMENT, "--out", str(out), "--root", str(REPO)]
        + ["--cell-timeout", "5", "--timeout", "100"]
    )
    assert status == 0, capsys.readouterr().err
    with zipfile.ZipFile(out) as archive:
        settings = json.loads(archive.read(CONFIG))
    assert settings["assignment"] == ASSIGNMENT and "seed" not in settings
    assert settings["limits"]["cell_timeout_s"] == 5.0
    assert settings["limits"]["hand_in_timeout_s"] == 100.0
    assert settings["limits"]["wall_factor"] == 3.0
    assert "300 s of wall-clock time" in capsys.readouterr().out


def test_a_bundle_refuses_a_fixed_seed_and_says_how_to_reproduce_a_grade(tmp_path, capsys):
    out = tmp_path / "autograder.zip"
    with pytest.raises(ValueError, match=r"no --seed: each submission draws"):
        build_bundle(REPO, ASSIGNMENT, out, seed=7, torch_version="2.5.1")
    status = main(
        ["gradescope", "--assignment", ASSIGNMENT, "--out", str(out), "--root", str(REPO)]
        + ["--seed", "7"]
    )
    assert status == 2 and not out.exists()
    assert "run `coursekit grade` with that --seed" in capsys.readouterr().err


def test_a_failure_of_the_grader_itself_writes_no_score(tmp_path, monkeypatch, capsys):
    """Every try failed on the grader's side: Gradescope must record no score (no
    results.json: it shows "the autograder failed"), never a 0, and the instructor is told."""
    from coursekit.commands import gradescope

    (tmp_path / "source").mkdir()
    (tmp_path / "source" / CONFIG).write_text(json.dumps({"assignment": ASSIGNMENT}))
    (tmp_path / "results").mkdir()
    stale = tmp_path / "results" / "results.json"
    stale.write_text('{"score": 0.0}')  # an earlier run's: it must not stand as this one's

    def grader_fails(*_args, **_kwargs):
        raise RuntimeError("the grader failed on every try: a runner was lost")

    monkeypatch.setattr(gradescope, "_grade", grader_fails)
    monkeypatch.setenv("AUTOGRADER_ROOT", str(tmp_path))
    assert gradescope.main() == 1
    assert not stale.exists()
    out = capsys.readouterr().out
    assert "Not graded: the grader itself failed (RuntimeError)" in out
    assert "a runner was lost" in out  # the traceback, for the instructor


def test_the_seed_is_also_written_as_text_which_a_reader_of_doubles_keeps(tmp_path, monkeypatch):
    """63 random bits: a JSON reader that holds numbers as doubles (JavaScript's) rounds
    ``extra_data.seed`` above 2**53; ``extra_data.seed_text`` keeps every digit."""
    from coursekit.commands import gradescope

    seed = 2**63 - 1  # the largest randbits(63) draws; as a double it is 2**63
    (tmp_path / "source").mkdir()
    (tmp_path / "source" / CONFIG).write_text(json.dumps({"assignment": ASSIGNMENT}))
    monkeypatch.setattr(gradescope.secrets, "randbits", lambda bits: seed)
    monkeypatch.setattr(gradescope, "_grade", lambda *args: {"score": 1.0, "tests": []})
    assert gradescope.run_autograder(tmp_path) is not None
    text = (tmp_path / "results" / "results.json").read_text()
    as_doubles = json.loads(text, parse_int=float)["extra_data"]
    assert as_doubles["seed"] != seed  # rounded: why the text is there
    assert int(as_doubles["seed_text"]) == seed == json.loads(text)["extra_data"]["seed"]


def test_python_started_through_a_link_to_its_environment_starts_again_at_the_real_path(
    tmp_path, monkeypatch
):
    from coursekit.commands import gradescope

    real = tmp_path / "course" / ".venv"
    (real / "bin").mkdir(parents=True)
    (tmp_path / "autograder").mkdir()
    (tmp_path / "autograder" / "venv").symlink_to(real, target_is_directory=True)
    linked = tmp_path / "autograder" / "venv"
    monkeypatch.setattr(sys, "prefix", str(linked))
    monkeypatch.setattr(sys, "executable", str(linked / "bin" / "python"))
    assert gradescope.python_at_its_real_path() == real.resolve() / "bin" / "python"
    monkeypatch.setattr(sys, "prefix", str(real.resolve()))
    monkeypatch.setattr(sys, "executable", str(real.resolve() / "bin" / "python"))
    assert gradescope.python_at_its_real_path() is None


@pytest.mark.parametrize("status", [1, 0, 137])
def test_run_autograder_writes_no_score_when_python_gives_no_result(bundle, tmp_path, status):
    """The grader failed (1), or its Python ended without a result (0: nothing written; 137:
    killed): no results.json, so Gradescope records no score, never a 0, and the script
    fails."""
    root = gradescope_root(bundle, tmp_path / "autograder")
    (root / "venv" / "bin").mkdir(parents=True)
    (root / "venv" / "bin" / "python").write_text(f"#!/bin/sh\nexit {status}\n")
    (root / "venv" / "bin" / "python").chmod(0o755)
    (root / "results" / "results.json").write_text('{"score": 5.0}')  # an earlier run's
    done = run_script(root)
    assert done.returncode == (status or 1)
    assert not (root / "results" / "results.json").exists()
    assert f"Not graded: the autograder ended without a result (exit status {status})" in (
        done.stdout
    )
