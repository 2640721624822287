"""Real model sizes without a download: published configurations, built on the ``meta`` device.

A model's memory follows from its shapes, and its shapes are in its ``config.json``. The
values below are copied from the published files (named in :data:`SOURCES`), so the course
can build the exact architecture with ``AutoModelForCausalLM.from_config`` on the ``meta``
device: every parameter has its shape and dtype and no storage, so a 7B model is counted
exactly in a fraction of a second and nothing is downloaded or allocated.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import nn

from coursekit.parameters import ParameterError

# The fields of each model's config.json that decide its shapes (the rest, such as
# rope_theta or the token ids, change no parameter count and are left at their defaults).
_QWEN = "https://huggingface.co/Qwen/{}/blob/main/config.json"
PUBLISHED_CONFIGS: dict[str, dict] = {
    "Qwen2.5-0.5B": {
        "model_type": "qwen2",
        "hidden_size": 896,
        "intermediate_size": 4864,
        "num_hidden_layers": 24,
        "num_attention_heads": 14,
        "num_key_value_heads": 2,
        "vocab_size": 151936,
        "tie_word_embeddings": True,
    },
    "Qwen2.5-1.5B": {
        "model_type": "qwen2",
        "hidden_size": 1536,
        "intermediate_size": 8960,
        "num_hidden_layers": 28,
        "num_attention_heads": 12,
        "num_key_value_heads": 2,
        "vocab_size": 151936,
        "tie_word_embeddings": True,
    },
    "Qwen2.5-3B": {
        "model_type": "qwen2",
        "hidden_size": 2048,
        "intermediate_size": 11008,
        "num_hidden_layers": 36,
        "num_attention_heads": 16,
        "num_key_value_heads": 2,
        "vocab_size": 151936,
        "tie_word_embeddings": True,
    },
    "Qwen2.5-7B": {
        "model_type": "qwen2",
        "hidden_size": 3584,
        "intermediate_size": 18944,
        "num_hidden_layers": 28,
        "num_attention_heads": 28,
        "num_key_value_heads": 4,
        "vocab_size": 152064,
        "tie_word_embeddings": False,
    },
    # transformers' GPT2Config() defaults are the released gpt2 (124 M parameters)
    "gpt2": {"model_type": "gpt2"},
}
#: Where each configuration's values come from.
SOURCES: dict[str, str] = {
    **{name: _QWEN.format(name) for name in PUBLISHED_CONFIGS if name.startswith("Qwen")},
    "gpt2": "https://huggingface.co/openai-community/gpt2/blob/main/config.json "
    "(equal to transformers' GPT2Config() defaults)",
}
#: The sizes of the course's table, about 0.5B, 1.5B, 3B and 7B parameters.
TABLE_MODELS = ("Qwen2.5-0.5B", "Qwen2.5-1.5B", "Qwen2.5-3B", "Qwen2.5-7B")


def published_config(name: str):
    """The transformers configuration of a model in :data:`PUBLISHED_CONFIGS`.

    Example:
        >>> published_config("Qwen2.5-7B").hidden_size
        3584
    """
    if name not in PUBLISHED_CONFIGS:
        listed = ", ".join(PUBLISHED_CONFIGS)
        raise ParameterError(
            f"No published configuration named {name!r}; the course has {listed}. For another "
            "model, pass its transformers config (AutoConfig.from_pretrained(...)) or its "
            "config.json as a dict."
        )
    return as_config(PUBLISHED_CONFIGS[name])


def as_config(config):
    """A transformers configuration from what a student may pass: a configuration, a dict
    read from a ``config.json`` (it must name its ``model_type``), or a published name."""
    from transformers import AutoConfig, PretrainedConfig

    if isinstance(config, str):
        return published_config(config)
    if isinstance(config, PretrainedConfig):
        return config
    if isinstance(config, Mapping):
        values = dict(config)
        model_type = values.pop("model_type", None)
        if not isinstance(model_type, str):
            raise ParameterError(
                "A configuration given as a dict needs its 'model_type' (as in config.json, "
                "for example 'llama' or 'qwen2'); this one has none."
            )
        try:
            return AutoConfig.for_model(model_type, **values)
        except (ValueError, KeyError) as error:
            raise ParameterError(
                f"transformers does not know the model_type {model_type!r} ({error})."
            ) from None
    raise ParameterError(
        f"config is {type(config).__name__}; give a transformers configuration, a dict from "
        f"a config.json, or one of {', '.join(PUBLISHED_CONFIGS)}."
    )


def meta_model(config) -> nn.Module:
    """The causal LM of ``config`` built on the ``meta`` device: exact shapes, no memory.

    Example:
        >>> model = meta_model("gpt2")
        >>> next(model.parameters()).device.type, count_parameters(model)
        ('meta', 124439808)
    """
    from transformers import AutoModelForCausalLM

    config = as_config(config)
    with torch.device("meta"):
        try:
            return AutoModelForCausalLM.from_config(config)
        except ValueError as error:  # a configuration class with no causal LM
            raise ParameterError(
                f"{type(config).__name__} has no causal language model in transformers "
                f"({str(error).splitlines()[0]})."
            ) from None
        except (AssertionError, TypeError, AttributeError) as error:  # inconsistent values
            raise ParameterError(
                f"transformers cannot build a model from this {type(config).__name__} "
                f"({type(error).__name__}: {error}); check its sizes and token ids "
                "(pad_token_id must be below vocab_size)."
            ) from None


def count_parameters(model: nn.Module) -> int:
    """Parameters, each counted once: tied input and output embeddings are one tensor."""
    return sum(p.numel() for p in model.parameters())
