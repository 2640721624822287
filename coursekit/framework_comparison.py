"""How far each framework's run ends up from a reference run, as one aligned table.

Module 5 runs the same training in the course's loop and in each framework
(:mod:`coursekit.framework_runs`); this module only reads the finished runs, so it needs no
framework and no training: the largest weight difference says whether a framework trained
what the reference trained, and the steps, final learning rate and last logged loss say where
it went another way.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from coursekit.framework_runs import FrameworkRun


class Row(NamedTuple):
    """One run against the reference run; see :func:`compare`."""

    name: str
    optimizer_steps: int
    max_param_diff: float
    final_lr: float
    last_loss: float


def compare(runs: Sequence[FrameworkRun], reference: FrameworkRun) -> list[Row]:
    """One :class:`Row` per run: its largest absolute weight difference from ``reference``,
    its optimizer steps, final learning rate and last reported loss; print with :func:`table`.
    """
    rows = []
    for run in runs:
        diff = max(
            float((run.parameters[name] - weight).abs().max())
            for name, weight in reference.parameters.items()
        )
        rows.append(
            Row(run.name, run.optimizer_steps, diff, run.learning_rates[-1], run.losses[-1])
        )
    return rows


def table(rows: Sequence[Row]) -> str:
    """The rows of :func:`compare` as aligned text.

    Example:
        >>> print(table([Row("course loop", 3, 0.0, 0.25, 3.2779)]))
        run          steps  max |Δweight|  final lr  last loss
        course loop      3       0.00e+00    0.2500     3.2779
    """
    width = max(len("run"), *(len(row.name) for row in rows))
    lines = [f"{'run':<{width}}  steps  max |Δweight|  final lr  last loss"]
    for row in rows:
        lines.append(
            f"{row.name:<{width}}  {row.optimizer_steps:>5}  {row.max_param_diff:>13.2e}"
            f"  {row.final_lr:>8.4f}  {row.last_loss:>9.4f}"
        )
    return "\n".join(lines)
