"""The error that says the sandbox itself could not be built: the machine's fault, no one's
grade.

Raised on the grader's side wherever building a sandbox fails before any hand-in code ran (the
warm parent, a runner that never got ready, a refusal to run hand-ins unconfined), and caught
by ``grade``, which stops the batch without marking anyone down. One runner's sandbox that
fails (:class:`RunnerSetupError`) is the grader's failure on that hand-in alone: tried again on
a fresh process, then stored as not graded, while the batch goes on.
"""


class SandboxSetupError(RuntimeError):
    """The sandbox could not be built (before any hand-in code ran): the machine's fault."""


class RunnerSetupError(SandboxSetupError):
    """One runner's sandbox was not ready (it ended, failed or hung before any hand-in code
    ran), while the warm parent serves: retried for that hand-in, never a grade."""


class GraderFault(RuntimeError):
    """The grader's own machinery failed while a hand-in ran (for instance it lost track of
    the hand-in's process): the hand-in is graded again on a fresh process, never scored."""
