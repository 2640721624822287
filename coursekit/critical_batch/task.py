"""The toy task of the batch-size sweeps: logistic regression on a teacher's noisy labels.

The labels' own noise makes the gradient noisy however good the model is (so small batches
are noise-limited near the target), and an ill-conditioned input covariance keeps large
batches from converging in a few steps (so they are curvature-limited): both ends of
McCandlish et al.'s hyperbola show on it. Its curvature is largest at the start, where every
prediction is 0.5, and never larger later (each sample's curvature carries a factor
p(1 - p) <= 1/4): the largest Hessian eigenvalue is 0.25 there, so SGD is stable up to a
rate of 2 / 0.25 = 8 from the first step (the eigenvalue is about 0.14 at module 6's target,
seed 0). So a warm-up (Goyal et al. 2017, arXiv:1706.02677) does not help there: at the
linearly scaled rate of module 6 (8), the large batch without warm-up does as well or
better (:mod:`coursekit.critical_batch.warmup` has a task where it does help). It runs in
float64, on a CPU in seconds.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from coursekit.arguments import real, whole


@dataclass(frozen=True)
class Task:
    """A training problem with a fresh i.i.d. batch at every step and an exact-enough loss.

    ``sample(step, batch_size)`` is deterministic in ``(step, batch_size)``: two runs that ask
    for the same step's batch get the same samples, so accumulating micro-batches of it and
    taking it whole give the same step. ``evaluate(model)`` is the expected loss over the
    teacher's label noise on a fixed set of inputs (no label sampling noise in the curve).
    ``floor_loss`` is the teacher's own loss there: the best any model can do.
    """

    make_model: Callable[[], nn.Module]
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    sample: Callable[..., tuple[torch.Tensor, torch.Tensor]]
    evaluate: Callable[[nn.Module], float]
    floor_loss: float
    initial_loss: float


def make_task(
    seed: int = 0,
    in_features: int = 16,
    teacher_norm: float = 4.0,
    condition: float = 100.0,
    n_eval: int = 2048,
) -> Task:
    """Logistic regression on labels drawn from a teacher ``p(y=1|x) = sigmoid(w* . x)``.

    Inputs are Gaussian with variances spread evenly on a log scale from 1 down to
    ``1 / condition`` (an ill-conditioned Hessian, as real ones are); ``teacher_norm`` sets
    how confident the teacher is (larger: less label noise). The student is a
    ``nn.Linear(in_features, 1)`` starting at zero, so the initial loss is ``log 2``.

    Example:
        >>> task = make_task(seed=0)
        >>> round(task.initial_loss, 4)
        0.6931
    """
    seed, in_features = whole("seed", seed, minimum=None), whole("in_features", in_features)
    teacher_norm = real("teacher_norm", teacher_norm, 0, low_open=True)
    condition = real("condition", condition, 1)
    n_eval = whole("n_eval", n_eval)
    dtype = torch.float64
    generator = torch.Generator().manual_seed(seed)
    scales = condition ** (-0.5 * torch.linspace(0, 1, in_features, dtype=dtype))
    teacher = torch.randn(in_features, generator=generator, dtype=dtype)
    teacher = teacher_norm * teacher / teacher.norm()
    eval_inputs = torch.randn(n_eval, in_features, generator=generator, dtype=dtype) * scales
    eval_probs = torch.sigmoid(eval_inputs @ teacher)

    def sample(step: int, batch_size: int, stream: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        g = torch.Generator().manual_seed(hash((seed, stream, step, batch_size)) % 2**62)
        inputs = torch.randn(batch_size, in_features, generator=g, dtype=dtype) * scales
        labels = torch.bernoulli(torch.sigmoid(inputs @ teacher).unsqueeze(1), generator=g)
        return inputs, labels

    def expected_loss(logits: torch.Tensor) -> float:
        # cross-entropy against the teacher's probabilities: the label-noise average, exactly
        return nn.functional.binary_cross_entropy_with_logits(logits, eval_probs).item()

    def evaluate(model: nn.Module) -> float:
        with torch.no_grad():
            return expected_loss(model(eval_inputs).squeeze(1))

    def make_model() -> nn.Module:
        model = nn.Linear(in_features, 1).to(dtype)
        nn.init.zeros_(model.weight)
        nn.init.zeros_(model.bias)
        return model

    return Task(
        make_model=make_model,
        loss_fn=nn.functional.binary_cross_entropy_with_logits,
        sample=sample,
        evaluate=evaluate,
        floor_loss=expected_loss(eval_inputs @ teacher),
        initial_loss=math.log(2.0),
    )
