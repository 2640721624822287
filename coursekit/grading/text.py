"""Text from hand-ins, made safe to store, print and export, losing nothing.

File names that are not valid UTF-8 reach Python as lone surrogates (``'\\udcff'``), and a
hand-in can raise an exception whose message holds one (``ValueError('\\ud800')``). Such
strings cannot be encoded as UTF-8: SQLite, ``write_text`` and HTML pages fail on them.
:func:`lossless` writes each such character as its backslash escape (``\\udcff``), so every
byte is still there to read; :func:`for_terminal` also escapes control characters, so a file
name cannot move the cursor or colour the instructor's terminal, and bidirectional controls
and invisible characters (U+202E, U+200B, U+FEFF...), so a name shows as what it is. Exports
write names the same way (:func:`visible`), and free text with :func:`text_for_page`; what is
stored (the gradebook's key for a student) is never changed. Notes are capped in length
and number: a hand-in must not be able to grow the gradebook or a feedback page at will.
"""

from __future__ import annotations

import builtins
import re
import unicodedata

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


# Characters that show nothing, or reorder what follows them, yet are not control characters:
# bidirectional controls (a name with U+202E shows its end backwards), zero-width and other
# invisible characters (two names that look the same, a BOM), and fillers that are letters
# but show as nothing. Python's ``str.isprintable`` already refuses most of them; this list
# makes sure of it whatever the Unicode version.
INVISIBLE = frozenset(
    "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"  # bidi
    "\u200b\u200c\u200d\u2060\u2061\u2062\u2063\u2064\ufeff\u180e\u00ad"  # zero-width
    "\u034f\u115f\u1160\u3164\uffa0"  # combining grapheme joiner, Hangul fillers
)


def _escaped(text: object, whitespace: bool) -> str:
    """:func:`lossless` text with each character that would not show as itself written as its
    backslash escape; ``whitespace`` keeps newlines, tabs and every kind of space."""

    def shows(ch: str) -> bool:
        if ch in INVISIBLE:
            return False
        if ch.isprintable():
            return True
        return whitespace and (ch in "\n\t" or unicodedata.category(ch) == "Zs")

    return "".join(
        ch if shows(ch) else ch.encode("unicode_escape").decode("ascii") for ch in lossless(text)
    )


def visible(text: object) -> str:
    """:func:`lossless`, with every character that does not show as itself written as its
    backslash escape: control characters (C0, DEL, C1: ``\\r``, ``\\x1b``, ``\\x85``),
    bidirectional controls and invisible characters (``\\u202e``, ``\\u200b``, ``\\ufeff``),
    separators other than the space. Letters of any script (José, 李) are kept. What a name
    is written as, on the terminal and in every export."""
    return _escaped(text, whitespace=False)


def for_terminal(text: object) -> str:
    """:func:`visible`: control characters (newlines included), bidirectional controls and
    invisible characters escaped, so the text is one line that shows as it is. Every name,
    file name, feedback line and note the command line prints goes through it."""
    return visible(text)


def for_terminal_lines(text: object) -> str:
    """:func:`for_terminal` of each line of a message of several lines, kept as lines."""
    return "\n".join(for_terminal(line) for line in lossless(text).split("\n"))


def text_for_page(text: object) -> str:
    """Free text (feedback, notes, errors) for a page or an export: :func:`visible`, but
    newlines, tabs and spaces of every kind are kept (they show, as blanks)."""
    return _escaped(text, whitespace=True)


def shown_differently(name: object) -> bool:
    """Does :func:`for_terminal` write this name otherwise than it is stored?"""
    return for_terminal(name) != lossless(name)


def look_alikes(names) -> list[list[str]]:
    """Groups of different names that are written the same once escaped (a name with an
    invisible character and one that spells its escape out, ``a\\u200bb``), each sorted."""
    by_shown: dict[str, set[str]] = {}
    for name in names:
        by_shown.setdefault(for_terminal(name), set()).add(lossless(name))
    return sorted(sorted(same) for same in by_shown.values() if len(same) > 1)


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


_RAISED = re.compile(r"Your function raised ([A-Za-z_]\w{0,59}):")
#: Exception classes whose names may be shown: a class name is the hand-in's own text too
#: (``type(f"E{secret}", (Exception,), {})``), so only names Python or torch define pass.
_KNOWN_ERRORS = frozenset(
    name
    for name, value in vars(builtins).items()
    if isinstance(value, type) and issubclass(value, BaseException)
) | {"OutOfMemoryError", "ParameterError"}


def error_feedback(message: object, hidden: bool, chars: int = 300) -> str:
    """The feedback for a test on which the student's code raised, from the message the
    hand-in's process sent (``registry.error_message``: type, text, line of their code).

    That message is the hand-in's own text, and on a hidden test its exception could quote
    the test's inputs (``raise ValueError(repr(batch))``, or torch's shapes of them): there
    the exception's text is never shown, nor the line number (the whole message, suffix
    included, is the hand-in's to write, so a number there could carry the inputs too); only
    its class's name, where Python or torch defines that name, is kept. On a public test
    (inputs the notebook shows anyway) the first line is kept, cut to ``chars`` characters,
    with the line of the student's code where it was raised."""
    text = lossless(message)
    if not hidden:
        first = text.splitlines()[0] if text.strip() else "Your function raised an error."
        return first if len(first) <= chars else first[:chars] + "..."
    raised = _RAISED.match(text)
    if raised and raised.group(1) in _KNOWN_ERRORS:
        what = f"Your function raised {raised.group(1)}"
    else:
        what = "Your function raised an error"
    return (
        f"{what} on a hidden test. Its message and line are not shown, since they could hold "
        "the hidden test's inputs; run your function on inputs of your own like the public "
        "tests'."
    )
