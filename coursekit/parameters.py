"""A notebook's papermill parameters, checked once and turned into the sizes its cells use.

Every course notebook opens with a cell tagged ``parameters``: plain assignments of
``device``, ``scale`` and ``seed`` (and, where a module has them, ``width``, ``steps`` and
``world_size``). papermill overrides them (``papermill in.ipynb out.ipynb -p scale 4 -p device
cuda``) by adding a cell after that one; the next cell passes them all to :func:`notebook_run`,
so a wrong value fails there, with a message that names it, rather than deep inside a demo.

``scale`` multiplies the sizes of data sets, batches and runs: 1 is the laptop-CPU default
that the course text's figures come from; 4 or more suits a GPU; 0.25, the smallest allowed,
runs fastest (the tests run every solution there). At 1 every size is exactly the one the
text was written for, so a notebook left at its defaults prints the text's numbers.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field

import torch

__all__ = ["DEVICE_CHOICES", "NotebookRun", "ParameterError", "notebook_run"]

DEVICE_CHOICES = ("auto", "cpu", "cuda", "cuda:N")
# The scales tried: 0.25 by the tests, below it some demonstrations have too little to show.
# Above 64 no size was ever tried, and a typo (scale 400 for 4.00) would run for days.
MIN_SCALE, MAX_SCALE = 0.25, 64
MAX_SEED = 2**31 - 1  # demonstrations add small offsets; every generator takes this range
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
    options: dict[str, object] = field(default_factory=dict)  # model, max_memory_gb (module 7)

    def size(self, default: int, minimum: int = 1, multiple_of: int = 1) -> int:
        """``default`` times the scale, rounded to the nearest multiple of ``multiple_of``
        (halves up), and at least ``minimum``. At scale 1 that is ``default`` itself for every
        size the notebooks write (each is already a multiple, and above its minimum); a
        module's own parameter (``run.size(run.steps, minimum=2)``) still gets its floor."""
        if multiple_of < 1 or minimum < 1:
            raise ValueError(f"multiple_of ({multiple_of}) and minimum ({minimum}) must be >= 1")
        multiples = max(1, math.floor(default * self.scale / multiple_of + 0.5))
        return max(minimum, multiples * multiple_of)

    @property
    def on_gpu(self) -> bool:
        return self.device.type == "cuda"

    def __getattr__(self, name: str) -> int:
        sizes = self.__dict__.get("sizes", {})
        if name in sizes:
            return sizes[name]
        options = self.__dict__.get("options", {})
        if name in options:
            return options[name]
        raise AttributeError(f"this notebook has no parameter {name!r}")

    def __str__(self) -> str:
        parts = [f"device {self.device}", f"scale {self.scale:g}", f"seed {self.seed}"]
        parts += [f"{name} {value}" for name, value in self.options.items()]
        parts += [f"{name} {value}" for name, value in self.sizes.items()]
        return f"Run: {', '.join(parts)}."


_UNSET = object()


def notebook_run(
    device="auto",
    scale=1,
    seed=0,
    *,
    at_least: dict[str, int] | None = None,
    even=(),
    model=_UNSET,
    max_memory_gb=_UNSET,
    **sizes,
) -> NotebookRun:
    """Check a notebook's parameters and return them as a :class:`NotebookRun`.

    Args:
        device: ``"auto"`` (the GPU when torch sees one, else the CPU), ``"cpu"``, ``"cuda"``
            or ``"cuda:N"`` (made torch's current GPU, so code that uses the current one
            follows). Asking for CUDA where there is none is an error, not a quiet fallback:
            a GPU-sized run on a CPU would take hours.
        scale: a number from 0.25 to 64 that multiplies the notebook's sizes (1: the text's).
        seed: a whole number from 0 to 2**31 - 1; seeds the notebook's draws.
        at_least: the smallest value of a module's own parameter where it is not 1 (a
            measurement that needs two processes: ``{"world_size": 2}``).
        even: the module's own parameters that must be even (a width split over 2 heads).
        model: module 7's model: ``"auto"``, ``"tiny"`` or a Hugging Face model id.
        max_memory_gb: module 7's memory budget in GiB: ``None`` (the whole card) or a
            number above 0.
        sizes: the module's own whole-number parameters, each at least 1.

    Example:
        >>> run = notebook_run(device="cpu", scale=0.5, seed=0)
        >>> run.size(512)
        256
    """
    at_least = at_least or {}
    checked = {name: _whole(value, name, at_least.get(name, 1)) for name, value in sizes.items()}
    for name in even:
        if checked[name] % 2:
            raise ParameterError(f"{name} is {sizes[name]!r}; give an even number ({_OVERRIDE}).")
    options = {}
    if model is not _UNSET:
        options["model"] = _model(model)
    if max_memory_gb is not _UNSET:
        options["max_memory_gb"] = _memory(max_memory_gb)
    run = NotebookRun(
        device=_device(device),
        scale=_scale(scale),
        seed=_seed(seed),
        sizes=checked,
        options=options,
    )
    if run.on_gpu:
        torch.cuda.set_device(run.device)
    return run


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
        if torch.version.cuda is None:
            raise ParameterError(
                f"device is {device!r}, but this torch ({torch.__version__}) is built without "
                "CUDA, so it cannot use a GPU even where there is one. On a GPU machine, "
                "install a CUDA build (delete .venv and run ./scripts/setup again), or pass "
                "device auto or cpu (a GPU-sized scale on a CPU takes far longer)."
            )
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


def _model(value) -> str:
    if not isinstance(value, str) or not value.strip() or any(c.isspace() for c in value.strip()):
        raise ParameterError(
            f"model is {value!r}; give 'auto', 'tiny' or a Hugging Face model id such as "
            f"'gpt2' ({_OVERRIDE})."
        )
    return value.strip()


def _memory(value) -> float | None:
    if value is None or (isinstance(value, str) and value.strip() in ("None", "none", "")):
        return None
    number = _number(value, "max_memory_gb")
    if not 0 < number < math.inf:
        raise ParameterError(
            f"max_memory_gb is {value!r}; give a number of GiB above 0, or None for the whole "
            f"card ({_OVERRIDE})."
        )
    return float(number)


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
    try:
        scale = float(_number(value, "scale"))
    except OverflowError:
        scale = math.inf
    if not MIN_SCALE <= scale <= MAX_SCALE:  # also refuses nan
        raise ParameterError(
            f"scale is {value!r}; give a number from {MIN_SCALE} to {MAX_SCALE}: 1 for the sizes "
            "in the text, 4 or more on a GPU, 0.25 for a quick run."
        )
    return scale


def _seed(value) -> int:
    seed = _whole(value, "seed", minimum=0)
    if seed > MAX_SEED:
        raise ParameterError(
            f"seed is {value!r}; give a whole number from 0 to {MAX_SEED} ({_OVERRIDE})."
        )
    return seed


def _whole(value, name: str, minimum: int) -> int:
    number = _number(value, name)
    try:
        whole = int(number)
    except (OverflowError, ValueError):  # inf, nan
        whole = None
    if whole is None or whole != number:
        raise ParameterError(f"{name} is {value!r}; give a whole number ({_OVERRIDE}).")
    if whole < minimum:
        raise ParameterError(
            f"{name} is {value!r}; give a whole number of at least {minimum} ({_OVERRIDE})."
        )
    return whole
