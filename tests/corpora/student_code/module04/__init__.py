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
from tests.corpora.student_code.sets import MAPS, SETS, merged

BY_QUESTION = {
    "resolve_batch_config": RESOLVE_BATCH_CONFIG,
    "ddp_window": DDP_WINDOW,
    "zero_memory": ZERO_MEMORY,
}

_QUESTIONS = (resolve_batch_config, ddp_window, zero_memory)
_SETS = merged(_QUESTIONS)
# The mutation-testing sets (tests/corpora/student_code/__init__.py says what each means),
# and NAMED_AS: variants whose mistake is named after another one that shows first.
NON_TEXTBOOK, HIDDEN_ONLY, UNNAMED = (_SETS[name] for name in SETS)
ALSO_NAMED, NAMED_AS, DESCRIBED = (_SETS[name] for name in MAPS)


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
