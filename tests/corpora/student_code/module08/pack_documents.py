"""``pack_documents`` hand-ins: right answers written several ways, and each known mistake, as
source. Most mistakes are one change to the textbook answer (``CORRECT``): ``_mutant`` makes
the change and fails loudly if the textbook text it replaces is not there exactly once.

Correct styles not held here are listed in the question's docstring
(``coursekit/checks/module08/pack_documents.py``).
"""

CORRECT = """
def pack_documents(documents, seq_len, rows_per_window, pad_id=0):
    for document in documents:
        if len(document) > seq_len:
            raise ValueError(f"a document of {len(document)} tokens is longer than {seq_len}")
    rows, room = [], 0
    for document in documents:
        if not rows or len(document) > room:
            rows.append([])
            room = seq_len
        rows[-1].append(document)
        room -= len(document)
    input_ids, labels, position_ids = [], [], []
    for row in rows:
        ids, targets, positions = [], [], []
        for document in row:
            ids += list(document)
            targets += [-100] + list(document[1:])
            positions += list(range(len(document)))
        padding = seq_len - len(ids)
        input_ids.append(ids + [pad_id] * padding)
        labels.append(targets + [-100] * padding)
        position_ids.append(positions + [0] * padding)
    counts = [sum(1 for label in row if label != -100) for row in labels]
    window_tokens = [
        sum(counts[start:start + rows_per_window])
        for start in range(0, len(counts), rows_per_window)
    ]
    return {"input_ids": input_ids, "labels": labels, "position_ids": position_ids,
            "window_tokens": window_tokens}
"""


def _mutant(*changes: tuple[str, str]) -> str:
    source = CORRECT
    for old, new in changes:
        assert source.count(old) == 1, old
        source = source.replace(old, new)
    return source


_PADDED = (
    "        input_ids.append(ids + [pad_id] * padding)\n"
    "        labels.append(targets + [-100] * padding)\n"
    "        position_ids.append(positions + [0] * padding)\n"
)

PACK_DOCUMENTS = {
    "correct": CORRECT,
    "correct_with_torch": """
import torch

def pack_documents(documents, seq_len, rows_per_window, pad_id=0):
    if any(len(d) > seq_len for d in documents):
        raise ValueError("cut documents to seq_len tokens before packing")
    starts, row, used = [], -1, seq_len
    for d in documents:
        if used + len(d) > seq_len:
            row, used = row + 1, 0
        starts.append((row, used))
        used += len(d)
    n_rows = row + 1
    ids = torch.full((n_rows, seq_len), pad_id, dtype=torch.long)
    real = torch.zeros((n_rows, seq_len), dtype=torch.bool)
    first = torch.zeros((n_rows, seq_len), dtype=torch.bool)
    pos = torch.zeros((n_rows, seq_len), dtype=torch.long)
    for d, (r, s) in zip(documents, starts):
        ids[r, s:s + len(d)] = torch.tensor(d, dtype=torch.long)
        real[r, s:s + len(d)] = True
        first[r, s] = True
        pos[r, s:s + len(d)] = torch.arange(len(d))
    labels = ids.masked_fill(~real | first, -100)
    per_row = (labels != -100).sum(dim=1)
    windows = [int(w.sum()) for w in per_row.split(rows_per_window)]
    return {"input_ids": ids, "labels": labels, "position_ids": pos, "window_tokens": windows}
""",
    "correct_offsets_plan": """
def pack_documents(documents, seq_len, rows_per_window, pad_id=0):
    plan = []  # (row, offset) of each document
    row = offset = 0
    for number, document in enumerate(documents):
        size = len(document)
        if size > seq_len:
            raise ValueError(f"document {number} has {size} tokens; seq_len is {seq_len}")
        if plan and offset + size > seq_len:
            row, offset = row + 1, 0
        plan.append((row, offset))
        offset += size
    n_rows = row + 1 if plan else 0
    input_ids = [[pad_id] * seq_len for _ in range(n_rows)]
    labels = [[-100] * seq_len for _ in range(n_rows)]
    position_ids = [[0] * seq_len for _ in range(n_rows)]
    for document, (r, o) in zip(documents, plan):
        for i, token in enumerate(document):
            input_ids[r][o + i] = token
            position_ids[r][o + i] = i
            if i > 0:
                labels[r][o + i] = token
    window_tokens = []
    for first in range(0, n_rows, rows_per_window):
        window = labels[first:first + rows_per_window]
        window_tokens.append(sum(label != -100 for row in window for label in row))
    return {"input_ids": input_ids, "labels": labels, "position_ids": position_ids,
            "window_tokens": window_tokens}
""",
    "correct_labels_from_positions": """
import itertools

def pack_documents(documents, seq_len, rows_per_window, pad_id=0):
    too_long = [len(d) for d in documents if len(d) > seq_len]
    if too_long:
        raise ValueError(f"documents of {too_long} tokens do not fit rows of {seq_len}")
    rows = []
    current = []
    for document in documents:
        if current and len(current) + len(document) > seq_len:
            rows.append(current)
            current = []
        current = current + [(token, i) for i, token in enumerate(document)]
    if current:
        rows.append(current)
    packed = {"input_ids": [], "labels": [], "position_ids": []}
    for row in rows:
        tail = seq_len - len(row)
        packed["input_ids"].append([t for t, _ in row] + [pad_id] * tail)
        packed["position_ids"].append([i for _, i in row] + list(range(tail)))
        packed["labels"].append([t if i > 0 else -100 for t, i in row] + [-100] * tail)
    scored = [sum(i > 0 for _, i in row) for row in rows]
    totals = list(itertools.accumulate(scored, initial=0))
    packed["window_tokens"] = [
        totals[min(k + rows_per_window, len(rows))] - totals[k]
        for k in range(0, len(rows), rows_per_window)
    ]
    return packed
""",
    # the pretraining habit: one stream, cut every seq_len tokens
    "split_across_rows": """
def pack_documents(documents, seq_len, rows_per_window, pad_id=0):
    for document in documents:
        if len(document) > seq_len:
            raise ValueError("document longer than seq_len")
    ids, targets, positions = [], [], []
    for document in documents:
        ids += list(document)
        targets += [-100] + list(document[1:])
        positions += list(range(len(document)))
    input_ids, labels, position_ids = [], [], []
    for start in range(0, len(ids), seq_len):
        padding = seq_len - len(ids[start:start + seq_len])
        input_ids.append(ids[start:start + seq_len] + [pad_id] * padding)
        labels.append(targets[start:start + seq_len] + [-100] * padding)
        position_ids.append(positions[start:start + seq_len] + [0] * padding)
    counts = [sum(1 for label in row if label != -100) for row in labels]
    window_tokens = [
        sum(counts[s:s + rows_per_window]) for s in range(0, len(counts), rows_per_window)
    ]
    return {"input_ids": input_ids, "labels": labels, "position_ids": position_ids,
            "window_tokens": window_tokens}
""",
    # first fit: a short document goes back into an earlier row with room
    "reordered_to_fill_gaps": _mutant(
        (
            "        if not rows or len(document) > room:\n"
            "            rows.append([])\n"
            "            room = seq_len\n"
            "        rows[-1].append(document)\n"
            "        room -= len(document)\n",
            "        for row in rows:\n"
            "            if sum(len(d) for d in row) + len(document) <= seq_len:\n"
            "                row.append(document)\n"
            "                break\n"
            "        else:\n"
            "            rows.append([document])\n",
        )
    ),
    "rows_not_padded": _mutant(("padding = seq_len - len(ids)", "padding = 0")),
    "ignore_index_as_input": _mutant(
        ("input_ids.append(ids + [pad_id] * padding)", "input_ids.append(ids + [-100] * padding)")
    ),
    "padded_on_the_left": _mutant(
        (
            _PADDED,
            "        input_ids.append([pad_id] * padding + ids)\n"
            "        labels.append([-100] * padding + targets)\n"
            "        position_ids.append([0] * padding + positions)\n",
        )
    ),
    "boundary_labels_kept": _mutant(
        ("targets += [-100] + list(document[1:])", "targets += list(document)")
    ),
    "padding_labelled": _mutant(
        ("labels.append(targets + [-100] * padding)", "labels.append(targets + [pad_id] * padding)")
    ),
    "last_token_masked": _mutant(
        ("targets += [-100] + list(document[1:])", "targets += list(document[:-1]) + [-100]")
    ),
    "pre_shifted_labels": _mutant(
        ("targets += [-100] + list(document[1:])", "targets += list(document[1:]) + [-100]")
    ),
    # the HF collator's habit: mask every token equal to the pad id (here the end-of-text too)
    "eos_masked_with_padding": _mutant(
        (
            "        labels.append(targets + [-100] * padding)\n",
            "        padded = ids + [pad_id] * padding\n"
            "        starts = positions + [0] * padding\n"
            "        labels.append([-100 if p == 0 or t == pad_id else t\n"
            "                       for t, p in zip(padded, starts)])\n",
        )
    ),
    "positions_not_reset": _mutant(
        (
            "position_ids.append(positions + [0] * padding)",
            "position_ids.append(list(range(seq_len)))",
        )
    ),
    "padding_counted": _mutant(
        (
            "counts = [sum(1 for label in row if label != -100) for row in labels]",
            "counts = [len(row) for row in labels]",
        )
    ),
    "document_starts_counted": _mutant(
        (
            "counts = [sum(1 for label in row if label != -100) for row in labels]",
            "counts = [sum(1 for token in row if token != pad_id) for row in input_ids]",
        )
    ),
    "last_window_dropped": _mutant(
        (
            "for start in range(0, len(counts), rows_per_window)",
            "for start in range(0, len(counts) - rows_per_window + 1, rows_per_window)",
        )
    ),
    "long_document_accepted": _mutant(
        (
            '            raise ValueError(f"a document of {len(document)} tokens is longer '
            'than {seq_len}")\n',
            "            pass\n",
        ),
        (
            "    rows, room = [], 0\n",
            "    documents = [d[:seq_len] for d in documents]\n    rows, room = [], 0\n",
        ),
    ),
    "wrong_exception": _mutant(
        (
            "        if len(document) > seq_len:\n"
            '            raise ValueError(f"a document of {len(document)} tokens is longer '
            'than {seq_len}")\n',
            '        assert len(document) <= seq_len, "document too long"\n',
        )
    ),
    # extends the caller's first document of each row in place
    "documents_changed": _mutant(
        (
            "        ids, targets, positions = [], [], []\n"
            "        for document in row:\n"
            "            ids += list(document)\n",
            "        ids, targets, positions = row[0], [], []\n"
            "        for number, document in enumerate(row):\n"
            "            if number:\n"
            "                ids += list(document)\n",
        )
    ),
}

PACK_DOCUMENTS |= {
    # a document that would fill the row exactly starts a new one
    "exact_fit_rejected": _mutant(
        ("if not rows or len(document) > room:", "if not rows or len(document) >= room:")
    ),
    # one list for both: the -100s written into the labels land in the input ids too
    "labels_alias_inputs": _mutant(
        (
            "        input_ids.append(ids + [pad_id] * padding)\n"
            "        labels.append(targets + [-100] * padding)\n",
            "        line = ids + [pad_id] * padding\n"
            "        input_ids.append(line)\n"
            "        labels.append(line)\n"
            "        for i, target in enumerate(targets + [-100] * padding):\n"
            "            line[i] = target\n",
        )
    ),
    # a mutable default argument: rows pile up from one call to the next
    "state_across_calls": _mutant(
        (
            "def pack_documents(documents, seq_len, rows_per_window, pad_id=0):",
            "def pack_documents(documents, seq_len, rows_per_window, pad_id=0, rows=[]):",
        ),
        ("    rows, room = [], 0\n", "    room = 0\n"),
    ),
}

NAMED_AS = {"documents_changed": "inputs_changed"}
# Mutants beyond the textbook mistakes.
NON_TEXTBOOK = {
    ("pack_documents", "documents_changed"),
    ("pack_documents", "padded_on_the_left"),
    ("pack_documents", "exact_fit_rejected"),
    ("pack_documents", "labels_alias_inputs"),
    ("pack_documents", "state_across_calls"),
}
# Further names, each true of the mutant on some draws.
ALSO_NAMED: dict = {}
