"""A real model on one GPU (module 7): a causal LM loaded with transformers, where its training
memory goes, the micro-batch chosen under a memory budget, and the whole recipe beside the HF
Trainer.

One idea per module: ``language_model`` (load a public checkpoint, or build the tiny GPT-2
offline; the text and tokenizer the course ships in ``data/``; the loss summed over the
tokens it predicts), ``memory`` (one training step's peak for each way of saving memory:
fp32, checkpointing, fp16, bf16, LoRA; the probe the tuner calls), ``tuning`` (probe for the
largest micro-batch under a budget, then the window that reaches the effective batch),
``simulated_device`` (a card that runs out of memory on purpose, for the CPU and the checks),
``finders`` (Accelerate's and Lightning's batch-size finders on the same probe), ``training``
(the recipe, and the same run in the HF Trainer), ``widget`` (the tuner's explorer) and
``plots``. Notebooks import every name from here::

    from coursekit.real_model import free_memory, memory_budget_gb, tune
    from coursekit.real_model import language_model, memory, training

Names load on first use, as ``coursekit``'s own do: importing one of them (the checks import
``tuning``) does not import matplotlib or the widgets. The graded question's answer,
``tuning.autotune``, is deliberately not exported. The flat module names of earlier releases
(``coursekit.autotune``, ``coursekit.lm_memory``, ...) still import: :mod:`coursekit.moved`.
"""

from __future__ import annotations

import importlib

#: public name -> the module that defines it, by its full name (as in ``coursekit``'s own:
#: the grader's seal accepts a lazy export only where it is that module's own object)
_EXPORTS = {
    "CPU_CARD_GB": "coursekit.real_model.tuning",
    "DEFAULT_MARGIN": "coursekit.real_model.tuning",
    "GIB": "coursekit.real_model.tuning",
    "Tuning": "coursekit.real_model.tuning",
    "budget_bytes": "coursekit.real_model.tuning",
    "free_memory": "coursekit.real_model.tuning",
    "is_out_of_memory": "coursekit.real_model.tuning",
    "memory_budget_gb": "coursekit.real_model.tuning",
    "tune": "coursekit.real_model.tuning",
    "ProbingDidNotStop": "coursekit.real_model.simulated_device",
    "SimulatedDevice": "coursekit.real_model.simulated_device",
    "FinderResult": "coursekit.real_model.finders",
    "with_accelerate": "coursekit.real_model.finders",
    "with_lightning": "coursekit.real_model.finders",
    "autotune_explorer": "coursekit.real_model.widget",
    "explorer_html": "coursekit.real_model.widget",
    "plot_memory_sweep": "coursekit.real_model.plots",
}
#: modules used as namespaces (``language_model.load``, ``memory.sweep``, ``training.train``)
_MODULES = ("language_model", "memory", "training")

__all__ = sorted([*_EXPORTS, *_MODULES])


def __getattr__(name: str):
    if name in _MODULES:
        return importlib.import_module(f"{__name__}.{name}")
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted([*globals(), *__all__])
