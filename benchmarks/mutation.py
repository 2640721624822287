"""Mutation scores of every graded question: mutants killed and correct styles passed.

Run: .venv/bin/python benchmarks/mutation.py [--seeds 50] [--question NAME ...]
For each question it runs every mutant and correct style in tests/corpora/student_code/ on the
grader's tests of each seed (public specs plus the hidden draw), and prints:
- mutants killed on every seed / all mutants (the mutation score; aim 100%);
- correct styles with full marks on every seed / all styles (aim 100%);
- mistake names attached that are not true (aim 0);
- rules of the exercise (Question.rules) whose mutants all fail one of the rule's own tests on
  every seed / all rules (aim 100%);
- killed mutants, over all seeds, whose feedback names the mistake (aim at least 95%);
- and the CPU seconds it took.
Survivors, styles marked down, untrue names, rules a mutant escaped, and one message per
mutant that was not named are listed under the table.
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
        f"{'untrue':>6} {'rules':>7} {'named':>6} {'cpu s':>6}"
    )
    details, perfect, kills, named = [], True, 0, 0
    for name in names:
        started = time.process_time()
        with contextlib.redirect_stdout(io.StringIO()):  # some mutants print their answer
            score = mutation.score(name, range(args.seeds))
        cpu = time.process_time() - started
        ratio = score.killed / score.mutants if score.mutants else 0.0
        rules = QUESTIONS[name].rules
        missed_rules = {index for index, _ in score.rule_missed}
        rules_held = len(rules) - len(missed_rules)
        kills += score.kills
        named += score.named
        print(
            f"{name:24} {QUESTIONS[name].module:22} {score.killed:>4}/{score.mutants:<4} "
            f"{ratio:>6.0%} {score.styles_passed:>3}/{score.styles:<4} "
            f"{len(score.false_names):>6} {rules_held:>3}/{len(rules):<3} "
            f"{score.named_share:>6.1%} {cpu:>6.1f}",
            flush=True,
        )
        for label, found in (
            ("survived (seeds)", score.survived),
            ("marked down (seeds)", score.marked_down),
            ("untrue names", score.false_names),
            ("crashed", score.crashed),
            ("not named, e.g.", score.not_named),
        ):
            for variant, what in found.items():
                details.append(f"  {name}: {variant} {label}: {what}")
        for (index, variant), seeds in score.rule_missed.items():
            details.append(
                f"  {name}: {variant} failed none of the tests of rule {index} "
                f"({rules[index].text[:60]!r}) on seeds {seeds}"
            )
        perfect &= not (
            score.survived
            or score.marked_down
            or score.false_names
            or score.crashed
            or score.rule_missed
            or not rules
            or score.named_share < 0.95
        )
    share = named / kills if kills else 1.0
    print(f"\nseeds per question: {args.seeds}; feedback names the mistake: {share:.1%} overall")
    print(
        "\n".join(details) if details else "every mutant killed on every seed; every style passed"
    )
    return 0 if perfect else 1


if __name__ == "__main__":
    raise SystemExit(main())
