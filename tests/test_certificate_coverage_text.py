"""What the guide, the README and the notebooks say a whole-course certificate covers is what
``coursekit certificate`` requires: every graded module, from the first to the last, as
``tracks.graded_modules()`` lists them (a new graded module changes the range, and the text
must follow)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from coursekit.grading.records.tracks import Coverage, coverage, graded_modules

REPO = Path(__file__).resolve().parents[1]
#: "every graded module, 00 to 08", "every module, 00 to 08": the statement of the range
RANGE = re.compile(r"every (?:graded )?module,\s+(\d+)\s+to\s+(\d+)")


def _texts() -> dict[str, str]:
    texts = {name: (REPO / name).read_text(encoding="utf-8") for name in ["README.md"]}
    for path in sorted((REPO / "docs").glob("*.md")):
        texts[path.relative_to(REPO).as_posix()] = path.read_text(encoding="utf-8")
    for path in sorted((REPO / "notebooks").glob("*.ipynb")):
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        text = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
        texts[path.relative_to(REPO).as_posix()] = text
    return texts


def test_the_whole_course_is_every_graded_module_in_one_unbroken_range():
    whole = coverage()
    assert isinstance(whole, Coverage) and whole.whole_course
    numbers = [int(name.split("_")[0]) for name in whole.modules]
    assert whole.modules == tuple(graded_modules())
    assert numbers == list(range(numbers[0], numbers[-1] + 1))  # so "X to Y" can say it


def test_every_statement_of_the_certificates_range_matches_the_code():
    numbers = [int(name.split("_")[0]) for name in graded_modules()]
    found = {
        name: [(int(a), int(b)) for a, b in RANGE.findall(re.sub(r"\s+", " ", text))]
        for name, text in _texts().items()
    }
    found = {name: ranges for name, ranges in found.items() if ranges}
    assert "docs/instructor-guide.md" in found and "notebooks/05_capstone.ipynb" in found
    wrong = {n: r for n, r in found.items() if set(r) != {(numbers[0], numbers[-1])}}
    assert wrong == {}, f"the certificate covers {numbers[0]:02d} to {numbers[-1]:02d}"
