"""What a gpu-check run found, and the short markdown report that says it.

Each part of the run is a :class:`Check`: a verdict where there is a right answer (the
notebooks ran, the tuner found what trying every size finds), or figures alone where the run
measures something the course has not measured before (the allocator's peaks beside the
memory model, tokens per second). The report puts the verdicts first and each part's table
after, so an instructor reads the first lines and knows whether the GPU paths work.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

PASSED, FAILED, MEASURED, NOT_RUN = "passed", "FAILED", "measured", "not run"


@dataclass
class Check:
    """One part of the run: its verdict, a one-line summary and the table behind it."""

    title: str
    verdict: str  # PASSED, FAILED, MEASURED (figures, no right answer) or NOT_RUN
    summary: str
    header: Sequence[str] = ()
    rows: list[Sequence[object]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def __post_init__(self) -> None:
        if self.verdict not in (PASSED, FAILED, MEASURED, NOT_RUN):
            raise ValueError(
                f"verdict must be one of passed, FAILED, measured, not run; got {self.verdict!r}"
            )


def failed(checks: Sequence[Check]) -> list[Check]:
    return [check for check in checks if check.verdict == FAILED]


def _cell(value: object) -> str:
    text = f"{value:,.4g}" if isinstance(value, float) else str(value)
    return text.replace("|", "\\|").replace("\n", " ")


def _table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> list[str]:
    lines = ["| " + " | ".join(_cell(h) for h in header) + " |"]
    lines.append("|" + "---|" * len(header))
    lines += ["| " + " | ".join(_cell(v) for v in row) + " |" for row in rows]
    return lines


def markdown(checks: Sequence[Check], machine: Sequence[str], dry_run: bool, seconds: float) -> str:
    """The report: where it ran, the verdicts, then each check's table and notes."""
    title = "# gpu-check report" + (" (CPU dry run)" if dry_run else "")
    lines = [title, ""]
    if dry_run:
        lines += [
            "**A dry run on the CPU, with tiny settings: it checks that gpu-check itself works, "
            "not a GPU's numbers. No figure below was measured on a GPU.**",
            "",
        ]
    lines += [f"- {line}" for line in machine]
    lines += [f"- whole run: {seconds:.0f} s", "", "## Verdicts", ""]
    lines += _table(
        ("check", "result", "seconds", "summary"),
        [(c.title, c.verdict, f"{c.seconds:.0f}", c.summary) for c in checks],
    )
    for number, check in enumerate(checks, 1):
        lines += ["", f"## {number}. {check.title}", "", check.summary]
        if check.rows:
            lines += [""] + _table(check.header, check.rows)
        if check.notes:
            lines += [""] + [f"- {note}" for note in check.notes]
    return "\n".join(lines) + "\n"


def write(path: Path, text: str) -> Path:
    """Write the report, making its folder; the path written."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path
