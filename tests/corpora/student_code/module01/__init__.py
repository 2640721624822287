"""Module 1 hand-ins as students write them, one file per question, gathered here.

Each question's file holds its variants and its part of the mutation-testing sets
(tests/helpers/mutation.py); this module merges them under the names every module's
hand-ins share (see tests/corpora/student_code/__init__.py).
"""

from tests.corpora.student_code.module01 import (
    accumulate_window,
    plan_micro_batch,
    train_accumulated,
)
from tests.corpora.student_code.module01.accumulate_window import ACCUMULATE_WINDOW
from tests.corpora.student_code.module01.plan_micro_batch import PLAN_MICRO_BATCH
from tests.corpora.student_code.module01.train_accumulated import TRAIN_ACCUMULATED

BY_QUESTION = {
    "accumulate_window": ACCUMULATE_WINDOW,
    "train_accumulated": TRAIN_ACCUMULATED,
    "plan_micro_batch": PLAN_MICRO_BATCH,
}

_QUESTIONS = (accumulate_window, train_accumulated, plan_micro_batch)
NON_TEXTBOOK = set().union(*(q.NON_TEXTBOOK for q in _QUESTIONS))
HIDDEN_ONLY = set().union(*(getattr(q, "HIDDEN_ONLY", set()) for q in _QUESTIONS))
UNNAMED = set().union(*(getattr(q, "UNNAMED", set()) for q in _QUESTIONS))
ALSO_NAMED = {k: v for q in _QUESTIONS for k, v in getattr(q, "ALSO_NAMED", {}).items()}
NAMED_AS = {k: v for q in _QUESTIONS for k, v in getattr(q, "NAMED_AS", {}).items()}
