"""Where the course runs: device choice, seeding and Colab detection.

Every notebook starts by asking these questions, so the answers live here once and are
tested, rather than being re-derived in cells.
"""

from __future__ import annotations

import os
import random

import numpy as np
import torch

from coursekit.colab import in_colab

__all__ = ["DEVICES", "gpu_summary", "in_colab", "pick_device", "seed_everything"]

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


def gpu_summary() -> dict | None:
    """Name and total memory of CUDA device 0, or None without CUDA."""
    if not torch.cuda.is_available():
        return None
    props = torch.cuda.get_device_properties(0)
    return {"name": props.name, "memory_bytes": int(props.total_memory)}
