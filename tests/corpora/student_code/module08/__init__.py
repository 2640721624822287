"""Module 8 hand-ins as students write them: the right answer and each known mistake.

One file per question; this gathers their variants and mutation-testing sets into the
names the corpus has always had (``tests/corpora/student_code/__init__.py`` reads them).
"""

from tests.corpora.student_code.module08 import pack_documents
from tests.corpora.student_code.module08.pack_documents import PACK_DOCUMENTS
from tests.corpora.student_code.sets import SETS, merged

BY_QUESTION = {"pack_documents": PACK_DOCUMENTS}

_SETS = merged((pack_documents,))
# The mutation-testing sets (tests/corpora/student_code/__init__.py says what each means),
# and NAMED_AS: variants whose mistake is named after another one that shows first.
NON_TEXTBOOK, HIDDEN_ONLY, UNNAMED = (_SETS[name] for name in SETS)
ALSO_NAMED, NAMED_AS = _SETS["ALSO_NAMED"], _SETS["NAMED_AS"]
DESCRIBED = _SETS.get("DESCRIBED", {})

__all__ = [
    "ALSO_NAMED",
    "BY_QUESTION",
    "DESCRIBED",
    "HIDDEN_ONLY",
    "NAMED_AS",
    "NON_TEXTBOOK",
    "PACK_DOCUMENTS",
    "UNNAMED",
]
