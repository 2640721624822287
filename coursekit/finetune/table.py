"""The table "what fits on 8 / 12 / 16 / 24 GB": for each model, mode and checkpointing
choice, the largest micro-batch on each card and the accumulation steps that reach the
batch in tokens (:func:`coursekit.finetune.plan_fine_tune`, the same memory model)."""

from __future__ import annotations

import html
from collections.abc import Iterable
from dataclasses import dataclass

from coursekit.arguments import choice
from coursekit.finetune.configs import TABLE_MODELS, count_parameters, meta_model
from coursekit.finetune.modes import TABLE_MODES
from coursekit.finetune.planner import plan_fine_tune

CARDS_GB = (8, 12, 16, 24)


@dataclass(frozen=True)
class FitRow:
    """One model, mode and checkpointing choice on one card."""

    model: str
    parameters: int
    mode: str
    checkpointing: bool
    card_gb: float
    micro_batch_size: int  # 0: not even one sequence fits
    accum_steps: int
    needs_bytes: int  # the estimate at this micro-batch (at 1 when nothing fits)

    @property
    def cell(self) -> str:
        """``"4 x 16"`` (micro-batch x accumulation steps), or ``"no"``."""
        return f"{self.micro_batch_size} x {self.accum_steps}" if self.micro_batch_size else "no"


def fits_table(
    models: Iterable[str] = TABLE_MODELS,
    cards_gb: Iterable[float] = CARDS_GB,
    modes: Iterable[str] = TABLE_MODES,
    seq_len: int = 1024,
    tokens_per_step: int = 65536,
    checkpointing: Iterable[bool] = (False, True),
    **plan_options,
) -> list[FitRow]:
    """Every model x mode x checkpointing x card, as :class:`FitRow` data (render it with
    :func:`render_fits_table`). ``plan_options`` go to :func:`plan_fine_tune` (``margin``,
    ``lora_rank``, ``context_gb``...)."""
    rows = []
    for model in models:
        parameters = count_parameters(meta_model(model))
        for mode in modes:
            for recompute in checkpointing:
                for card in cards_gb:
                    plan = plan_fine_tune(
                        model,
                        card,
                        mode,
                        seq_len,
                        tokens_per_step,
                        checkpointing=recompute,
                        **plan_options,
                    )
                    rows.append(
                        FitRow(
                            model,
                            parameters,
                            plan.mode,
                            recompute,
                            card,
                            plan.micro_batch_size,
                            plan.accum_steps,
                            plan.estimate.total_bytes,
                        )
                    )
    return rows


def _grid(rows: list[FitRow]) -> tuple[list[str], list[list[str]]]:
    cards = list(dict.fromkeys(row.card_gb for row in rows))
    header = ["model", "mode", "checkpointing", *(f"{card:g} GB" for card in cards)]
    lines: dict[tuple, dict] = {}
    for row in rows:
        key = (row.model, row.parameters, row.mode, row.checkpointing)
        lines.setdefault(key, {})[row.card_gb] = row.cell
    body = [
        [f"{model} ({parameters / 1e9:.2f}B)", mode, "yes" if ckpt else "no"]
        + [cells.get(card, "") for card in cards]
        for (model, parameters, mode, ckpt), cells in lines.items()
    ]
    return header, body


def render_fits_table(rows: list[FitRow], fmt: str = "markdown") -> str:
    """The rows as a table, one line per model, mode and checkpointing choice, one column per
    card; each cell is "micro-batch x accumulation steps" or "no". ``fmt`` is
    ``"markdown"`` or ``"html"``."""
    fmt = choice("fmt", fmt, ("markdown", "html"))
    header, body = _grid(list(rows))
    if fmt == "markdown":
        lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        lines += ["| " + " | ".join(line) + " |" for line in body]
        return "\n".join(lines)
    head = "".join(f"<th>{html.escape(cell)}</th>" for cell in header)
    rows_html = "".join(
        "<tr>" + "".join(f"<td>{html.escape(cell)}</td>" for cell in line) + "</tr>"
        for line in body
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{rows_html}</tbody></table>"
