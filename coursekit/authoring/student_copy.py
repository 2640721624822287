"""A copy of the course for students of a graded course: without solutions or sources.

``solutions/`` holds the worked answers and ``notebooks/`` the sources with their hidden-test
cells; a graded course publishes neither. The copy holds what a student needs to take the
course: the exercises, the library, the two set-up scripts, the Colab notes, the environment
a hub's image is built from (``binder/``), and a README
written for students (:func:`student_readme`): the course's own README sends its reader to
``solutions/``, ``notebooks/``, the instructor guide and ``./scripts/test``, none of which are
in the copy. (The library itself carries coursekit's reference code, which the in-notebook
checks compare against; a student who calls it is flagged by the grader, see the course
README's "What grading trusts".)
"""

from __future__ import annotations

import shutil
from pathlib import Path

from coursekit import course

# What a student's copy holds, relative to the course folder, besides its README.
STUDENT_FILES = (
    "pyproject.toml",
    ".gitignore",
    "coursekit",
    "exercises",
    "scripts/setup",
    "scripts/start",
    "docs/colab.md",
    "binder",  # the environment of a JupyterHub's or Binder's image (hub_environment)
)
_NOT_COPIED = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", ".ipynb_checkpoints")
_GIVEAWAYS = ("### BEGIN SOLUTION", "### BEGIN HIDDEN TESTS")


class StudentCopyError(ValueError):
    """The copy cannot be made; the message says why."""


def _cell(text: str) -> str:
    """Authored text in a Markdown table cell: one line, no column break."""
    return " ".join(text.split()).replace("|", "\\|")


def _first_graded_module() -> str:
    """The first module with a graded question (the hand-in example names it)."""
    from coursekit.checks import questions_of

    graded = [module.name for module in course.MODULES if questions_of(module.name)]
    return (graded or [module.name for module in course.MODULES] or ["01_accumulation"])[0]


def student_readme() -> str:
    """The README of a student's copy: the modules (from ``coursekit.course``), how to start
    on a laptop or on Colab, how to work and how to hand in; nothing that is not in the copy.
    """
    rows = [
        "| # | Module | What you learn | Minutes | Notebook |",
        "|---|---|---|---|---|",
    ]
    for module in course.MODULES:
        path = f"exercises/{module.name}.ipynb"
        notebook = f"[{path}]({path}) ([Colab]({course.colab_url('exercises', module.name)}))"
        rows.append(
            f"| {_cell(module.name.split('_', 1)[0])} | {_cell(module.title)} | "
            f"{_cell(module.learn)} | {module.minutes} | {notebook} |"
        )
    hours, minutes = divmod(sum(module.minutes for module in course.MODULES), 60)
    length = f"{hours} h {minutes} min" if hours else f"{minutes} min"
    first = _first_graded_module()
    return f"""# {course.TITLE}

Your copy of the course: {len(course.MODULES)} modules of Jupyter notebooks, about {length}
in all. Take them in order: each builds on the one before. Each exercise has a `check(...)` cell
that tells you at once whether your answer passes its public checks; hidden tests run when
your notebook is graded.

## Modules

{chr(10).join(rows)}

## On your own machine

With Python 3.10 or newer, from this folder:

```bash
./scripts/start   # sets up .venv (the first time: a few minutes) and opens JupyterLab
```

On a remote machine, `./scripts/start --no-browser` prints the address to open instead. It
copies the notebooks of `exercises/` into `my-work/` (once: it never overwrites them) and
opens `my-work/index.ipynb`, the table of contents, with a link to each module. Work in
`my-work/`; stop the course with Ctrl-C in the terminal. `./scripts/setup` only sets up
`.venv/`.

## On Colab

Open a module with its Colab link above, then *File > Save a copy in Drive* to keep your work:
the notebook's first cell installs coursekit. [docs/colab.md](docs/colab.md) says what runs
there, GPU included.

## Working through a module

- Fill in each `raise NotImplementedError`, run the cell, then run the `check(...)` cell below
  it. `[passed]` means the public checks pass.
- `.venv/bin/coursekit doctor` (or the doctor cell of the first module) says what your machine
  offers and what to do about anything missing.

## Handing in

Save the notebook, then pack it:

```bash
.venv/bin/coursekit submit my-work/{first}.ipynb --student YOUR-NAME
```

This writes `my-work/YOUR-NAME-{first}.coursekit.zip` (your notebook as saved, and which
checks it shows as passed): hand in that file, as your instructor says.
`coursekit.submit("YOUR-NAME")` as a notebook's last cell does the same. A plain `.ipynb` is
accepted too (on Colab: *File > Download > Download .ipynb*).
"""


def make_student_copy(root: Path, destination: Path) -> list[Path]:
    """Copy the course at ``root`` for students into ``destination`` (new or empty).

    Refuses to write into a folder with files in it, and checks that no notebook of the
    copy holds a solution or hidden-test marker. Returns the top-level entries written.
    """
    root, destination = Path(root).resolve(), Path(destination).resolve()
    if destination == root or root in destination.parents:
        raise StudentCopyError(f"{destination} is inside the course folder; copy it elsewhere.")
    if destination.exists() and any(destination.iterdir()):
        raise StudentCopyError(f"{destination} is not empty; give a new or empty folder.")
    missing = [name for name in STUDENT_FILES if not (root / name).exists()]
    if missing:
        raise StudentCopyError(f"the course at {root} has no {', '.join(missing)}.")
    written = []
    for name in STUDENT_FILES:
        source, target = root / name, destination / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            shutil.copytree(source, target, ignore=_NOT_COPIED)
        else:
            shutil.copy2(source, target)
        written.append(target)
    readme = destination / "README.md"
    readme.write_text(student_readme(), encoding="utf-8")
    written.insert(0, readme)
    for notebook in destination.rglob("*.ipynb"):
        text = notebook.read_text(encoding="utf-8")
        if any(marker in text for marker in _GIVEAWAYS):
            shutil.rmtree(destination)
            raise StudentCopyError(
                f"{notebook.relative_to(destination)} holds a solution or hidden tests; run "
                "`coursekit build` and copy again."
            )
    return written
