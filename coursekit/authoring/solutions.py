"""Solution regions: stubbed for students, unmarked for the worked solutions."""

from __future__ import annotations

from coursekit.authoring.markup import BEGIN_SOLUTION, END_SOLUTION, find_regions, source_lines

STUB = 'raise NotImplementedError("Replace this line with your code.")'


def _rewrite(notebook, name: str, replace) -> None:
    for index, cell in enumerate(notebook["cells"]):
        if cell["cell_type"] != "code":
            continue
        lines = source_lines(cell)
        regions = find_regions(lines, BEGIN_SOLUTION, END_SOLUTION, name, index)
        for region in reversed(regions):
            lines[region.begin : region.end + 1] = replace(lines, region)
        if regions:
            cell["source"] = "\n".join(lines).rstrip()


def stub_solutions(notebook, name: str):
    """Replace each solution region by a stub at the BEGIN marker's indentation."""

    def stub(lines, region):
        marker = lines[region.begin]
        indent = marker[: len(marker) - len(marker.lstrip())]
        return [indent + STUB]

    _rewrite(notebook, name, stub)
    return notebook


def unmark_solutions(notebook, name: str):
    """Keep the solution code and drop the two marker lines around it."""
    _rewrite(notebook, name, lambda lines, region: lines[region.begin + 1 : region.end])
    return notebook
