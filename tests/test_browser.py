"""Every exercise notebook, run from JupyterLab's Run menu in headless Chromium, as students
get it.

What only a browser shows: each widget renders (no "Error displaying widget"), each module's
closing quiz appears as options and buttons, and the notebooks run to the end in JupyterLab
itself with no error output. A screenshot of each notebook is kept in artifacts/browser/ for
a person to look at. The exercises run at the smallest scale (their parameters cell says
``scale = 0.25``, the one edit made to the student's notebook): what is checked here does not
depend on the sizes, and nbval runs the same demonstrations whole at the defaults in
solutions/. The solutions hold the same widgets; set ``COURSEKIT_BROWSER_SOLUTIONS=1`` to run
them here too (under strict checks, at the defaults), for a look at their plots.

Skipped, with the reason, where playwright or Debian's chromium is missing (./scripts/setup
--browser, run by ./scripts/test, installs both where it can).
"""

import os
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from coursekit.course import MODULES
from tests.helpers.lab_browser import (
    CHROMIUM,
    CHROMIUM_ARGS,
    STRICT_KERNEL,
    VIEWPORT,
    WIDGET_MIME,
    NotebookHung,
    RunResult,
    copy_notebook,
    error_outputs,
    missing_browser_reason,
    open_notebook,
    read_results,
    run_all_cells,
    running_lab,
    screenshot_notebook,
    settle_widgets,
    unexecuted_cells,
)

REASON = missing_browser_reason()
pytestmark = [
    pytest.mark.browser,
    pytest.mark.notebook,
    pytest.mark.skipif(REASON is not None, reason=f"browser test: {REASON}"),
]
REPO = Path(__file__).resolve().parents[1]
ARTIFACTS = REPO / "artifacts" / "browser"
FOLDERS = ["exercises"] + (["solutions"] if os.environ.get("COURSEKIT_BROWSER_SOLUTIONS") else [])
NOTEBOOKS = [(folder, m.name) for folder in FOLDERS for m in MODULES]
#: The scale each folder runs at: a solution opened for a look shows the text's figures.
SCALE = {"exercises": 0.25, "solutions": 1}
#: The slowest notebook (module 4) takes under a minute on two cores; a hang shows long before.
RUN_TIMEOUT_S = 900  # a backstop for a hung notebook, generous for a busy machine
OPEN_TIMEOUT_S = 300


def kernel_for(folder: str) -> str:
    """Solutions run with strict checks (as under nbval), exercises as students get them."""
    return STRICT_KERNEL if folder == "solutions" else "python3"


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """One JupyterLab for every notebook, serving copies in a temporary folder."""
    workdir = tmp_path_factory.mktemp("jupyterlab")
    for folder, name in NOTEBOOKS:
        source = REPO / folder / f"{name}.ipynb"
        copy_notebook(
            source,
            workdir / "root" / folder / source.name,
            kernel_for(folder),
            parameters={"scale": SCALE[folder]},
        )
    with running_lab(workdir) as running:
        yield running


@pytest.fixture(scope="module")
def browser_context():
    """One headless Chromium, with a fresh profile, for every notebook.

    The notebooks share its cache, so JupyterLab's scripts load once, not twelve times.
    """
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=list(CHROMIUM_ARGS))
        context = chromium.new_context(viewport=VIEWPORT)
        yield context
        chromium.close()


@pytest.fixture
def page(browser_context, lab):
    """A new tab per notebook; its kernel is shut down when the test ends."""
    tab = browser_context.new_page()
    yield tab
    tab.close()
    lab.shut_down_kernels()


def run_in_lab(page, lab, path: str, timeout_s: float, screenshot: Path | None = None):
    """Open ``path`` (relative to the server's root), Run All Cells, and read the outcome."""
    open_notebook(page, lab, path, OPEN_TIMEOUT_S)
    try:
        run_all_cells(page, path, timeout_s)
        settle_widgets(page)
    finally:  # a hung or failed notebook is worth a look too
        if screenshot:
            screenshot_notebook(page, screenshot)
    return read_results(page, path)


def quiz_cell(notebook: dict) -> int:
    """Index of the module's closing ``coursekit.quiz(...).show()`` cell."""
    return max(
        index
        for index, cell in enumerate(notebook["cells"])
        if cell["cell_type"] == "code" and "quiz(" in "".join(cell["source"])
    )


def run_settings(notebook: dict) -> str:
    """The ``Run: device ..., scale ...`` line the notebook printed, or "" if none."""
    lines = [
        line
        for cell in notebook["cells"]
        for output in cell.get("outputs", [])
        if output["output_type"] == "stream"
        for line in "".join(output["text"]).splitlines()
    ]
    return next((line for line in lines if line.startswith("Run: ")), "")


def unrendered_widgets(result: RunResult) -> list[str]:
    """Cells whose widget output shows no widget view, with what they show instead."""
    return [f"cell {w['index'] + 1}: {w['text']!r}" for w in result.widgets if not w["views"]]


@pytest.mark.parametrize(("folder", "name"), NOTEBOOKS, ids=[f"{f}-{n}" for f, n in NOTEBOOKS])
def test_the_notebook_runs_in_jupyterlab_and_its_widgets_render(folder, name, lab, page):
    path = f"{folder}/{name}.ipynb"
    shot = ARTIFACTS / f"{folder}-{name}.png"
    result = run_in_lab(page, lab, path, RUN_TIMEOUT_S, screenshot=shot)
    notebook = result.notebook

    assert not result.dialogs, f"{path}: JupyterLab opened a dialog: {result.dialogs}"
    assert result.kernel == kernel_for(folder), f"{path} ran on {result.kernel}"
    assert not error_outputs(notebook), f"{path}: error outputs: {error_outputs(notebook)}"
    assert not unexecuted_cells(notebook), f"{path}: cells never ran: {unexecuted_cells(notebook)}"
    settings = run_settings(notebook)
    assert f", scale {SCALE[folder]:g}," in settings, f"{path}: not at its scale: {settings!r}"
    assert result.rendered_cells == len(notebook["cells"]), f"{path}: cells missing from the page"
    assert not result.widget_errors, f"{path}: {result.widget_errors}"
    assert not unrendered_widgets(result), (
        f"{path}: widgets not shown: {unrendered_widgets(result)}"
    )
    quiz = {w["index"]: w for w in result.widgets}.get(quiz_cell(notebook))
    assert quiz, f"{path}: the quiz cell shows no widget"
    assert quiz["radio_buttons"] and quiz["buttons"], f"{path}: the quiz has no options: {quiz}"
    if folder == "exercises":  # what test_notebooks.py's untouched-exercise run asserts
        assert_untouched_exercise(notebook, path)


def assert_untouched_exercise(notebook: dict, path: str) -> None:
    """An exercise as released: every ``check(...)`` says "[not attempted]". (With the
    checks above, this is all of tests/test_notebooks.py's run of the untouched exercise,
    which leaves that run to this test when both run in one session: see conftest.py.)"""
    checks = [
        cell
        for cell in notebook["cells"]
        if cell["cell_type"] == "code" and "".join(cell["source"]).lstrip().startswith("check(")
    ]
    assert checks, f"{path}: each module has graded questions"
    for cell in checks:
        printed = "".join(
            "".join(o.get("text", ""))
            for o in cell.get("outputs", [])
            if o["output_type"] == "stream" and o.get("name") == "stdout"
        )
        assert printed.startswith("[not attempted]"), f"{path}: {printed!r}"


# The harness itself, on notebooks broken on purpose: a check that cannot fail checks nothing.


def write_notebook(lab, name: str, sources: list[str]) -> str:
    """A small notebook in the server's root (after a title cell); returns its path there."""
    cells = [new_markdown_cell(f"# {name}")] + [new_code_cell(s) for s in sources]
    nb = new_notebook(
        cells=cells, metadata={"kernelspec": {"name": "python3", "display_name": "Python 3"}}
    )
    path = f"harness/{name}.ipynb"
    (lab.root / "harness").mkdir(exist_ok=True)
    nbformat.write(nb, lab.root / path)
    return path


def test_the_harness_sees_a_missing_widget_and_an_error_but_not_stderr(lab, page):
    missing_model = {WIDGET_MIME: {"model_id": "none", "version_major": 2, "version_minor": 0}}
    path = write_notebook(
        lab,
        "broken",
        [
            f"from IPython.display import display\ndisplay({missing_model!r}, raw=True)",
            "import sys\nprint('10/10 steps', file=sys.stderr)",  # a progress bar, not an error
            "raise ValueError('boom')",
            "print('never runs: Run All stops at the error')",
        ],
    )
    result = run_in_lab(page, lab, path, timeout_s=600)
    assert error_outputs(result.notebook) == ["cell 4: ValueError: boom"]
    assert unexecuted_cells(result.notebook) == [5]
    assert result.widget_errors == ["Error displaying widget: model not found"]
    assert [w.split(":")[0] for w in unrendered_widgets(result)] == ["cell 2"]


def test_the_harness_names_the_cell_that_hangs(lab, page):
    path = write_notebook(lab, "hangs", ["x = 1", "import time\n\ntime.sleep(600)", "x = 2"])
    with pytest.raises(NotebookHung, match=r"hangs.ipynb: still running .* at cell 3 of 4"):
        run_in_lab(page, lab, path, timeout_s=5)


def test_the_class_report_renders_with_every_figure(browser_context, tmp_path):
    """`coursekit report`'s page, opened from its file: its title, and every figure loaded."""
    from coursekit.commands.class_report import write_report
    from tests.test_class_report import sample_gradebook

    report = write_report(sample_gradebook(tmp_path / "g.sqlite"), tmp_path / "report.html")
    tab = browser_context.new_page()
    try:
        tab.goto(report.as_uri())
        tab.wait_for_load_state("load")
        assert tab.title() == "Class report: all graded assignments"
        widths = tab.eval_on_selector_all("img", "images => images.map(i => i.naturalWidth)")
        assert len(widths) == 6 and all(width > 0 for width in widths), widths
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        tab.screenshot(path=str(ARTIFACTS / "class-report.png"), full_page=True)
    finally:
        tab.close()
