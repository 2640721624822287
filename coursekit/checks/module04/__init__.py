"""Module 4's questions, checked in the notebook 04_distributed.

DeepSpeed's batch arithmetic (``resolve_batch_config``), one window under DDP with
``no_sync()`` (``ddp_window``) and ZeRO's memory per device (``zero_memory``). The import
order below is the registration order, and so the order of the questions in the notebook.
"""

from coursekit.checks.module04 import (  # noqa: F401, I001  (importing registers, in this order)
    resolve_batch_config,
    ddp_window,
    zero_memory,
)
