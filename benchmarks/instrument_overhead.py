"""What the checks' instruments cost a hand-in: each instrumented question's ``run`` on the
reference, over its public specs and one hidden draw, as the hand-in's process runs it.

Run: .venv/bin/python benchmarks/instrument_overhead.py [--rounds 5]
Prints, per question, the median milliseconds of one pass over those specs, and the total.
To compare with another version of coursekit, run it with that version first on PYTHONPATH
(e.g. ``git archive <commit> coursekit | tar -x -C /tmp/old`` and ``PYTHONPATH=/tmp/old``).
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

import torch

QUESTIONS = (
    "accumulate_window",
    "train_accumulated",
    "plan_micro_batch",
    "accumulate_tokens",
    "amp_window",
    "train_scheduled",
    "accumulate_in_float32",
    "global_token_scale",
    "grad_cache_step",
    "ddp_window",
    "recipe_window",
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    rounds = parser.parse_args().rounds
    torch.set_num_threads(1)
    import coursekit
    from coursekit.checks import QUESTIONS as REGISTRY

    print(f"coursekit from {coursekit.__file__}")
    total = 0.0
    for name in QUESTIONS:
        question = REGISTRY[name]
        specs = question.public_specs() + question.hidden_specs(random.Random(0))[:1]
        reference = question.reference()
        for spec in specs:  # warm up: imports, first calls
            question.run(reference, spec)
        times = []
        for _ in range(rounds):
            start = time.perf_counter()
            for spec in specs:
                question.run(reference, spec)
            times.append(time.perf_counter() - start)
        median = statistics.median(times) * 1000
        total += median
        print(f"{name:24s} {len(specs):2d} specs  {median:8.1f} ms")
    print(f"{'all':24s}           {total:8.1f} ms")


if __name__ == "__main__":
    main()
