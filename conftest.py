"""Test-wide settings, including for nbval's notebook kernels (they inherit this environment)."""

import os

import matplotlib

# In solutions/ every check(...) must pass: a verdict other than "passed" raises there.
os.environ["COURSEKIT_STRICT_CHECKS"] = "1"
# Tests draw figures without a screen (notebook kernels keep their inline backend).
matplotlib.use("Agg")
