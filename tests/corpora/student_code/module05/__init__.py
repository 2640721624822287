"""Module 5 hand-ins as students write them: the right answer and each known mistake.

One file per question; this gathers their variants and mutation-testing sets into the
names the corpus has always had (``tests/corpora/student_code/__init__.py`` reads them).
"""

from tests.corpora.student_code.module05 import (
    count_steps,
    plan_accumulation,
    recipe_window,
)
from tests.corpora.student_code.module05.count_steps import COUNT_STEPS
from tests.corpora.student_code.module05.plan_accumulation import PLAN_ACCUMULATION
from tests.corpora.student_code.module05.recipe_window import RECIPE_WINDOW

BY_QUESTION = {
    "plan_accumulation": PLAN_ACCUMULATION,
    "recipe_window": RECIPE_WINDOW,
    "count_steps": COUNT_STEPS,
}

_QUESTIONS = (plan_accumulation, recipe_window, count_steps)

# Variants whose mistake is named after another one that shows first.
NAMED_AS = {k: v for m in _QUESTIONS for k, v in getattr(m, "NAMED_AS", {}).items()}

# Mutation-testing sets (tests/helpers/mutation.py; tests/corpora/student_code/__init__.py
# says what each means).
NON_TEXTBOOK = set().union(*(getattr(m, "NON_TEXTBOOK", set()) for m in _QUESTIONS))
HIDDEN_ONLY = set().union(*(getattr(m, "HIDDEN_ONLY", set()) for m in _QUESTIONS))
UNNAMED = set().union(*(getattr(m, "UNNAMED", set()) for m in _QUESTIONS))
ALSO_NAMED = {k: v for m in _QUESTIONS for k, v in getattr(m, "ALSO_NAMED", {}).items()}

__all__ = [
    "ALSO_NAMED",
    "BY_QUESTION",
    "COUNT_STEPS",
    "HIDDEN_ONLY",
    "NAMED_AS",
    "NON_TEXTBOOK",
    "PLAN_ACCUMULATION",
    "RECIPE_WINDOW",
    "UNNAMED",
]
