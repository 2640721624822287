"""Module 7 hand-ins as students write them: the right answer and each known mistake.

One file per question; this gathers their variants and mutation-testing sets into the
names the corpus has always had (``tests/corpora/student_code/__init__.py`` reads them).
"""

from tests.corpora.student_code.module07 import autotune
from tests.corpora.student_code.module07.autotune import AUTOTUNE
from tests.corpora.student_code.sets import MAPS, SETS, merged

BY_QUESTION = {"autotune": AUTOTUNE}

_SETS = merged((autotune,))
# The mutation-testing sets (tests/corpora/student_code/__init__.py says what each means),
# and NAMED_AS: variants whose mistake is named after another one that shows first.
NON_TEXTBOOK, HIDDEN_ONLY, UNNAMED = (_SETS[name] for name in SETS)
ALSO_NAMED, NAMED_AS, DESCRIBED = (_SETS[name] for name in MAPS)

__all__ = [
    "ALSO_NAMED",
    "AUTOTUNE",
    "BY_QUESTION",
    "HIDDEN_ONLY",
    "NAMED_AS",
    "NON_TEXTBOOK",
    "UNNAMED",
]
