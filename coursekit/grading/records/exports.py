"""Grades out of the gradebook: CSVs (every grade, or one for an LMS), Gradescope results, pages.

Every text a hand-in could shape (its student's name from a file name, notes, feedback) is
written losslessly (:mod:`coursekit.grading.text`), and each student's files get a name no
other student's can have (:func:`file_stem`), so no page or results file is overwritten.
A name is written as the terminal shows it (:func:`~coursekit.grading.text.visible`): control
characters, bidirectional controls (U+202E) and invisible characters (U+200B, U+FEFF) as
escapes (``\\u202e``), so no name shows as another or turns a row backwards; free text
(feedback, notes, errors) likewise, keeping its lines (``text_for_page``). The gradebook
keeps each name as it is: only what is written changes. :func:`escaped_names` says which
names were escaped (``coursekit export`` names them, and names that would read the same).

A grade the grader failed on (``grade.not_graded``: no score) is never written as a number:
the CSV leaves its score empty and says why, the feedback page says it is not graded yet, and
no Gradescope results file is written for it (:func:`write_gradescope` names what it left out).
"""

from __future__ import annotations

import csv
import hashlib
import html
import json
import re
from pathlib import Path

from coursekit.grading.text import for_terminal, look_alikes, lossless, text_for_page, visible


def file_stem(student: str) -> str:
    """A file name for a student's exports, different for every different name.

    Plain lower-case names stay as they are (``ada``); any other name (capitals, which
    case-insensitive file systems fold, characters that are not safe, a trailing dot, or an
    ending that looks like such a hash) gets a short hash of the exact name: ``ada.`` and
    ``ada`` export to different files, and so do ``Ada`` and ``ada-<the hash of Ada>``.
    """
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", student).strip("._")[:80] or "student"
    if safe != student or safe.lower() != safe or _HASHED.search(safe):
        digest = hashlib.sha256(student.encode("utf-8", "surrogatepass")).hexdigest()[:10]
        safe = f"{safe}-{digest}"
    return safe


_HASHED = re.compile(r"-[0-9a-f]{10}$")


def export_name(grade, suffix: str) -> str:
    return f"{file_stem(grade.student)}_{grade.assignment}{suffix}"


def clashes(grades: list, suffix: str) -> list[tuple[str, str]]:
    """(what, file name folded) for grades that would be written to one file: it cannot
    happen with :func:`file_stem` short of a hash collision, but exports check rather than
    overwrite."""
    by_name: dict[str, list] = {}
    for grade in grades:
        by_name.setdefault(export_name(grade, suffix).casefold(), []).append(grade)
    return [
        (f"{', '.join(_quoted(g.student) for g in same)} would all be {name}", name)
        for name, same in by_name.items()
        if len(same) > 1
    ]


def _quoted(name: str) -> str:
    return f"'{for_terminal(name)}'"


def not_graded_names(grades) -> list[str]:
    """The students (escaped, as written) whose current hand-in the grader failed on: they
    have no score, and exports write none for them."""
    return sorted({visible(g.student) for g in grades if _not_graded(g)})


def escaped_names(names) -> list[str]:
    """The names (as written, escaped) that an export writes otherwise than they are stored,
    each once, sorted: those with a control, bidirectional or invisible character."""
    shown = {visible(name) for name in names if visible(name) != lossless(name)}
    return sorted(shown)


def name_warnings(names, look_alike_consequence: str) -> tuple[list[str], list[list[str]]]:
    """(lines to show the instructor, groups of look-alike names as stored) for an export of
    ``names``: one line naming every name written escaped, and one per group of different
    students whose names read the same once escaped (each with its :func:`file_stem`, which
    tells them apart), ending with ``look_alike_consequence``."""
    names = list(names)
    lines = []
    escaped = escaped_names(names)
    if escaped:
        lines.append(
            f"{len(escaped)} student name(s) hold control, bidirectional or invisible "
            f"characters, written escaped, as here: {', '.join(_quoted(n) for n in escaped)}. "
            "The gradebook keeps each name as it is."
        )
    groups = look_alikes(names)
    for group in groups:
        lines.append(
            f"{' and '.join(f'{_quoted(n)} (files {file_stem(n)}_*)' for n in group)} are "
            f"different students whose names read the same once escaped; "
            f"{look_alike_consequence}"
        )
    return lines, groups


def _cell(value) -> str | float:
    """Text a spreadsheet will not run as a formula (a student picks their file's name)."""
    if isinstance(value, str) and value[:1] in ("=", "+", "-", "@", "\t", "\r"):
        return "'" + value
    return value


#: How the grader begins each flag for review among a hand-in's notes (grader.grade_path).
FLAG_PREFIX = "Flagged for review: "
#: Between two reasons in one cell of ``grades.csv``'s ``flag`` column.
FLAG_SEPARATOR = " | "
#: ``grades.csv``'s columns. New ones go at the end: an import mapped by position still reads
#: the old ones where they were.
CSV_HEADER = (
    "student", "assignment", "score", "max_score", "percent", "graded_at", "error", "flag"
)  # fmt: skip


def review_flags(notes) -> list[str]:
    """Why a hand-in was flagged for review: each of its notes that is a flag (the grader
    begins those with :data:`FLAG_PREFIX`), without that prefix, as lossless text."""
    flags = (lossless(note) for note in notes or ())
    return [note[len(FLAG_PREFIX) :] for note in flags if note.startswith(FLAG_PREFIX)]


def write_csv(grades: list, path: Path) -> Path:
    """One row per student and assignment: the current grade, and in ``flag`` why it was
    flagged for review (empty when it was not)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(CSV_HEADER)
        for g in grades:
            flag = FLAG_SEPARATOR.join(
                review_flags((getattr(g, "result", None) or {}).get("notes"))
            )
            if _not_graded(g):  # no score: empty cells, never a 0
                row = [visible(g.student), g.assignment, None, points(g.max_score), None]
                row += [g.graded_at, g.error, flag]
                writer.writerow([_cell(_text(v)) if v is not None else "" for v in row])
                continue
            percent = round(100 * g.score / g.max_score, 1) if g.max_score else 0.0
            row = [
                visible(g.student),
                g.assignment,
                points(g.score),
                points(g.max_score),
                percent,
                g.graded_at,
                g.error,
                flag,
            ]
            writer.writerow([_cell(_text(value)) if value is not None else "" for value in row])
    return path


def _not_graded(grade) -> bool:
    """Whether the grader failed on this grade's hand-in: it has no score."""
    return bool(getattr(grade, "not_graded", None)) or grade.score is None


def _text(value):
    return text_for_page(value) if isinstance(value, str) else value


LMS_HEADER = ("student", "score", "out of")


def write_lms_csv(rows: list[tuple[str, float, float]], path: Path) -> Path:
    """A CSV for a learning-management system's grade import: ``student, score, out of``.

    One row per ``(student, score, out of)``, UTF-8 without a byte-order mark, a header row.
    Moodle's CSV import reads it once ``student`` is mapped to a user field and ``score`` to a
    grade item; Canvas's import wants the columns of its own gradebook export, so there the
    scores are copied into that file (docs/instructor-guide.md, section 5). ``out of`` is there
    to check the grade item's maximum. Whole numbers are written without a trailing ``.0``.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(LMS_HEADER)
        for student, score, out_of in rows:
            writer.writerow([_cell(visible(student)), points(score), points(out_of)])
    return path


#: Decimals of every score an export shows; the gradebook keeps the grader's own values.
SHOWN_DECIMALS = 2


def points(value: float) -> str:
    """A score as an instructor (and an importer) reads it: ``8`` not ``8.0``, at most
    :data:`SHOWN_DECIMALS` decimals (``7.43`` for 7.428571)."""
    text = f"{float(value):.{SHOWN_DECIMALS}f}".rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


def shown(value: float) -> float:
    """A score rounded as :func:`points` writes it, as a number (for JSON exports)."""
    return float(points(value))


def gradescope_results(grade) -> dict:
    """Gradescope's autograder ``results.json`` for one hand-in (one that has a score: a
    hand-in the grader failed on has none to give, and raises ValueError)."""
    if _not_graded(grade):
        raise ValueError(f"{visible(grade.student)}'s hand-in is not graded: it has no score")
    tests = [
        {
            "name": q["name"],
            "score": shown(q["score"]),
            "max_score": shown(q["max_score"]),
            "output": text_for_page(q["feedback"]),
            "visibility": "visible",
        }
        for q in grade.result.get("questions", [])
    ]
    results = {"score": shown(grade.score), "tests": tests, "visibility": "visible"}
    if grade.error:
        results["output"] = text_for_page(grade.error)
    return results


def write_gradescope(grades: list, folder: Path) -> list[Path]:
    """One results file per graded hand-in; none for a hand-in the grader failed on (see
    :func:`not_graded_names`: the export says which were left out)."""
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for grade in grades:
        if _not_graded(grade):
            continue
        path = folder / export_name(grade, ".json")
        path.write_text(json.dumps(gradescope_results(grade), indent=2), encoding="utf-8")
        written.append(path)
    return written


PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<title>Feedback: {assignment}, {student}</title>
<style>
body {{ font-family: system-ui, sans-serif; max-width: 46rem; margin: 2rem auto; padding: 0 1rem;
       color: #222; line-height: 1.5; }}
.score {{ font-size: 1.6rem; font-weight: 600; }}
.question {{ border: 1px solid #ddd; border-radius: 6px; padding: .6rem 1rem; margin: .8rem 0; }}
.full {{ border-left: 6px solid #2e7d32; }} .partial {{ border-left: 6px solid #ef6c00; }}
.zero {{ border-left: 6px solid #c62828; }}
.error {{ background: #fdecea; padding: .6rem 1rem; border-radius: 6px; }}
.notes {{ color: #555; font-size: .92rem; }}
</style></head><body>
<h1>{assignment}</h1>
<p>Feedback for <b>{student}</b>, graded {graded_at}.</p>
<p class="score">{score}{max_score}</p>
{error}
{questions}
{notes}
</body></html>
"""


def feedback_page(grade) -> str:
    """A page a student can read: the score, each question's feedback, notes on the hand-in."""

    def esc(value) -> str:
        return html.escape(text_for_page(value))

    questions = "\n".join(
        f'<div class="question {_standing(q["score"], q["max_score"])}">'
        f"<h2>{esc(q['name'])}: {points(q['score'])} / {points(q['max_score'])}</h2>"
        f"<p>{esc(q['feedback'])}</p></div>"
        for q in grade.result.get("questions", [])
    )
    notes = grade.result.get("notes") or []
    notes_html = (
        '<div class="notes"><h2>About your hand-in</h2><p>These cost no points; they '
        "may explain a failing test.</p><ul>"
        + "".join(f"<li>{esc(n)}</li>" for n in notes)
        + "</ul></div>"
        if notes
        else ""
    )
    error = f'<p class="error">{esc(grade.error)}</p>' if grade.error else ""
    if _not_graded(grade):
        score, max_score = "Not graded yet", ""
    else:
        score, max_score = f"{points(grade.score)} / ", f"{points(grade.max_score)} points"
    return PAGE.format(
        assignment=esc(grade.assignment),
        student=html.escape(visible(grade.student)),
        graded_at=esc(grade.graded_at),
        score=score,
        max_score=max_score,
        error=error,
        questions=questions,
        notes=notes_html,
    )


def _standing(score: float, max_score: float) -> str:
    """The page's style for a question's score: full marks, none, or partial credit."""
    if score >= max_score:
        return "full"
    return "zero" if score <= 0 else "partial"


def write_feedback(grades: list, folder: Path) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for grade in grades:
        path = folder / export_name(grade, ".html")
        path.write_text(feedback_page(grade), encoding="utf-8")
        written.append(path)
    return written
