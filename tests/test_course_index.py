"""The course index: progress read from the verdicts the student's notebooks show, as saved."""

import json
import shutil

import nbformat
import pytest
from nbclient.exceptions import CellExecutionError

from coursekit.commands.course_index import (
    course_progress,
    exercise_questions,
    index_html,
    summary_lines,
    write_index,
)
from coursekit.course import MODULES
from tests.helpers import kernels
from tests.helpers.hand_ins import REPO


def _with_verdicts(path, verdicts: dict[str, str]):
    """A copy of an exercise notebook whose check cells show the given verdicts."""
    notebook = json.loads(path.read_text())
    for cell in notebook["cells"]:
        source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        if cell["cell_type"] == "code" and source.startswith("check("):
            name = source.split('"')[1]
            if name in verdicts:
                text = f"[{verdicts[name]}] {name}: details\n"
                cell["outputs"] = [{"output_type": "stream", "name": "stdout", "text": [text]}]
    return notebook


def test_progress_counts_passed_exercises_per_module(tmp_path):
    work = tmp_path / "my-work"
    work.mkdir()
    exercise = REPO / "exercises" / "01_accumulation.ipynb"
    questions = exercise_questions(exercise)
    assert questions == ["accumulate_window", "train_accumulated", "plan_micro_batch"]
    answers = {questions[0]: "passed", questions[1]: "failed"}
    (work / exercise.name).write_text(json.dumps(_with_verdicts(exercise, answers)))
    (work / "02_loss_scaling.ipynb").write_text("{ half-written")
    rows = {row.module.name: row for row in course_progress(REPO, work)}
    assert [row for row in rows] == [module.name for module in MODULES]
    first = rows["01_accumulation"]
    assert (first.passed, first.status(questions[2])) == (1, "not run")
    assert rows["02_loss_scaling"].passed == 0 and rows["02_loss_scaling"].questions
    assert rows["00_welcome"].notebook is None
    lines = summary_lines(list(rows.values()))
    assert "1 of 3 exercises pass their checks" in lines[1]
    page = index_html(list(rows.values()))
    assert '<a href="01_accumulation.ipynb">' in page and "1 / 3" in page
    assert 'title="train_accumulated: failed"' in page and "#c62828" in page


def test_the_landing_notebook_runs_and_shows_the_table(tmp_path):
    shutil.copytree(REPO / "exercises", tmp_path / "exercises")
    work = tmp_path / "my-work"
    work.mkdir()
    path = write_index(work)
    notebook = nbformat.read(path, as_version=4)
    kernels.execute(notebook, timeout_s=600, cwd=work)
    shown = notebook.cells[1].outputs[0]["data"]["text/html"]
    assert shown.count("<tr>") == len(MODULES) + 1
    assert "0 / 1" in shown  # module 0's exercise, not run yet


def test_notebook_kernels_in_the_tests_print_no_transport_warning(capfd):
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell("print(6 * 7)")]
    kernels.execute(notebook, timeout_s=120)
    assert notebook.cells[0].outputs[0]["text"] == "42\n"
    assert "without encryption" not in capfd.readouterr().err  # filtered: see conftest.py


def test_the_kernel_stderr_filter_drops_only_the_shutdown_zmq_traceback():
    text = (
        "a warning the kernel printed\n"
        "ERROR:tornado.general:Uncaught exception in ZMQStream callback\n"
        "Traceback (most recent call last):\n"
        '  File "zmq/sugar/socket.py", line 1, in send\n'
        "zmq.error.ZMQError: Socket operation on non-socket\n"
        "RuntimeError: a real failure stays\n"
    )
    assert kernels.without_shutdown_noise(text) == (
        "a warning the kernel printed\nRuntimeError: a real failure stays\n"
    )


def test_a_cell_past_its_timeout_fails_with_its_own_traceback_and_no_zmq_noise(capfd):
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell("while True:\n    pass")]
    with pytest.raises(CellExecutionError, match="KeyboardInterrupt"):
        kernels.execute(notebook, timeout_s=2)
    assert "ZMQError" not in capfd.readouterr().err
