"""Where the course runs: device choice, seeding and Colab detection.

Every notebook starts by asking these questions, so the answers live here once and are
tested, rather than being re-derived in cells.
"""

from __future__ import annotations

import contextlib
import os
import random
from collections.abc import Iterator

import numpy as np
import torch

from coursekit.colab import in_colab

__all__ = ["DEVICES", "gpu_summary", "in_colab", "pick_device", "seed_everything", "seeded"]

DEVICES = ("cuda", "mps", "cpu")


def pick_device(prefer: str | None = None) -> torch.device:
    """Return the best available device: CUDA, then Apple's MPS, then the CPU.

    Args:
        prefer: ``"cuda"``, ``"mps"`` or ``"cpu"`` to ask for one; falls back with a
            warning-free choice of the next best when it is not available. The environment
            variable ``COURSEKIT_DEVICE`` does the same without editing a notebook.

    Example:
        >>> pick_device("cpu")
        device(type='cpu')
    """
    prefer = prefer or os.environ.get("COURSEKIT_DEVICE") or None
    if prefer is not None and prefer not in DEVICES:
        raise ValueError(f"Unknown device {prefer!r}: choose one of {', '.join(DEVICES)}.")
    if prefer == "cpu":
        return torch.device("cpu")
    if prefer in (None, "cuda") and torch.cuda.is_available():
        return torch.device("cuda")
    if prefer in (None, "mps", "cuda") and _mps_available():
        return torch.device("mps")
    return torch.device("cpu")


def _mps_available() -> bool:
    backend = getattr(torch.backends, "mps", None)
    return bool(backend is not None and backend.is_available())


def seed_everything(seed: int = 0) -> None:
    """Seed Python's, NumPy's and torch's generators (all CUDA devices included).

    Accumulated and full-batch runs are only comparable when they see the same
    initial weights and data, so every experiment in the course starts here.
    """
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)  # also seeds every CUDA device


@contextlib.contextmanager
def seeded(seed: int) -> Iterator[None]:
    """Run the block with torch's CPU generator seeded by ``seed``, then give the caller's
    generator back as it was.

    The course's models and data are built this way: two calls with the same seed give the
    same weights whatever the notebook drew before (the accumulated-against-full-batch
    comparisons need that), and building one does not shift the notebook's own random
    numbers. Only the CPU generator is touched, where the weights are drawn; a CUDA one is
    neither seeded nor disturbed.

    Example:
        >>> with seeded(0):
        ...     a = torch.randn(2)
        >>> with seeded(0):
        ...     b = torch.randn(2)
        >>> bool((a == b).all())
        True
    """
    from coursekit.arguments import whole

    seed = whole("seed", seed, minimum=None)
    state = torch.random.get_rng_state()
    torch.random.default_generator.manual_seed(seed)
    try:
        yield
    finally:
        torch.random.set_rng_state(state)


def gpu_summary() -> dict | None:
    """Name and total memory of CUDA device 0, or None without CUDA."""
    if not torch.cuda.is_available():
        return None
    props = torch.cuda.get_device_properties(0)
    return {"name": props.name, "memory_bytes": int(props.total_memory)}
