"""The three measurements of a gpu-check run, on a GPT-2-sized model built from its
configuration (random weights: no Hub on a GPU machine), or the tiny one on a dry run.

- **The memory model**: the CUDA allocator's peak of one training step beside the course's
  estimate (weights, AdamW's state, gradients and what autograd saves), by mode and size.
- **The tuner**: :func:`coursekit.real_model.tune`'s micro-batch against trying every size from
  1 up, at a budget below the card and on the whole card at long sequences, where the card
  really runs out of memory; and whether a failed try left memory behind.
- **Throughput**: the course's loop (:func:`coursekit.real_model.training.train`) against the HF
  Trainer on the same settings (micro-batch, window, steps, precision), in tokens per second.
"""

from __future__ import annotations

import time
from contextlib import nullcontext
from dataclasses import dataclass

import torch

from coursekit.frameworks import missing
from coursekit.gpu_check.report import FAILED, MEASURED, NOT_RUN, PASSED, Check
from coursekit.mixed_precision import half_precision
from coursekit.real_model import language_model, memory, training
from coursekit.real_model.tuning import free_memory, is_out_of_memory, tune

MIB = 2**20
MEMORY = "Memory: allocator against the model"
TUNER = "Tuner against every size"
THROUGHPUT = "Throughput: course loop against HF Trainer"


@dataclass(frozen=True)
class Settings:
    """What a run measures; :data:`ON_GPU` and :data:`DRY_RUN` are the two used."""

    device: str
    model: str
    notebook_parameters: dict  # papermill -p for every notebook
    module7_parameters: dict  # and for module 7's, on top
    seq_len: int
    sizes: tuple[int, ...]
    tuner_budget_gb: float  # a card smaller than the real one: the tuner's limit, no OOM
    oom_seq_len: int | None  # the whole card at this length: real out-of-memory errors
    target_batch: int
    micro_batch: int
    accum_steps: int
    steps: int


#: GPT-2's size at 128 tokens; a 6 GiB budget holds a micro-batch of about 20 (fp32, AdamW),
#: and the whole card at 1,024 tokens runs out of memory below the 512 asked for.
ON_GPU = Settings(
    device="cuda",
    model="config:gpt2",
    notebook_parameters={"device": "cuda"},
    # an 8 GiB card simulated on the real one: the tuner then splits the 256 into a window
    module7_parameters={"model": "config:gpt2", "max_memory_gb": 8},
    seq_len=128,
    sizes=(1, 2, 4, 8, 16),
    tuner_budget_gb=6.0,
    oom_seq_len=1024,
    target_batch=512,
    micro_batch=8,
    accum_steps=4,
    steps=6,
)
#: The same code on the CPU, sized to take seconds: the tiny model, a simulated 1/16 GiB card
#: that runs out of memory below the 64 sequences asked for.
DRY_RUN = Settings(
    device="cpu",
    model="tiny",
    notebook_parameters={"device": "cpu", "scale": 0.25},
    module7_parameters={"model": "tiny"},
    seq_len=64,
    sizes=(2, 4, 8),
    tuner_budget_gb=1 / 16,
    oom_seq_len=None,
    target_batch=64,
    micro_batch=4,
    accum_steps=2,
    steps=2,
)


def modes(settings: Settings) -> list[str]:
    found = ["fp32", "checkpointing", half_precision(settings.device)]
    return found + ([] if missing("peft") else ["lora"])


def memory_model(lm, settings: Settings, deadline: float) -> Check:
    """The allocator's peak (the live tensors' on a CPU) beside the course's estimate."""
    start = time.monotonic()
    rows = []
    for mode in modes(settings):
        if time.monotonic() > deadline:
            break
        rows += memory.sweep(lm, settings.sizes, [settings.seq_len], [mode], progress=False)
    table = [
        (
            r.mode,
            r.micro_batch,
            r.seq_len,
            f"{r.peak_bytes / MIB:,.1f}",
            f"{r.estimate_bytes / MIB:,.1f}",
            f"{r.estimate_bytes / r.peak_bytes:.2f}",
        )
        for r in rows
    ]
    if not rows:
        return Check(MEMORY, NOT_RUN, "out of time", seconds=0.0)
    ratios = [r.estimate_bytes / r.peak_bytes for r in rows]
    what = "allocator's peak" if settings.device == "cuda" else "live-tensor peak (CPU)"
    summary = (
        f"estimate / {what}: {min(ratios):.2f} to {max(ratios):.2f} over {len(rows)} "
        f"steps of {lm.name} at {settings.seq_len} tokens"
    )
    notes = [
        "Peak: one forward and backward pass, less what was allocated before it, plus the "
        "weights and AdamW's two moments (not allocated by a probe). The optimizer step's "
        "own temporary (about 4 B per trainable weight with foreach AdamW, the default on a "
        "GPU) is in neither.",
    ]
    for mode in dict.fromkeys(r.mode for r in rows):
        points = sorted(
            (r.micro_batch, r.peak_bytes, r.estimate_bytes) for r in rows if r.mode == mode
        )
        if len(points) >= 2:
            (b1, p1, e1), (b2, p2, e2) = points[-2:]
            notes.append(
                f"{mode}: per sample, measured {(p2 - p1) / (b2 - b1) / MIB:,.1f} MiB, "
                f"estimated {(e2 - e1) / (b2 - b1) / MIB:,.1f} MiB (sizes {b1} and {b2})"
            )
    header = ("mode", "micro-batch", "tokens", "peak MiB", "estimate MiB", "estimate / peak")
    return Check(MEMORY, MEASURED, summary, header, table, notes, time.monotonic() - start)


def largest_by_trying_every_size(try_step, free, limit_bytes: int, share: int, deadline: float):
    """(the largest size that fits, trying 1, 2, 3, ... until one does not; probes made), or
    (None, probes) when time ran out first: what the tuner's 2 log2(share) probes should find."""
    largest = 0
    for size in range(1, share + 1):
        if time.monotonic() > deadline:
            return None, size - 1
        peak = None
        try:
            peak = try_step(size)
        except Exception as error:
            if not is_out_of_memory(error):
                raise
        if peak is None:  # freed here, after the except block
            free()
            return largest, size
        if peak > limit_bytes:
            return largest, size
        largest = size
    return largest, share


def _allocated(device: torch.device) -> int | None:
    """What the CUDA allocator holds; None on a CPU, where nothing keeps the count."""
    return torch.cuda.memory_allocated(device) if device.type == "cuda" else None


def tuner(lm, settings: Settings, deadline: float, card_gb: float) -> Check:
    """The tuner against trying every size, at a budget below the card and (on a GPU) on the
    whole card at long sequences."""
    start = time.monotonic()
    cases = [(settings.tuner_budget_gb, settings.seq_len)]
    if settings.oom_seq_len:
        cases.append((card_gb, settings.oom_seq_len))
    rows, ok = [], True
    for budget_gb, seq_len in cases:
        if time.monotonic() > deadline:
            rows.append((f"{budget_gb:.3g}", seq_len, "not run: out of time", *[""] * 5))
            ok = False
            continue
        row, fine = _tune_case(lm, settings, budget_gb, seq_len, deadline)
        rows.append(row)
        ok = ok and fine
    header = (
        "budget GiB",
        "tokens",
        "tuner",
        "probes",
        "every size",
        "tries",
        "peak / (budget less margin)",
        "MiB left after",
    )
    where = "real out-of-memory errors" if settings.device == "cuda" else "a simulated card"
    kept = "nothing stays allocated" if settings.device == "cuda" else "memory left not measured"
    summary = (
        f"the tuner's micro-batch is the largest that fits, within the budget; {kept} ({where})"
        if ok
        else "the tuner and trying every size disagree, a peak is over the budget, memory "
        "stayed allocated or a case did not run: see the table"
    )
    notes = [
        "'every size' tries 1, 2, 3, ... until a size does not fit; it assumes memory grows "
        "with the micro-batch, as the memory table shows.",
        "'MiB left after': what the CUDA allocator still held once the search was over and "
        "its probe closed, against before it (failed tries must be freed).",
    ]
    verdict = PASSED if ok else FAILED
    return Check(TUNER, verdict, summary, header, rows, notes, time.monotonic() - start)


def _tune_case(lm, settings: Settings, budget_gb: float, seq_len: int, deadline: float):
    """One budget and length: (the table's row, whether it is right)."""
    device = torch.device(settings.device)
    warm, _ = _probe(lm, settings, seq_len, budget_gb)
    with warm as try_step:  # a first step allocates cuBLAS workspaces that stay: not a leak
        try_step(1)
    before = _allocated(device)
    probe, free = _probe(lm, settings, seq_len, budget_gb)
    with probe as try_step:
        tuning = tune(try_step, settings.target_batch, budget_gb, free=free, progress=False)
    after = _allocated(device)
    left_behind = None if before is None else after - before
    probe, free = _probe(lm, settings, seq_len, budget_gb)
    with probe as try_step:
        every, tries = largest_by_trying_every_size(
            try_step, free, tuning.budget_bytes, settings.target_batch, deadline
        )
    peak = dict(tuning.probes)[tuning.largest_fit]
    ooms = sum(1 for _, p in tuning.probes if p is None)
    fine = (
        every is not None
        and tuning.largest_fit == every
        and peak is not None
        and peak <= tuning.budget_bytes
        and (left_behind is None or left_behind <= MIB)
    )
    row = (
        f"{budget_gb:.3g}",
        seq_len,
        tuning.largest_fit,
        f"{len(tuning.probes)} ({ooms} out of memory)",
        "out of time" if every is None else every,
        tries,
        f"{peak / tuning.budget_bytes:.1%}",
        "n/a (CPU)" if left_behind is None else f"{left_behind / MIB:.1f}",
    )
    return row, fine


def _probe(lm, settings: Settings, seq_len: int, budget_gb: float):
    """(try_step as a context manager, the free function to pair with it): the real model on
    a GPU, a simulated card made from a short sweep on a CPU."""
    if settings.device == "cuda":
        return memory.probe(lm, "fp32", seq_len), free_memory
    rows = memory.sweep(lm, settings.sizes[-2:], [seq_len], ["fp32"], progress=False)
    card = memory.simulated_card(rows, "fp32", seq_len, budget_gb)
    return nullcontext(card.try_step), card.free_memory


def throughput(lm, settings: Settings, deadline: float) -> Check:
    """Tokens per second of the course's loop and the HF Trainer, same settings, each after a
    one-step warm-up (CUDA kernels, cuBLAS handles)."""
    start = time.monotonic()
    if missing("transformers"):
        return Check(THROUGHPUT, NOT_RUN, missing("transformers"))
    sequences = language_model.sequences(lm.tokenizer, settings.seq_len)
    micro, accum, steps = settings.micro_batch, settings.accum_steps, settings.steps
    precisions = ["fp32"] + ([half_precision(settings.device)] if settings.device == "cuda" else [])
    rows = []
    for mode in precisions:
        if time.monotonic() > deadline:
            rows.append((mode, "not run: out of time", "", "", "", ""))
            continue
        training.train(lm, sequences, [micro] * accum, 1, mode=mode, progress=False)
        ours = training.train(lm, sequences, [micro] * accum, steps, mode=mode, progress=False)
        training.with_hf_trainer(lm, sequences, micro, accum, 1, mode=mode)
        trainer = training.with_hf_trainer(lm, sequences, micro, accum, steps, mode=mode)
        rows.append(
            (
                mode,
                f"{ours.tokens_per_second:,.0f}",
                f"{trainer.tokens_per_second:,.0f}",
                f"{trainer.tokens_per_second / ours.tokens_per_second:.2f}",
                f"{trainer.losses[0] / ours.losses[0]:.4f}",
                f"{training.max_weight_difference(ours, trainer):.1e}",
            )
        )
    header = (
        "precision",
        "loop tokens/s",
        "Trainer tokens/s",
        "Trainer / loop",
        "first loss, Trainer / loop",
        "weights apart (relative)",
    )
    summary = (
        f"{steps} optimizer steps of {micro} x {accum} sequences of up to {settings.seq_len} "
        f"tokens, {lm.name}"
    )
    notes = [
        "The loop's time is its training loop; the Trainer's is its own train_runtime (its "
        "dataloader and callbacks included). Tokens are predicted tokens, the same for both.",
        "For GPT-2 the Trainer's first loss is lower by predicted / labelled tokens (module 7).",
    ]
    return Check(THROUGHPUT, MEASURED, summary, header, rows, notes, time.monotonic() - start)
