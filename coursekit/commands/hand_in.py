"""``coursekit.submit(...)``: pack the notebook you are in, from its last cell.

A kernel does not know for sure which file it belongs to, so the notebook is found from what
the front end tells the kernel (JupyterLab's session path, VS Code's file), or else from the
course notebooks in the current folder; when none of that settles it, the student is told
exactly what to pass. Packing reads the file on disk, so what is not saved is not handed in.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from coursekit.authoring.markup import QUESTION_HEADER
from coursekit.colab import in_colab
from coursekit.grading.packed import MAX_HAND_IN_BYTES
from coursekit.grading.submission import SubmissionError, describe, pack

_SESSION_NAMES = ("__session__", "__vsc_ipynb_file__")  # JupyterLab (ipykernel), VS Code


def _shell():
    try:
        from IPython import get_ipython
    except ImportError:
        return None
    return get_ipython()


def _course_notebooks(folder: Path) -> dict[Path, tuple[str, set[str]]]:
    """Notebooks in ``folder`` with a coursekit assignment tag: path -> (assignment, questions)."""
    found = {}
    for path in sorted(folder.glob("*.ipynb"))[:100]:
        try:
            if path.stat().st_size > MAX_HAND_IN_BYTES:
                continue
            notebook = json.loads(path.read_text(encoding="utf-8"))
            assignment = notebook["metadata"]["coursekit"]["assignment"]
            sources = ["".join(cell["source"]) for cell in notebook["cells"]]
        except (OSError, ValueError, KeyError, TypeError):
            continue
        first_lines = (QUESTION_HEADER.match(s.split("\n", 1)[0].strip()) for s in sources)
        found[path] = (str(assignment), {m["name"] for m in first_lines if m})
    return found


def find_notebook(
    namespace: dict | None = None, folder: Path | None = None
) -> tuple[Path | None, str]:
    """(path, "") of the notebook this kernel runs, or (None, what to do instead).

    ``namespace`` is the kernel's globals (the session names and the functions defined);
    ``folder`` the current folder.
    """
    namespace = namespace or {}
    folder = folder or Path.cwd()
    named = [namespace.get(name) for name in _SESSION_NAMES] + [os.environ.get("JPY_SESSION_NAME")]
    for value in named:
        if isinstance(value, str) and value.endswith(".ipynb"):
            for path in (Path(value), folder / value, folder / Path(value).name):
                if path.is_file():
                    return path, ""
    if in_colab():
        return None, (
            "On Colab your notebook is kept in Google Drive, not in this runtime's files, so "
            "it cannot be packed from here. Either download it (File > Download > Download "
            ".ipynb) and hand in that .ipynb as it is, or upload it with the Files panel on the "
            'left and run coursekit.submit("your-name", notebook="/content/NAME.ipynb"): the '
            "packed file then downloads to your computer."
        )
    candidates = _course_notebooks(folder)
    if len(candidates) > 1:  # keep those whose questions this kernel has defined
        defined = {name for name, value in namespace.items() if callable(value)}
        candidates = {p: v for p, v in candidates.items() if v[1] & defined} or candidates
    if len(candidates) == 1:
        return next(iter(candidates)), ""
    listed = ", ".join(p.name for p in candidates)
    which = f"It could be any of {listed}." if candidates else "There is no course notebook here."
    return None, (
        f"Could not tell which notebook this is (looked in {folder}). {which} Pass its file, "
        'e.g. coursekit.submit("your-name", notebook="01_accumulation.ipynb").'
    )


def _this_cell(shell) -> int | None:
    """The running cell's number, In [N] (its input is stored before it runs)."""
    try:
        return len(shell.history_manager.input_hist_raw) - 1
    except (AttributeError, TypeError):
        return None


def unsaved_runs(path: Path, execution_count: int | None) -> str:
    """A warning when cells ran after the file was saved: ``execution_count`` is this cell's
    number, and the cells run just before it have numbers the saved file does not hold."""
    if not isinstance(execution_count, int):
        return ""
    try:
        cells = json.loads(path.read_text(encoding="utf-8")).get("cells", [])
        counts = [c.get("execution_count") for c in cells if isinstance(c, dict)]
    except (OSError, ValueError, AttributeError):
        return ""
    saved = max((c for c in counts if isinstance(c, int)), default=0)
    if saved >= execution_count - 1:
        return ""
    return (
        f"Warning: cells ran after the last save (In [{saved + 1}] to In [{execution_count - 1}] "
        "are not in the file). If you changed anything since, save (Ctrl+S) and run this cell "
        "again."
    )


def submit(
    student: str, notebook: str | Path | None = None, out_dir: str | Path | None = None
) -> Path | None:
    """Pack this notebook into the file you hand in; run it as the last cell, after saving.

    It packs the notebook as saved on disk: save first (File > Save, or Ctrl+S). The notebook
    is found by itself in JupyterLab, VS Code, or when it is the only course notebook here;
    otherwise pass ``notebook=``. Returns the packed file's path, or None after saying why.
    On Colab the packed file is downloaded to your computer.

    Example (the last cell of a notebook):
        >>> coursekit.submit("ada")  # doctest: +SKIP
        Packed 01_accumulation for ada: 3 of 3 checks passed in the saved notebook. ...
    """
    shell = _shell()
    if notebook is not None:
        path = Path(notebook).expanduser()
    else:
        path, why = find_notebook(getattr(shell, "user_ns", None))
        if path is None:
            print(why)
            return None
    print(f"Packing {path} as saved on disk (save first: File > Save, or Ctrl+S).")
    try:
        packed = pack(path, student, out_dir)
    except SubmissionError as error:
        print(f"Not packed: {error}")
        return None
    warning = unsaved_runs(path, _this_cell(shell))
    print(describe(packed) + (f"\n{warning}" if warning else ""))
    if in_colab():
        from google.colab import files  # only there

        files.download(str(packed))
        print("Colab is downloading the packed file to your computer; hand in that file.")
    return packed
