"""How many optimizer steps a run takes, counted the way each framework counts them.

Three counts of "the same" run disagree, and each disagreement is a bug report:

- **A loop that steps at every window boundary and at the end of each epoch** (the course's
  loop, Accelerate with a prepared dataloader, Lightning, the HF Trainer): each epoch has
  ``ceil(M / N)`` windows for ``M`` micro-batches and ``N`` accumulation steps. Counting
  ``floor(M / N)`` instead made the Trainer stop short of the epochs asked for (transformers
  #33455 and #36297; transformers 5 counts the short window).
- **A scheduler prepared by HF Accelerate** (``split_batches=False``, the default) steps
  ``num_processes`` times per optimizer step (``accelerate/scheduler.py``), so its length must
  be the optimizer steps times ``num_processes`` (Accelerate #2926).
- **A DeepSpeed engine that decides the boundary itself** (``engine.step()`` after every
  micro-batch, as DeepSpeed's own examples do) steps when ``(micro_steps + 1) % N == 0``
  (``DeepSpeedEngine.is_gradient_accumulation_boundary``): it counts micro-batches across
  epochs, never steps a short window, and ends the run with ``M * epochs % N`` micro-batches
  unstepped. A loop that counts the short windows takes more steps than such an engine, and
  their windows fall in different places (transformers #22082 and #36297, Accelerate #3552).
  Current Accelerate passes its own boundary to the engine
  (``set_gradient_accumulation_boundary``), which makes the two agree.

And ``engine.backward(loss)`` divides the loss by ``N`` itself (``scale_wrt_gas=True`` by
default), so a loss already divided by ``N`` is divided twice (DeepSpeed #1107): before
``engine.backward``, divide by nothing.
"""

from __future__ import annotations

from typing import NamedTuple

from coursekit.arguments import whole


class StepCounts(NamedTuple):
    """What :func:`count_steps` returns; each field is a whole number."""

    optimizer_steps: int  # a loop that also steps each epoch's short last window
    prepared_scheduler_total: int  # the length to give a scheduler Accelerate prepares
    deepspeed_steps: int  # a DeepSpeed engine that decides the boundary itself
    deepspeed_loss_divisor: int  # what to divide a loss by before engine.backward(loss)

    def as_dict(self) -> dict[str, int]:
        return self._asdict()


def count_steps(
    micro_batches_per_epoch: int, accum_steps: int, epochs: int, num_processes: int = 1
) -> StepCounts:
    """The step counts of one run, ``micro_batches_per_epoch`` being each process's own.

    Example:
        >>> count_steps(micro_batches_per_epoch=10, accum_steps=4, epochs=3, num_processes=2)
        StepCounts(optimizer_steps=9, prepared_scheduler_total=18, deepspeed_steps=7, deepspeed_loss_divisor=1)
    """  # noqa: E501
    micro = whole("micro_batches_per_epoch", micro_batches_per_epoch, minimum=0)
    accum_steps = whole("accum_steps", accum_steps)
    epochs = whole("epochs", epochs, minimum=0)
    num_processes = whole("num_processes", num_processes)
    optimizer_steps = -(-micro // accum_steps) * epochs  # a whole-number ceiling per epoch
    return StepCounts(
        optimizer_steps=optimizer_steps,
        prepared_scheduler_total=optimizer_steps * num_processes,
        deepspeed_steps=micro * epochs // accum_steps,
        deepspeed_loss_divisor=1,
    )


def deepspeed_boundaries(micro_batches_per_epoch: int, accum_steps: int, epochs: int) -> list:
    """``(epoch, micro_batch)`` of every micro-batch after which DeepSpeed's engine steps, when
    it decides the boundary itself: each ``accum_steps``-th micro-batch of the whole run.

    Example:
        >>> deepspeed_boundaries(micro_batches_per_epoch=5, accum_steps=2, epochs=2)
        [(0, 1), (0, 3), (1, 0), (1, 2), (1, 4)]
    """
    micro = whole("micro_batches_per_epoch", micro_batches_per_epoch, minimum=0)
    accum_steps = whole("accum_steps", accum_steps)
    epochs = whole("epochs", epochs, minimum=0)
    return [divmod(seen, micro) for seen in range(accum_steps - 1, micro * epochs, accum_steps)]


def loop_boundaries(micro_batches_per_epoch: int, accum_steps: int, epochs: int) -> list:
    """``(epoch, micro_batch)`` after which a loop that steps each epoch's short window steps.

    Example:
        >>> loop_boundaries(micro_batches_per_epoch=5, accum_steps=2, epochs=2)
        [(0, 1), (0, 3), (0, 4), (1, 1), (1, 3), (1, 4)]
    """
    micro = whole("micro_batches_per_epoch", micro_batches_per_epoch, minimum=0)
    accum_steps = whole("accum_steps", accum_steps)
    epochs = whole("epochs", epochs, minimum=0)
    return [
        (epoch, index)
        for epoch in range(epochs)
        for index in range(micro)
        if (index + 1) % accum_steps == 0 or index + 1 == micro
    ]
