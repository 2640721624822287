"""Mutation scores of every graded question: mutants killed and correct styles passed.

Run: .venv/bin/python benchmarks/mutation.py [--seeds 50] [--question NAME ...]
For each question it runs every mutant and correct style in tests/corpora/student_code/ on the
grader's tests of each seed (public specs plus the hidden draw), and prints:
- mutants killed on every seed / all mutants (the mutation score; aim 100%);
- correct styles with full marks on every seed / all styles (aim 100%);
- mistake names attached that are not true (aim 0), and the CPU seconds it took.
Survivors, styles marked down and untrue names are listed under the table.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402

from coursekit.checks import QUESTIONS  # noqa: E402
from tests.helpers import mutation  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=50)
    parser.add_argument("--question", action="append", choices=sorted(QUESTIONS))
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")  # mutants do what torch warns about, on purpose
    names = args.question or list(QUESTIONS)
    print(
        f"{'question':24} {'module':22} {'killed':>9} {'score':>6} {'correct':>8} "
        f"{'untrue':>6} {'cpu s':>6}"
    )
    details, perfect = [], True
    for name in names:
        started = time.process_time()
        with contextlib.redirect_stdout(io.StringIO()):  # some mutants print their answer
            score = mutation.score(name, range(args.seeds))
        cpu = time.process_time() - started
        ratio = score.killed / score.mutants if score.mutants else 0.0
        print(
            f"{name:24} {QUESTIONS[name].module:22} {score.killed:>4}/{score.mutants:<4} "
            f"{ratio:>6.0%} {score.styles_passed:>3}/{score.styles:<4} "
            f"{len(score.false_names):>6} {cpu:>6.1f}",
            flush=True,
        )
        for label, found in (
            ("survived (seeds)", score.survived),
            ("marked down (seeds)", score.marked_down),
            ("untrue names", score.false_names),
            ("crashed", score.crashed),
        ):
            for variant, what in found.items():
                details.append(f"  {name}: {variant} {label}: {what}")
        perfect &= not (score.survived or score.marked_down or score.false_names or score.crashed)
    print(f"\nseeds per question: {args.seeds}")
    print(
        "\n".join(details) if details else "every mutant killed on every seed; every style passed"
    )
    return 0 if perfect else 1


if __name__ == "__main__":
    raise SystemExit(main())
