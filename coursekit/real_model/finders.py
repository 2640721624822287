"""Accelerate's ``find_executable_batch_size`` and Lightning's ``BatchSizeFinder`` on the
same probe as :func:`coursekit.real_model.tune`, so their answers can be set side by side.

Each finder is given the same ``try_step`` (a real step on a GPU, the simulated card of the
notebook on a CPU) and returns the batch size it settles on, with every size it tried. What
neither does is the point of the comparison: they return *a batch size that runs*, which
then becomes the batch you train with. The effective batch, and so the learning rate, the
schedule's length and the warm-up, follow from the memory instead of from a decision.
"""

from __future__ import annotations

import contextlib
import io
import logging
import tempfile
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field

import torch


@dataclass
class FinderResult:
    name: str
    batch_size: int | None
    tried: list[int] = field(default_factory=list)
    note: str = ""


def _recording(try_step: Callable[[int], int], tried: list[int]) -> Callable[[int], int]:
    def step(size: int) -> int:
        tried.append(size)
        return try_step(size)

    return step


def with_accelerate(try_step: Callable[[int], int], starting_batch_size: int) -> FinderResult:
    """``accelerate.utils.find_executable_batch_size`` from ``starting_batch_size`` down."""
    from accelerate.utils import find_executable_batch_size

    tried: list[int] = []
    step = _recording(try_step, tried)

    @find_executable_batch_size(starting_batch_size=starting_batch_size)
    def fit(batch_size):
        step(batch_size)
        return batch_size

    found = fit()
    return FinderResult("Accelerate find_executable_batch_size", found, tried)


def with_lightning(
    try_step: Callable[[int], int],
    samples: int,
    mode: str = "binsearch",
    max_val: int = 8192,
) -> FinderResult:
    """Lightning's ``Tuner.scale_batch_size`` (the ``BatchSizeFinder`` callback) in
    ``mode``, on a LightningModule whose training step is the probe. ``samples`` is the
    data set's length: the finder stops growing there. Needs Lightning 2.6 or newer, the
    first with ``max_val`` and with the margin (5% of the batch size found, in ``binsearch``
    mode) that the finder then takes off; check with ``missing("lightning", at_least="2.6")``."""
    import lightning.pytorch as pl
    from lightning.pytorch.tuner import Tuner

    tried: list[int] = []
    step = _recording(try_step, tried)

    class Probe(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.batch_size = 1
            self.anchor = torch.nn.Parameter(torch.zeros(()))  # Lightning's backward needs one

        def train_dataloader(self):
            data = torch.arange(samples)
            return torch.utils.data.DataLoader(data, batch_size=self.batch_size)

        def training_step(self, batch, batch_idx):
            step(len(batch))  # raises out-of-memory where the probe does
            return self.anchor * 0.0

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.0)

    with (
        tempfile.TemporaryDirectory() as root,
        warnings.catch_warnings(),
        contextlib.redirect_stdout(io.StringIO()),
        contextlib.redirect_stderr(io.StringIO()),
    ):
        warnings.simplefilter("ignore")
        logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
        trainer = pl.Trainer(
            default_root_dir=root,
            accelerator="auto",
            devices=1,
            max_epochs=1,
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
        )
        module = Probe()
        found = Tuner(trainer).scale_batch_size(
            module, mode=mode, init_val=1, steps_per_trial=1, max_val=max_val
        )
    return FinderResult(f"Lightning BatchSizeFinder ({mode})", found, tried)
