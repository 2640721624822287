"""Generated notebooks carry no outputs, counts or stray metadata: clean diffs, no stale state."""

from __future__ import annotations

KEPT_CELL_METADATA = ("tags",)


def clear_outputs(notebook, name: str):
    """Drop outputs and execution counts; keep only cell tags and the kernel's identity."""
    for cell in notebook["cells"]:
        metadata = cell.get("metadata", {})
        cell["metadata"] = {k: v for k, v in metadata.items() if k in KEPT_CELL_METADATA}
        if cell["cell_type"] == "code":
            cell["outputs"] = []
            cell["execution_count"] = None
    notebook["metadata"] = {
        "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
        "language_info": {"name": "python"},
    }
    return notebook
