"""Training a small image classifier with accumulation, and measuring it on held-out images."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

from coursekit.data import split_micro_batches
from coursekit.progress import Progress
from coursekit.training import train_accumulated, windows


@dataclass
class ClassifierRun:
    """What one training run logged: a loss per optimizer step, an accuracy per epoch."""

    step_losses: list[float] = field(default_factory=list)
    test_accuracy: list[float] = field(default_factory=list)


def accuracy(model: nn.Module, images: torch.Tensor, labels: torch.Tensor) -> float:
    """Share of ``images`` classified right, in eval mode (BatchNorm uses running stats)."""
    was_training = model.training
    model.eval()
    with torch.no_grad():
        right = (model(images).argmax(dim=1) == labels).double().mean()
    model.train(was_training)
    return float(right)


def train_classifier(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    train: tuple[torch.Tensor, torch.Tensor],
    test: tuple[torch.Tensor, torch.Tensor],
    micro_batch_size: int,
    accum_steps: int,
    epochs: int,
    label: str = "training",
    progress: bool = True,
) -> ClassifierRun:
    """``epochs`` passes of accumulated training (coursekit's loop), testing after each.

    A progress bar named ``label`` counts optimizer steps and shows the epoch and the latest
    loss; ``progress=False`` hides it.
    """
    run = ClassifierRun()
    steps = windows(split_micro_batches(*train, micro_batch_size), accum_steps)
    loss_fn = nn.CrossEntropyLoss()
    with Progress(epochs * len(steps), label, enabled=progress) as bar:
        for epoch in range(epochs):
            model.train()
            for window in steps:
                run.step_losses += train_accumulated(model, optimizer, loss_fn, window, accum_steps)
                bar.step(f"epoch {epoch + 1}/{epochs}, loss {run.step_losses[-1]:.2f}")
            run.test_accuracy.append(accuracy(model, *test))
    return run
