"""Module 2 hand-ins as students write them: the right answer and each known mistake.

One file per question, each with its variants and its part of the mutation-testing sets
(tests/helpers/mutation.py); this module merges them under the names the single module 2
file had, which tests/corpora/student_code/__init__.py reads.
"""

from tests.corpora.student_code.module02 import (
    accumulate_in_float32,
    accumulate_tokens,
    amp_window,
    global_token_scale,
    loss_scales,
    train_scheduled,
)
from tests.corpora.student_code.module02.accumulate_in_float32 import ACCUMULATE_IN_FLOAT32
from tests.corpora.student_code.module02.accumulate_tokens import ACCUMULATE_TOKENS
from tests.corpora.student_code.module02.amp_window import AMP_WINDOW
from tests.corpora.student_code.module02.global_token_scale import GLOBAL_TOKEN_SCALE
from tests.corpora.student_code.module02.loss_scales import LOSS_SCALES
from tests.corpora.student_code.module02.train_scheduled import TRAIN_SCHEDULED
from tests.corpora.student_code.sets import MAPS, SETS, merged

BY_QUESTION = {
    "loss_scales": LOSS_SCALES,
    "accumulate_tokens": ACCUMULATE_TOKENS,
    "global_token_scale": GLOBAL_TOKEN_SCALE,
    "accumulate_in_float32": ACCUMULATE_IN_FLOAT32,
    "amp_window": AMP_WINDOW,
    "train_scheduled": TRAIN_SCHEDULED,
}

_QUESTIONS = (
    loss_scales,
    accumulate_tokens,
    global_token_scale,
    accumulate_in_float32,
    amp_window,
    train_scheduled,
)
_SETS = merged(_QUESTIONS)
# The mutation-testing sets (tests/corpora/student_code/__init__.py says what each means),
# and NAMED_AS: variants whose mistake is named after another one that shows first.
NON_TEXTBOOK, HIDDEN_ONLY, UNNAMED = (_SETS[name] for name in SETS)
ALSO_NAMED, NAMED_AS, DESCRIBED = (_SETS[name] for name in MAPS)
AMP_WINDOW_NAMED_AS = NAMED_AS  # the old module's name for it, kept importable
