"""Recognising the scale patterns that known mistakes leave on a gradient.

A wrong accumulation rarely gives a random gradient: forgetting ``1/N`` gives exactly N
times the right one. ``scale_factor`` finds such a k when there is one.
"""

from __future__ import annotations

import torch

from coursekit.gradients import relative_error


def scale_factor(actual: torch.Tensor, expected: torch.Tensor) -> float | None:
    """k when ``actual`` is k times ``expected`` (to 1e-6 relative), else None."""
    expected = expected.double()
    denominator = float(expected @ expected)
    if denominator == 0.0:
        return None
    k = float(actual.double() @ expected) / denominator
    if k == 0.0 or relative_error(actual, k * expected) > 1e-6:
        return None
    return k
