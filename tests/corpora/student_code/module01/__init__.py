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
from tests.corpora.student_code.sets import MAPS, SETS, merged

BY_QUESTION = {
    "accumulate_window": ACCUMULATE_WINDOW,
    "train_accumulated": TRAIN_ACCUMULATED,
    "plan_micro_batch": PLAN_MICRO_BATCH,
}

_QUESTIONS = (accumulate_window, train_accumulated, plan_micro_batch)
_SETS = merged(_QUESTIONS)
# The mutation-testing sets (tests/corpora/student_code/__init__.py says what each means),
# and NAMED_AS: variants whose mistake is named after another one that shows first.
NON_TEXTBOOK, HIDDEN_ONLY, UNNAMED = (_SETS[name] for name in SETS)
ALSO_NAMED, NAMED_AS, DESCRIBED = (_SETS[name] for name in MAPS)
