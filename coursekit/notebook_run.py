"""A notebook's papermill parameters, checked once and turned into the sizes its cells use.

Every course notebook opens with a cell tagged ``parameters``: plain assignments of
``device``, ``scale`` and ``seed`` (and, where a module has them, ``width``, ``steps`` and
``world_size``). papermill overrides them (``papermill in.ipynb out.ipynb -p scale 4 -p device
cuda``) by adding a cell after that one; the next cell passes them all to :func:`notebook_run`,
so a wrong value fails there, with a message that names it, rather than deep inside a demo.

``scale`` multiplies the sizes of data sets, batches and runs: 1 is the laptop-CPU default
that the course text's figures come from; 4 or more suits a GPU; below 1 runs faster (the
tests run every solution at 0.25). At 1 every size is exactly the one the text was written
for, so a notebook left at its defaults prints the text's numbers.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field

import torch

__all__ = ["DEVICE_CHOICES", "NotebookRun", "ParameterError", "notebook_run"]

DEVICE_CHOICES = ("auto", "cpu", "cuda", "cuda:N")
_OVERRIDE = "papermill -p NAME VALUE, or edit the parameters cell"


class ParameterError(ValueError):
    """A notebook parameter that cannot be used; the message says which and what to pass."""


@dataclass(frozen=True)
class NotebookRun:
    """The checked parameters of one notebook run.

    ``sizes`` holds the module's own parameters (``width``, ``steps``, ``world_size``...).
    """

    device: torch.device
    scale: float
    seed: int
    sizes: dict[str, int] = field(default_factory=dict)

    def size(self, default: int, minimum: int = 1, multiple_of: int = 1) -> int:
        """``default`` times the scale, rounded to the nearest multiple of ``multiple_of``
        and at least ``minimum``; exactly ``default`` at scale 1."""
        if self.scale == 1:
            return default
        multiples = max(1, round(default * self.scale / multiple_of))
        return max(minimum, multiples * multiple_of)

    @property
    def on_gpu(self) -> bool:
        return self.device.type == "cuda"

    @property
    def is_default_scale(self) -> bool:
        return self.scale == 1

    def __getattr__(self, name: str) -> int:
        sizes = self.__dict__.get("sizes", {})
        if name in sizes:
            return sizes[name]
        raise AttributeError(f"this notebook has no parameter {name!r}")

    def __str__(self) -> str:
        parts = [f"device {self.device}", f"scale {self.scale:g}", f"seed {self.seed}"]
        parts += [f"{name} {value}" for name, value in self.sizes.items()]
        return f"Run: {', '.join(parts)}."


def notebook_run(device="auto", scale=1, seed=0, **sizes) -> NotebookRun:
    """Check a notebook's parameters and return them as a :class:`NotebookRun`.

    Args:
        device: ``"auto"`` (the GPU when torch sees one, else the CPU), ``"cpu"``, ``"cuda"``
            or ``"cuda:N"``. Asking for CUDA where there is none is an error, not a quiet
            fallback: a GPU-sized run on a CPU would take hours.
        scale: a positive number that multiplies the notebook's sizes (1: the text's).
        seed: a whole number; seeds the notebook's draws.
        sizes: the module's own whole-number parameters, each at least 1.

    Example:
        >>> run = notebook_run(device="cpu", scale=0.5, seed=0)
        >>> run.size(512)
        256
    """
    return NotebookRun(
        device=_device(device),
        scale=_scale(scale),
        seed=_whole(seed, "seed", minimum=None),
        sizes={name: _whole(value, name, minimum=1) for name, value in sizes.items()},
    )


def _device(device) -> torch.device:
    if not isinstance(device, str):
        raise ParameterError(
            f"device is {device!r}; give one of {', '.join(DEVICE_CHOICES)} as text ({_OVERRIDE})."
        )
    name = device.strip().lower()
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cpu":
        return torch.device("cpu")
    if name == "cuda" or (name.startswith("cuda:") and name[5:].isdigit()):
        if not torch.cuda.is_available():
            raise ParameterError(
                f"device is {device!r}, but torch sees no CUDA GPU here "
                "(torch.cuda.is_available() is False). Run on a GPU machine, or pass "
                "device auto or cpu (a GPU-sized scale on a CPU takes far longer)."
            )
        index = int(name[5:]) if ":" in name else 0
        if index >= torch.cuda.device_count():
            raise ParameterError(
                f"device is {device!r}, but torch sees {torch.cuda.device_count()} GPU(s), "
                f"numbered from 0: pass a smaller index."
            )
        return torch.device(name)
    raise ParameterError(
        f"device is {device!r}; give one of {', '.join(DEVICE_CHOICES)} ({_OVERRIDE})."
    )


def _number(value, name: str):
    if isinstance(value, bool) or not isinstance(value, (numbers.Real, str)):
        raise ParameterError(f"{name} is {value!r}; give a number ({_OVERRIDE}).")
    if isinstance(value, str):  # papermill -r passes text as it was typed
        try:
            value = float(value)
        except ValueError:
            raise ParameterError(f"{name} is {value!r}; give a number ({_OVERRIDE}).") from None
    return value


def _scale(value) -> float:
    scale = float(_number(value, "scale"))
    if not math.isfinite(scale) or scale <= 0:
        raise ParameterError(
            f"scale is {value!r}; give a positive number: 1 for the sizes in the text, 4 or "
            "more on a GPU, 0.25 for a quick run."
        )
    return scale


def _whole(value, name: str, minimum: int | None) -> int:
    number = _number(value, name)
    if not (isinstance(number, numbers.Integral) or float(number).is_integer()):
        raise ParameterError(f"{name} is {value!r}; give a whole number ({_OVERRIDE}).")
    whole = int(number)
    if minimum is not None and whole < minimum:
        raise ParameterError(f"{name} is {value!r}; give a whole number of at least {minimum}.")
    return whole
