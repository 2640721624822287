"""The ways to fine-tune on one card, each a choice of four things: how the base's weights
are stored, what trains (every weight, or LoRA adapters), the optimizer's state, and the
dtype the activations are computed in."""

from __future__ import annotations

from dataclasses import dataclass

from coursekit.arguments import choice


@dataclass(frozen=True)
class Mode:
    """One fine-tuning mode; see :data:`MODES`."""

    name: str
    weights: str  # "fp32", "bf16", "int8" or "nf4": the base as stored
    lora: bool  # True: frozen base, float32 LoRA adapters train
    optimizer: str  # "adamw" (torch, states in the parameter's dtype) or "adamw8bit"
    # ("adamw8bit": bitsandbytes, the embeddings' states in float32 as the HF Trainer keeps them)
    compute: str  # "fp32" or "bf16": the dtype of the activations
    summary: str

    @property
    def compute_bytes(self) -> int:
        return 4 if self.compute == "fp32" else 2


_ALL = (
    Mode("full-fp32", "fp32", False, "adamw", "fp32", "every weight trains, all in float32"),
    Mode(
        "full-bf16-adam8bit",
        "bf16",
        False,
        "adamw8bit",
        "bf16",
        "every weight trains in bf16 (no float32 master copy: an update under 1/512 to "
        "1/256 of a weight rounds away), bitsandbytes' 8-bit AdamW; the memory lower bound",
    ),
    Mode("lora-fp32", "fp32", True, "adamw", "fp32", "LoRA on a float32 base (module 7)"),
    Mode("lora-bf16", "bf16", True, "adamw", "bf16", "LoRA on a frozen bf16 base"),
    Mode("lora-int8", "int8", True, "adamw", "bf16", "LoRA on an 8-bit (LLM.int8) base"),
    Mode("qlora-nf4", "nf4", True, "adamw", "bf16", "QLoRA: LoRA on a 4-bit NF4 base"),
)
#: Every mode, by name.
MODES: dict[str, Mode] = {mode.name: mode for mode in _ALL}
#: The modes of the "what fits" table.
TABLE_MODES = ("full-fp32", "full-bf16-adam8bit", "lora-bf16", "qlora-nf4")


def mode_named(name) -> Mode:
    """The :class:`Mode` called ``name``, or a ValueError listing the modes."""
    if isinstance(name, Mode):
        return name
    return MODES[choice("mode", name, tuple(MODES))]
