"""Module 7's question (07_real_model): the auto-tuner, probed on simulated cards.

Importing a question's file registers it.
"""

from coursekit.checks.module07 import autotune  # noqa: F401  (importing registers it)
