"""A real causal language model, loaded the way people load one, and the text module 7 trains
it on.

``transformers``' ``AutoModelForCausalLM`` and ``AutoTokenizer`` load a public checkpoint
(``gpt2``, ``HuggingFaceTB/SmolLM2-135M``, ...) where the Hugging Face Hub is reachable. Where
it is not (the tests, CI, a laptop offline), the *same classes* build a tiny GPT-2 from a
configuration (``AutoModelForCausalLM.from_config``) with a byte-level BPE tokenizer the course
ships, so every later cell runs the same code on a model that trains in seconds on a CPU.

The text is the course's own prose (``coursekit/real_model/data/course_text.txt``, made by
``scripts/make-lm-data``): one sequence per paragraph, so the sequences have different
lengths, and a window's loss must be divided by its tokens, not averaged per micro-batch.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from importlib import resources

import torch
from torch import nn

from coursekit.parameters import ParameterError

TINY = "tiny"
#: ``"config:gpt2"`` builds ``transformers``' default GPT-2 configuration (``GPT2Config()``:
#: 124 M parameters, a 50,257-token output layer) with random weights: a real model's size and
#: memory where the Hub cannot be reached, fed by the course's tokenizer.
FROM_CONFIG = "config:"
#: The model types ``config:`` builds. Only small defaults: Llama's default configuration, for
#: one, has 6.7 B parameters, 27 GB of float32 weights before any training.
CONFIG_TYPES = ("gpt2",)
#: The checkpoint ``model="auto"`` loads on a GPU: small enough for a 15 GB T4 in fp32.
DEFAULT_HUB_MODEL = "gpt2"
END_OF_TEXT = "<|endoftext|>"
IGNORE = -100  # the label PyTorch's cross-entropy (and every HF model) skips
_DATA = "coursekit.real_model.data"  # the shipped text and tokenizer (scripts/make-lm-data)


@dataclass
class LanguageModel:
    """A causal LM and its tokenizer, and where they came from."""

    name: str  # "tiny" or a hub id
    model: nn.Module
    tokenizer: object  # a transformers PreTrainedTokenizerFast
    from_hub: bool

    @property
    def parameters(self) -> int:
        return sum(p.numel() for p in self.model.parameters())

    @property
    def vocabulary(self) -> int:
        """The model's output size: the tokens its loss chooses among."""
        return int(self.model.config.vocab_size)

    def __str__(self) -> str:
        where = (
            "pretrained, from the Hugging Face Hub"
            if self.from_hub
            else "built from a configuration: random weights"
        )
        config = self.model.config
        used = len(self.tokenizer)
        tokens = f" (the tokenizer uses {used:,} of them)" if used != self.vocabulary else ""
        return (
            f"{self.name} ({config.model_type}, {where}): {self.parameters / 1e6:.2f} M "
            f"parameters, {config.num_hidden_layers} layers, vocabulary "
            f"{self.vocabulary:,}{tokens}"
        )


def course_text() -> str:
    """The text the module fine-tunes on."""
    return resources.files(_DATA).joinpath("course_text.txt").read_text("utf-8")


def course_tokenizer():
    """The tiny model's tokenizer: byte-level BPE with 1,024 tokens, read from the package."""
    from transformers import PreTrainedTokenizerFast

    path = resources.files(_DATA).joinpath("tokenizer.json")
    with resources.as_file(path) as file:
        tokenizer = PreTrainedTokenizerFast(tokenizer_file=str(file), eos_token=END_OF_TEXT)
    tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def tiny_config(vocab_size: int, end_of_text: int, max_positions: int = 512):
    """A GPT-2 configuration small enough to train in seconds on a CPU. Dropout is off so
    that two runs over the same samples give the same gradients."""
    from transformers import AutoConfig

    return AutoConfig.for_model(
        "gpt2",
        vocab_size=vocab_size,
        n_positions=max_positions,
        n_embd=64,
        n_layer=2,
        n_head=4,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        bos_token_id=end_of_text,
        eos_token_id=end_of_text,
    )


def resolve_name(model: str, device: torch.device) -> str:
    """``model`` as the notebook passes it: ``"auto"`` is the hub's ``gpt2`` on a GPU and the
    tiny model on a CPU (a real model trains for hours there); ``"tiny"``,
    ``"config:<model type>"`` (see :data:`FROM_CONFIG`) and hub ids stay as they are."""
    if not isinstance(model, str) or not model.strip():
        raise ParameterError(
            f"model is {model!r}; give 'auto', 'tiny' or a Hugging Face model id such as "
            "'gpt2' (papermill -p model gpt2, or edit the parameters cell)."
        )
    name = model.strip()
    if name == "auto":
        return DEFAULT_HUB_MODEL if device.type == "cuda" else TINY
    return name


def load(model: str, device: torch.device, seed: int = 0, max_positions: int = 512):
    """Load ``model`` (see :func:`resolve_name`) onto ``device`` as a :class:`LanguageModel`.

    A hub model that cannot be downloaded is an error naming why, except under
    ``model="auto"``, which then falls back to the tiny model and says so: the cells after
    it run the same code either way. ``HF_HUB_OFFLINE=1`` (the tests set it) forbids every
    download.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    name = resolve_name(model, device)
    if name == TINY:
        tokenizer = course_tokenizer()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            config = tiny_config(len(tokenizer), tokenizer.eos_token_id, max_positions)
            lm = AutoModelForCausalLM.from_config(config)
        return LanguageModel(TINY, name_default_loss(lm).to(device), tokenizer, from_hub=False)
    if name.startswith(FROM_CONFIG):
        return _from_default_config(name, device, seed)
    try:
        tokenizer = AutoTokenizer.from_pretrained(name)
        lm = AutoModelForCausalLM.from_pretrained(name)
    except OSError as error:  # not cached and no hub, or no such model
        offline = os.environ.get("HF_HUB_OFFLINE") == "1"
        why = "HF_HUB_OFFLINE=1 forbids downloads" if offline else str(error).splitlines()[0]
        if model.strip() == "auto":
            print(f"Could not load {name} ({why}); using the tiny model instead.")
            return load(TINY, device, seed, max_positions)
        raise ParameterError(
            f"Could not load the model {name!r}: {why}. It needs the Hugging Face Hub (or a "
            "copy in its cache); pass model='tiny' to run every cell on the course's tiny "
            "model instead."
        ) from None
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    lm = name_default_loss(without_dropout(lm))
    return LanguageModel(name, lm.to(device), tokenizer, from_hub=True)


def _from_default_config(name: str, device: torch.device, seed: int) -> LanguageModel:
    """``config:<model type>``: transformers' default configuration of that type (one of
    :data:`CONFIG_TYPES`), random weights (seeded), dropout off, and the course's tokenizer.
    Nothing is downloaded."""
    from transformers import AutoConfig, AutoModelForCausalLM

    model_type = name[len(FROM_CONFIG) :]
    if model_type not in CONFIG_TYPES:
        raise ParameterError(
            f"model is {name!r}; a model built from a default configuration is one of "
            f"{', '.join(FROM_CONFIG + t for t in CONFIG_TYPES)} (other defaults are far "
            "bigger), or give 'tiny' or a Hugging Face model id."
        )
    config = AutoConfig.for_model(model_type)
    tokenizer = course_tokenizer()
    config.bos_token_id = config.eos_token_id = tokenizer.eos_token_id
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        lm = AutoModelForCausalLM.from_config(config)
    lm = name_default_loss(without_dropout(lm))
    return LanguageModel(name, lm.to(device), tokenizer, from_hub=False)


def name_default_loss(model: nn.Module) -> nn.Module:
    """Set, by name, the loss transformers falls back to for a causal LM whose class it cannot
    map to a loss (in place): the same loss, without the warning "`loss_type=None` was set in
    the config but it is unrecognized. Using the default loss: `ForCausalLMLoss`".

    transformers picks a model's loss from its class name (``LOSS_MAPPING``:
    ``LlamaForCausalLM`` gives ``"ForCausalLM"``). GPT-2's ``GPT2LMHeadModel`` matches no
    entry, so its ``loss_type`` is None, and the first loss it computes (the HF Trainer's, or
    any call with ``labels``) prints that warning and uses ``ForCausalLMLoss``, which is the
    right loss for a causal LM: the config is not wrong ("set in the config" is transformers'
    wording; nothing was set), and no number changes. Here that same function becomes the
    model's ``loss_function``. ``loss_type`` stays None on purpose: the HF Trainer reads it to
    count a window's tokens, and for GPT-2 it counts every label, the first of each sequence
    too (module 7 measures that difference; naming ``loss_type`` would hide it). A model whose
    loss transformers recognises is left as it is, and so is every model where transformers
    cannot set a model's loss (the warning then prints, and means the same).
    """
    setter = getattr(getattr(type(model), "loss_function", None), "fset", None)
    if setter is None or getattr(model, "loss_type", "") is not None:
        return model
    try:
        from transformers.loss.loss_utils import LOSS_MAPPING
    except ImportError:  # a transformers without the loss table: it does not warn either
        return model
    model.loss_function = LOSS_MAPPING["ForCausalLM"]
    return model


def without_dropout(model: nn.Module) -> nn.Module:
    """Turn dropout off (in place): two runs over the same samples, one accumulated and one
    in a single batch, then compute the same gradients, which is what module 7 compares.
    Checkpoints such as gpt2 ship with dropout 0.1; fine-tuning without it is common."""
    for module in model.modules():
        if isinstance(module, nn.Dropout):
            module.p = 0.0
        if isinstance(getattr(module, "attention_dropout", None), float):
            module.attention_dropout = 0.0  # Llama-style attention reads a float, not a module
    return model


def sequences(tokenizer, seq_len: int, text: str | None = None, min_tokens: int = 8):
    """The text as token sequences: one per paragraph, cut into pieces of at most
    ``seq_len`` tokens, each ending in the end-of-text token; pieces shorter than
    ``min_tokens`` are dropped (a heading alone teaches little)."""
    text = course_text() if text is None else text
    found = []
    for paragraph in text.split("\n\n"):
        ids = tokenizer(paragraph.strip())["input_ids"] + [tokenizer.eos_token_id]
        for start in range(0, len(ids), seq_len):
            piece = ids[start : start + seq_len]
            if len(piece) >= min_tokens:
                found.append(piece)
    return found


def collate(batch: list[list[int]], pad_id: int, device=None) -> dict[str, torch.Tensor]:
    """Pad a micro-batch of sequences on the right: ``input_ids``, ``attention_mask`` and
    ``labels`` (the inputs, with the padding set to -100 so the loss skips it)."""
    longest = max(len(ids) for ids in batch)
    input_ids = torch.full((len(batch), longest), pad_id, dtype=torch.long)
    mask = torch.zeros((len(batch), longest), dtype=torch.long)
    for row, ids in enumerate(batch):
        input_ids[row, : len(ids)] = torch.tensor(ids)
        mask[row, : len(ids)] = 1
    labels = input_ids.masked_fill(mask == 0, IGNORE)
    out = {"input_ids": input_ids, "attention_mask": mask, "labels": labels}
    return {key: value.to(device) for key, value in out.items()} if device else out


def predicted_tokens(batch: dict[str, torch.Tensor]) -> int:
    """The tokens a causal LM's loss scores: every label but the first of each sequence
    (nothing predicts it) and the padding. The HF Trainer's ``num_items_in_batch`` counts the
    same (``labels[..., 1:] != -100``) only for models whose ``loss_type`` maps to the
    causal-LM loss; for GPT-2 it counts every label (module 7, m07-25)."""
    return int((batch["labels"][:, 1:] != IGNORE).sum())


def summed_loss(model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """The micro-batch's loss summed over its predicted tokens (in float32), to be divided by
    the window's token count: each token then weighs the same, whatever its sequence's
    length or its micro-batch."""
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    return nn.functional.cross_entropy(
        logits[:, :-1].float().flatten(0, 1),
        batch["labels"][:, 1:].flatten(),
        ignore_index=IGNORE,
        reduction="sum",
    )


@torch.no_grad()
def mean_token_loss(lm: LanguageModel, sequences: list[list[int]], count: int = 32) -> float:
    """The model's mean loss per predicted token on the first ``count`` sequences: near
    :func:`uniform_loss` for random weights, well below it for a pretrained model."""
    device = next(lm.model.parameters()).device
    batch = collate(sequences[:count], lm.tokenizer.pad_token_id, device)
    return float(summed_loss(lm.model, batch) / predicted_tokens(batch))


def uniform_loss(lm: LanguageModel) -> float:
    """ln V, the loss of a model that spreads its guess evenly over its V output tokens, which
    is about where a model with random weights starts."""
    return math.log(lm.vocabulary)


@torch.no_grad()
def complete(lm: LanguageModel, prompt: str, new_tokens: int = 24) -> str:
    """The model's greedy continuation of ``prompt``: what fine-tuning changes, in words."""
    model, tokenizer = lm.model, lm.tokenizer
    device = next(model.parameters()).device
    ids = tokenizer(prompt, return_tensors="pt")["input_ids"].to(device)
    was_training = model.training
    model.eval()
    out = model.generate(
        ids,
        attention_mask=torch.ones_like(ids),
        max_new_tokens=new_tokens,
        do_sample=False,
        pad_token_id=tokenizer.pad_token_id,
    )
    model.train(was_training)
    return tokenizer.decode(out[0, ids.shape[1] :], skip_special_tokens=True)
