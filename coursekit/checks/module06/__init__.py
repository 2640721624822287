"""Module 6's questions (06_batch_size), one file per question.

Importing a question's file registers it; the order below is the order the questions are
listed and graded in.
"""

from coursekit.checks.module06 import (  # noqa: F401, I001  (importing registers, in this order)
    noise_scale,
    scaled_hyperparameters,
    ramp_plan,
)
