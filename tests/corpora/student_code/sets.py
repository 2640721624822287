"""The mutation-testing sets of a module's hand-ins, merged from its questions' files.

Each question's file may hold its part of ``NON_TEXTBOOK``, ``HIDDEN_ONLY``, ``UNNAMED`` (sets
of (question, variant)), ``ALSO_NAMED`` and ``NAMED_AS`` (dicts); ``tests/corpora/
student_code/__init__.py`` says what each means. A module's ``__init__`` merges them once,
here, rather than each module spelling the merge out.
"""

from __future__ import annotations

from types import ModuleType

SETS = ("NON_TEXTBOOK", "HIDDEN_ONLY", "UNNAMED")
MAPS = ("ALSO_NAMED", "NAMED_AS", "DESCRIBED")


def merged(questions: tuple[ModuleType, ...]) -> dict:
    """{name: the union of the questions' sets, or their dicts merged} for every name."""
    result: dict = {name: set() for name in SETS} | {name: {} for name in MAPS}
    for question in questions:
        for name in SETS:
            result[name] |= getattr(question, name, set())
        for name in MAPS:
            result[name].update(getattr(question, name, {}))
    return result
