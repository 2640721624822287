"""Module 0's question, in notebook 00_welcome: a warm-up that shows how checks work.

``effective_batch_size``: micro-batch size x accumulation steps x processes.
"""

from coursekit.checks.module00 import (  # noqa: F401, I001  (importing registers, in this order)
    effective_batch_size,
)
