"""The test suite's time is stated in one place, the README: a second figure elsewhere (the
instructor guide said 16 minutes while the README said 20) only drifts from the first."""

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
A_TIME = re.compile(r"\b\d+(?:[.,½]\d*)?\s*(?:minutes?|mins?|seconds?|hours?)\b", re.IGNORECASE)


def statements_of_the_suite_s_time(text: str) -> list[str]:
    """Sentences (or commented command lines) that name ``scripts/test`` and give a time."""
    pieces = re.split(r"(?<=[.!?])\s+|\n\s*\n|\n(?=\S*\s*\./scripts/)", text)
    return [p.strip() for p in pieces if "scripts/test" in p and A_TIME.search(p)]


def test_only_the_readme_gives_the_suite_s_time():
    documents = [*REPO.glob("docs/**/*.md"), *REPO.glob("*.md"), REPO / "binder" / "README.md"]
    stated = {
        str(path.relative_to(REPO)): statements_of_the_suite_s_time(path.read_text())
        for path in documents
        if path.is_file() and path != REPO / "README.md"
    }
    assert {name: found for name, found in stated.items() if found} == {}
    assert statements_of_the_suite_s_time((REPO / "README.md").read_text())  # it is stated


def test_a_time_beside_the_command_is_found():
    """The check itself: the guide's old line is caught, a line without a time is not."""
    old = "./scripts/test            # runs everything CI runs (about 16 minutes on 2 cores)"
    assert statements_of_the_suite_s_time(old)
    assert not statements_of_the_suite_s_time("./scripts/test   # its time: the README")
    other = "It takes 25 minutes. It is not part of `./scripts/test` or CI."
    assert not statements_of_the_suite_s_time(other)  # another command's time, beside it
