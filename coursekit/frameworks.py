"""Module 5's one import for the framework comparison: ``from coursekit import frameworks``.

The work lives in two modules, one idea each: :mod:`coursekit.framework_runs` trains the same
run in the course's loop, HF Accelerate, PyTorch Lightning and the HF Trainer, and
:mod:`coursekit.framework_comparison` measures the finished runs against a reference. This
module keeps the names the notebooks, tests and docs use in one place, and holds the one
question a notebook asks before any run: is this framework installed here (:func:`missing`)?

Example:
    >>> from coursekit import frameworks
    >>> course = frameworks.course_loop(frameworks.token_micro_batches(), accum_steps=4)
    >>> frameworks.compare([course], reference=course)[0].max_param_diff
    0.0
"""

from __future__ import annotations

import importlib.util

from coursekit.framework_comparison import Row, compare, table
from coursekit.framework_runs import (
    LR,
    VOCAB_SIZE,
    FrameworkRun,
    course_loop,
    token_micro_batches,
    warmup_linear,
    with_accelerate,
    with_hf_trainer,
    with_lightning,
)

__all__ = [
    "FRAMEWORKS",
    "LR",
    "VOCAB_SIZE",
    "FrameworkRun",
    "Row",
    "compare",
    "course_loop",
    "missing",
    "table",
    "token_micro_batches",
    "warmup_linear",
    "with_accelerate",
    "with_hf_trainer",
    "with_lightning",
]

#: Each extra: the modules it needs importable, and its name in messages.
FRAMEWORKS = {
    "accelerate": (("accelerate",), "HF Accelerate"),
    "lightning": (("lightning",), "PyTorch Lightning"),
    "transformers": (("transformers", "accelerate"), "the HF Trainer"),  # it runs on Accelerate
    "peft": (("peft",), "LoRA (peft)"),
}


def missing(framework: str) -> str | None:
    """``None`` if ``framework`` (``"accelerate"``, ``"lightning"`` or ``"transformers"``) can
    be imported, else one line saying what to install, for a notebook cell to print and skip.

    Example:
        >>> missing("keras")
        Traceback (most recent call last):
        ...
        ValueError: framework must be one of accelerate, lightning, transformers, peft; got 'keras'.
    """
    if framework not in FRAMEWORKS:
        raise ValueError(f"framework must be one of {', '.join(FRAMEWORKS)}; got {framework!r}.")
    modules, title = FRAMEWORKS[framework]
    absent = [module for module in modules if importlib.util.find_spec(module) is None]
    if not absent:
        return None
    return (
        f"Skipped: {title} needs {' and '.join(absent)}, not installed here. "
        'Install the extras with: pip install "coursekit[frameworks]"'
    )
