"""The error that says the sandbox itself could not be built: the machine's fault, no one's
grade.

Raised on the grader's side wherever building a sandbox fails before any hand-in code ran (the
warm parent, a runner that never got ready, a refusal to run hand-ins unconfined), and caught
by ``grade``, which stops the batch without marking anyone down.
"""


class SandboxSetupError(RuntimeError):
    """The sandbox could not be built (before any hand-in code ran): the machine's fault."""
