"""Module 3's questions, checked in the notebook 03_batch_dependence.

BatchNorm's momentum over a window (``accumulation_momentum``), BatchNorm swapped for
GroupNorm (``to_group_norm``) and GradCache's two passes (``grad_cache_step``). The import
order below is the registration order, and so the order of the questions in the notebook.
"""

from coursekit.checks.module03 import (  # noqa: F401, I001  (importing registers, in this order)
    accumulation_momentum,
    to_group_norm,
    grad_cache_step,
)
