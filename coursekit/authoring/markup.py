"""The visible markers an author writes in a source notebook, and their validation.

A source notebook marks:

- graded questions, with a first line ``# Question: NAME`` in the cell that defines them;
- the answer, between ``### BEGIN SOLUTION`` and ``### END SOLUTION`` lines (exercises get a
  stub that raises ``NotImplementedError``; solutions keep the code without the markers);
- hidden tests, between ``### BEGIN HIDDEN TESTS NAME`` and ``### END HIDDEN TESTS`` lines,
  which neither exercises nor solutions contain.

Anything malformed is a :class:`MarkupError` that names the notebook, the cell and the line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

BEGIN_SOLUTION = "### BEGIN SOLUTION"
END_SOLUTION = "### END SOLUTION"
BEGIN_HIDDEN = "### BEGIN HIDDEN TESTS"
END_HIDDEN = "### END HIDDEN TESTS"
QUESTION_HEADER = re.compile(r"^#\s*Question:\s*(?P<name>\S+)\s*$")
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class MarkupError(ValueError):
    """Bad markup in a source notebook; the message says where and how to fix it."""

    def __init__(self, notebook: str, cell_index: int, message: str):
        self.notebook = notebook
        self.cell_index = cell_index
        where = f"{notebook}, cell {cell_index + 1}" if cell_index >= 0 else notebook
        super().__init__(f"{where}: {message}")


@dataclass(frozen=True)
class Region:
    """Lines ``begin`` .. ``end`` (the marker lines, 0-based, inclusive) of one cell."""

    begin: int
    end: int
    label: str = ""  # the question a hidden-tests region belongs to


def source_lines(cell) -> list[str]:
    source = cell["source"]
    text = "".join(source) if isinstance(source, list) else source
    return text.split("\n")


def find_regions(
    lines: list[str], begin: str, end: str, notebook: str, cell_index: int
) -> list[Region]:
    """Pairs of ``begin``/``end`` marker lines; unclosed, unopened or nested pairs are errors."""
    regions, open_at, label = [], None, ""
    for number, line in enumerate(lines):
        stripped = line.strip()
        if stripped.startswith(begin):
            if open_at is not None:
                raise MarkupError(
                    notebook,
                    cell_index,
                    f"'{begin}' on line {number + 1} opens inside the region opened on line "
                    f"{open_at + 1}; close that one with '{end}' first.",
                )
            open_at, label = number, stripped[len(begin) :].strip()
        elif stripped.startswith(end):
            if open_at is None:
                raise MarkupError(
                    notebook,
                    cell_index,
                    f"'{end}' on line {number + 1} has no '{begin}' before it.",
                )
            regions.append(Region(open_at, number, label))
            open_at = None
    if open_at is not None:
        raise MarkupError(
            notebook,
            cell_index,
            f"'{begin}' on line {open_at + 1} is never closed by '{end}'.",
        )
    return regions


def question_name(cell) -> str | None:
    """The NAME of a ``# Question: NAME`` first line, or None."""
    if cell["cell_type"] != "code":
        return None
    match = QUESTION_HEADER.match(source_lines(cell)[0].strip())
    return match["name"] if match else None


def validate(notebook_node, notebook: str) -> dict[str, int]:
    """Check the whole notebook's markup; return its questions and their cells, in order."""
    questions: dict[str, int] = {}
    hidden: list[tuple[str, int]] = []
    for index, cell in enumerate(notebook_node["cells"]):
        lines = source_lines(cell)
        markers = any(
            m in line
            for line in lines
            for m in (BEGIN_SOLUTION, END_SOLUTION, BEGIN_HIDDEN, END_HIDDEN)
        )
        if cell["cell_type"] != "code":
            if markers:
                raise MarkupError(
                    notebook, index, "solution and hidden-test markers belong in code cells."
                )
            continue
        solutions = find_regions(lines, BEGIN_SOLUTION, END_SOLUTION, notebook, index)
        for region in find_regions(lines, BEGIN_HIDDEN, END_HIDDEN, notebook, index):
            if not region.label:
                raise MarkupError(
                    notebook,
                    index,
                    f"'{BEGIN_HIDDEN}' on line {region.begin + 1} must name its question, "
                    f"e.g. '{BEGIN_HIDDEN} accumulate_window'.",
                )
            hidden.append((region.label, index))
        name = question_name(cell)
        if name is None:
            continue
        if not _NAME.match(name):
            raise MarkupError(notebook, index, f"question name {name!r} is not a Python name.")
        if name in questions:
            raise MarkupError(
                notebook,
                index,
                f"question {name!r} is declared twice (first in cell {questions[name] + 1}); "
                "each question needs its own name.",
            )
        if not solutions:
            raise MarkupError(
                notebook,
                index,
                f"question {name!r} has no '{BEGIN_SOLUTION}' ... '{END_SOLUTION}' region.",
            )
        questions[name] = index
    for label, index in hidden:
        if label not in questions:
            raise MarkupError(
                notebook,
                index,
                f"hidden tests for {label!r}, but no cell above declares '# Question: {label}'.",
            )
        if index < questions[label]:
            raise MarkupError(
                notebook,
                index,
                f"hidden tests for {label!r} come before the question's cell "
                f"({questions[label] + 1}); put them after it.",
            )
    return questions
