"""Module 4 hand-ins as students write them: the right answer and each known mistake.

One file per question; this gathers their variants and mutation-testing sets into the
names the corpus has always had (``tests/corpora/student_code/__init__.py`` reads them).
"""

from tests.corpora.student_code.module04 import (
    ddp_window,
    resolve_batch_config,
    zero_memory,
)
from tests.corpora.student_code.module04.ddp_window import DDP_WINDOW
from tests.corpora.student_code.module04.resolve_batch_config import RESOLVE_BATCH_CONFIG
from tests.corpora.student_code.module04.zero_memory import ZERO_MEMORY

BY_QUESTION = {
    "resolve_batch_config": RESOLVE_BATCH_CONFIG,
    "ddp_window": DDP_WINDOW,
    "zero_memory": ZERO_MEMORY,
}

_QUESTIONS = (resolve_batch_config, ddp_window, zero_memory)

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
    "DDP_WINDOW",
    "HIDDEN_ONLY",
    "NAMED_AS",
    "NON_TEXTBOOK",
    "RESOLVE_BATCH_CONFIG",
    "UNNAMED",
    "ZERO_MEMORY",
]
