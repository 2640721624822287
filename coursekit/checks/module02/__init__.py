"""Module 2's questions, in notebook 02_loss_scaling: scaling each loss, and the window's end.

``loss_scales`` and ``accumulate_tokens`` weight micro-batches of different sizes (samples,
then real tokens), ``global_token_scale`` counts tokens across data-parallel ranks,
``amp_window`` and ``train_scheduled`` do once per window what must happen once (GradScaler,
learning-rate schedule), and ``accumulate_in_float32`` sums a bf16 model's gradients in
float32.
"""

from coursekit.checks.module02 import (  # noqa: F401, I001  (importing registers, in this order)
    loss_scales,
    accumulate_tokens,
    global_token_scale,
    amp_window,
    train_scheduled,
    accumulate_in_float32,
)
