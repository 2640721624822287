"""The course index: progress read from the verdicts the student's notebooks show, as saved."""

import copy
import json
import re
import shutil

import mistune
import nbformat
import pytest
from jupyter_client.kernelspec import KernelSpecManager
from nbclient.exceptions import CellExecutionError

from coursekit import course
from coursekit.commands import course_index
from coursekit.commands.course_index import (
    contents_markdown,
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


@pytest.mark.slow  # over 4 s: out of the quick run (-m 'not slow')
def test_the_landing_notebook_runs_and_shows_the_table(tmp_path):
    shutil.copytree(REPO / "exercises", tmp_path / "exercises")
    work = tmp_path / "my-work"
    work.mkdir()
    path = write_index(work)
    notebook = nbformat.read(path, as_version=4)
    written = copy.deepcopy(notebook.metadata)
    kernels.execute(notebook, timeout_s=600, cwd=work)
    shown = notebook.cells[2].outputs[0]["data"]["text/html"]
    assert shown.count("<tr>") == len(MODULES) + 1
    assert "0 / 1" in shown  # module 0's exercise, not run yet
    # JupyterLab rewrites the kernelspec and language_info the kernel gives it where they
    # differ, and the notebook then opens as unsaved: the running kernel's, written before
    assert (
        written["language_info"] == notebook.metadata["language_info"]
    )  # nbclient's, the kernel's
    spec = KernelSpecManager().get_kernel_spec(notebook.metadata["kernelspec"]["name"])
    assert written["kernelspec"] == {  # what Lab's _updateSpec writes, for this kernel
        "name": "python3",
        "display_name": spec.display_name,
        "language": spec.language,
    }


def _rendered_rows(markdown: str) -> list[list[str]]:
    """The table's body rows as rendered HTML cells (mistune's GFM tables, as JupyterLab)."""
    page = mistune.create_markdown(plugins=["table"])(markdown)
    body = page.split("<tbody>", 1)[1].split("</tbody>", 1)[0]
    return [re.findall(r"<td[^>]*>(.*?)</td>", row, re.S) for row in body.split("</tr>")[:-1]]


def test_the_landing_notebook_shows_the_contents_before_anything_runs(tmp_path):
    for module in MODULES:
        (tmp_path / f"{module.name}.ipynb").write_text("{}")  # the student's copies
    notebook = nbformat.read(write_index(tmp_path), as_version=4)
    kinds = [cell.cell_type for cell in notebook.cells]
    assert kinds == ["markdown", "markdown", "code"]  # contents first, live progress below
    contents = notebook.cells[0].source
    rows = _rendered_rows(contents)
    assert len(rows) == len(MODULES)
    for row, module in zip(rows, MODULES, strict=True):
        assert row[0] == module.name[:2]
        assert row[1] == f'<a href="{module.name}.ipynb">{module.title}</a>'
        assert row[3] == str(module.minutes)
    total = sum(module.minutes for module in MODULES)
    assert f"{total // 60} h {total % 60} min in all" in contents
    assert "show_index" in notebook.cells[2].source


def test_the_contents_follow_course_py_and_show_any_title_as_itself(monkeypatch):
    hostile = course.Module(
        "07_more stuff", "Pipes | *stars* <b>tags</b> $x$ [link](evil)", "one | two", 45
    )
    monkeypatch.setattr(course_index, "MODULES", (*MODULES, hostile))
    rows = _rendered_rows(contents_markdown())
    assert len(rows) == len(MODULES) + 1
    number, link, learn, minutes = rows[-1]
    assert (number, minutes, learn) == ("07", "45", "one | two")
    assert link == (
        '<a href="07_more%20stuff.ipynb">Pipes | *stars* &lt;b&gt;tags&lt;/b&gt; $x$ '
        "[link](evil)</a>"
    )


def test_a_module_with_no_copy_yet_is_listed_without_a_broken_link(tmp_path):
    (tmp_path / f"{MODULES[0].name}.ipynb").write_text("{}")
    rows = _rendered_rows(contents_markdown(tmp_path))
    assert rows[0][1] == f'<a href="{MODULES[0].name}.ipynb">{MODULES[0].title}</a>'
    assert rows[1][1] == f"{MODULES[1].title} (not in your copy of the course yet)"


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


@pytest.mark.slow  # over 2.5 s: out of the quick run (-m 'not slow')
def test_a_cell_past_its_timeout_fails_with_its_own_traceback_and_no_zmq_noise(capfd):
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell("while True:\n    pass")]
    with pytest.raises(CellExecutionError, match="KeyboardInterrupt"):
        kernels.execute(notebook, timeout_s=2)
    assert "ZMQError" not in capfd.readouterr().err
