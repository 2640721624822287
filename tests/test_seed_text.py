"""A grade's seed has 63 random bits: JSON readers that hold numbers as doubles (JavaScript's)
round integers above 2**53, so every JSON that carries the seed (``grade --json``,
Gradescope's ``extra_data``, tested in tests/test_gradescope.py) carries it as text too."""

from __future__ import annotations

import json

from coursekit.grading.grader import GradeResult


def test_grade_json_carries_the_seed_as_text_that_a_reader_of_doubles_keeps():
    seed = 2**63 - 1  # the largest the grader draws; as a double it reads as 2**63
    result = GradeResult("ada.ipynb", "ada", "01_accumulation", "a", 8.0, 10.0, seed=seed)
    as_doubles = json.loads(json.dumps(result.public()), parse_int=float)
    assert as_doubles["seed"] != seed  # rounded: why the text is there
    assert int(as_doubles["seed_text"]) == seed
    unseeded = GradeResult("ada.ipynb", "ada", "01_accumulation", "a", 8.0, 10.0)
    assert unseeded.public()["seed_text"] is None
