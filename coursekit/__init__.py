"""coursekit: the library behind the gradient accumulation course.

Notebooks import what they need from here; each name comes from a small module with one
idea (see the module docstrings).
"""

from coursekit.checks import CheckResult, check, evaluate
from coursekit.data import make_classification, make_regression, split_micro_batches
from coursekit.environment import in_colab, pick_device, seed_everything
from coursekit.gradients import flat_gradient, full_batch_gradient, relative_error
from coursekit.memory import (
    MemoryBreakdown,
    activation_bytes,
    activation_bytes_by_size,
    fit_bytes_per_sample,
    memory_breakdown,
    optimizer_state_bytes,
    track_cuda_peak,
)
from coursekit.models import tiny_mlp
from coursekit.notebook import uses_your
from coursekit.quizzes import quiz
from coursekit.training import samples_per_second, train_accumulated, windows
from coursekit.units import format_bytes

__version__ = "0.1.0"

__all__ = [
    "CheckResult",
    "MemoryBreakdown",
    "activation_bytes",
    "activation_bytes_by_size",
    "check",
    "evaluate",
    "fit_bytes_per_sample",
    "flat_gradient",
    "format_bytes",
    "full_batch_gradient",
    "in_colab",
    "make_classification",
    "make_regression",
    "memory_breakdown",
    "optimizer_state_bytes",
    "pick_device",
    "quiz",
    "relative_error",
    "samples_per_second",
    "seed_everything",
    "split_micro_batches",
    "tiny_mlp",
    "track_cuda_peak",
    "train_accumulated",
    "uses_your",
    "windows",
]
