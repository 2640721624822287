"""How big should the effective batch be? Steps against samples, and the critical batch.

Training to a fixed target loss at batch ``B`` takes ``S`` optimizer steps and ``E = B * S``
samples. McCandlish et al. (2018, arXiv:1812.06162) found that, with the learning rate tuned
for each batch size, the pairs follow ``(S / S_min - 1) (E / E_min - 1) = 1``: small batches
are noise-limited (doubling ``B`` halves ``S``, ``E`` stays put), large ones are
curvature-limited (doubling ``B`` leaves ``S`` near ``S_min`` and doubles ``E``). The turn,
the critical batch ``B_crit = E_min / S_min``, is where accumulating a bigger batch stops
saving steps and starts wasting samples.

One idea per module: ``task`` (the logistic toy task the sweeps run on), ``training`` (one run,
to a target or for a loss curve, accumulated and optionally warmed up), ``sweep`` (the best
steps per batch size), ``hyperbola`` (the fit that gives ``B_crit``), ``lr_scaling`` (how the
learning rate moves with the batch), ``warmup`` (a task where a warm-up is needed, and its
runs), ``throughput`` (samples per second by micro-batch size) and ``advice`` (whether to
accumulate). Notebooks import every name from here.
"""

from coursekit.critical_batch.advice import Advice, should_accumulate
from coursekit.critical_batch.hyperbola import HyperbolaFit, fit_hyperbola
from coursekit.critical_batch.lr_scaling import linear_scaling_sweep, lr_scaling_runs
from coursekit.critical_batch.sweep import SweepPoint, batch_size_sweep
from coursekit.critical_batch.task import Task, make_task
from coursekit.critical_batch.throughput import measure_throughput
from coursekit.critical_batch.training import (
    OPTIMIZERS,
    LossCurve,
    _lr_at,
    loss_curve,
    steps_to_target,
)
from coursekit.critical_batch.warmup import diverged, make_warmup_task, warmup_runs

__all__ = [
    "OPTIMIZERS",
    "Advice",
    "HyperbolaFit",
    "LossCurve",
    "SweepPoint",
    "Task",
    "_lr_at",  # private, but benchmarks/critical_batch.py imports it from here
    "batch_size_sweep",
    "diverged",
    "fit_hyperbola",
    "linear_scaling_sweep",
    "loss_curve",
    "lr_scaling_runs",
    "make_task",
    "make_warmup_task",
    "measure_throughput",
    "should_accumulate",
    "steps_to_target",
    "warmup_runs",
]
