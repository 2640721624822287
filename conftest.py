"""Test-wide settings, including for nbval's notebook kernels (they inherit this environment)."""

import os

import matplotlib

# In solutions/ every check(...) must pass: a verdict other than "passed" raises there.
os.environ["COURSEKIT_STRICT_CHECKS"] = "1"
# Tests draw figures without a screen (notebook kernels keep their inline backend).
matplotlib.use("Agg")

# Golden notebooks are pipeline fixtures (their exercise stubs raise on purpose), not course
# notebooks for nbval to run.
collect_ignore = ["tests/golden"]
