"""Module 7 on a real model, measured: is the auto-tuner's micro-batch the largest that fits,
how close does a step come to the budget, and how fast is the course's loop beside the HF
Trainer with the same settings?

    .venv/bin/python benchmarks/autotune.py                        # gpt2 on the GPU
    .venv/bin/python benchmarks/autotune.py --model HuggingFaceTB/SmolLM2-135M --max-memory-gb 8

It needs a CUDA GPU and the Hugging Face Hub (or the model in its cache). Without a GPU it
says so, and measures the same things for the tiny model on a simulated card instead, which
checks the script, not a GPU's numbers.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from coursekit.real_model import language_model, memory, training  # noqa: E402
from coursekit.real_model.tuning import free_memory, is_out_of_memory, memory_budget_gb, tune  # noqa: E402

MIB = 2**20


def exhaustive_largest(try_step, free, limit_bytes: int, share: int) -> int:
    """The largest micro-batch up to ``share`` that fits, trying every size upward: what the
    tuner's about 2 log2(share) probes should find."""
    largest = 0
    for size in range(1, share + 1):
        peak = None
        try:
            peak = try_step(size)
        except Exception as error:
            if not is_out_of_memory(error):
                raise
        if peak is None:
            free()
            break
        if peak > limit_bytes:
            break
        largest = size
    return largest


def timed(run) -> tuple[object, float]:
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    start = time.perf_counter()
    result = run()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return result, time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="gpt2")
    parser.add_argument("--max-memory-gb", type=float, default=None)
    parser.add_argument("--seq-len", type=int, default=256)
    parser.add_argument("--target-batch", type=int, default=256)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--margin", type=float, default=0.1)
    args = parser.parse_args()

    on_gpu = torch.cuda.is_available()
    if on_gpu:
        device = torch.device("cuda")
        lm = language_model.load(args.model, device)
    else:
        print(
            "benchmarks/autotune.py needs a CUDA GPU: torch sees none here. Measuring the tiny "
            "model on a simulated card instead (this checks the script, not a GPU's numbers).\n"
        )
        device = torch.device("cpu")
        lm = language_model.load("tiny", device, max_positions=64)
        args.seq_len, args.target_batch, args.steps = 64, 128, 2
    budget_gb = memory_budget_gb(args.max_memory_gb, device)
    limit = int(budget_gb * 2**30 * (1 - args.margin))
    share = args.target_batch
    print(f"model: {lm}")
    print(f"budget: {budget_gb:.3g} GiB, less a {args.margin:.0%} margin: {limit / MIB:,.1f} MiB")

    if on_gpu:
        make_probe = lambda: (memory.probe(lm, "fp32", args.seq_len), free_memory)  # noqa: E731
    else:
        rows = memory.sweep(lm, [8, 16], [args.seq_len], ["fp32"], progress=False)

        def make_probe():
            card = memory.simulated_card(rows, "fp32", args.seq_len, budget_gb)
            return card.try_step, card.free_memory

    try_step, free = make_probe()
    tuning, tuned_s = timed(
        lambda: tune(try_step, args.target_batch, budget_gb, 1, args.margin, free, False)
    )
    peak = dict(tuning.probes)[tuning.largest_fit]
    try_step, free = make_probe()
    exhaustive, exhaustive_s = timed(lambda: exhaustive_largest(try_step, free, limit, share))
    print(f"\n{'':32}{'micro-batch':>12}{'probes':>8}{'seconds':>9}")
    print(
        f"{'coursekit.real_model.tuning.tune':32}{tuning.largest_fit:>12}{len(tuning.probes):>8}"
        f"{tuned_s:>9.1f}"
    )
    print(f"{'every size from 1 upward':32}{exhaustive:>12}{exhaustive + 1:>8}{exhaustive_s:>9.1f}")
    print(f"window: {tuning.plan}")
    print(
        f"peak at the chosen micro-batch: {peak / MIB:,.1f} MiB = {peak / limit:.1%} of the "
        f"budget less its margin, {peak / (budget_gb * 2**30):.1%} of the budget"
    )

    sequences = language_model.sequences(lm.tokenizer, args.seq_len)
    even = max(d for d in range(1, tuning.largest_fit + 1) if args.target_batch % d == 0)
    accum = args.target_batch // even
    tokens = sum(
        language_model.predicted_tokens(language_model.collate(rows_, lm.tokenizer.pad_token_id))
        for window in training.windows(sequences, [even] * accum, args.steps)
        for rows_ in window
    )
    ours, ours_s = timed(
        lambda: training.train(lm, sequences, [even] * accum, args.steps, progress=False)
    )
    trainer, trainer_s = timed(
        lambda: training.with_hf_trainer(lm, sequences, even, accum, args.steps)
    )
    gap = training.max_weight_difference(ours, trainer)
    print(
        f"\n{args.steps} optimizer steps of {even} x {accum} = {args.target_batch} sequences "
        f"({tokens:,} predicted tokens), fp32:"
    )
    print(f"  course loop: {tokens / ours_s:>10,.0f} tokens/s ({ours_s:.1f} s)")
    print(
        f"  HF Trainer:  {tokens / trainer_s:>10,.0f} tokens/s ({trainer_s:.1f} s, model "
        "copy and Trainer set-up included)"
    )
    print(f"  weights apart by {gap:.1e} (relative)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
