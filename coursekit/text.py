"""A small text corpus, generated on the spot, and character-level token batches from it.

The capstone trains a language model on text, and the course downloads nothing: the lines
come from a little grammar, seeded, so every run sees the same corpus. Lines differ in
length (one clause of 5 to 10 words, or two joined), which is what makes padding, and with it
token-count normalisation, matter. Characters are the tokens: no tokenizer to install.
"""

from __future__ import annotations

import random

import torch

from coursekit.arguments import whole
from coursekit.tokens import IGNORE_INDEX, PAD

_SUBJECTS = (
    "the model",
    "the student",
    "a small gpu",
    "the optimizer",
    "every worker",
    "the teacher",
    "my laptop",
    "the scheduler",
    "a careful engineer",
    "the cat",
)
_VERBS = (
    "adds",
    "keeps",
    "scales",
    "clips",
    "counts",
    "steps on",
    "divides",
    "saves",
    "reads",
    "checks",
)
_OBJECTS = (
    "the gradients",
    "four micro-batches",
    "the loss",
    "every token",
    "the window",
    "the learning rate",
    "the activations",
    "one batch",
    "the norm",
    "a memory budget",
)
_ENDINGS = (
    "",
    " once",
    " again",
    " at the boundary",
    " before the step",
    " in float32",
    " per window",
    " with care",
    " on the cpu",
    " every epoch",
)
_JOINERS = (" and", " so", " while", " but")

#: Token 0 pads, token 1 starts a line; characters follow.
ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789 .,-"
VOCAB_SIZE = 2 + len(ALPHABET)
BOS = 1


def make_lines(n_lines: int, seed: int = 0) -> list[str]:
    """``n_lines`` sentences from the grammar, mostly one clause, some two (seeded, local).

    Example:
        >>> make_lines(2, seed=3)[0].endswith(".")
        True
    """
    n_lines, seed = whole("n_lines", n_lines), whole("seed", seed, minimum=None)
    rng = random.Random(seed)

    def clause() -> str:
        return (
            f"{rng.choice(_SUBJECTS)} {rng.choice(_VERBS)} {rng.choice(_OBJECTS)}"
            f"{rng.choice(_ENDINGS)}"
        )

    lines = []
    for _ in range(n_lines):
        text = clause()
        for _ in range(rng.choice((0, 0, 0, 1))):
            text += f"{rng.choice(_JOINERS)} {clause()}"
        lines.append(text + ".")
    return lines


def encode(text: str) -> list[int]:
    """Character ids of ``text`` (lower-cased); a character outside the alphabet is refused."""
    ids = []
    for char in text.lower():
        where = ALPHABET.find(char)
        if where < 0:
            raise ValueError(f"{char!r} is not in the course's alphabet {ALPHABET!r}.")
        ids.append(where + 2)
    return ids


def decode(ids: list[int]) -> str:
    """The text of character ids; padding and the start token are left out."""
    return "".join(ALPHABET[i - 2] for i in ids if i >= 2)


def line_batches(lines: list[str], context: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(inputs, labels)`` of shape ``(len(lines), context)`` for next-character prediction.

    Each line starts with ``BOS`` and is cut at ``context`` characters; the rest of the row
    is padding, whose labels are ``IGNORE_INDEX`` so the loss skips them.
    """
    context = whole("context", context)
    inputs = torch.full((len(lines), context), PAD, dtype=torch.long)
    labels = torch.full((len(lines), context), IGNORE_INDEX, dtype=torch.long)
    for row, line in enumerate(lines):
        ids = [BOS, *encode(line)][: context + 1]
        length = len(ids) - 1
        inputs[row, :length] = torch.tensor(ids[:-1])
        labels[row, :length] = torch.tensor(ids[1:])
    return inputs, labels
