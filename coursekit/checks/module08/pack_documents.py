"""Module 8's question ``pack_documents``: pack tokenized documents into rows of ``seq_len``
tokens with their boundaries right, and count each window's predicted tokens.

The student writes ``pack_documents(documents, seq_len, rows_per_window, pad_id)``. Its
answer is unique (documents in order, a new row when the next one does not fit), so the
judge compares each field with the reference's, in the order a mistake shows first:
``input_ids`` (how documents were placed, how rows were padded), ``labels`` (the
boundaries), ``position_ids`` (at real tokens only: nothing reads them at the padding), then
``window_tokens``. A wrong field is matched against what each known mistake gives on the same
documents (computed here, in the grader), so a name is given only when one mistake explains
it exactly. The documents are real where it matters: the course's own text, cut by the
course's tokenizer, whose end-of-text token is also its padding id.

Other correct styles exist that the corpus does not hold (tests/corpora/student_code/
module08/pack_documents.py has four): rows built with numpy or ``itertools.accumulate``
offsets; rows filled from a precomputed plan of (row, start) per document; labels made
from position ids (``-100`` where the position is 0, or beyond the row's real tokens);
padding positions left at 0 or counted on from the last document; a packer class with an
``add`` method; tensors or numpy arrays returned instead of lists (``run`` reads
``.tolist()``); windows counted while packing rather than after.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping

from coursekit.checks.module08.common import END_OF_TEXT, MODULE, course_documents
from coursekit.checks.question import Failure, Question, Rule
from coursekit.checks.registry import register
from coursekit.checks.side_effects import judge_left_behind
from coursekit.packing import IGNORE, pack_documents

MAX_ROWS = 4096  # a reply larger than any spec's packing is not read further


def _packs(spec) -> bool:
    return _too_long(spec) is None


def _pad_in_documents(spec) -> bool:
    return _packs(spec) and any(spec["pad_id"] in d[1:] for d in spec["documents"])


EVERY_PACKING = "every test that packs (all but the long documents)"

#: The rules exercise 8.1 states, quoted; each with the tests an answer breaking it fails
#: and the corpus's mutants that break it (tests/corpora/student_code/module08/).
RULES = (
    Rule(
        "Take the documents in the order given: a document goes at the end of the current "
        "row if it fits in the room left, otherwise it starts a new row.",
        "a small example (a one-token document that fits an earlier row), and the course's text",
        ("reordered_to_fill_gaps", "exact_fit_rejected"),
        _packs,
    ),
    Rule(
        "Never split a document between rows.",
        EVERY_PACKING,
        ("split_across_rows",),
        _packs,
    ),
    Rule(
        "Pad each row at its end to exactly `seq_len` tokens with `pad_id`.",
        EVERY_PACKING,
        ("rows_not_padded", "ignore_index_as_input", "padded_on_the_left"),
        _packs,
    ),
    Rule(
        "`labels`: the input ids, with -100 at the padding and at the first token of every "
        "document.",
        EVERY_PACKING,
        ("boundary_labels_kept", "padding_labelled", "last_token_masked"),
        _packs,
    ),
    Rule(
        "Do not shift the labels: the model compares its prediction at position t with the "
        "label at t + 1 itself.",
        EVERY_PACKING,
        ("pre_shifted_labels",),
        _packs,
    ),
    Rule(
        "A document's own end-of-text token is a label like any other, even where `pad_id` "
        "is the same id.",
        "the course's text and the hidden draws of it: pad_id is the end-of-text id",
        ("eos_masked_with_padding",),
        _pad_in_documents,
    ),
    Rule(
        "`position_ids` count 0, 1, 2, ... from each document's first token.",
        EVERY_PACKING,
        ("positions_not_reset",),
        _packs,
    ),
    Rule(
        "`window_tokens`: for each window of `rows_per_window` consecutive rows (the last may "
        "have fewer), the number of its labels that are not -100.",
        "every test that packs; a small example ends in a window of fewer rows",
        ("padding_counted", "document_starts_counted", "last_window_dropped"),
        _packs,
    ),
    Rule(
        "Raise a `ValueError` when a document is longer than `seq_len`.",
        "a document longer than seq_len, and a long document in the hidden draw",
        ("long_document_accepted", "wrong_exception"),
        lambda spec: _too_long(spec) is not None,
    ),
)


def _spec(label, documents, seq_len, rows_per_window, pad_id):
    return {
        "label": label,
        "documents": [list(d) for d in documents],
        "seq_len": seq_len,
        "rows_per_window": rows_per_window,
        "pad_id": pad_id,
    }


def _too_long(spec) -> int | None:
    return next(
        (i for i, d in enumerate(spec["documents"]) if len(d) > spec["seq_len"]),
        None,
    )


# ------------------------------------------------------------------ what each mistake gives


def _rows(documents, seq_len, first_fit=False, exact_fit_rejected=False):
    rows, rooms = [], []
    for document in documents:
        if first_fit:
            slot = next((i for i, room in enumerate(rooms) if len(document) <= room), None)
        elif exact_fit_rejected:
            slot = len(rows) - 1 if rows and len(document) < rooms[-1] else None
        else:
            slot = len(rows) - 1 if rows and len(document) <= rooms[-1] else None
        if slot is None:
            rows.append([])
            rooms.append(seq_len)
            slot = len(rows) - 1
        rows[slot].append(list(document))
        rooms[slot] -= len(document)
    return rows


def _placements(spec) -> dict[str, list[list[int]]]:
    """input_ids as each placement mistake gives them."""
    docs, seq_len, pad = spec["documents"], spec["seq_len"], spec["pad_id"]
    rows = _rows(docs, seq_len)
    flat = [t for d in docs for t in d]
    chunks = [flat[i : i + seq_len] for i in range(0, len(flat), seq_len)]

    def padded(row_ids, value=pad, left=False):
        fill = [value] * (seq_len - len(row_ids))
        return fill + row_ids if left else row_ids + fill

    joined = [[t for d in row for t in d] for row in rows]
    return {
        "split_across_rows": [padded(c) for c in chunks],
        "reordered_to_fill_gaps": [
            padded([t for d in row for t in d]) for row in _rows(docs, seq_len, first_fit=True)
        ],
        "exact_fit_rejected": [
            padded([t for d in row for t in d])
            for row in _rows(docs, seq_len, exact_fit_rejected=True)
        ],
        "rows_not_padded": joined,
        "ignore_index_as_input": [padded(r, IGNORE) for r in joined],
        "padded_on_the_left": [padded(r, left=True) for r in joined],
    }


def _labelings(spec) -> dict[str, list[list[int]]]:
    """labels as each labelling mistake gives them, on the right rows."""
    seq_len, pad = spec["seq_len"], spec["pad_id"]
    rows = _rows(spec["documents"], seq_len)

    def build(per_document, pad_label=IGNORE):
        result = []
        for row in rows:
            labels = [x for d in row for x in per_document(d)]
            result.append(labels + [pad_label] * (seq_len - len(labels)))
        return result

    real = [[t for d in row for t in d] for row in rows]
    padding_only = [r + [IGNORE] * (seq_len - len(r)) for r in real]
    masked = {
        "boundary_labels_kept": [padding_only, [[IGNORE, *r[1:]] for r in padding_only]],
        "padding_labelled": [build(lambda d: [IGNORE, *d[1:]], pad)],
        "last_token_masked": [build(lambda d: [*d[:-1], IGNORE])],
        "pre_shifted_labels": [
            build(lambda d: [*d[1:], IGNORE]),
            [r[1:] + [IGNORE] for r in padding_only],
        ],
        "eos_masked_with_padding": [
            build(lambda d: [IGNORE, *(IGNORE if t == pad else t for t in d[1:])]),
            [[IGNORE if t == pad else t for t in r] for r in padding_only],
        ],
    }
    if not any(pad in d for d in spec["documents"]):
        del masked["eos_masked_with_padding"]  # indistinguishable from the right masking
    return masked


def _counts(spec, expected_windows: list[int]) -> dict[str, list[list[int]]]:
    seq_len, per = spec["seq_len"], spec["rows_per_window"]
    rows = _rows(spec["documents"], seq_len)
    sizes = [len(rows[i : i + per]) for i in range(0, len(rows), per)]
    real = [sum(len(d) for d in row) for row in rows]
    every = [sum(real[i : i + per]) for i in range(0, len(rows), per)]
    return {
        "padding_counted": [[n * seq_len for n in sizes]],
        "document_starts_counted": [every],
        "last_window_dropped": [expected_windows[: len(rows) // per]] if len(rows) % per else [],
    }


# ------------------------------------------------------------------ reading the answer


class _Kept:
    """The documents as handed over, to say after the call where they changed: the
    report :func:`judge_left_behind` reads (side_effects.Kept's, for lists of ints, which
    it would copy and compare one number at a time)."""

    def __init__(self, documents: list[list[int]]):
        self.documents = documents
        self.before = [tuple(d) for d in documents]

    def report(self) -> dict:
        given, before = self.documents, self.before
        if not isinstance(given, list) or len(given) != len(before):
            return {"input_changed": "documents (length)"}
        changed = next(
            (i for i, d in enumerate(given) if not isinstance(d, list) or tuple(d) != before[i]),
            None,
        )
        return {"input_changed": None if changed is None else f"documents[{changed}]"}


def _as_list(value):
    tolist = getattr(value, "tolist", None)
    if callable(tolist) and type(value).__module__.split(".")[0] in ("torch", "numpy"):
        return tolist()
    return value


def _whole(value) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _int_rows(value) -> list[list[int]] | None:
    value = _as_list(value)
    if not isinstance(value, (list, tuple)) or len(value) > MAX_ROWS:
        return None
    rows = []
    for row in value:
        row = _as_list(row)
        if not isinstance(row, (list, tuple)) or len(row) > 100_000:
            return None
        if all(type(x) is int for x in row):
            rows.append(list(row))
        elif all(_whole(x) for x in row):
            rows.append([int(x) for x in row])
        else:
            return None
    return rows


def _read(returned) -> dict:
    if not isinstance(returned, Mapping):
        return {"returned": f"{type(returned).__name__}: {repr(returned)[:120]}"}
    read = {}
    for key in ("input_ids", "labels", "position_ids"):
        rows = _int_rows(returned.get(key))
        if rows is None:
            return {"returned": f"{key}: {repr(returned.get(key))[:120]}"}
        read[key] = rows
    windows = _as_list(returned.get("window_tokens"))
    if not isinstance(windows, (list, tuple)) or not all(_whole(x) for x in windows):
        return {"returned": f"window_tokens: {repr(windows)[:120]}"}
    read["window_tokens"] = [int(x) for x in windows][:MAX_ROWS]
    return read


def _first_difference(actual, expected) -> str:
    for index, (mine, right) in enumerate(zip(actual, expected, strict=False)):
        if mine != right:
            at = next(
                (i for i, (a, b) in enumerate(zip(mine, right, strict=False)) if a != b),
                min(len(mine), len(right)),
            )
            return (
                f"row {index} from position {at}: yours {mine[at : at + 8]}, expected "
                f"{right[at : at + 8]}"
            )
    return f"{len(actual)} rows where {len(expected)} are expected"


MESSAGES = {
    "split_across_rows": "you concatenated the documents and cut the stream every seq_len "
    "tokens, so some documents continue in the next row (the pretraining habit). In "
    "fine-tuning an example cut in two loses its context: start a new row when the next "
    "document does not fit in the room left.",
    "reordered_to_fill_gaps": "a document was put back into an earlier row that still had "
    "room. Take the documents in the order given and only ever add to the current row: "
    "the windows then hold the documents the sampler chose, in its order.",
    "rows_not_padded": "your rows are not all seq_len tokens long: pad each row at its end "
    "to exactly seq_len tokens, so the rows stack into one tensor per micro-batch.",
    "ignore_index_as_input": "you padded the input ids with -100. -100 is the label the loss "
    "skips; as an input id it is not a token at all (the embedding lookup fails): pad the "
    "inputs with pad_id, the labels with -100.",
    "padded_on_the_left": "you padded at the start of the row. Pad at the end (where "
    "training collators pad; left padding is for generation).",
    "boundary_labels_kept": "only the padding is -100. The label of each document's first "
    "token is predicted by the last position of the document before it: that loss crosses "
    "a document boundary and teaches the model that one example continues into an "
    "unrelated one. Set it to -100.",
    "padding_labelled": "the padding has labels. Set them to -100, or the model learns to "
    "predict padding and every window's loss counts it.",
    "last_token_masked": "the last token of each document is -100 instead of the first. The "
    "model shifts the labels itself: the first token has nothing in its own document to "
    "predict it, while the last one (the end-of-text) is a prediction worth learning.",
    "pre_shifted_labels": "your labels are already shifted by one (label t is input t + 1). "
    "The model shifts them again (logits at t against the label at t + 1), so every "
    "prediction would be two tokens ahead: labels are the input ids themselves.",
    "eos_masked_with_padding": "every token equal to pad_id is -100, the documents' own "
    "end-of-text tokens included (here pad_id is the end-of-text id, as with GPT-2's "
    "tokenizer). The model then never learns to stop: mask the padding by where it is, "
    "not by its id.",
    "positions_not_reset": "position_ids run through the whole row. Start them at 0 at each "
    "document's first token: a transformers model reads packed rows from them (a new "
    "document where the position does not go up by one), so with positions that run on, "
    "each document attends to the ones before it in the row.",
    "exact_fit_rejected": "a document that fills the room left in a row exactly went to a "
    "new row. It fits: it goes at the end of the current row when its length is at most the "
    "room left.",
    "labels_alias_inputs": "your input_ids equal the labels, -100 at each document's first "
    "token and at the padding: the input ids changed along with the labels, as happens when "
    "both names hold the same lists (labels = ids, then changed in place). Build the labels "
    "as a new list (list(ids), ids.clone()).",
    "padding_counted": "each window's count includes the padding (rows x seq_len). Divide by "
    "the tokens the loss scores: the labels that are not -100.",
    "document_starts_counted": "each window's count includes the first token of every "
    "document, which has no prediction (its label is -100). Count the labels that are not "
    "-100: a count that includes them makes every gradient smaller than it should be "
    "(the HF Trainer's count for GPT-2 in module 7).",
    "last_window_dropped": "the last window is missing: when the rows do not divide into "
    "windows of rows_per_window, the last window has fewer rows, and it still trains.",
}


@register
class PackDocuments(Question):
    name = "pack_documents"
    module = MODULE
    points = 3
    library_answers = ("coursekit.packing.pack_documents",)
    rules = RULES

    def public_specs(self):
        text = course_documents(64)
        return [
            _spec(
                "a small example",
                # a document that fills a row's room exactly, then a one-token document
                # that an earlier row has room for; 5 rows: the last window holds one
                [
                    [5, 6, 7],
                    [8, 9],
                    [10, 11, 12, 13],
                    [14, 15],
                    [16],
                    [17, 18, 19, 20, 21, 22],
                    [23, 24],
                ],
                6,
                2,
                0,
            ),
            # 40 paragraphs of the course's text; the end-of-text id is also pad_id
            _spec("the course's text", text[100:130], 64, 3, END_OF_TEXT),
            _spec("a document longer than seq_len", [[3, 4, 5], [6, 7, 8, 9, 10]], 4, 1, 0),
        ]

    def hidden_specs(self, rng):
        specs = []
        for index in range(3):
            seq_len = rng.choice([24, 32, 48, 64, 96])
            text = course_documents(seq_len)
            count = rng.randint(10, 30)
            start = rng.randrange(len(text) - count)
            documents = list(text[start : start + count])
            specs.append(_spec(f"text {index}", documents, seq_len, rng.randint(1, 5), END_OF_TEXT))
        seq_len = rng.randint(4, 12)
        pad = rng.randint(1, 9)
        documents = [
            [
                rng.randint(1, 9)
                for _ in range(rng.choice([1, 1, 2, seq_len, rng.randint(1, seq_len)]))
            ]
            for _ in range(rng.randint(6, 16))
        ]
        specs.append(_spec("short documents", documents, seq_len, rng.randint(1, 4), pad))
        long = [[rng.randint(2, 50) for _ in range(rng.randint(1, 8))] for _ in range(4)]
        long.insert(rng.randint(0, 4), [rng.randint(2, 50) for _ in range(9)])
        specs.append(_spec("a long document", long, 8, 2, 0))
        return specs

    def run(self, fn, spec):
        documents = [list(d) for d in spec["documents"]]
        kept = _Kept(documents)
        args = (documents, spec["seq_len"], spec["rows_per_window"], spec["pad_id"])
        if _too_long(spec) is not None:
            try:
                returned = fn(*args)
            except NotImplementedError:
                raise  # the stub stays "not attempted"
            except Exception as error:  # the refusal is what this spec checks
                return {
                    "raised": type(error).__name__,
                    "value_error": isinstance(error, ValueError),
                    **kept.report(),
                }
            return {**_read(returned), "returned_anyway": True, **kept.report()}
        read = {**_read(fn(*args)), **kept.report()}
        rows = read.get("input_ids")
        if isinstance(rows, list) and len(rows) > len(_rows(spec["documents"], spec["seq_len"])):
            # more rows than these documents make: does a second, identical call differ?
            documents = [list(d) for d in spec["documents"]]
            try:
                again = _read(fn(documents, *args[1:])).get("input_ids")
            except Exception:  # the first answer's verdict says what is wrong
                again = None
            read["rows_again"] = len(again) if isinstance(again, list) else None
        return read

    def reference(self):
        return pack_documents

    def judge(self, spec, outputs, expected):
        docs = spec["documents"]
        lengths = [len(d) for d in docs] or [0]
        setting = (
            f"({len(docs)} documents of {min(lengths)} to {max(lengths)} tokens, seq_len "
            f"{spec['seq_len']}, rows_per_window {spec['rows_per_window']}, pad_id "
            f"{spec['pad_id']}; case: {spec['label']})"
        )
        judge_left_behind(outputs, setting)
        long = _too_long(spec)
        if long is not None:
            _judge_refusal(spec, outputs, long, setting)
            return
        if "returned" in outputs:
            raise Failure(
                "Return a dict with input_ids, labels and position_ids (one list of seq_len "
                f"whole numbers per row) and window_tokens (a list of whole numbers) {setting}; "
                f"yours gave {outputs['returned']}."
            )
        for key in ("input_ids", "labels", "position_ids", "window_tokens"):
            _judge_field(spec, key, outputs[key], expected[key], expected, setting, outputs)


def _named(actual, candidates: dict[str, list]) -> str | None:
    names = {name for name, options in candidates.items() if actual in options}
    return names.pop() if len(names) == 1 else None


def _judge_field(spec, key, actual, right, expected, setting, outputs):
    if key == "position_ids":  # nothing reads a position at the padding: compare the rest
        real = _real_mask(spec)
        actual, right = _at_real_tokens(actual, real), _at_real_tokens(right, real)
    if actual == right:
        return
    if key == "input_ids":
        name = _named(actual, {k: [v] for k, v in _placements(spec).items()})
        if name is None and actual == expected["labels"]:
            name = "labels_alias_inputs"
        again = outputs.get("rows_again")
        if name is None and isinstance(again, int) and again != len(actual):
            raise Failure(
                f"Your input_ids have {len(actual)} rows where these documents make "
                f"{len(right)} {setting}, and a second call with the same arguments returned "
                f"{again} rows: your function keeps something between calls (a default "
                "argument such as rows=[], or a global). Start every call with empty rows.",
                "state_across_calls",
            )
    elif key == "labels":
        name = _named(actual, _labelings(spec))
    elif key == "position_ids":
        name = "positions_not_reset" if _runs_on(actual) else None
    else:
        name = _named(actual, _counts(spec, right))
    if name is not None:
        raise Failure(f"Your {key} are wrong {setting}: {MESSAGES[name]}", name)
    if key == "window_tokens":
        raise Failure(
            f"Your window_tokens are {actual[:12]}, expected {right[:12]} {setting}: for "
            "each window of rows_per_window rows (the last may have fewer), count its labels "
            "that are not -100."
        )
    raise Failure(f"Your {key} differ {setting}: {_first_difference(actual, right)}.")


def _real_mask(spec) -> list[list[bool]]:
    """Per row of the right packing, which positions hold a document's token."""
    mask = []
    for row in _rows(spec["documents"], spec["seq_len"]):
        used = sum(len(d) for d in row)
        mask.append([True] * used + [False] * (spec["seq_len"] - used))
    return mask


def _at_real_tokens(rows, real):
    """``rows`` with None at the padding, where the shapes are the right packing's."""
    if len(rows) != len(real) or any(len(r) != len(m) for r, m in zip(rows, real, strict=True)):
        return rows
    return [
        [value if keep else None for value, keep in zip(row, mask, strict=True)]
        for row, mask in zip(rows, real, strict=True)
    ]


def _runs_on(positions) -> bool:
    """True when the positions at real tokens count on through each row (0, 1, 2, ...)."""
    for row in positions:
        shown = [p for p in row if p is not None]
        if shown != list(range(len(shown))):
            return False
    return True


def _judge_refusal(spec, outputs, index, setting):
    length = len(spec["documents"][index])
    if outputs.get("returned_anyway"):
        raise Failure(
            f"Document {index} has {length} tokens, more than seq_len ({spec['seq_len']}) "
            f"{setting}, yet your function returned rows. Raise a ValueError that says so: "
            "a document cut or spread over rows in silence trains on something the caller "
            "never meant (cut long documents into pieces before packing).",
            "long_document_accepted",
        )
    if outputs.get("value_error") is not True:
        raise Failure(
            f"Right to refuse a document of {length} tokens with seq_len {spec['seq_len']} "
            f"{setting}, but raise a ValueError, not {outputs.get('raised')} (an assert "
            "disappears under python -O, and the caller cannot tell it from a bug).",
            "wrong_exception",
        )
