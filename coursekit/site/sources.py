"""What the site shows of each module: the exercise notebook, made by ``coursekit build``'s
own pipeline from ``notebooks/``, never from ``solutions/``.

Why the pipeline and not the committed ``exercises/`` files: the site then shows what the
next ``coursekit build`` will write, even before it is committed, and a solution cell reaches
the site only through ``stub_solutions``, the transform that makes every student's copy.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import nbformat

from coursekit import course
from coursekit.authoring.build import read_source, render
from coursekit.authoring.publication import Publication, resolve
from coursekit.authoring.setup_cell import install_from_setting, setup_source


@dataclass(frozen=True)
class ModuleSource:
    """One module as the site reads it: course.py's description and its exercise notebook."""

    module: course.Module
    exercise: nbformat.NotebookNode

    @property
    def name(self) -> str:
        return self.module.name


def read_modules(root: Path, publication: Publication | None = None) -> list[ModuleSource]:
    """Every module of course.py, in course order, with its exercise notebook as built.

    A module of course.py without a source notebook is a FileNotFoundError naming it.
    """
    root = Path(root)
    publication = publication or resolve(root)
    setup = setup_source(publication, install_from_setting())
    found = []
    for module in course.MODULES:
        path = root / "notebooks" / f"{module.name}.ipynb"
        if not path.is_file():
            raise FileNotFoundError(
                f"course.py names the module {module.name}, but {path} does not exist: add the "
                "notebook or remove the module from coursekit/course.py."
            )
        text = render(read_source(path), str(path.relative_to(root)), "exercises", setup)
        found.append(ModuleSource(module, nbformat.reads(text, as_version=4)))
    return found
