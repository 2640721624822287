"""Drive the course's notebooks in a real JupyterLab and headless Chromium, as a student would.

nbclient and nbval run notebooks without a front end, so they cannot see what only a browser
shows: a widget that fails to render ("Error displaying widget"), a notebook that JupyterLab
cannot run from its own Run menu. This module starts one JupyterLab on copies of the
notebooks (it never saves into the repository), opens them in Debian's chromium through
Playwright, runs all cells from the Run menu and reports what the page and the notebook model
hold afterwards. tests/test_browser.py holds the assertions.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from coursekit.checks.registry import STRICT_ENV
from coursekit.commands.launch import free_port, lab_command

#: Debian's chromium: Playwright's own browser download is not available everywhere we run.
CHROMIUM = "/usr/bin/chromium"
#: Without the background-networking flags Chromium's connections are refused many at a time
#: in containers; Chromium refuses to start its sandbox as root, and containers run as root.
CHROMIUM_ARGS = (
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
)
#: The kernel that runs solutions: checks that do not pass raise, as under nbval.
STRICT_KERNEL = "coursekit-strict"
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
WIDGET_ERROR = "Error displaying widget"
#: What a widget output shows until its model arrives; one that never does stays so.
WIDGET_LOADING = "Loading widget..."
VIEWPORT = {"width": 1280, "height": 900}
#: Screenshots stop here (the longest notebook is about half of it) so a runaway output
#: cannot make an image of hundreds of megabytes.
MAX_SCREENSHOT_HEIGHT_PX = 32_000


def missing_browser_reason() -> str | None:
    """Why the browser test cannot run on this machine, or None when it can."""
    if importlib.util.find_spec("playwright") is None:
        return "playwright is not installed (pip install -e '.[test]')"
    if not os.access(CHROMIUM, os.X_OK):
        return f"{CHROMIUM} is missing (./scripts/setup installs Debian's chromium as root)"
    return None


def lab_settings(settings_dir: Path) -> None:
    """User settings for a test JupyterLab: every cell rendered, nothing fetched from the web.

    JupyterLab 4 renders only the cells in view (windowing); with ``windowingMode: none``
    every cell is in the page, so each output can be checked and the screenshot shows them
    (without the empty screen that ``scrollPastEnd`` adds below the last cell).
    """
    settings = {
        "notebook-extension/tracker": {"windowingMode": "none", "scrollPastEnd": False},
        "apputils-extension/notification": {"checkForUpdates": False, "fetchNews": "false"},
    }
    for plugin, values in settings.items():
        path = settings_dir / "@jupyterlab" / f"{plugin}.jupyterlab-settings"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values))


def strict_kernelspec(jupyter_path: Path) -> None:
    """A Python kernel with ``COURSEKIT_STRICT_CHECKS=1``, for the solutions only.

    Exercises must run as students see them (checks say "not attempted"), solutions as nbval
    runs them (a check that does not pass raises); one server serves both, so the difference
    lives in the kernel each notebook names.
    """
    spec = {
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Python 3 (strict checks)",
        "language": "python",
        "env": {STRICT_ENV: "1"},
    }
    folder = jupyter_path / "kernels" / STRICT_KERNEL
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "kernel.json").write_text(json.dumps(spec))


def copy_notebook(
    source: Path, target: Path, kernel: str, parameters: dict[str, object] | None = None
) -> None:
    """Copy a notebook for JupyterLab to run, naming the kernel it should start.

    ``parameters``: values written into the copy's own parameters cell (see
    :func:`set_parameters`), so the student's flow, that cell included, stays as it is.
    """
    nb = json.loads(source.read_text())
    nb["metadata"]["kernelspec"]["name"] = kernel
    if parameters:
        set_parameters(nb, parameters)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(nb))


def set_parameters(nb: dict, values: dict[str, object]) -> None:
    """Change the assignments of the notebook's cell tagged ``parameters`` in place.

    The value is rewritten where the student would edit it (``scale = 1  # ...`` becomes
    ``scale = 0.25  # ...``, its comment kept) rather than set in a cell papermill-style
    after it: the browser test runs the notebook as a student sees it. A parameter the cell
    does not assign exactly once is an error, so a renamed parameter cannot leave the run
    quietly at its default.
    """
    (cell,) = [c for c in nb["cells"] if "parameters" in c.get("metadata", {}).get("tags", [])]
    source = "".join(cell["source"])
    for name, value in values.items():
        assignment = re.compile(rf"^({re.escape(name)} = )\S+", flags=re.MULTILINE)
        source, count = assignment.subn(lambda m, v=value: f"{m.group(1)}{v!r}", source)
        if count != 1:
            raise ValueError(f"the parameters cell assigns {name} {count} times, not once")
    cell["source"] = source


@dataclass
class Lab:
    """A running JupyterLab: where it is and how to reach its REST API."""

    port: int
    token: str
    root: Path

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}/{path}?token={self.token}"

    def api(self, path: str, method: str = "GET"):
        request = urllib.request.Request(self.url(f"api/{path}"), method=method)
        with urllib.request.urlopen(request, timeout=10) as response:
            body = response.read()
        return json.loads(body) if body else None

    def shut_down_kernels(self) -> None:
        """Stop every kernel, so one notebook's processes never slow the next one down."""
        for session in self.api("sessions"):
            self.api(f"sessions/{session['id']}", method="DELETE")


@contextlib.contextmanager
def running_lab(workdir: Path, wait_s: float = 90) -> Iterator[Lab]:
    """Start JupyterLab serving ``workdir/root`` (as coursekit/commands/launch.py does), stop
    it after.

    Its settings, workspaces, configuration, runtime files and the strict kernel all live in
    ``workdir``, so neither the developer's own Jupyter set-up nor an earlier run changes what
    it shows, and nothing is left behind.
    """
    root, jupyter_path = workdir / "root", workdir / "jupyter"
    lab_settings(workdir / "settings")
    strict_kernelspec(jupyter_path)
    token, port = secrets.token_hex(16), free_port(8900)
    env = {k: v for k, v in os.environ.items() if k != STRICT_ENV}
    # One torch thread per kernel: beside Chromium and the server, two OpenMP threads on two
    # cores spin against each other and made module 3's tiny CNN run 3 to 10 times slower.
    env["OMP_NUM_THREADS"] = "1"
    env["JUPYTER_PATH"] = os.pathsep.join(
        filter(None, [str(jupyter_path), env.get("JUPYTER_PATH")])
    )
    env["JUPYTER_CONFIG_DIR"] = str(workdir / "config")
    # Kernels talk over Unix sockets in the runtime folder, whose paths may not pass 107
    # bytes: a folder of pytest's (longer under pytest-xdist) gave "File name too long".
    runtime = Path(tempfile.mkdtemp(prefix="coursekit-lab-"))
    env["JUPYTER_RUNTIME_DIR"] = str(runtime)
    command = [
        *lab_command(root, port, token, open_browser=False),  # the student's server, and:
        f"--LabApp.user_settings_dir={workdir / 'settings'}",
        f"--LabApp.workspaces_dir={workdir / 'workspaces'}",
        # Lets the test read the notebook model (outputs as saved) without saving it.
        "--LabApp.expose_app_in_browser=True",
        # A kernel that has started a multiprocessing child (run_workers does) does not exit on
        # the shutdown request; the server stops it when half of this wait (5 s by default) is
        # over. The test has read all it needs by the time it shuts a kernel down.
        "--KernelManager.shutdown_wait_time=1",
    ]
    log_path = workdir / "jupyterlab.log"
    log = log_path.open("w")
    process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
    lab = Lab(port, token, root)
    try:
        deadline = time.monotonic() + wait_s
        while not _answers(lab):
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"JupyterLab did not start; its log:\n{log_path.read_text()}")
            time.sleep(0.3)
        yield lab
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()
        shutil.rmtree(runtime, ignore_errors=True)


def _answers(lab: Lab) -> bool:
    try:
        lab.api("status")
        return True
    except OSError:
        return False


class NotebookHung(AssertionError):
    """A notebook did not finish within its time; the message names the cell."""


@dataclass
class RunResult:
    """What a notebook looked like after Run All Cells, in the page and in its model."""

    notebook: dict  # the model as JupyterLab would save it (nbformat JSON)
    kernel: str  # the kernel's name: solutions run on STRICT_KERNEL
    rendered_cells: int  # cells in the page (all of them, with windowing off)
    widgets: list[dict]  # per cell with a widget output: index, views, radio_buttons, buttons, text
    widget_errors: list[str]  # texts of elements that say "Error displaying widget"
    dialogs: list[str]  # texts of any dialog JupyterLab opened (e.g. "Kernel Restarting")


# The page is read with small scripts; each returns plain JSON.
_CELL_STATE = """() => {
  const indicator = document.querySelector('.jp-Notebook-ExecutionIndicator');
  const prompts = [...document.querySelectorAll('.jp-Notebook .jp-CodeCell .jp-InputPrompt')];
  return {
    kernel: indicator ? indicator.dataset.status : null,
    running: prompts.map((p, i) => p.innerText.includes('*') ? i : -1).filter(i => i >= 0),
    numbered: prompts.filter(p => /\\d/.test(p.innerText)).length,
    dialogs: [...document.querySelectorAll('.jp-Dialog')].map(d => d.innerText),
  };
}"""

_PANEL = """const panel = (path) => [...window.jupyterapp.shell.widgets('main')].find(
  w => w.context && w.context.path === path);"""

_READY_OR_ASKING = f"""(path) => {{ {_PANEL}
  if (document.querySelector('.jp-Dialog')) return true;
  const session = window.jupyterapp && panel(path) && panel(path).sessionContext;
  return !!(session && session.isReady && session.session?.kernel?.status === 'idle');
}}"""

_KERNEL_NAME = f"(path) => {{ {_PANEL} return panel(path).sessionContext.session.kernel.name; }}"

_MODEL = f"(path) => {{ {_PANEL} return panel(path).context.model.toJSON(); }}"

_WIDGETS_IN_CELLS = """(indices) => {
  const cells = [...document.querySelectorAll('.jp-Notebook .jp-Cell')];
  return indices.map(index => ({
    index,
    views: cells[index].querySelectorAll('.jp-OutputArea-output .jupyter-widgets').length,
    radio_buttons: cells[index].querySelectorAll('.widget-radio-box').length,
    buttons: cells[index].querySelectorAll('.jupyter-button').length,
    text: (cells[index].querySelector('.jp-OutputArea') || {innerText: ''}).innerText.slice(0, 200),
  }));
}"""

_CELL_COUNT = "() => document.querySelectorAll('.jp-Notebook .jp-Cell').length"


def open_notebook(page, lab: Lab, path: str, timeout_s: float) -> None:
    """Open a notebook in a fresh workspace and wait until its kernel has started and idles.

    The toolbar's indicator says "idle" before any kernel exists, and Run All then asks
    which kernel to start; the session itself is what says the kernel is ready. ``reset``
    keeps JupyterLab from reopening the previous test's notebook (and starting its kernel);
    collapsing the file browser gives the notebook the screenshot's width.
    """
    page.goto(lab.url(f"lab/tree/{path}") + "&reset")
    page.wait_for_function(_READY_OR_ASKING, arg=path, timeout=timeout_s * 1000)
    dialogs = page.evaluate(_CELL_STATE)["dialogs"]
    assert not dialogs, f"{path}: JupyterLab asked before any cell ran: {dialogs}"
    page.evaluate("() => window.jupyterapp.shell.collapseLeft()")


def run_all_cells(page, path: str, timeout_s: float) -> None:
    """Run > Run All Cells, then wait until no cell is queued or running and the kernel idles.

    Run All stops at a cell that raises, leaving the rest unnumbered, so "finished" is judged
    by the ``[*]`` prompts and the kernel, not by every cell having run.
    """
    page.click('.lm-MenuBar-item:has-text("Run")')
    page.click('.lm-Menu-item[data-command="runmenu:run-all"]')
    deadline = time.monotonic() + timeout_s
    quiet_since = None
    while True:
        state = page.evaluate(_CELL_STATE)
        if state["dialogs"]:
            return  # a kernel death or restart: nothing more will run; reported by the caller
        done = state["kernel"] == "idle" and not state["running"] and state["numbered"] > 0
        if done:
            quiet_since = quiet_since or time.monotonic()
            if time.monotonic() - quiet_since > 1.0:  # idle between two queued cells is not done
                return
        else:
            quiet_since = None
        if time.monotonic() > deadline:
            raise NotebookHung(_hung_message(page, path, state["running"], timeout_s))
        time.sleep(0.25)


def _hung_message(page, path: str, running: list[int], timeout_s: float) -> str:
    """Name the cell that was still running when a notebook ran out of time."""
    if not running:
        return f"{path}: did not finish in {timeout_s:.0f} s (the kernel never went idle)."
    cells = page.evaluate(_MODEL, path)["cells"]
    code = [index for index, cell in enumerate(cells) if cell["cell_type"] == "code"]
    index = code[running[0]]
    first_line = ("".join(cells[index]["source"]).strip().splitlines() or [""])[0]
    return (
        f"{path}: still running after {timeout_s:.0f} s at cell {index + 1} of {len(cells)}: "
        f"{first_line!r}"
    )


def settle_widgets(page, wait_s: float = 10) -> None:
    """Give widgets still loading after the last cell ``wait_s`` to appear (or to fail)."""
    loading = page.get_by_text(WIDGET_LOADING)
    deadline = time.monotonic() + wait_s
    while loading.count() and time.monotonic() < deadline:
        time.sleep(0.25)


def read_results(page, path: str) -> RunResult:
    """Collect what the test asserts on, once every cell has finished."""
    notebook = page.evaluate(_MODEL, path)
    return RunResult(
        notebook=notebook,
        kernel=page.evaluate(_KERNEL_NAME, path),
        rendered_cells=page.evaluate(_CELL_COUNT),
        widgets=page.evaluate(_WIDGETS_IN_CELLS, widget_cells(notebook)),
        widget_errors=page.get_by_text(WIDGET_ERROR).all_inner_texts(),
        dialogs=page.evaluate(_CELL_STATE)["dialogs"],
    )


def error_outputs(notebook: dict) -> list[str]:
    """One line per error output (a raised exception), naming its cell.

    Judged on the model's ``output_type``, not on red text in the page: stderr also carries
    progress bars and warnings, which are not errors.
    """
    return [
        f"cell {index + 1}: {output.get('ename')}: {output.get('evalue')}"
        for index, cell in enumerate(notebook["cells"])
        for output in cell.get("outputs", [])
        if output["output_type"] == "error"
    ]


def unexecuted_cells(notebook: dict) -> list[int]:
    """1-based indices of code cells with code that never ran (Run All stopped before them)."""
    return [
        index + 1
        for index, cell in enumerate(notebook["cells"])
        if cell["cell_type"] == "code"
        and "".join(cell["source"]).strip()
        and cell.get("execution_count") is None
    ]


def widget_cells(notebook: dict) -> list[int]:
    """0-based indices of cells whose outputs hold a widget view (ipywidgets' display)."""
    return [
        index
        for index, cell in enumerate(notebook["cells"])
        if any(WIDGET_MIME in output.get("data", {}) for output in cell.get("outputs", []))
    ]


def screenshot_notebook(page, target: Path) -> None:
    """Save the whole notebook as one image.

    JupyterLab fills the window and scrolls the notebook inside it, so a "full page"
    screenshot would show one screen; the window is made as tall as the notebook instead.
    """
    extra = page.evaluate(
        """() => {
          const scroller = document.querySelector('.jp-NotebookPanel .jp-WindowedPanel-outer');
          if (!scroller) return 0;
          scroller.scrollTop = 0;
          return scroller.scrollHeight - scroller.clientHeight;
        }"""
    )
    height = min(VIEWPORT["height"] + max(extra, 0), MAX_SCREENSHOT_HEIGHT_PX)
    page.set_viewport_size({"width": VIEWPORT["width"], "height": height})
    page.wait_for_timeout(500)  # let JupyterLab lay out the taller window
    target.parent.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(target))
    page.set_viewport_size(VIEWPORT)
