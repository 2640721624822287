"""``coursekit build``: write exercises/ and solutions/ from notebooks/, or check they match.

It also writes the README's module table and a hub's environment, ``binder/requirements.txt``
(see ``hub_environment``), which name the course's address too.

Each output is the source notebook passed through a fixed pipeline of small transforms.
The order is data, not a comment: validation first, then the transforms in sequence, then the
set-up cell, whose code depends on where the course is published (see ``publication``).
Beside them it keeps ``notebooks/released-demos.json``, every release's demo cells, which the
grader skips in hand-ins made from any release (see ``released_demos``).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from coursekit.authoring.assignment_tag import tag_assignment
from coursekit.authoring.demo_cells import demo_problems, released_demos
from coursekit.authoring.hidden_tests import drop_hidden_tests
from coursekit.authoring.hub_environment import REQUIREMENTS, hub_requirements
from coursekit.authoring.markup import MarkupError, validate
from coursekit.authoring.outputs import clear_outputs
from coursekit.authoring.publication import Publication, resolve
from coursekit.authoring.readme_table import with_module_table
from coursekit.authoring.released_demos import RECORD, wanted_record
from coursekit.authoring.setup_cell import add_setup_cell, install_from_setting, setup_source
from coursekit.authoring.solutions import stub_solutions, unmark_solutions

Transform = Callable[[dict, str], dict]

PIPELINES: dict[str, tuple[Transform, ...]] = {
    "exercises": (stub_solutions, drop_hidden_tests, clear_outputs, tag_assignment),
    "solutions": (unmark_solutions, drop_hidden_tests, clear_outputs, tag_assignment),
}


def read_source(path: Path) -> nbformat.NotebookNode:
    """Read a source notebook, turning unreadable files into a MarkupError that names them."""
    try:
        return nbformat.read(path, as_version=4)
    except Exception as exc:  # nbformat raises several kinds for bad JSON or schema
        raise MarkupError(str(path), -1, f"not a readable notebook ({exc}).") from None


def render(source: nbformat.NotebookNode, name: str, folder: str, setup: str | None = None) -> str:
    """The exact text of ``folder``'s version of a source notebook.

    ``setup`` is the set-up cell's code; the one course.py alone describes when None.
    """
    notebook = copy.deepcopy(source)
    for transform in PIPELINES[folder]:
        notebook = transform(notebook, name)
    notebook = add_setup_cell(notebook, name, setup)
    return nbformat.writes(notebook, version=4) + "\n"


@dataclass
class BuildPlan:
    """What the outputs should contain, and which on-disk files differ from that."""

    wanted: dict[Path, str] = field(default_factory=dict)
    stale: list[Path] = field(default_factory=list)  # generated files with no source

    def changes(self) -> list[Path]:
        differing = [
            path
            for path, text in self.wanted.items()
            if not path.exists() or path.read_text(encoding="utf-8") != text
        ]
        return sorted(differing + self.stale)


def plan_build(root: Path, publication: Publication | None = None) -> BuildPlan:
    """Validate every source notebook and compute all generated files.

    ``publication`` is where the course is published; found from ``root`` when None.
    """
    root = Path(root)
    publication = publication or resolve(root)
    setup = setup_source(publication, install_from_setting())
    sources = sorted((root / "notebooks").glob("*.ipynb"))
    if not sources:
        raise FileNotFoundError(f"No source notebooks in {root / 'notebooks'}.")
    plan = BuildPlan()
    declared: dict[str, str] = {}
    demos: dict[str, dict[str, str]] = {}  # assignment -> its exercise's demo cells
    for path in sources:
        relative = str(path.relative_to(root))
        notebook = read_source(path)
        for question, cell in validate(notebook, relative).items():
            if question in declared:
                raise MarkupError(
                    relative,
                    cell,
                    f"question {question!r} is also declared in {declared[question]}; "
                    "question names are unique across the course.",
                )
            declared[question] = f"{relative}, cell {cell + 1}"
        for folder in PIPELINES:
            plan.wanted[root / folder / path.name] = render(notebook, relative, folder, setup)
        _check_demo_cells(notebook, plan.wanted[root / "solutions" / path.name], relative)
        exercise = nbformat.reads(plan.wanted[root / "exercises" / path.name], as_version=4)
        demos[path.stem] = released_demos(exercise)
    for folder in PIPELINES:
        for existing in sorted((root / folder).glob("*.ipynb")):
            if existing not in plan.wanted:
                plan.stale.append(existing)
    record = wanted_record(root, demos)  # every release's demo cells, for the grader
    if record is not None:
        plan.wanted[root / RECORD] = record
    plan.wanted[root / REQUIREMENTS] = hub_requirements(publication, install_from_setting())
    readme = root / "README.md"
    if readme.exists():
        plan.wanted[readme] = with_module_table(readme.read_text(encoding="utf-8"), publication)
    return plan


def _check_demo_cells(source: nbformat.NotebookNode, solution: str, relative: str) -> None:
    """Grading skips demo cells: none may define a name the graded cells need."""
    problems = demo_problems(nbformat.reads(solution, as_version=4))
    if problems:
        cell_id, why = problems[0]
        index = next((i for i, c in enumerate(source.cells) if c.get("id") == cell_id), -1)
        raise MarkupError(
            relative,
            index,
            f"{why}. Grading skips a demo cell a student left as released, so the graded code "
            "would run without it: move that code to a cell without the tag, or drop the tag.",
        )


def build(root: Path, check: bool = False, publication: Publication | None = None) -> list[Path]:
    """Write (or, with ``check``, only compare) the generated files; return those that differ.

    ``publication`` is where the course is published; found from ``root`` when None. With
    ``check``, a course.py that still holds the placeholder address while the git remote names
    another repository is a ValueError: a build without that remote would differ.
    """
    publication = publication or resolve(root)
    conflict = publication.placeholder_conflict()
    if check and conflict:
        raise ValueError(conflict)
    plan = plan_build(root, publication)
    changes = plan.changes()
    if not check:
        for path in changes:
            if path in plan.stale:
                path.unlink()
                continue
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(plan.wanted[path], encoding="utf-8")
    return changes
