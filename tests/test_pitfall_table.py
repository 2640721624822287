"""docs/pitfalls.md, the coverage table of the 24 pitfalls, says only what the course does:
every cell it names exists and runs code, every mistake it names is one a check recognises,
and its counts are the table's own."""

import ast
import re
from pathlib import Path

import nbformat

REPO = Path(__file__).resolve().parents[1]
TABLE = REPO / "docs" / "pitfalls.md"
ROW = re.compile(r"^\| (\d+) \| (.+?) \| (.+?) \| (.+?) \| (.+?) \|$")


def rows() -> list[dict]:
    found = []
    for line in TABLE.read_text().splitlines():
        if match := ROW.match(line):
            number, name, taught, shown, graded = match.groups()
            found.append({
                "number": int(number), "name": name,
                "taught": taught.strip() != "-",
                "shown": [] if shown.strip() == "-" else [s.strip() for s in shown.split(",")],
                "graded": [] if graded.strip() == "-" else [g.strip() for g in graded.split(",")],
            })  # fmt: skip
    return found


def named_mistakes() -> set[str]:
    """Every mistake name in coursekit/checks: the second argument of each ``Failure(...)``
    given as a string, and the keys of the ``*_MISTAKES`` and ``*_MESSAGES`` tables."""
    names = set()
    for path in (REPO / "coursekit" / "checks").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and getattr(node.func, "id", None) == "Failure"
                and len(node.args) > 1
                and isinstance(node.args[1], ast.Constant)
                and isinstance(node.args[1].value, str)
            ):
                names.add(node.args[1].value)
            if isinstance(node, ast.Assign | ast.AnnAssign) and isinstance(node.value, ast.Dict):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                if any(
                    isinstance(t, ast.Name) and t.id.endswith(("MISTAKES", "MESSAGES"))
                    for t in targets
                ):
                    names |= {k.value for k in node.value.keys if isinstance(k, ast.Constant)}
    return names


def code_cell_ids() -> set[str]:
    ids = set()
    for path in (REPO / "notebooks").glob("*.ipynb"):
        notebook = nbformat.read(path, as_version=4)
        ids |= {c.get("id") for c in notebook.cells if c.cell_type == "code"}
    return ids


def test_the_table_has_the_24_pitfalls_in_order():
    assert [r["number"] for r in rows()] == list(range(1, 25))


def test_every_cell_named_exists_and_is_code():
    cells = code_cell_ids()
    missing = {c for r in rows() for c in r["shown"] if c not in cells}
    assert not missing, f"cells named in docs/pitfalls.md but not in notebooks/: {missing}"


def test_every_mistake_named_is_recognised_by_a_check():
    known = named_mistakes()
    assert {"mean_of_means", "logged_loss_wrong", "off_by_one_boundary"} <= known
    unknown = {m for r in rows() for m in r["graded"] if m not in known}
    assert not unknown, f"mistakes named in docs/pitfalls.md that no check names: {unknown}"


def test_the_counts_are_the_tables_own():
    table = rows()
    counts = {
        "taught": sum(r["taught"] for r in table),
        "shown": sum(bool(r["shown"]) for r in table),
        "graded": sum(bool(r["graded"]) for r in table),
    }
    stated = re.search(
        r"Counts: taught (\d+)/24, shown (\d+)/24, graded (\d+)/24\.", TABLE.read_text()
    )
    assert stated, "docs/pitfalls.md has no counts line"
    assert tuple(map(int, stated.groups())) == (counts["taught"], counts["shown"], counts["graded"])
