"""The planner as a widget: pick a model (or pass your own configuration), a card, a mode,
checkpointing, the sequence length and the tokens per optimizer step; see the micro-batch,
the accumulation steps and where the memory goes. It calls the same
:func:`coursekit.finetune.plan_fine_tune` as the notebook. Display only: grading never
depends on it."""

from __future__ import annotations

import html

from coursekit.finetune.configs import PUBLISHED_CONFIGS, TABLE_MODELS
from coursekit.finetune.modes import MODES
from coursekit.finetune.planner import plan_fine_tune
from coursekit.parameters import ParameterError
from coursekit.units import format_bytes

YOUR_MODEL = "your model"


def planner_html(
    config, card_gb: float, mode: str, seq_len: int, tokens_per_step: int, checkpointing: bool
) -> str:
    """The plan as a sentence, a bar of the card's memory by part, and the breakdown."""
    try:
        plan = plan_fine_tune(
            config, card_gb, mode, seq_len, tokens_per_step, checkpointing=checkpointing
        )
    except ParameterError as error:
        return f"<p><b>No plan:</b> {html.escape(str(error))}</p>"
    text = html.escape(str(plan)).split("\n", 1)
    card = card_gb * 2**30
    colours = ("#4c72b0", "#55a868", "#c44e52", "#8172b2", "#ccb974", "#64b5cd", "#999999")
    parts = [(name, n) for name, n in plan.estimate.parts().items() if n]
    bar = "".join(
        f'<div title="{html.escape(name)}: {format_bytes(n)}" style="width:'
        f'{min(100.0, 100 * n / card):.2f}%;background:{colours[i % len(colours)]}"></div>'
        for i, (name, n) in enumerate(parts)
    )
    legend = ", ".join(
        f'<span style="color:{colours[i % len(colours)]}">&#9632;</span> {html.escape(name)}'
        for i, (name, _) in enumerate(parts)
    )
    verdict = "fits" if plan.fits else "does not fit"
    return (
        f"<p><b>{verdict}</b>: {text[0]}</p>"
        f'<div style="display:flex;width:100%;border:1px solid #888;height:22px">{bar}</div>'
        f"<p>{legend} (the bar is the {card_gb:g} GB card; parts that exist at different "
        f"moments may not all be alive at once)</p><pre>{text[1] if len(text) > 1 else ''}"
        "</pre>"
    )


def planner_widget(config=None):
    """Dropdowns for the model (the published sizes, or ``config`` as "your model"), the
    card, the mode, checkpointing, the sequence length and the tokens per step."""
    import ipywidgets as widgets

    models = list(TABLE_MODELS) + [n for n in PUBLISHED_CONFIGS if n not in TABLE_MODELS]
    if config is not None:
        models.insert(0, YOUR_MODEL)
    model = widgets.Dropdown(options=models, value=models[0], description="model")
    card = widgets.Dropdown(options=[6, 8, 12, 16, 24, 40, 48, 80], value=12, description="card GB")
    mode = widgets.Dropdown(options=list(MODES), value="qlora-nf4", description="mode")
    recompute = widgets.Checkbox(value=True, description="checkpointing")
    seq_len = widgets.Dropdown(
        options=[256, 512, 1024, 2048, 4096, 8192], value=1024, description="seq_len"
    )
    tokens = widgets.Dropdown(
        options=[8192, 16384, 32768, 65536, 131072, 262144, 524288],
        value=65536,
        description="tokens/step",
    )
    view = widgets.HTML()

    def update(_change=None):
        chosen = config if model.value == YOUR_MODEL else model.value
        view.value = planner_html(
            chosen, card.value, mode.value, seq_len.value, tokens.value, recompute.value
        )

    controls = (model, card, mode, recompute, seq_len, tokens)
    for control in controls:
        control.observe(update, names="value")
    update()
    return widgets.VBox([*controls, view])
