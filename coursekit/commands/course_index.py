"""The course index: every module, its exercises, and which of them pass their public checks.

Progress is read from what the student's notebooks show, as saved: the verdict each
``check(...)`` cell printed the last time it ran. Nothing is executed and no state is kept
elsewhere, so the index can never disagree with the notebooks the student sees and hands in
(and a notebook not yet saved shows its previous state, which the index says).
"""

from __future__ import annotations

import copy
import html
import json
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

import nbformat

from coursekit.authoring.markup import question_name
from coursekit.course import MODULES, TITLE, Module
from coursekit.grading.submission import NOT_RUN, saved_checks

INDEX_NOTEBOOK = "index.ipynb"
#: The kernel the landing notebook runs in: the one every course notebook names.
KERNEL_NAME = "python3"


def exercise_questions(path: Path) -> list[str]:
    """The graded questions of a notebook, in order, from its ``# Question: NAME`` cells
    (none when the file is not a readable notebook)."""
    try:
        cells = json.loads(path.read_text(encoding="utf-8")).get("cells", [])
    except (OSError, ValueError, AttributeError):
        return []
    return [name for cell in cells if isinstance(cell, dict) and (name := _question(cell))]


def _question(cell: dict) -> str | None:
    try:
        return question_name(cell)
    except (KeyError, IndexError, TypeError):
        return None


@dataclass
class ModuleProgress:
    """One module as the student's copy shows it."""

    module: Module
    notebook: Path | None  # the student's copy; None before it exists
    questions: list[str]
    verdicts: dict[str, str] = field(default_factory=dict)

    @property
    def passed(self) -> int:
        return sum(self.verdicts.get(q) == "passed" for q in self.questions)

    def status(self, question: str) -> str:
        return self.verdicts.get(question, NOT_RUN)


def course_progress(root: Path, work: Path) -> list[ModuleProgress]:
    """Progress of every module: questions from ``root/exercises``, verdicts from ``work``."""
    rows = []
    for module in MODULES:
        exercise = root / "exercises" / f"{module.name}.ipynb"
        questions = exercise_questions(exercise) if exercise.exists() else []
        copy = work / f"{module.name}.ipynb"
        verdicts = {}
        if copy.exists():
            try:
                saved = saved_checks(json.loads(copy.read_text(encoding="utf-8")))
                verdicts = {q: status for q, status in saved.items() if status != NOT_RUN}
            except (OSError, ValueError):
                verdicts = {}  # a notebook being written, or damaged: shown as not run
        rows.append(ModuleProgress(module, copy if copy.exists() else None, questions, verdicts))
    return rows


def summary_lines(rows: list[ModuleProgress]) -> list[str]:
    """One plain-text line per module, for the terminal ``coursekit start`` runs in."""
    lines = []
    for row in rows:
        number = row.module.name[:2]
        if not row.questions:
            state = "no graded exercises"
        else:
            state = f"{row.passed} of {len(row.questions)} exercises pass their checks"
        lines.append(f"  {number} {row.module.title:52} {state}")
    return lines


# Coloured squares drawn with CSS: emoji are missing from many machines' fonts.
_COLOUR = {
    "passed": "#2e7d32",
    "failed": "#c62828",
    "error": "#c62828",
    "not attempted": "#bdbdbd",
    "not run": "#bdbdbd",
}


def _mark(status: str, title: str = "") -> str:
    return (
        f'<span title="{html.escape(title)}" style="display:inline-block;width:0.9em;'
        f'height:0.9em;margin-right:2px;border-radius:2px;background:{_COLOUR[status]}">'
        "</span>"
    )


def index_html(rows: list[ModuleProgress]) -> str:
    """The index as an HTML table: module (a link to the notebook), time, exercises."""
    body = []
    for row in rows:
        name = html.escape(row.module.name)
        link = f'<a href="{name}.ipynb">{html.escape(row.module.title)}</a>'
        marks = "".join(_mark(row.status(q), f"{q}: {row.status(q)}") for q in row.questions)
        score = f"{row.passed} / {len(row.questions)}" if row.questions else "no exercises"
        body.append(
            f"<tr><td>{name[:2]}</td><td>{link}<br><small>{html.escape(row.module.learn)}"
            f'</small></td><td style="white-space:nowrap">{row.module.minutes} min</td>'
            f'<td style="white-space:nowrap">{marks}</td><td style="white-space:nowrap">{score}'
            "</td></tr>"
        )
    return (
        '<table style="text-align:left"><thead><tr><th></th><th>Module</th><th>Time</th>'
        "<th>Exercises</th><th>Passed</th></tr></thead><tbody>"
        + "".join(body)
        + "</tbody></table><p><small>"
        + f"{_mark('passed')} passes its public checks {_mark('failed')} fails them "
        + f"{_mark('not run')} not attempted or not run yet, as your notebooks were last saved "
        "(hover over a square for its exercise). Hidden tests run when your notebook is graded."
        "</small></p>"
    )


def show_index(root: str | Path = "..", work: str | Path = ".") -> None:
    """Display the index in a notebook (the landing notebook's one code cell calls this)."""
    from IPython.display import HTML, display

    display(HTML(index_html(course_progress(Path(root), Path(work)))))


def _markdown_text(text: str) -> str:
    """``text`` shown as itself in a Markdown table cell: no markup, no column break."""
    text = " ".join(str(text).split())
    return re.sub(r"([\\`*_\[\]<>|$~&#])", r"\\\1", text)


def contents_markdown(work: Path | None = None) -> str:
    """The course's table of contents, as Markdown: every module of ``coursekit.course``
    with its minutes and a link to the student's copy in ``work`` (a module with no copy
    there yet says so instead); shown before anything runs."""
    rows = ["| # | Module | What you learn | Minutes |", "|---|---|---|---|"]
    for module in MODULES:
        link = f"[{_markdown_text(module.title)}]({quote(module.name)}.ipynb)"
        if work is not None and not (work / f"{module.name}.ipynb").exists():
            link = f"{_markdown_text(module.title)} (not in your copy of the course yet)"
        rows.append(
            f"| {_markdown_text(module.name[:2])} | {link} | {_markdown_text(module.learn)} "
            f"| {module.minutes} |"
        )
    hours, minutes = divmod(sum(module.minutes for module in MODULES), 60)
    return (
        f"# {_markdown_text(TITLE)}\n\n"
        f"{len(MODULES)} modules, about {f'{hours} h ' if hours else ''}{minutes} min in all. "
        "Start with the first and go in order: each module builds on the one before. Click a "
        "module to open your copy of it.\n\n"
        + "\n".join(rows)
        + "\n\nIn each notebook, fill in every `raise NotImplementedError`, run the cell, then "
        "the `check(...)` below it."
    )


def index_notebook(work: Path | None = None) -> nbformat.NotebookNode:
    """The landing notebook: the contents (Markdown, shown as soon as it opens), and below
    them a cell that shows which exercises pass, as the notebooks were last saved."""
    contents = nbformat.v4.new_markdown_cell(contents_markdown(work))
    progress_intro = nbformat.v4.new_markdown_cell(
        "## Your progress\n\n"
        "Run the cell below (Shift+Enter) to see which exercises pass their checks; save your "
        "notebooks (Ctrl+S) so it sees your latest results."
    )
    progress = nbformat.v4.new_code_cell(
        'from coursekit.commands.course_index import show_index\n\nshow_index(root="..", work=".")'
    )
    contents["id"], progress_intro["id"], progress["id"] = (
        "index-contents",
        "index-intro",
        "index-progress",
    )
    notebook = nbformat.v4.new_notebook(cells=[contents, progress_intro, progress])
    notebook.metadata.update(kernel_metadata())
    return notebook


def kernel_metadata(name: str = KERNEL_NAME) -> dict:
    """The notebook metadata JupyterLab writes once kernel ``name`` runs a notebook: its
    ``kernelspec`` (name, and the display name and language of the installed spec) and the
    ``language_info`` the kernel reports.

    Why: JupyterLab sets both as the kernel starts, and a notebook whose values differ (the
    display name "Python 3" where the spec says "Python 3 (ipykernel)", no ``language_info``)
    shows as unsaved the moment it opens. ``language_info`` is written only where the kernel
    is this Python (a spec that starts ``python``, which Jupyter runs as the server's own
    interpreter, the one ``coursekit start`` starts JupyterLab with); for another, JupyterLab
    fills it in."""
    kernelspec = {"name": name, "display_name": "Python 3", "language": "python"}
    metadata = {"kernelspec": kernelspec}
    try:
        from jupyter_client.kernelspec import KernelSpecManager

        spec = KernelSpecManager().get_kernel_spec(name)
    except (ImportError, KeyError):  # no Jupyter here, or no such kernel: Lab fills it in
        return metadata
    kernelspec.update(display_name=spec.display_name, language=spec.language)
    command = spec.argv[0] if spec.argv else ""
    major, minor = sys.version_info[:2]
    this_python = command in ("python", f"python{major}", f"python{major}.{minor}") or (
        os.path.realpath(command) == os.path.realpath(sys.executable)
    )
    if this_python and spec.language == "python":
        try:
            from ipykernel.ipkernel import IPythonKernel
        except ImportError:
            return metadata
        metadata["language_info"] = copy.deepcopy(IPythonKernel.language_info)
    return metadata


def write_index(work: Path) -> Path:
    """Write (or refresh) the landing notebook in ``work``; it holds no student work."""
    path = work / INDEX_NOTEBOOK
    nbformat.write(index_notebook(work), path)
    return path
