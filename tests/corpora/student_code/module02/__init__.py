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
NON_TEXTBOOK = set().union(*(q.NON_TEXTBOOK for q in _QUESTIONS))
HIDDEN_ONLY: set[tuple[str, str]] = set()
UNNAMED = set().union(*(getattr(q, "UNNAMED", set()) for q in _QUESTIONS))
ALSO_NAMED = {k: v for q in _QUESTIONS for k, v in getattr(q, "ALSO_NAMED", {}).items()}
# Variants whose mistake is named after another one that shows first (or that is the same
# mistake seen from outside), keyed by variant.
NAMED_AS = {k: v for q in _QUESTIONS for k, v in getattr(q, "NAMED_AS", {}).items()}
AMP_WINDOW_NAMED_AS = NAMED_AS  # the old module's name for it, kept importable
