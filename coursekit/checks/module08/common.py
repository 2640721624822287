"""What module 8's question shares with its specs: the notebook, and real documents (the
course's own text, tokenized by the tokenizer the course ships), read once per length."""

from __future__ import annotations

from functools import lru_cache

MODULE = "08_fitting_one_gpu"


@lru_cache(maxsize=1)
def _paragraphs() -> tuple[tuple[int, ...], ...]:
    """Each paragraph of the course's text, tokenized, with its end-of-text token."""
    from coursekit.real_model import language_model

    tokenizer = language_model.course_tokenizer()
    text = language_model.course_text()
    return tuple(
        (*tokenizer(paragraph.strip())["input_ids"], tokenizer.eos_token_id)
        for paragraph in text.split("\n\n")
    )


@lru_cache(maxsize=8)
def course_documents(seq_len: int) -> tuple[tuple[int, ...], ...]:
    """The course's text as documents of at most ``seq_len`` tokens, as module 7 trains on
    them (``language_model.sequences``: each paragraph cut into pieces of ``seq_len``,
    pieces under 8 tokens dropped), with the text tokenized once for every length."""
    return tuple(
        piece
        for ids in _paragraphs()
        for start in range(0, len(ids), seq_len)
        if len(piece := ids[start : start + seq_len]) >= 8
    )


END_OF_TEXT = 0  # the course tokenizer's end-of-text id, which is also its padding id
