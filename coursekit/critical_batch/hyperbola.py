"""The critical batch from a sweep: McCandlish et al.'s hyperbola fitted to steps and samples.

``(S / S_min - 1) (E / E_min - 1) = 1`` is linear in ``S_min`` and ``E_min`` against
``1 / B``, so a weighted least-squares fit finds both, and ``B_crit = E_min / S_min``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import torch

from coursekit.arguments import real


class HyperbolaFit(NamedTuple):
    """``S = min_steps * (1 + critical_batch / B)``, the same as
    ``(S / S_min - 1)(E / E_min - 1) = 1`` with ``E_min = min_samples``.

    ``rms_log_error`` is the root-mean-square of ``ln(S_fit / S)`` over the points: 0.1
    means the fit misses a typical point by about 10%.
    """

    min_steps: float
    min_samples: float
    critical_batch: float
    rms_log_error: float

    def steps(self, batch_size: float) -> float:
        """Steps to the target at ``batch_size`` on the fitted curve."""
        return self.min_steps * (1 + self.critical_batch / batch_size)

    def samples(self, batch_size: float) -> float:
        """Samples to the target at ``batch_size`` on the fitted curve."""
        return self.min_samples * (1 + batch_size / self.critical_batch)


def fit_hyperbola(steps: Sequence[float], samples: Sequence[float]) -> HyperbolaFit:
    """Fit McCandlish et al.'s ``S = S_min + E_min / B`` to measured steps and samples.

    The model is linear in ``S_min`` and ``E_min`` against ``1 / B`` (with ``B = E / S``),
    the paper's own form. It is fitted by least squares on relative errors (each point
    weighted by ``1 / S**2``): step counts span orders of magnitude, and plain least
    squares would let the small-batch points, with thousands of steps, decide alone and
    ignore the flat end where ``S_min`` shows. ``critical_batch = E_min / S_min``.

    Example:
        >>> fit = fit_hyperbola([110, 20, 11], [1100, 2000, 11000])
        >>> round(fit.min_steps), round(fit.min_samples), round(fit.critical_batch)
        (10, 1000, 100)
    """
    if len(steps) != len(samples):
        raise ValueError(f"steps and samples differ in length ({len(steps)} vs {len(samples)}).")
    if len(steps) < 3:
        raise ValueError(
            f"fit_hyperbola needs at least 3 (steps, samples) points, got {len(steps)}: "
            "two unknowns and a residual to judge the fit by."
        )
    s = torch.tensor([real("steps", v, 0, low_open=True) for v in steps], dtype=torch.float64)
    e = torch.tensor([real("samples", v, 0, low_open=True) for v in samples], dtype=torch.float64)
    design = torch.stack([torch.ones_like(s), s / e], dim=1) / s.unsqueeze(1)  # [1, 1/B] / S
    solution = torch.linalg.lstsq(design, torch.ones_like(s).unsqueeze(1)).solution.squeeze(1)
    min_steps, min_samples = solution.tolist()
    if min_steps <= 0 or min_samples <= 0:
        raise ValueError(
            f"the points do not bend like the hyperbola (S_min = {min_steps:.3g}, E_min = "
            f"{min_samples:.3g}): include batch sizes on both sides of the critical batch."
        )
    fitted = min_steps + min_samples * s / e
    rms = torch.log(fitted / s).pow(2).mean().sqrt().item()
    return HyperbolaFit(min_steps, min_samples, min_samples / min_steps, rms)
