"""Module 8's packing (coursekit/packing.py): rows and labels on small cases written out by
hand, the token counts the notebook prints, and the oracle the module rests on: a packed
window's gradient equals the padded window's on the same documents (float64), while rows
packed with their boundaries ignored give another one."""

import pytest
import torch

from coursekit import packing
from coursekit.checks.module08.common import course_documents

pytestmark = pytest.mark.module8
IGNORE = packing.IGNORE


def test_rows_labels_positions_and_window_tokens_by_hand():
    documents = [[5, 6, 7], [8, 9], [10, 11, 12, 13], [14, 15], [16], [17, 18]]
    packed = packing.pack_documents(documents, 6, 2, pad_id=3)
    assert packed["input_ids"] == [
        [5, 6, 7, 8, 9, 3],
        [10, 11, 12, 13, 14, 15],  # fills its room exactly
        [16, 17, 18, 3, 3, 3],  # the one-token document starts a row of its own
    ]
    assert packed["labels"] == [
        [IGNORE, 6, 7, IGNORE, 9, IGNORE],
        [IGNORE, 11, 12, 13, IGNORE, 15],
        [IGNORE, IGNORE, 18, IGNORE, IGNORE, IGNORE],
    ]
    assert [row[:3] for row in packed["position_ids"]] == [[0, 1, 2], [0, 1, 2], [0, 0, 1]]
    assert packed["window_tokens"] == [3 + 4, 1]  # the last window has one row


def test_a_document_longer_than_a_row_is_refused_by_its_number():
    with pytest.raises(ValueError, match=r"Document 1 has 5 tokens, more than seq_len \(4\)"):
        packing.pack_documents([[1, 2], [1, 2, 3, 4, 5]], 4, 1)


def test_an_end_of_text_that_is_also_the_pad_id_keeps_its_label():
    packed = packing.pack_documents([[7, 8, 0], [9, 0]], 8, 1, pad_id=0)
    assert packed["labels"] == [[IGNORE, 8, 0, IGNORE, 0, IGNORE, IGNORE, IGNORE]]
    assert packed["window_tokens"] == [3]


def test_token_counts_and_padded_slots():
    sequences = [[1] * 4, [1] * 2, [1] * 6, [1] * 3, [1] * 5]
    assert packing.predicted_per_window(sequences, 2) == [3 + 1, 5 + 2]  # a part window: none
    assert packing.padded_slots(sequences, 2) == 2 * 4 + 2 * 6 + 1 * 5


def test_grouping_by_length_keeps_every_sequence_and_cuts_padding():
    sequences = [list(d) for d in course_documents(256)]
    grouped = packing.by_length(sequences, 8, seed=0)
    assert sorted(map(tuple, grouped)) == sorted(map(tuple, sequences))
    assert packing.padded_slots(grouped, 8) < packing.padded_slots(sequences, 8)


@pytest.fixture(scope="module")
def tiny_model():
    from coursekit.real_model import language_model

    lm = language_model.load("tiny", torch.device("cpu"), seed=0, max_positions=64)
    return lm.model.double()


SHORT = [list(d) for d in course_documents(64) if len(d) <= 16][:6]  # 4 fit in a row


def test_the_packed_window_s_gradient_is_the_padded_one_and_ignored_boundaries_are_not(
    tiny_model,
):
    gradients, counts, slots = packing.window_gradients(
        tiny_model, SHORT, 64, 0, packing.pack_documents, micro=2
    )
    padded = gradients["padded"]
    assert counts["predicted"] == sum(len(d) - 1 for d in SHORT) == counts["window_tokens"][0]
    assert (gradients["packed"] - padded).norm() <= 1e-12 * padded.norm()
    assert (gradients["boundaries ignored"] - padded).norm() > 1e-3 * padded.norm()
    assert slots["packed"] % 64 == 0


def test_a_packed_row_is_read_as_separate_documents_only_without_a_cache(tiny_model):
    """What module 8 says of transformers 5.25: position ids that restart mark the documents
    of a row, unless the model builds a cache (GPT-2 does by default, even in training).
    Measured on these four documents (11, 15, 8 and 11 tokens): 3e-16 without, 0.37 with."""
    row = packing.packed_tensors(packing.pack_documents(SHORT[:4], 64, 1, 0), slice(0, 1))
    alone = torch.cat([tiny_model(input_ids=torch.tensor([d])).logits[0] for d in SHORT[:4]])
    used = sum(len(d) for d in SHORT[:4])
    inputs = {"input_ids": row["input_ids"], "position_ids": row["position_ids"]}
    without_cache = tiny_model(**inputs, use_cache=False).logits[0, :used]
    with_cache = tiny_model(**inputs).logits[0, :used]
    assert (without_cache - alone).abs().max() <= 1e-12
    assert (with_cache - alone).abs().max() > 1e-3
