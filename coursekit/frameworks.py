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

import importlib.metadata
import importlib.util
import re

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


def missing(framework: str, at_least: str | None = None) -> str | None:
    """``None`` if ``framework`` (``"accelerate"``, ``"lightning"``, ``"transformers"`` or
    ``"peft"``) can be imported, and its installed version is ``at_least`` that where one is
    given; else one line saying what to install, for a notebook cell to print and skip.

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
    if not absent and at_least is not None:
        installed = importlib.metadata.version(modules[0])
        if _release(installed) < _release(at_least):
            return (
                f"Skipped: this needs {title} {at_least} or newer; {installed} is installed "
                'here. Upgrade with: pip install "coursekit[frameworks]"'
            )
    if not absent:
        return None
    return (
        f"Skipped: {title} needs {' and '.join(absent)}, not installed here. "
        'Install the extras with: pip install "coursekit[frameworks]"'
    )


def _release(version: str) -> tuple[int, ...]:
    """The release numbers of a version string: ``"2.6.0rc1"`` is (2, 6, 0)."""
    match = re.match(r"\d+(\.\d+)*", version)
    if match is None:
        raise ValueError(f"not a version number: {version!r}")
    return tuple(int(part) for part in match.group().split("."))
