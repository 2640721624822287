"""Hidden tests stay in the source notebook: neither students nor solutions get them."""

from __future__ import annotations

from coursekit.authoring.markup import BEGIN_HIDDEN, END_HIDDEN, find_regions, source_lines


def drop_hidden_tests(notebook, name: str):
    """Remove every hidden-tests region, and any cell left with nothing but blank lines."""
    kept = []
    for index, cell in enumerate(notebook["cells"]):
        if cell["cell_type"] == "code":
            lines = source_lines(cell)
            regions = find_regions(lines, BEGIN_HIDDEN, END_HIDDEN, name, index)
            if regions:
                for region in reversed(regions):
                    del lines[region.begin : region.end + 1]
                while lines and not lines[-1].strip():
                    lines.pop()
                if not any(line.strip() for line in lines):
                    continue
                cell["source"] = "\n".join(lines)
        kept.append(cell)
    notebook["cells"] = kept
    return notebook
