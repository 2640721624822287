"""The Gradescope bundle end to end where Gradescope runs it: as root in a container that
refuses namespaces (tests/helpers/docker_like.py), with a correct, a wrong, a folder-zipped and a
hostile submission (issue 29).

Each runs ``run_autograder`` as Gradescope does, in a folder laid out like ``/autograder``
(tests/test_gradescope.py). The hostile one, written as a student who knows the layout and
runs as root would, tries to rewrite ``run_autograder`` and ``results.json``, read the
bundle's reference notebook, and kill every process it sees, before three right answers.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys

import nbformat
import pytest

from coursekit.commands.gradescope import FLAG_TAG, build_bundle
from coursekit.grading.sandbox.driver import Limits
from tests.corpora.student_code import BY_QUESTION
from tests.helpers import docker_like
from tests.helpers.hand_ins import REPO, runners_left
from tests.test_gradescope import gradescope_root, student_visible

pytestmark = [
    pytest.mark.grading,
    pytest.mark.module0,
    pytest.mark.skipif(docker_like.available() is not None, reason=str(docker_like.available())),
]
ASSIGNMENT = "00_welcome"

HOSTILE = """
import glob, os, signal
root = {root!r}
found = []
for path in [root + "/run_autograder", root + "/results/results.json"]:
    try:
        with open(path, "a") as handle:
            handle.write("\\necho '{{\\"score\\": 999}}' > results/results.json\\n")
        found.append("wrote " + path)
    except OSError:
        pass
for path in glob.glob(root + "/source/**/*.ipynb", recursive=True):
    try:
        open(path).read(10)
        found.append("read " + path)
    except OSError:
        pass
for pid in os.listdir("/proc"):
    if pid.isdigit() and int(pid) != os.getpid():
        try:
            os.kill(int(pid), signal.SIGKILL)
        except OSError:
            pass
if found:
    raise RuntimeError("ESCAPED: " + "; ".join(found))
"""


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    out = tmp_path_factory.mktemp("bundle-docker") / "autograder.zip"
    build_bundle(REPO, ASSIGNMENT, out, Limits(cell_timeout_s=5.0, wall_factor=3.0))
    return out


def _notebook(extra: list[str], answer: str = "correct"):
    notebook = nbformat.read(REPO / "solutions" / f"{ASSIGNMENT}.ipynb", as_version=4)
    for cell in notebook.cells:
        if "def effective_batch_size" in cell.source:
            cell.source = BY_QUESTION["effective_batch_size"][answer]
    notebook.cells[1:1] = [nbformat.v4.new_code_cell(source) for source in extra]
    return notebook


def _run(bundle, folder, place) -> tuple[dict, object, dict]:
    root = gradescope_root(bundle, folder)
    place(root)
    before = hashlib.sha256((root / "run_autograder").read_bytes()).hexdigest()
    python = os.path.dirname(sys.executable)
    env = {
        **os.environ,
        "PATH": f"{python}{os.pathsep}{os.environ.get('PATH', '')}",
        "AUTOGRADER_ROOT": str(root),
        "AS_USER_PATHS": str(root),
    }
    done = docker_like.run(
        [str(root / "run_autograder")], cwd=root, env=env, capture_output=True, text=True
    )
    results = json.loads((root / "results" / "results.json").read_text())
    after = hashlib.sha256((root / "run_autograder").read_bytes()).hexdigest()
    return results, done, {"script_kept": before == after, "root": root}


@pytest.fixture(scope="module")
def runs(bundle, tmp_path_factory):
    def one_file(notebook):
        return lambda root: nbformat.write(notebook, root / "submission" / f"{ASSIGNMENT}.ipynb")

    def zipped(root):
        (root / "submission" / "hw").mkdir()
        nbformat.write(_notebook([]), root / "submission" / "hw" / f"{ASSIGNMENT}.ipynb")
        (root / "submission" / "__MACOSX").mkdir()

    made = {}
    for name, place in {
        "correct": one_file(_notebook([])),
        "wrong": one_file(_notebook([], "world_size_ignored")),
        "zipped": zipped,
        "hostile": None,
    }.items():
        folder = tmp_path_factory.mktemp(f"gs-{name}")
        os.chmod(folder, 0o755)
        if place is None:
            place = one_file(_notebook([HOSTILE.format(root=str(folder))]))
        made[name] = _run(bundle, folder, place)
    return made


def test_it_runs_without_namespaces_and_says_so(runs):
    _, done, _ = runs["correct"]
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "Mode: no namespaces, as root" in done.stdout, done.stdout[-3000:]


@pytest.mark.parametrize("name", ["correct", "zipped"])
def test_right_answers_get_full_marks_with_no_flag(runs, name):
    results, done, _ = runs[name]
    assert results["score"] == 1.0, (results, done.stdout[-2000:])
    assert not any(t.get("tags") == [FLAG_TAG] for t in results["tests"])


def test_a_wrong_answer_loses_its_points(runs):
    results, _, _ = runs["wrong"]
    assert results["score"] < 1.0, results
    assert not any(t.get("tags") == [FLAG_TAG] for t in results["tests"])  # a mistake, no flag


def test_a_hostile_submission_reaches_nothing_of_the_graders(runs):
    results, done, kept = runs["hostile"]
    assert kept["script_kept"]
    assert results["score"] == 1.0, results  # its right answers, nothing more
    # the forged score is 999; the hidden tests' seed is random and may hold those digits
    shown = re.sub(r'"seed(_text)?": "?[0-9]+"?', "", json.dumps(results))
    assert "ESCAPED" not in shown and "999" not in shown
    assert "ESCAPED" not in done.stdout
    # results/ and the bundle's source are root's alone while the hand-in runs
    assert oct(kept["root"].joinpath("source").stat().st_mode & 0o777) == "0o700"


def test_no_process_of_a_submission_is_left(runs):
    assert runners_left() == 0


def test_the_student_sees_no_seed_and_the_instructor_does(runs):
    results, done, _ = runs["correct"]
    seed = results["extra_data"]["seed"]
    assert str(seed) in done.stdout and str(seed) not in student_visible(results)
