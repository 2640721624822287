"""Module 2's questions (transitional: the files below become one file per question)."""

from coursekit.checks import (  # noqa: F401, I001  (importing registers, in this order)
    module02_scaling,
    module02_scaling_ranks,
    module02_steps,
    module02_bf16,
)
