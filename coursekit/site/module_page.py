"""A module's page: its cells as the student's notebook has them, its quiz working on the
page, the "on this page" headings, reading time and the words for the search index."""

from __future__ import annotations

import html
import math
import re
from dataclasses import dataclass, field

from coursekit.quizzes import QUIZZES
from coursekit.quizzes.widget import Quiz
from coursekit.site.cells import Written, code_html, markdown_html, outputs_html
from coursekit.site.outputs import OutputCache, cell_keys
from coursekit.site.sources import ModuleSource

#: Words a reader reads in a minute, for "reading time" (technical text, a usual figure).
WORDS_PER_MINUTE = 200
#: The cell that shows a module's quiz widget in the notebook; the page shows it in HTML.
_QUIZ_CELL = re.compile(r"""coursekit\.quiz\(\s*["'](\w+)["']\s*\)\.show\(\)""")
_HEADING = re.compile(r'<h([23]) id="([^"]+)">(.*?)</h\1>', re.S)
_TAG = re.compile(r"<[^>]+>")
#: Tags that end a run of text (blocks); other tags (a highlighted code's <span>s) do not:
#: ``loss.backward()`` in a code cell is searched for as written, not as ``loss . backward ( )``.
_BLOCK_TAG = re.compile(
    r"</?(?:address|article|aside|blockquote|br|button|dd|details|div|dl|dt|figcaption|figure|"
    r"footer|form|h[1-6]|header|hr|img|li|main|nav|ol|p|pre|section|summary|table|td|th|tr|ul)"
    r"\b[^>]*>",
    re.I,
)
_SETUP_CELL = "coursekit-setup"


@dataclass(frozen=True)
class Heading:
    level: int
    anchor: str
    text: str


@dataclass
class ModulePage:
    """What the module's template needs, and what the search index takes from it."""

    body: str
    headings: list[Heading]
    reading_minutes: int
    sections: list[dict] = field(default_factory=list)  # {"anchor", "heading", "text"}
    missing_outputs: int = 0


def plain_text(fragment: str) -> str:
    """The words of an HTML fragment, as a reader sees them (for search and headings)."""
    text = _TAG.sub("", _BLOCK_TAG.sub(" ", fragment))
    return " ".join(html.unescape(text).replace("\u00b6", " ").split())


def _inline(text: str) -> str:
    """Quiz text: escaped, with `code` spans kept as code."""
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", html.escape(text))


def quiz_html(name: str, quiz: Quiz) -> str:
    """The quiz as the notebook's widget asks it: choose an option, see right or wrong and why."""
    parts = [f'<section class="quiz" id="quiz-{name}"><h3 id="quiz">{html.escape(quiz.title)}</h3>']
    for number, question in enumerate(quiz.questions, start=1):
        options = "".join(
            f'<li><button type="button" class="quiz-option" data-option="{index}">'
            f"{_inline(option)}</button></li>"
            for index, option in enumerate(question.options)
        )
        parts.append(
            f'<div class="quiz-question" data-answer="{question.answer}">'
            f'<p class="prompt"><b>{number}.</b> {_inline(question.prompt)}</p>'
            f'<ol class="options">{options}</ol>'
            '<p class="verdict" hidden></p>'
            f'<p class="explanation" hidden>{_inline(question.explanation)}</p></div>'
        )
    parts.append("</section>")
    return "".join(parts)


def module_page(source: ModuleSource, cache: OutputCache, written: Written) -> ModulePage:
    """The page body of one module: every cell but the set-up cell (a notebook's business,
    not a reader's), with the cached outputs of its code cells."""
    keys = cell_keys(source.name, source.exercise)
    blocks, words, missing = [], 0, 0
    quiz_shown = False
    for index, cell in enumerate(source.exercise.cells):
        anchor = html.escape(str(cell.get("id", f"cell-{index}")))
        if cell.cell_type == "markdown":
            blocks.append(
                f'<div class="cell markdown" id="{anchor}">{markdown_html(cell.source)}</div>'
            )
            words += len(cell.source.split())
            continue
        if cell.cell_type != "code" or cell.get("id") == _SETUP_CELL:
            continue
        quiz = _QUIZ_CELL.search(cell.source)
        if quiz and quiz[1] in QUIZZES:
            blocks.append(quiz_html(quiz[1], QUIZZES[quiz[1]]))
            quiz_shown = True
            continue
        tags = cell.metadata.get("tags", [])
        outputs = cache.get(keys[index])
        missing += outputs is None and "demo" in tags
        rendered = outputs_html(outputs, demo="demo" in tags, written=written)
        kind = "exercise" if cell.source.lstrip().startswith("# Question:") else "code"
        blocks.append(
            f'<div class="cell {kind}" id="{anchor}">{code_html(cell.source)}'
            f'<div class="outputs">{rendered}</div></div>'
        )
        words += len(cell.source.split())
    if not quiz_shown and source.name in QUIZZES:
        blocks.append(quiz_html(source.name, QUIZZES[source.name]))
    body = "\n".join(blocks)
    headings = [
        Heading(int(level), anchor, plain_text(text))
        for level, anchor, text in _HEADING.findall(body)
    ]
    return ModulePage(
        body=body,
        headings=headings,
        reading_minutes=max(1, math.ceil(words / WORDS_PER_MINUTE)),
        sections=_sections(body),
        missing_outputs=missing,
    )


def _sections(body: str) -> list[dict]:
    """The page cut at its headings, as plain text, for the search index."""
    sections, start, current = [], 0, ("", "")
    for match in _HEADING.finditer(body):
        sections.append((current, body[start : match.start()]))
        current, start = (match[2], plain_text(match[3])), match.end()
    sections.append((current, body[start:]))
    return [
        {"anchor": anchor, "heading": heading, "text": plain_text(fragment)}
        for (anchor, heading), fragment in sections
        if plain_text(fragment) or heading
    ]
