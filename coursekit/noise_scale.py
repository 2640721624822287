"""The gradient noise scale: how big an effective batch is still worth its samples.

McCandlish, Kaplan, Amodei et al. (2018), "An Empirical Model of Large-Batch Training"
(arXiv:1812.06162). With per-sample gradients g_j, the true gradient G = E[g_j] and their
covariance Sigma, the mean gradient of a batch of B i.i.d. samples has
E|G_B|^2 = |G|^2 + tr(Sigma) / B. The *simple noise scale* B_simple = tr(Sigma) / |G|^2 is
the batch size at which the noise in a batch's gradient is about as large as the signal:
well below it, a bigger batch makes each step better almost for free; well above it, more
samples per step buy little.

Measuring |G_B|^2 at two batch sizes, b < B, gives unbiased estimates of both |G|^2 and
tr(Sigma) (the paper's appendix A.1). Accumulation hands us both sizes with no extra forward
or backward pass: each micro-batch's gradient is a small batch (b samples), the window's
accumulated gradient the big one (B = k * b). Reading a micro-batch's gradient as the change
of ``.grad`` across its backward costs gradient-sized copies (float64 here) and one norm per
micro-batch. Under DDP, each rank's local gradient is the small batch and the all-reduced
one the big batch (:class:`DDPNoiseScale`; :mod:`coursekit.workers.noise_scale` runs it on
two processes).

One estimate is noisy, and the ratio of two noisy numbers is biased, so the paper averages
|G|^2 and tr(Sigma) separately over many steps and only then divides
(:class:`NoiseScaleMeter`).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import torch
from torch import nn
from torch.func import functional_call, grad, vmap

from coursekit.arguments import real, whole
from coursekit.progress import Progress

LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
MicroBatches = Sequence[tuple[torch.Tensor, torch.Tensor]]


@dataclass(frozen=True)
class NoiseEstimate:
    """Estimates of |G|^2 (``gradient_sq_norm``) and of tr(Sigma) (``trace``).

    Either can come out negative on one noisy measurement: the estimators are unbiased
    differences, not sums of squares. Negative values are kept, not clipped, because
    clipping would bias any average taken later.
    """

    gradient_sq_norm: float
    trace: float

    @property
    def b_simple(self) -> float:
        """The simple noise scale, ``trace / gradient_sq_norm``: the plain ratio.

        One noisy estimate can give a negative or a huge ratio; average the two parts first
        (:class:`NoiseScaleMeter`). A zero ``gradient_sq_norm`` gives +inf or -inf (the sign
        of ``trace``), or nan when ``trace`` is zero too, instead of ZeroDivisionError; a
        nan in either part gives nan.
        """
        if self.gradient_sq_norm == 0.0:
            return math.copysign(math.inf, self.trace) if self.trace != 0.0 else math.nan
        return self.trace / self.gradient_sq_norm

    def as_dict(self) -> dict[str, float]:
        """``{"gradient_sq_norm", "trace", "b_simple"}`` as plain floats."""
        return {
            "gradient_sq_norm": float(self.gradient_sq_norm),
            "trace": float(self.trace),
            "b_simple": float(self.b_simple),
        }


def two_batch_estimate(
    small_sq_norm: float, big_sq_norm: float, small_batch: int, big_batch: int
) -> NoiseEstimate:
    """|G|^2 and tr(Sigma) from mean gradients' squared norms at two batch sizes (paper, A.1).

    Both estimates are unbiased when the two squared norms are those of mean gradients over
    b and B i.i.d. samples: since
    E|G_b|^2 = |G|^2 + tr(Sigma)/b, solving the two equations for the two unknowns gives
    |G|^2 = (B |G_B|^2 - b |G_b|^2) / (B - b) and tr(Sigma) = (|G_b|^2 - |G_B|^2) / (1/b - 1/B).

    Example:
        >>> two_batch_estimate(3.0, 1.5, 1, 4).as_dict()
        {'gradient_sq_norm': 1.0, 'trace': 2.0, 'b_simple': 2.0}
    """
    small_batch = whole("small_batch", small_batch)
    big_batch = whole("big_batch", big_batch)
    if big_batch <= small_batch:
        raise ValueError(
            f"big_batch ({big_batch}) must be larger than small_batch ({small_batch}): the "
            "estimate compares gradient norms at two different batch sizes."
        )
    small_sq_norm = real("small_sq_norm", small_sq_norm, 0.0)
    big_sq_norm = real("big_sq_norm", big_sq_norm, 0.0)
    gradient_sq_norm = (big_batch * big_sq_norm - small_batch * small_sq_norm) / (
        big_batch - small_batch
    )
    trace = (small_sq_norm - big_sq_norm) / (1 / small_batch - 1 / big_batch)
    return NoiseEstimate(gradient_sq_norm, trace)


def _trainable(model: nn.Module) -> list[nn.Parameter]:
    return [p for p in model.parameters() if p.requires_grad]


def _flat_grad(parameters: list[nn.Parameter]) -> torch.Tensor:
    """The gradients as one float64 vector, a missing one as zeros."""
    return torch.cat(
        [
            (p.grad if p.grad is not None else torch.zeros_like(p)).detach().double().flatten()
            for p in parameters
        ]
    )


def per_sample_gradients(
    model: nn.Module, loss_fn: LossFn, inputs: torch.Tensor, targets: torch.Tensor
) -> torch.Tensor:
    """One row per sample: the gradient of ``loss_fn`` on that sample alone, shape (n, P).

    torch.func's ``vmap(grad(...))`` over ``functional_call`` computes all n gradients in one
    batched pass instead of n backward passes. Columns follow ``model.parameters()`` (those
    that require grad), flattened, in the model's dtype. The model must treat samples
    independently (no BatchNorm in training mode): a one-sample batch is what it sees.
    ``model`` and its ``.grad`` are left untouched.
    """
    if len(inputs) != len(targets):
        raise ValueError(
            f"inputs and targets differ in length ({len(inputs)} vs {len(targets)}): give "
            "one target per sample."
        )
    names = [name for name, p in model.named_parameters() if p.requires_grad]
    if not names:
        raise ValueError("The model has no parameter that requires grad: nothing to differentiate.")
    all_parameters = {name: p.detach() for name, p in model.named_parameters()}
    buffers = {name: b.detach() for name, b in model.named_buffers()}

    def sample_loss(trainable, x, y):
        parameters = {**all_parameters, **trainable}
        outputs = functional_call(model, (parameters, buffers), (x.unsqueeze(0),))
        return loss_fn(outputs, y.unsqueeze(0))

    trainable = {name: all_parameters[name] for name in names}
    grads = vmap(grad(sample_loss), in_dims=(None, 0, 0))(trainable, inputs, targets)
    return torch.cat([grads[name].reshape(len(inputs), -1) for name in names], dim=1)


def _sizes(micro_batches: MicroBatches) -> tuple[int, int]:
    """``(k, b)``: the number of micro-batches and their common size, or a ValueError."""
    micro_batches = list(micro_batches)
    if len(micro_batches) < 2:
        raise ValueError(
            f"Got {len(micro_batches)} micro-batch(es); the estimate needs at least 2, so that "
            "the window's gradient is a bigger batch than one micro-batch's."
        )
    sizes = [len(inputs) for inputs, _ in micro_batches]
    if len(set(sizes)) != 1:
        raise ValueError(
            f"Micro-batch sizes differ ({sizes}): the small-batch size b must be one number. "
            "Use equal micro-batches (drop or pad the short last one)."
        )
    return len(sizes), sizes[0]


def _accumulate(
    model: nn.Module, loss_fn: LossFn, micro_batches: MicroBatches, measure: bool
) -> tuple[float, float | None, float | None]:
    """Accumulate one window into ``.grad``: each micro-batch's ``loss / k``, backward.

    With ``measure``, also read each micro-batch's own gradient as the increment of ``.grad``
    times k (no extra backward: a copy of the gradient between backward passes). Returns
    the window's mean loss, mean_i |g_i|^2 and |G_B|^2 (both None without ``measure``).
    """
    k = len(micro_batches)
    parameters = _trainable(model)
    previous = _flat_grad(parameters) if measure else None
    start = previous
    window_loss, small_total = 0.0, 0.0
    for inputs, targets in micro_batches:
        loss = loss_fn(model(inputs), targets) / k
        loss.backward()
        window_loss += loss.item()
        if measure:
            current = _flat_grad(parameters)
            small_total += float(((current - previous) * k).pow(2).sum())
            previous = current
    if not measure:
        return window_loss, None, None
    big = float((previous - start).pow(2).sum())
    return window_loss, small_total / k, big


def estimate_from_micro_batches(
    model: nn.Module, loss_fn: LossFn, micro_batches: MicroBatches
) -> NoiseEstimate:
    """The two-batch estimate from one accumulation window, as a training loop measures it.

    For each of the k equal micro-batches of b samples: backward of ``loss / k``; the
    increment of ``.grad`` is that micro-batch's gradient divided by k, so k times it is the
    small batch's gradient g_i. The accumulated ``.grad`` is the big batch's mean gradient
    G_B (B = k * b). Small = mean_i |g_i|^2 (averaging k of them makes |G_b|^2 less noisy),
    big = |G_B|^2. Every parameter's ``.grad`` is left as it was found.

    Example:
        >>> from coursekit.data import make_regression, split_micro_batches
        >>> from coursekit.models import tiny_mlp
        >>> x, y = make_regression(32)
        >>> estimate = estimate_from_micro_batches(
        ...     tiny_mlp(), nn.MSELoss(), split_micro_batches(x, y, 8))
        >>> sorted(estimate.as_dict())
        ['b_simple', 'gradient_sq_norm', 'trace']
    """
    micro_batches = list(micro_batches)
    k, b = _sizes(micro_batches)
    parameters = _trainable(model)
    saved = [p.grad for p in parameters]
    for p in parameters:
        p.grad = None  # backward would add into the caller's tensors in place
    try:
        _, small, big = _accumulate(model, loss_fn, micro_batches, measure=True)
    finally:
        for p, g in zip(parameters, saved, strict=True):
            p.grad = g
    return two_batch_estimate(small, big, b, k * b)


def per_sample_gradients_float64(
    model: nn.Module, loss_fn: LossFn, inputs: torch.Tensor, targets: torch.Tensor
) -> torch.Tensor:
    """:func:`per_sample_gradients` on a float64 copy of the model with float64 inputs (and
    float targets), so an oracle's own rounding (~1e-16) is far below a float32
    measurement's (~1e-7). The model itself is untouched."""
    model64 = copy.deepcopy(model).double()
    if inputs.is_floating_point():
        inputs = inputs.double()
    if targets.is_floating_point():
        targets = targets.double()
    return per_sample_gradients(model64, loss_fn, inputs, targets).double()


def estimate_from_per_sample(
    model: nn.Module, loss_fn: LossFn, micro_batches: MicroBatches
) -> NoiseEstimate:
    """The oracle for :func:`estimate_from_micro_batches`: the same estimate from per-sample
    gradients of the same samples (g_i = the mean of micro-batch i's rows, G_B = the mean of
    all rows), computed in float64 on a copy of the model. No ``.grad`` is touched."""
    micro_batches = list(micro_batches)
    k, b = _sizes(micro_batches)
    inputs = torch.cat([x for x, _ in micro_batches])
    targets = torch.cat([y for _, y in micro_batches])
    rows = per_sample_gradients_float64(model, loss_fn, inputs, targets)
    micro_gradients = rows.reshape(k, b, -1).mean(dim=1)
    small = float(micro_gradients.pow(2).sum(dim=1).mean())
    big = float(rows.mean(dim=0).pow(2).sum())
    return two_batch_estimate(small, big, b, k * b)


def true_noise_scale(
    model: nn.Module, loss_fn: LossFn, inputs: torch.Tensor, targets: torch.Tensor
) -> NoiseEstimate:
    """The exact |G|^2 and tr(Sigma) of a finite data set, from every sample's gradient.

    G is the mean of the n per-sample gradients and tr(Sigma) = (1/n) sum_j |g_j - G|^2:
    normalised by n, not n - 1, because the data set here *is* the population. A sample
    drawn uniformly from it has exactly this covariance, so batches drawn with replacement
    satisfy E|G_B|^2 = |G|^2 + tr(Sigma)/B exactly: this is what the two-batch estimator
    estimates without bias. (Batches drawn without replacement have a smaller variance, by
    the finite-population factor (n - B) / (n - 1).) Computed in float64 on a copy of the
    model.
    """
    rows = per_sample_gradients_float64(model, loss_fn, inputs, targets)
    mean = rows.mean(dim=0)
    trace = float((rows - mean).pow(2).sum(dim=1).mean())
    return NoiseEstimate(float(mean.pow(2).sum()), trace)


class NoiseScaleMeter:
    """Running averages of the |G|^2 and tr(Sigma) estimates; B_simple is their ratio.

    Each :meth:`update` adds one step's two-batch estimate to exponential moving averages
    (``decay`` per update; 0 keeps only the last). The averages are bias-corrected as in
    Adam (divided by 1 - decay^t), so the first updates are not pulled towards zero. The
    ratio is taken only after averaging, as the paper does: a mean of noisy ratios is
    biased, a ratio of means much less. Before any update :attr:`b_simple` is nan.

    Example:
        >>> meter = NoiseScaleMeter(decay=0.5)
        >>> _ = meter.update(3.0, 1.5, 1, 4)
        >>> meter.b_simple
        2.0
    """

    def __init__(self, decay: float = 0.9):
        self.decay = real("decay", decay, 0.0, 1.0, high_open=True)
        self._gradient_sq_norm = 0.0
        self._trace = 0.0
        self._weight = 0.0  # 1 - decay^t: the bias correction
        self.history: list[dict[str, float]] = []

    def update(
        self, small_sq_norm: float, big_sq_norm: float, small_batch: int, big_batch: int
    ) -> NoiseEstimate:
        """Add one measurement (see :func:`two_batch_estimate`); return this step's estimate.

        :attr:`history` gets the averaged values after this update.
        """
        return self.add(two_batch_estimate(small_sq_norm, big_sq_norm, small_batch, big_batch))

    def add(self, step: NoiseEstimate) -> NoiseEstimate:
        """Add one step's estimate as it is (e.g. from :func:`estimate_from_micro_batches`);
        return it. :attr:`history` gets the averaged values after this update."""
        keep = self.decay
        self._gradient_sq_norm = keep * self._gradient_sq_norm + (1 - keep) * step.gradient_sq_norm
        self._trace = keep * self._trace + (1 - keep) * step.trace
        self._weight = keep * self._weight + (1 - keep)
        self.history.append(self.estimate.as_dict())
        return step

    @property
    def estimate(self) -> NoiseEstimate:
        """The averaged |G|^2 and tr(Sigma) (nan before the first update)."""
        if self._weight == 0.0:
            return NoiseEstimate(math.nan, math.nan)
        return NoiseEstimate(self._gradient_sq_norm / self._weight, self._trace / self._weight)

    @property
    def b_simple(self) -> float:
        """The averaged trace over the averaged |G|^2 (see :attr:`NoiseEstimate.b_simple`)."""
        return self.estimate.b_simple


def noise_scale_along_training(
    model: nn.Module,
    loss_fn: LossFn,
    optimizer: torch.optim.Optimizer,
    windows: Iterable[MicroBatches],
    measure_every: int = 1,
    decay: float = 0.9,
    progress: bool = True,
) -> list[dict[str, float]]:
    """Train with accumulation and measure the noise scale along the way, almost for free.

    ``windows`` is an iterable of accumulation windows, each a list of k >= 2 equal-size
    ``(inputs, targets)`` micro-batches. Per window: backward of ``loss / k`` per
    micro-batch, ``optimizer.step()``, ``optimizer.zero_grad()`` (gradients are cleared once
    before the first window too). On every ``measure_every``-th window (the first included)
    the gradient is copied between backward passes (the increments are the micro-batches'
    gradients, the final ``.grad`` the window's), with no extra forward or backward, and
    the two-batch estimate goes into a :class:`NoiseScaleMeter` with ``decay``.

    Returns one dict per measured window: ``step`` (the window's index, from 0), ``loss``
    (the window's mean loss, before its step), ``gradient_sq_norm``, ``trace`` and
    ``b_simple`` (averaged by the meter), and ``raw_b_simple`` (this window's own ratio).
    """
    measure_every = whole("measure_every", measure_every)
    meter = NoiseScaleMeter(decay)
    windows = list(windows)
    history: list[dict[str, float]] = []
    optimizer.zero_grad()
    with Progress(len(windows), "training, measuring the noise scale", enabled=progress) as bar:
        for index, window in enumerate(windows):
            window = list(window)
            k, b = _sizes(window)
            measure = index % measure_every == 0
            loss, small, big = _accumulate(model, loss_fn, window, measure)
            optimizer.step()
            optimizer.zero_grad()
            if measure:
                raw = meter.update(small, big, b, k * b)
                history.append(
                    {
                        "step": index,
                        "loss": loss,
                        **meter.estimate.as_dict(),
                        "raw_b_simple": raw.b_simple,
                    }
                )
            bar.step(f"loss {loss:.3g}, B_simple {meter.b_simple:.3g}")
    return history


# no annotations: DDP compares a hook's annotations with dist.GradBucket, and under
# `from __future__ import annotations` they would be strings
def _local_norm_hook(state, bucket):
    """DDP's default mean all-reduce, after adding the bucket's local squared norm to
    ``state.local_sq_norm`` (kept as a tensor on the bucket's device: no host sync)."""
    import torch.distributed as dist

    buffer = bucket.buffer()
    state._add_local(buffer.detach().double().pow(2).sum())
    buffer.div_(dist.get_world_size())
    work = dist.all_reduce(buffer, async_op=True)
    return work.get_future().then(lambda future: future.value()[0])


class DDPNoiseScale:
    """The noise scale under DDP, almost for free: a communication hook and one scalar
    all-reduce per measurement.

    Each rank's gradient before the all-reduce is a small batch's (its own
    ``local_batch_size`` samples: with accumulation under ``no_sync``, its whole window), the
    all-reduced mean is the big batch's (``local_batch_size * world_size``). The hook adds up
    the local squared norm as the buckets go through, so no extra backward runs. Registering
    it replaces DDP's default hook with the same mean all-reduce.

    Example (on every rank)::

        noise = DDPNoiseScale(ddp_model, local_batch_size=micro_batch_size * accum_steps)
        ...  # the window's backward passes; the last one all-reduces
        estimate = noise.measure()  # before optimizer.step() and zero_grad()
        print(noise.meter.b_simple)
    """

    def __init__(self, ddp_model: nn.Module, local_batch_size: int, decay: float = 0.9):
        import torch.distributed as dist

        self.local_batch_size = whole("local_batch_size", local_batch_size)
        self.world_size = dist.get_world_size()
        if self.world_size < 2:
            raise ValueError(
                "DDPNoiseScale needs at least 2 processes: with one, the local and the "
                "all-reduced gradients are the same batch. Use estimate_from_micro_batches."
            )
        self.model = ddp_model
        self.meter = NoiseScaleMeter(decay)
        self._local: torch.Tensor | None = None
        ddp_model.register_comm_hook(self, _local_norm_hook)

    def _add_local(self, sq_norm: torch.Tensor) -> None:
        self._local = sq_norm if self._local is None else self._local + sq_norm

    def measure(self) -> NoiseEstimate:
        """This step's two-batch estimate (also added to :attr:`meter`); call it after the
        backward that all-reduced and before the gradients are cleared."""
        import torch.distributed as dist

        if self._local is None:
            raise RuntimeError(
                "No gradient went through the all-reduce since the last measure(): call it "
                "after the window's last backward (the one outside no_sync)."
            )
        local, self._local = self._local.clone(), None
        dist.all_reduce(local)  # the small batches' mean: one scalar on the wire
        small = float(local) / self.world_size
        big = float(sum(p.grad.double().pow(2).sum() for p in _trainable(self.model)))
        return self.meter.add(
            two_batch_estimate(
                small, big, self.local_batch_size, self.local_batch_size * self.world_size
            )
        )
