"""Module 3 hand-ins as students write them: the right answer and each known mistake.

One file per question; this gathers their variants and mutation-testing sets into the
names the corpus has always had (``tests/corpora/student_code/__init__.py`` reads them).
"""

from tests.corpora.student_code.module03 import (
    accumulation_momentum,
    grad_cache_step,
    to_group_norm,
)
from tests.corpora.student_code.module03.accumulation_momentum import ACCUMULATION_MOMENTUM
from tests.corpora.student_code.module03.grad_cache_step import GRAD_CACHE_STEP
from tests.corpora.student_code.module03.to_group_norm import TO_GROUP_NORM
from tests.corpora.student_code.sets import MAPS, SETS, merged

BY_QUESTION = {
    "accumulation_momentum": ACCUMULATION_MOMENTUM,
    "to_group_norm": TO_GROUP_NORM,
    "grad_cache_step": GRAD_CACHE_STEP,
}

_QUESTIONS = (accumulation_momentum, to_group_norm, grad_cache_step)
_SETS = merged(_QUESTIONS)
# The mutation-testing sets (tests/corpora/student_code/__init__.py says what each means),
# and NAMED_AS: variants whose mistake is named after another one that shows first.
NON_TEXTBOOK, HIDDEN_ONLY, UNNAMED = (_SETS[name] for name in SETS)
ALSO_NAMED, NAMED_AS, DESCRIBED = (_SETS[name] for name in MAPS)


__all__ = [
    "ACCUMULATION_MOMENTUM",
    "ALSO_NAMED",
    "BY_QUESTION",
    "GRAD_CACHE_STEP",
    "HIDDEN_ONLY",
    "NAMED_AS",
    "NON_TEXTBOOK",
    "TO_GROUP_NORM",
    "UNNAMED",
]
