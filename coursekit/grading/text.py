"""Text from hand-ins, made safe to store, print and export, losing nothing.

File names that are not valid UTF-8 reach Python as lone surrogates (``'\\udcff'``), and a
hand-in can raise an exception whose message holds one (``ValueError('\\ud800')``). Such
strings cannot be encoded as UTF-8: SQLite, ``write_text`` and HTML pages fail on them.
:func:`lossless` writes each such character as its backslash escape (``\\udcff``), so every
byte is still there to read; :func:`for_terminal` also escapes control characters, so a file
name cannot move the cursor or colour the instructor's terminal. Notes are capped in length
and number: a hand-in must not be able to grow the gradebook or a feedback page at will.
"""

from __future__ import annotations

NOTE_CHARS = 500
MAX_NOTES = 40


def lossless(text: object) -> str:
    """``text`` as a string that encodes as UTF-8, lone surrogates written as escapes."""
    return str(text).encode("utf-8", "backslashreplace").decode("utf-8")


def lossless_tree(value):
    """A copy of plain data (the grader's own results) with every string made lossless."""
    if isinstance(value, str):
        return lossless(value)
    if isinstance(value, dict):
        return {lossless(k): lossless_tree(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [lossless_tree(v) for v in value]
    return value


def for_terminal(text: object) -> str:
    """:func:`lossless`, with control characters (newlines included) escaped too."""
    return "".join(
        ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii")
        for ch in lossless(text)
    )


def capped(text: object, limit: int = NOTE_CHARS) -> str:
    """At most ``limit`` characters of :func:`lossless` text, saying when it was cut."""
    text = lossless(text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def capped_notes(notes: list[str]) -> list[str]:
    """At most :data:`MAX_NOTES` notes of at most :data:`NOTE_CHARS` characters each."""
    kept = [capped(note) for note in notes[:MAX_NOTES]]
    if len(notes) > MAX_NOTES:
        kept.append(f"... and {len(notes) - MAX_NOTES} more notes like these.")
    return kept
