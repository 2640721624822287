"""coursekit: the library behind the gradient accumulation course.

Notebooks import what they need from here; each name comes from a small module with one
idea (see the module docstrings). Names load on first use, so ``coursekit doctor`` can run
(and say what is missing) even where torch is not installed yet.
"""

from __future__ import annotations

import importlib

from coursekit import moved

moved.install()

__version__ = "0.1.0"

_EXPORTS = {
    "plan_accumulation": "coursekit.budget",
    "largest_micro_batch": "coursekit.budget",
    "fit_micro_batch": "coursekit.budget",
    "training_step_bytes": "coursekit.budget",
    "NothingFits": "coursekit.budget",
    "peak_live_bytes": "coursekit.memory",
    "Checkpointed": "coursekit.checkpointing",
    "checkpoint_costs": "coursekit.checkpointing",
    "tiny_gpt": "coursekit.gpt",
    "generate": "coursekit.gpt",
    "make_lines": "coursekit.text",
    "line_batches": "coursekit.text",
    "decode": "coursekit.text",
    "recipe_window": "coursekit.recipe",
    "train_recipe": "coursekit.recipe",
    "autocast_dtype": "coursekit.recipe",
    "warmup_cosine": "coursekit.schedules",
    "CheckResult": "coursekit.checks",
    "check": "coursekit.checks",
    "evaluate": "coursekit.checks",
    "make_classification": "coursekit.data",
    "make_images": "coursekit.data",
    "make_regression": "coursekit.data",
    "split_micro_batches": "coursekit.data",
    "in_colab": "coursekit.environment",
    "pick_device": "coursekit.environment",
    "seed_everything": "coursekit.environment",
    "seeded": "coursekit.environment",
    "flat_gradient": "coursekit.gradients",
    "full_batch_gradient": "coursekit.gradients",
    "relative_error": "coursekit.gradients",
    "MemoryBreakdown": "coursekit.memory",
    "activation_bytes": "coursekit.memory",
    "activation_bytes_by_size": "coursekit.memory",
    "fit_bytes_per_sample": "coursekit.memory",
    "memory_breakdown": "coursekit.memory",
    "optimizer_state_bytes": "coursekit.memory",
    "track_cuda_peak": "coursekit.memory",
    "tiny_cnn": "coursekit.models",
    "tiny_lm": "coursekit.models",
    "tiny_mlp": "coursekit.models",
    "optimizer_steps": "coursekit.schedules",
    "count_steps": "coursekit.step_counts",
    "warmup_linear_decay": "coursekit.schedules",
    "count_tokens": "coursekit.tokens",
    "lm_loss": "coursekit.tokens",
    "make_token_batches": "coursekit.tokens",
    "split_token_batches": "coursekit.tokens",
    "train_classifier": "coursekit.vision",
    "batchnorm_explorer": "coursekit.widgets",
    "loss_scaling_explorer": "coursekit.widgets",
    "pipeline_view": "coursekit.widgets",
    "zero_calculator": "coursekit.widgets",
    "memory_planner": "coursekit.widgets",
    "uses_your": "coursekit.notebook",
    "notebook_run": "coursekit.parameters",
    "submit": "coursekit.commands.hand_in",
    "quiz": "coursekit.quizzes",
    "Progress": "coursekit.progress",
    "samples_per_second": "coursekit.training",
    "train_accumulated": "coursekit.training",
    "windows": "coursekit.training",
    "format_bytes": "coursekit.units",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'coursekit' has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted([*globals(), *_EXPORTS])
