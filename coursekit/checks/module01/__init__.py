"""Module 1's questions, in notebook 01_accumulation: one window, the loop, and memory.

``accumulate_window`` adds one window's gradients up, ``train_accumulated`` is the loop that
steps once per window, and ``plan_micro_batch`` picks the largest micro-batch that fits a
memory budget. Each question builds its inputs from a small spec (seeds and sizes), so the
grader can rebuild exactly the same problem in another process. Judges compare with the
reference's outputs and, on a mismatch, try the known mistakes before giving a generic
message.
"""

from coursekit.checks.module01 import (  # noqa: F401, I001  (importing registers, in this order)
    accumulate_window,
    train_accumulated,
    plan_micro_batch,
)
