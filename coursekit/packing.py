"""Packing documents into fixed-length rows, and the effective batch counted in tokens.

A padded micro-batch spends compute on padding, and a window of N sequences holds a number of
tokens that moves from step to step with their lengths. Packing puts several documents in
one row of ``seq_len`` tokens, so each row is nearly full and a window of R rows holds nearly
the same tokens every step. It changes nothing else only when the boundaries are right:

- ``position_ids`` restart at 0 at every document, so a model that reads them
  (``transformers`` detects packed rows from them when no attention mask is given) lets no
  token attend to another document and gives each document its own positions;
- the label of every document's first token is -100: the logits that would predict it
  belong to the document before, so no loss crosses a boundary;
- the window's loss is divided by its labels that are not -100, the tokens it predicts.

Then a packed window's gradient equals the padded window's on the same documents (module 8
shows it to float rounding). :func:`pack_documents` is exercise 8.1's reference answer.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

IGNORE = -100  # the label PyTorch's cross-entropy (and every HF model) skips


def pack_documents(
    documents: Sequence[Sequence[int]], seq_len: int, rows_per_window: int, pad_id: int = 0
) -> dict[str, list]:
    """Pack ``documents`` (lists of token ids) into rows of ``seq_len`` tokens, in order, and
    count each window's predicted tokens.

    A document goes at the end of the current row if it fits in the room left, else it
    starts a new row; none is split. Rows are padded at the end with ``pad_id``.

    Returns:
        ``input_ids``, ``labels`` and ``position_ids``: one list of ``seq_len`` ints per row
        (labels -100 at the padding and at each document's first token; positions from 0 at
        each document's first token, and at the padding's); ``window_tokens``: for each
        window of ``rows_per_window`` consecutive rows (the last may have fewer), its labels
        that are not -100.

    Raises:
        ValueError: a document longer than ``seq_len`` (cut it before packing).

    Example:
        >>> packed = pack_documents([[5, 6, 7], [8, 9], [10, 11, 12]], 6, 2, pad_id=0)
        >>> packed["input_ids"]
        [[5, 6, 7, 8, 9, 0], [10, 11, 12, 0, 0, 0]]
        >>> packed["labels"][0], packed["window_tokens"]
        ([-100, 6, 7, -100, 9, -100], [5])
    """
    for index, document in enumerate(documents):
        if len(document) > seq_len:
            raise ValueError(
                f"Document {index} has {len(document)} tokens, more than seq_len ({seq_len}): "
                "cut long documents into pieces of at most seq_len tokens before packing."
            )
    input_ids, labels, position_ids = [], [], []
    for row in _rows(documents, seq_len):
        ids, targets, positions = [], [], []
        for document in row:
            ids += list(document)
            targets += [IGNORE, *document[1:]]
            positions += range(len(document))
        padding = seq_len - len(ids)
        input_ids.append(ids + [pad_id] * padding)
        labels.append(targets + [IGNORE] * padding)
        position_ids.append(positions + list(range(padding)))
    counts = [sum(label != IGNORE for label in row) for row in labels]
    window_tokens = [
        sum(counts[start : start + rows_per_window])
        for start in range(0, len(counts), rows_per_window)
    ]
    return {
        "input_ids": input_ids,
        "labels": labels,
        "position_ids": position_ids,
        "window_tokens": window_tokens,
    }


def _rows(documents: Sequence[Sequence[int]], seq_len: int) -> list[list[Sequence[int]]]:
    """The documents of each row: in order, a new row when the next one does not fit."""
    rows: list[list[Sequence[int]]] = []
    room = 0
    for document in documents:
        if not rows or len(document) > room:
            rows.append([])
            room = seq_len
        rows[-1].append(document)
        room -= len(document)
    return rows


# ------------------------------------------------------------------ the effective batch in tokens


def predicted_per_window(sequences: Sequence[Sequence[int]], per_window: int) -> list[int]:
    """The predicted tokens (each sequence's length less one) of each full window of
    ``per_window`` sequences, in order: what a window's loss is divided by when the
    effective batch is counted in sequences."""
    counts = [len(ids) - 1 for ids in sequences]
    full = len(counts) // per_window * per_window
    return [sum(counts[i : i + per_window]) for i in range(0, full, per_window)]


def padded_slots(sequences: Sequence[Sequence[int]], micro_batch: int) -> int:
    """The token slots a model computes when each micro-batch of ``micro_batch`` sequences,
    in order, is padded to its longest sequence."""
    slots = 0
    for start in range(0, len(sequences), micro_batch):
        batch = sequences[start : start + micro_batch]
        slots += len(batch) * max(len(ids) for ids in batch)
    return slots


def by_length(sequences: Sequence[Sequence[int]], micro_batch: int, seed: int = 0) -> list:
    """Length-grouped order, the cheap alternative to packing: shuffle, sort each run of 50
    micro-batches longest first, then shuffle the micro-batches, so similar lengths share a
    micro-batch. Close to the HF Trainer's ``group_by_length``, which sorts each megabatch
    (at most 50 micro-batches, fewer on a small dataset) longest first and does not shuffle
    the micro-batches (``get_length_grouped_indices``, transformers 5.25). Either way a
    window of a few micro-batches holds near-equal lengths, so its token count varies more
    than a shuffled window's; less padding is all it buys."""
    generator = torch.Generator().manual_seed(seed)
    order = [sequences[i] for i in torch.randperm(len(sequences), generator=generator).tolist()]
    chunk = 50 * micro_batch
    grouped = []
    for start in range(0, len(order), chunk):
        grouped += sorted(order[start : start + chunk], key=len, reverse=True)
    batches = [grouped[i : i + micro_batch] for i in range(0, len(grouped), micro_batch)]
    shuffled = torch.randperm(len(batches), generator=generator).tolist()
    return [ids for i in shuffled for ids in batches[i]]


# ------------------------------------------------------------------ a window's gradient, two ways


def packed_tensors(packed: dict, rows: range | slice, device=None) -> dict[str, torch.Tensor]:
    """Rows of a packing as a micro-batch: ``input_ids``, ``labels``, ``position_ids``
    tensors (no attention mask: the position ids say where documents start)."""
    return {
        key: torch.tensor(packed[key][rows], dtype=torch.long, device=device)
        for key in ("input_ids", "labels", "position_ids")
    }


def packed_summed_loss(model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """A packed micro-batch's loss summed over its predicted tokens. ``transformers`` reads
    packed rows from ``position_ids`` when no attention mask is given."""
    logits = model(
        input_ids=batch["input_ids"], position_ids=batch["position_ids"], use_cache=False
    ).logits
    return nn.functional.cross_entropy(
        logits[:, :-1].float().flatten(0, 1),
        batch["labels"][:, 1:].flatten(),
        ignore_index=IGNORE,
        reduction="sum",
    )


def boundaries_ignored(
    documents: Sequence[Sequence[int]], seq_len: int, pad_id: int = 0
) -> dict[str, list]:
    """The rows :func:`pack_documents` makes, labelled the pretraining way: positions run
    through the row and only the padding is -100, so attention and the loss cross from one
    document into the next."""
    input_ids, labels, position_ids = [], [], []
    for row in _rows(documents, seq_len):
        ids = [token for document in row for token in document]
        padding = seq_len - len(ids)
        input_ids.append(ids + [pad_id] * padding)
        labels.append(ids + [IGNORE] * padding)
        position_ids.append(list(range(seq_len)))
    return {"input_ids": input_ids, "labels": labels, "position_ids": position_ids}


def window_gradients(model: nn.Module, documents, seq_len: int, pad_id: int, pack, micro: int):
    """One window of ``documents`` trained three ways, each gradient flattened: padded
    (micro-batches of ``micro`` documents, divided by their predicted tokens), packed by
    ``pack`` (micro-batches of ``micro`` rows at most, divided by the ``window_tokens`` it
    returns), and packed with the boundaries ignored (divided by its labels that are not
    -100). Also the counts (and the padded window's mean loss per token) and the token
    slots each computes."""
    from coursekit.real_model.language_model import collate, predicted_tokens, summed_loss

    padded = [collate(documents[i : i + micro], pad_id) for i in range(0, len(documents), micro)]
    count = sum(predicted_tokens(batch) for batch in padded)
    packed = pack(documents, seq_len, 10**9, pad_id)  # one window: every row
    rows = len(packed["input_ids"])
    naive = boundaries_ignored(documents, seq_len, pad_id)
    gradient, loss = window_gradient(model, [_call(summed_loss, model, b) for b in padded], count)
    result = {"padded": gradient}
    for name, packing in (("packed", packed), ("boundaries ignored", naive)):
        batches = [packed_tensors(packing, slice(i, i + micro)) for i in range(0, rows, micro)]
        total = sum(int((b["labels"][:, 1:] != IGNORE).sum()) for b in batches)
        if name == "packed":
            total = int(packed["window_tokens"][0])
        losses = [_call(packed_summed_loss, model, b) for b in batches]
        result[name], _ = window_gradient(model, losses, total)
    slots = {
        "padded": sum(b["input_ids"].numel() for b in padded),
        "packed": rows * seq_len,
    }
    counts = {"predicted": count, "window_tokens": packed["window_tokens"], "padded_loss": loss}
    return result, counts, slots


def _call(function, *args):
    return lambda: function(*args)


def window_gradient(model: nn.Module, losses, count: int) -> tuple[torch.Tensor, float]:
    """The window's gradient, flattened, and its loss: each micro-batch's summed loss (from
    the callables in ``losses``) divided by the window's ``count`` of predicted tokens, and
    accumulated."""
    model.zero_grad(set_to_none=True)
    total = 0.0
    for summed in losses:
        loss = summed() / count
        loss.backward()
        total += loss.item()
    gradient = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
    model.zero_grad(set_to_none=True)
    return gradient, total
