"""What the course is made of: its modules and where it lives, stated once.

The README's module table, the Open-in-Colab links and the set-up cell of every generated
notebook are all derived from this file by ``coursekit build``, so the repository address is
written here and nowhere else.
"""

from __future__ import annotations

from dataclasses import dataclass

#: The course's name, as certificates print it.
TITLE = "Gradient accumulation, hands-on"
#: ``owner/name`` of the public GitHub repository that students open in Colab.
REPOSITORY = "coursekit/coursekit"
#: The branch that Colab links and the set-up cell install from.
BRANCH = "main"
#: The address the course template ships with. ``coursekit build --check`` refuses it while
#: the git remote ``origin`` names another GitHub repository: set REPOSITORY to that one.
PLACEHOLDER_REPOSITORY = "coursekit/coursekit"
#: Where the set-up cell installs coursekit from on Colab. None means the GitHub repository
#: (a public course). For a private course: an https URL ending in .whl, or a path under
#: /content/drive/ (the cell mounts Drive first).
INSTALL_FROM: str | None = None
#: Named sets of modules a certificate can cover (``coursekit certificate --track NAME``): the
#: pass mark then applies to these modules' points alone. The whole course needs no entry.
TRACKS: dict[str, tuple[str, ...]] = {"workshop": ("01_accumulation", "02_loss_scaling")}


@dataclass(frozen=True)
class Module:
    """One notebook of the course."""

    name: str  # file stem, e.g. "01_accumulation"
    title: str
    learn: str  # one line: what a student can do afterwards
    minutes: int


MODULES: tuple[Module, ...] = (
    Module(
        "00_welcome",
        "Welcome",
        "Set up, check your device, see how checks and grading work, and a first look at "
        "memory against batch size.",
        15,
    ),
    Module(
        "01_accumulation",
        "Accumulating gradients",
        "Write the accumulation loop, prove it equals the full batch, handle the last window, "
        "measure activation memory and throughput.",
        60,
    ),
    Module(
        "02_loss_scaling",
        "Scaling the loss right",
        "Scale losses for unequal micro-batches and padded tokens, use a GradScaler with "
        "accumulation, accumulate bf16 in float32, and step schedules in optimizer steps.",
        95,
    ),
    Module(
        "03_batch_dependence",
        "When samples depend on each other",
        "Measure what BatchNorm does to accumulation, correct its running statistics, switch "
        "to GroupNorm or frozen BatchNorm, and accumulate contrastive losses with GradCache.",
        75,
    ),
    Module(
        "04_distributed",
        "Accumulation with data parallelism, ZeRO and FSDP",
        "Run DDP with no_sync on real processes, size ZeRO stages, measure what DDP, ZeRO-1 "
        "and FSDP communicate per step, and see the pipeline bubble shrink.",
        75,
    ),
    Module(
        "05_capstone",
        "Putting it together",
        "Fit a memory budget, trade memory for compute with checkpointing, train a tiny GPT "
        "with the full recipe, compare with HF Accelerate, Lightning and the HF Trainer, and "
        "count the steps each framework (and DeepSpeed) takes.",
        100,
    ),
    Module(
        "06_batch_size",
        "How big should the effective batch be?",
        "Measure the gradient noise scale with accumulation and DDP, find the critical batch "
        "from steps against samples, scale the learning rate with the batch, ramp the batch "
        "up, and decide when accumulating buys nothing.",
        80,
    ),
    Module(
        "07_real_model",
        "Fine-tune a real language model",
        "Load a pretrained model with transformers, measure where its training memory goes, "
        "let an auto-tuner pick the micro-batch for a memory budget, and fine-tune with the "
        "whole recipe beside the HF Trainer.",
        75,
    ),
    Module(
        "08_fitting_one_gpu",
        "Fit a fine-tune on one GPU",
        "Count the effective batch in tokens, pack documents without losses across their "
        "boundaries, see where a fine-tune's memory goes on an 8-24 GB card, and plan the "
        "micro-batch and accumulation for your own model and card.",
        60,
    ),
)


def repository_url() -> str:
    return f"https://github.com/{REPOSITORY}"


def install_spec() -> str:
    """The pip requirement that installs coursekit from the repository (used on Colab)."""
    return f"coursekit @ git+{repository_url()}@{BRANCH}"


def colab_url(folder: str, module_name: str) -> str:
    return f"https://colab.research.google.com/github/{REPOSITORY}/blob/{BRANCH}/{folder}/{module_name}.ipynb"


def module(name: str) -> Module:
    for candidate in MODULES:
        if candidate.name == name:
            return candidate
    known = ", ".join(m.name for m in MODULES)
    raise KeyError(f"No module named {name!r}. Known modules: {known}.")
