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
from tests.corpora.student_code.sets import MAPS, SETS, merged

BY_QUESTION = {
    "plan_accumulation": PLAN_ACCUMULATION,
    "recipe_window": RECIPE_WINDOW,
    "count_steps": COUNT_STEPS,
}

_QUESTIONS = (plan_accumulation, recipe_window, count_steps)
_SETS = merged(_QUESTIONS)
# The mutation-testing sets (tests/corpora/student_code/__init__.py says what each means),
# and NAMED_AS: variants whose mistake is named after another one that shows first.
NON_TEXTBOOK, HIDDEN_ONLY, UNNAMED = (_SETS[name] for name in SETS)
ALSO_NAMED, NAMED_AS, DESCRIBED = (_SETS[name] for name in MAPS)


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
