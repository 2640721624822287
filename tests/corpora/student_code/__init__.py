"""Hand-ins as students write them: the right answer and each known mistake, as source text.

Source text, not functions, because the same code is injected into exercise notebooks to
test that the notebook run names the mistake too (tests/test_notebooks.py). Each module's
hand-ins live in a file (or a package, one file per question) of their own; this module
gathers them.
"""

from tests.corpora.student_code import (
    module00 as student_code_00,
)
from tests.corpora.student_code import (
    module01 as student_code_01,
)
from tests.corpora.student_code import (
    module02 as student_code_02,
)
from tests.corpora.student_code import (
    module03 as student_code_03,
)
from tests.corpora.student_code import (
    module04 as student_code_04,
)
from tests.corpora.student_code import (
    module05 as student_code_05,
)
from tests.corpora.student_code import (
    module06_batch as student_code_06_batch,
)
from tests.corpora.student_code import (
    module06_noise as student_code_06_noise,
)
from tests.corpora.student_code import (
    module07 as student_code_07,
)
from tests.corpora.student_code import (
    module08 as student_code_08,
)
from tests.corpora.student_code.module00 import EFFECTIVE_BATCH_SIZE
from tests.corpora.student_code.module01 import (
    ACCUMULATE_WINDOW,
    PLAN_MICRO_BATCH,
    TRAIN_ACCUMULATED,
)

__all__ = [
    "ACCUMULATE_WINDOW",
    "ALSO_NAMED",
    "BY_QUESTION",
    "DESCRIBED",
    "EFFECTIVE_BATCH_SIZE",
    "HIDDEN_ONLY",
    "NAMED_AS",
    "NON_TEXTBOOK",
    "PLAN_MICRO_BATCH",
    "TRAIN_ACCUMULATED",
    "UNNAMED",
    "load",
    "mistake_of",
]

BY_QUESTION = {
    **student_code_00.BY_QUESTION,
    **student_code_01.BY_QUESTION,
    **student_code_02.BY_QUESTION,
    **student_code_03.BY_QUESTION,
    **student_code_04.BY_QUESTION,
    **student_code_05.BY_QUESTION,
    **student_code_06_noise.BY_QUESTION,
    **student_code_06_batch.BY_QUESTION,
    **student_code_07.BY_QUESTION,
    **student_code_08.BY_QUESTION,
}

# Variants whose mistake is named after another one that shows first.
NAMED_AS = {
    **student_code_00.NAMED_AS,
    **student_code_01.NAMED_AS,
    **student_code_02.NAMED_AS,
    **student_code_03.NAMED_AS,
    **student_code_04.NAMED_AS,
    **student_code_05.NAMED_AS,
    **student_code_06_noise.NAMED_AS,
    **student_code_06_batch.NAMED_AS,
    **student_code_07.NAMED_AS,
    **student_code_08.NAMED_AS,
}

_MODULES = (
    student_code_00,
    student_code_01,
    student_code_02,
    student_code_03,
    student_code_04,
    student_code_05,
    student_code_06_noise,
    student_code_06_batch,
    student_code_07,
    student_code_08,
)

# (question, variant) pairs, for tests/helpers/mutation.py:
# - NON_TEXTBOOK: mutants beyond the textbook mistakes (boundaries, partial windows, steps
#   outside the loop, sizes that do not divide, dtype slips, in-place changes to inputs,
#   stale state, .data/detach misuse, searches that skip candidates);
# - HIDDEN_ONLY: mutants the public check(...) may pass; only the grader's draw kills them;
# - UNNAMED: mutants whose failures must carry no mistake name (none would be true);
# - ALSO_NAMED: further mistake names that are also true of a mutant.
NON_TEXTBOOK = set().union(*(getattr(m, "NON_TEXTBOOK", set()) for m in _MODULES))
HIDDEN_ONLY = set().union(*(getattr(m, "HIDDEN_ONLY", set()) for m in _MODULES))
UNNAMED = set().union(*(getattr(m, "UNNAMED", set()) for m in _MODULES))
ALSO_NAMED = {k: v for m in _MODULES for k, v in getattr(m, "ALSO_NAMED", {}).items()}
# - DESCRIBED: for an UNNAMED mutant, a regular expression its feedback must match to count
#   as naming its mistake (tests/helpers/mutation.py measures how often feedback does).
DESCRIBED = {k: v for m in _MODULES for k, v in getattr(m, "DESCRIBED", {}).items()}


def mistake_of(variant: str) -> str:
    """The mistake the checks should name for a variant."""
    return NAMED_AS.get(variant, variant)


def load(question: str, variant: str):
    """The function a variant's source defines."""
    namespace: dict = {}
    exec(BY_QUESTION[question][variant], namespace)  # test fixtures, from the modules above
    return namespace[question]
