"""Exit statuses that the sandbox's own processes end with, known to both sides.

The runner's process tree ends with them and the grader reads them (through the warm parent's
:class:`~coursekit.grading.sandbox.reaping.Child`), so they live here, apart from either side:
neither the grader's modules nor the runner's need to import the other's to agree on them.
"""

SETUP_FAILED = 70  # a sandbox that could not be set up: no hand-in code ran
SCRATCH_FULL = 71  # a hand-in ended for writing past its scratch cap
