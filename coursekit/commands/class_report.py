"""The class report: one page, for the instructor, of how the whole class did on an assignment.

A grader gives each student a grade; in the break of a workshop the instructor needs the
class-level picture instead: how each question's scores spread, which named mistakes many
students made (and who), which hand-ins a person should read (flagged for review, cells
that failed or timed out), and what to explain again first. Everything comes from the
gradebook alone (each student's newest grading of their newest hand-in, as exports use), so
the report can be written on any machine that has the gradebook file.

The page is one self-contained HTML file: the figures are PNGs inside it as ``data:`` URIs,
it loads nothing from anywhere, and every text that a hand-in could shape (a student's name
from a file name, feedback quoting a hand-in's error, notes) is HTML-escaped, with control,
bidirectional and invisible characters written as escapes (``\\u202e``), names as on the
terminal (:func:`coursekit.grading.text.visible`). ``coursekit report`` names the students
whose names were escaped (:func:`students_of`).

Example::

    from coursekit.commands.class_report import write_report
    write_report(Path("gradebook.sqlite"), Path("report.html"), "01_accumulation")
"""

from __future__ import annotations

import base64
import html
import io
import re
import statistics
from dataclasses import dataclass
from pathlib import Path

from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from coursekit.grading.records.exports import points
from coursekit.grading.records.gradebook import Grade, Gradebook
from coursekit.grading.text import lossless, text_for_page, visible

#: How many questions "what to re-explain first" lists, and mistakes under each.
REEXPLAIN_QUESTIONS = 3
MISTAKES_PER_QUESTION = 2
DESCRIPTION_CHARS = 240

REEXPLAIN_RULE = (
    "Questions are ranked by the class's mean score as a fraction of the question's points, "
    "lowest first (a tie goes to the question more students lost points on); only questions "
    "someone lost points on are listed, each with its most common named mistakes."
)

# The grader's notes (coursekit.grading.grader): flags start with this; cell notes name a cell.
FLAG_PREFIX = "Flagged for review: "
_CELL_NOTE = re.compile(r"^Cell \d+ (raised|took too long|was skipped)")
_CELL_KIND = {"raised": "failed", "took too long": "timed out", "was skipped": "skipped"}
_TESTS_PASS = re.compile(r"^\d+ of \d+ tests pass\. ")


@dataclass(frozen=True)
class QuestionScores:
    """Every student's score on one question."""

    name: str
    max_score: float
    scores: tuple[float, ...]

    @property
    def mean_fraction(self) -> float:
        """The class's mean score as a fraction of the question's points (0 to 1)."""
        if not self.scores or not self.max_score:
            return 0.0
        return statistics.fmean(self.scores) / self.max_score

    @property
    def below_full(self) -> int:
        """How many students lost points on this question."""
        return sum(score < self.max_score for score in self.scores)


@dataclass(frozen=True)
class Mistake:
    """A named mistake on one question, the students who made it, and what their feedback said."""

    name: str
    question: str
    students: tuple[str, ...]
    description: str

    @property
    def count(self) -> int:
        return len(self.students)


@dataclass(frozen=True)
class HandInNote:
    """One thing about one hand-in that a person should look at."""

    student: str
    kind: str  # "flagged", "not graded", or a cell that "failed", "timed out" or was "skipped"
    text: str


@dataclass(frozen=True)
class Priority:
    """One line of "what to re-explain first": a question and its top mistakes."""

    question: QuestionScores
    mistakes: tuple[Mistake, ...]


@dataclass(frozen=True)
class AssignmentSummary:
    """The class-level picture of one assignment."""

    assignment: str
    totals: dict[str, float]  # student -> total score, of graded hand-ins only
    max_score: float
    questions: tuple[QuestionScores, ...]  # scores of graded hand-ins only
    mistakes: tuple[Mistake, ...]  # most students first
    flagged: tuple[HandInNote, ...]
    cell_problems: tuple[HandInNote, ...]
    #: Students whose hand-in was not graded (its grading holds an error, and zeros that
    #: are no score): listed under "flagged", left out of every number.
    not_graded: tuple[str, ...] = ()

    @property
    def class_size(self) -> int:
        return len(self.totals) + len(self.not_graded)

    @property
    def mean_total(self) -> float | None:
        """The mean total of the graded hand-ins; None where none was graded."""
        return statistics.fmean(self.totals.values()) if self.totals else None

    @property
    def median_total(self) -> float | None:
        """The median total of the graded hand-ins; None where none was graded."""
        return statistics.median(self.totals.values()) if self.totals else None

    def reexplain_first(self) -> list[Priority]:
        """The questions to explain again first, by :data:`REEXPLAIN_RULE`."""
        struggled = [q for q in self.questions if q.below_full]
        struggled.sort(key=lambda q: (q.mean_fraction, -q.below_full))
        return [
            Priority(
                q, tuple(m for m in self.mistakes if m.question == q.name)[:MISTAKES_PER_QUESTION]
            )
            for q in struggled[:REEXPLAIN_QUESTIONS]
        ]


def summarise(assignment: str, grades: list[Grade]) -> AssignmentSummary:
    """The summary of ``grades`` (one per student, all of ``assignment``)."""
    names: list[str] = []  # the questions, in the order the grader graded them
    max_scores: dict[str, float] = {}
    scores: dict[str, list[float]] = {}
    made: dict[tuple[str, str], list[tuple[str, dict]]] = {}  # (question, mistake) -> made by
    flagged: list[HandInNote] = []
    cell_problems: list[HandInNote] = []
    not_graded: list[str] = []
    for grade in grades:
        student = lossless(grade.student)
        if grade.error:  # its questions hold zeros the grader wrote for "not graded"
            not_graded.append(student)
        for question in [] if grade.error else grade.result.get("questions", []):
            name = question["name"]
            if name not in max_scores:
                names.append(name)
                max_scores[name] = float(question["max_score"])
            scores.setdefault(name, []).append(float(question["score"]))
            for mistake in question.get("mistakes", []):
                made.setdefault((name, mistake), []).append((student, question))
        if grade.error:
            flagged.append(HandInNote(student, "not graded", lossless(grade.error)))
        for note in grade.result.get("notes") or []:
            note = lossless(note)
            if note.startswith(FLAG_PREFIX):
                flagged.append(HandInNote(student, "flagged", note[len(FLAG_PREFIX) :]))
            elif match := _CELL_NOTE.match(note):
                cell_problems.append(HandInNote(student, _CELL_KIND[match.group(1)], note))
    questions = tuple(QuestionScores(n, max_scores[n], tuple(scores[n])) for n in names)
    mistakes = [
        Mistake(mistake, question, tuple(sorted(s for s, _ in by)), _description(mistake, by))
        for (question, mistake), by in made.items()
    ]
    order = {name: index for index, name in enumerate(names)}
    mistakes.sort(key=lambda m: (-m.count, order[m.question], m.name))
    return AssignmentSummary(
        assignment=assignment,
        totals={lossless(g.student): float(g.score) for g in grades if not g.error},
        max_score=max((float(g.max_score) for g in grades), default=0.0),
        questions=questions,
        mistakes=tuple(mistakes),
        flagged=tuple(flagged),
        cell_problems=tuple(cell_problems),
        not_graded=tuple(not_graded),
    )


def _description(mistake: str, made_by: list[tuple[str, dict]]) -> str:
    """One instance's feedback, from a question where this was the only mistake if any was.

    A question's feedback quotes its first failing test, so it describes this mistake for
    sure only where the question named no other one.
    """
    alone = [(s, q) for s, q in made_by if list(q.get("mistakes", [])) == [mistake]]
    _, question = min(alone or made_by, key=lambda pair: pair[0])
    text = _TESTS_PASS.sub("", lossless(question.get("feedback", ""))).strip()
    text = " ".join(text.split())  # one line
    if len(text) <= DESCRIPTION_CHARS:
        return text
    cut = text.rfind(". ", 0, DESCRIPTION_CHARS)  # whole sentences where there is one to keep
    return text[: cut + 1] if cut > 0 else text[: DESCRIPTION_CHARS - 1] + "…"


def load_summaries(gradebook: Path, assignment: str | None) -> list[AssignmentSummary]:
    """One summary per assignment in the gradebook (or only ``assignment``).

    Raises:
        ValueError: the gradebook file is missing or empty, or holds no grades of
            ``assignment``; the message says what to do.
    """
    if not gradebook.is_file():
        raise ValueError(
            f"there is no gradebook at {gradebook}: grade the hand-ins first (`coursekit grade "
            "... --gradebook FILE`), or pass the gradebook you graded into with --gradebook."
        )
    with Gradebook(gradebook) as book:
        grades = book.current_grades()
    if not grades:
        raise ValueError(
            f"the gradebook {gradebook} holds no grades yet: grade some hand-ins into it with "
            "`coursekit grade`, then write the report."
        )
    by_assignment: dict[str, list[Grade]] = {}
    for grade in grades:
        by_assignment.setdefault(grade.assignment, []).append(grade)
    if assignment is not None and assignment not in by_assignment:
        raise ValueError(
            f"the gradebook {gradebook} holds no grades for the assignment {assignment!r}; it "
            f"holds {', '.join(sorted(by_assignment))}. Pass one of those to --assignment, or "
            "leave it out for all of them."
        )
    chosen = [assignment] if assignment is not None else sorted(by_assignment)
    return [summarise(name, by_assignment[name]) for name in chosen]


# The page.


def _figure_uri(figure: Figure) -> str:
    """A figure as a ``data:`` URI of a PNG, to put in the page itself."""
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=150)  # sharp at the page's 300 px
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def histogram_uri(scores: tuple[float, ...], max_score: float, xlabel: str) -> str:
    """A small histogram of scores from 0 to ``max_score``: how many students got each."""
    figure = Figure(figsize=(3.0, 1.85), layout="constrained")
    axes = figure.subplots()
    top = max_score or 1.0
    axes.hist(scores, bins=10, range=(0, top), color="#3f6fb5", edgecolor="white")
    axes.set_xlim(0, top)
    axes.set_xlabel(xlabel, fontsize=9)
    axes.set_ylabel("students", fontsize=9)
    axes.yaxis.set_major_locator(MaxNLocator(integer=True))
    axes.tick_params(labelsize=8)
    axes.spines[["top", "right"]].set_visible(False)
    return _figure_uri(figure)


STYLE = """
body { font-family: system-ui, sans-serif; max-width: 64rem; margin: 2rem auto; padding: 0 1rem;
       color: #222; line-height: 1.45; }
h1 { margin-bottom: .2rem; } h2 { border-bottom: 2px solid #3f6fb5; padding-bottom: .2rem; }
h3 { margin: 1.4rem 0 .4rem; }
.facts { font-size: 1.1rem; } .facts b { font-size: 1.3rem; }
.rule { color: #555; font-size: .92rem; }
.grid { display: flex; flex-wrap: wrap; gap: .8rem; }
.card { border: 1px solid #ddd; border-radius: 6px; padding: .5rem .7rem; width: 300px; }
.card h4 { margin: 0 0 .2rem; font-family: ui-monospace, monospace; font-size: .95rem; }
.card p { margin: .2rem 0 0; font-size: .88rem; color: #444; }
.card img { display: block; width: 300px; height: 185px; }
table { border-collapse: collapse; width: 100%; font-size: .92rem; }
th, td { text-align: left; vertical-align: top; padding: .35rem .5rem;
         border-bottom: 1px solid #e4e4e4; }
th { background: #f3f5f9; }
code { font-family: ui-monospace, monospace; font-size: .9em; }
.count { text-align: right; font-weight: 600; }
.none { color: #2e7d32; }
ol.first li { margin-bottom: .5rem; }
section.assignment { margin-bottom: 3rem; }
"""


def _esc(value: object) -> str:
    return html.escape(text_for_page(value))


def _name(student: str) -> str:
    return html.escape(visible(student))


def _plural(count: int) -> str:
    return "student" if count == 1 else "students"


def _students(names: tuple[str, ...] | list[str]) -> str:
    return ", ".join(_name(name) for name in names)


def _reexplain(summary: AssignmentSummary) -> str:
    priorities = summary.reexplain_first()
    if not priorities:
        if not summary.totals:
            return '<p class="none">No hand-in was graded.</p>'
        if summary.not_graded:
            return (
                '<p class="none">Every graded hand-in got full marks on every question '
                f"({len(summary.not_graded)} not graded, listed below).</p>"
            )
        return '<p class="none">Every student got full marks on every question.</p>'
    items = []
    for priority in priorities:
        q = priority.question
        mistakes = "; ".join(
            f"<code>{_esc(m.name)}</code> ({m.count}: {_students(m.students)})"
            for m in priority.mistakes
        )
        items.append(
            f"<li><code>{_esc(q.name)}</code>: mean {q.mean_fraction:.0%} of its points, "
            f"{q.below_full} of {len(q.scores)} students lost points. "
            + (f"Most common: {mistakes}." if mistakes else "No named mistake: read the feedback.")
            + "</li>"
        )
    return (
        f'<ol class="first">{"".join(items)}</ol>'
        f'<p class="rule">How this list is made: {_esc(REEXPLAIN_RULE)}</p>'
    )


def _distribution(summary: AssignmentSummary) -> str:
    if not summary.totals:
        return '<p class="rule">No hand-in was graded: there are no scores to show.</p>'
    cards = [
        '<div class="card"><h4>Total</h4>'
        f'<img alt="histogram of total scores" src="'
        f'{histogram_uri(tuple(summary.totals.values()), summary.max_score, "total score")}">'
        f"<p>out of {points(summary.max_score)}: mean {points(summary.mean_total)}, "
        f"median {points(summary.median_total)}</p></div>"
    ]
    for q in summary.questions:
        uri = histogram_uri(q.scores, q.max_score, f"score out of {points(q.max_score)}")
        full = len(q.scores) - q.below_full
        cards.append(
            f'<div class="card"><h4>{_esc(q.name)}</h4>'
            f'<img alt="histogram of scores on {_esc(q.name)}" src="{uri}">'
            f"<p>mean {points(statistics.fmean(q.scores))} of {points(q.max_score)} "
            f"({q.mean_fraction:.0%}); full marks: {full} of {len(q.scores)} "
            f"{_plural(len(q.scores))}</p></div>"
        )
    return f'<div class="grid">{"".join(cards)}</div>'


def _mistakes(summary: AssignmentSummary) -> str:
    if not summary.mistakes:
        return '<p class="none">No named mistake in this class.</p>'
    rows = "".join(
        f"<tr><td><code>{_esc(m.name)}</code></td><td><code>{_esc(m.question)}</code></td>"
        f'<td class="count">{m.count}</td><td>{_students(m.students)}</td>'
        f"<td>{_esc(m.description)}</td></tr>"
        for m in summary.mistakes
    )
    return (
        '<table><tr><th>mistake</th><th>question</th><th class="count">students</th><th>who</th>'
        f"<th>what the feedback said (one of them)</th></tr>{rows}</table>"
    )


def _notes_table(notes: tuple[HandInNote, ...], empty: str) -> str:
    if not notes:
        return f'<p class="none">{empty}</p>'
    rows = "".join(
        f"<tr><td>{_name(n.student)}</td><td>{_esc(n.kind)}</td><td>{_esc(n.text)}</td></tr>"
        for n in notes
    )
    return f"<table><tr><th>student</th><th>what</th><th>note</th></tr>{rows}</table>"


def _facts(summary: AssignmentSummary) -> str:
    """The class size, mean and median total, saying how many hand-ins were not graded."""
    size = f"<b>{summary.class_size}</b> {_plural(summary.class_size)}"
    missing = len(summary.not_graded)
    if not summary.totals:
        return f"{size} &middot; no hand-in was graded (see the list below)"
    counted = (
        f" &middot; <b>{missing}</b> not graded (listed below; left out of every number on "
        f"this page: the mean and median are of the {len(summary.totals)} graded)"
        if missing
        else ""
    )
    return (
        f"{size}{counted} &middot; mean total\n<b>{points(summary.mean_total)}</b> &middot; "
        f"median total <b>{points(summary.median_total)}</b>\n&middot; out of "
        f"{points(summary.max_score)}"
    )


def _every_cell_ran(summary: AssignmentSummary) -> str:
    """What to say where no cell failed or timed out, true of hand-ins that were not graded."""
    missing = len(summary.not_graded)
    if not missing:
        return "Every cell of every hand-in ran."
    graded = len(summary.totals)
    if not graded:
        return f"No hand-in was graded ({missing} listed above), so none is listed here."
    return (
        f"Every cell of the {graded} graded hand-in{'' if graded == 1 else 's'} ran; "
        f"{missing} hand-in{' was' if missing == 1 else 's were'} not graded (listed above)."
    )


def _section(summary: AssignmentSummary) -> str:
    name = _esc(summary.assignment)
    return f"""<section class="assignment" id="{name}">
<h2>{name}</h2>
<p class="facts">{_facts(summary)}</p>
<h3>What to re-explain first</h3>
{_reexplain(summary)}
<h3>Score distribution per question</h3>
{_distribution(summary)}
<h3>The most common named mistakes</h3>
{_mistakes(summary)}
<h3>Hand-ins flagged for review, or not graded</h3>
{_notes_table(summary.flagged, "None flagged.")}
<h3>Cells that failed or timed out</h3>
{_notes_table(summary.cell_problems, _every_cell_ran(summary))}
</section>"""


def render_report(summaries: list[AssignmentSummary]) -> str:
    """The whole page: one section per assignment."""
    which = summaries[0].assignment if len(summaries) == 1 else "all graded assignments"
    title = f"Class report: {_esc(which)}"
    sections = "\n".join(_section(summary) for summary in summaries)
    return (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">\n'
        f"<title>{title}</title>\n<style>{STYLE}</style></head><body>\n"
        "<h1>Class report</h1>\n"
        '<p class="rule">Each student\'s newest hand-in, as last graded. Names of mistakes are '
        "the ones the feedback gives the student.</p>\n"
        f"{sections}\n</body></html>\n"
    )


def students_of(gradebook: Path, assignment: str | None = None) -> list[str]:
    """Every student the report of ``assignment`` (or every graded one) counts, as the
    gradebook keeps their names, sorted (for the command to name those written escaped).

    Raises:
        ValueError: as :func:`load_summaries`.
    """
    summaries = load_summaries(gradebook, assignment)
    return sorted({name for s in summaries for name in (*s.totals, *s.not_graded)})


def write_report(gradebook: Path, out: Path, assignment: str | None = None) -> Path:
    """Write the class report of ``assignment`` (or every graded one) to ``out``.

    Raises:
        ValueError: as :func:`load_summaries`.
    """
    page = render_report(load_summaries(gradebook, assignment))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(page, encoding="utf-8")
    return out
