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

BY_QUESTION = {
    "accumulation_momentum": ACCUMULATION_MOMENTUM,
    "to_group_norm": TO_GROUP_NORM,
    "grad_cache_step": GRAD_CACHE_STEP,
}

_QUESTIONS = (accumulation_momentum, to_group_norm, grad_cache_step)

# Variants whose mistake is named after another one that shows first.
NAMED_AS = {k: v for m in _QUESTIONS for k, v in getattr(m, "NAMED_AS", {}).items()}

# Mutation-testing sets (tests/helpers/mutation.py; tests/corpora/student_code/__init__.py
# says what each means).
NON_TEXTBOOK = set().union(*(getattr(m, "NON_TEXTBOOK", set()) for m in _QUESTIONS))
HIDDEN_ONLY = set().union(*(getattr(m, "HIDDEN_ONLY", set()) for m in _QUESTIONS))
UNNAMED = set().union(*(getattr(m, "UNNAMED", set()) for m in _QUESTIONS))
ALSO_NAMED = {k: v for m in _QUESTIONS for k, v in getattr(m, "ALSO_NAMED", {}).items()}

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
