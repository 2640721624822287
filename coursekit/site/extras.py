"""The site's pages beside the modules: the pitfalls table, the FAQ, and what the
certificate page checks with (the issuer's public key and the revocation list).

All of it is read from the course's own material: ``docs/pitfalls.md`` (the table the tests
keep honest), the modules' quizzes (each question, its answer and why, as an FAQ), and the
files ``coursekit issuer-key`` and ``coursekit revoke`` publish in ``certificates/``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from coursekit import course
from coursekit.grading.records import revocation
from coursekit.grading.records.keys import (
    PUBLIC_KEY_FILE,
    KeyFileError,
    b64url,
    fingerprint,
    raw_public,
    read_verifying_key,
)
from coursekit.quizzes import QUIZZES
from coursekit.site.cells import markdown_html
from coursekit.site.module_page import _inline

PITFALLS = Path("docs") / "pitfalls.md"
_CELL_ID = re.compile(r"\bm(\d\d)-[0-9a-z]+\b")


def pitfalls_html(root: Path) -> str | None:
    """docs/pitfalls.md as HTML, each cell id a link to that cell on its module's page."""
    path = Path(root) / PITFALLS
    if not path.is_file():
        return None
    by_number = {module.name[:2]: module.name for module in course.MODULES}
    text = path.read_text(encoding="utf-8")
    table = text.find("\n| # |")  # the file's introduction is for the course's maintainers
    intro = (
        "Each mistake the course is built around: where a module teaches it, the cell that "
        "shows it happen (follow the link), and the names its checks give it when your code "
        "makes it.\n"
    )
    body = markdown_html(intro + text[table:] if table >= 0 else text)

    def link(match: re.Match) -> str:
        module = by_number.get(match[1])
        if module is None:
            return match[0]
        return f'<a href="{module}.html#{match[0]}">{match[0]}</a>'

    # Only in table cells' text: a cell id never appears inside a tag of this page.
    return re.sub(r">([^<]*)<", lambda m: ">" + _CELL_ID.sub(link, m[1]) + "<", body)


def faq_entries() -> list[dict]:
    """Every quiz question of the course with its answer and why, module by module."""
    entries = []
    for module in course.MODULES:
        quiz = QUIZZES.get(module.name)
        if quiz is None:
            continue
        for question in quiz.questions:
            entries.append(
                {
                    "module": module,
                    "question": _inline(question.prompt),
                    "answer": _inline(question.options[question.answer]),
                    "why": _inline(question.explanation),
                }
            )
    return entries


@dataclass(frozen=True)
class Published:
    """What the certificate page checks with, as the page embeds it."""

    key_b64url: str | None  # the raw Ed25519 public key
    fingerprint: str | None
    revoked: dict[str, dict]  # ID -> {"date", "reason"}
    where: str  # in words, for the build's report


def published(folder: Path | None) -> Published:
    """The issuer key and revocation list in ``folder`` (the course's ``certificates/``).

    A folder without a key gives a page that says no key is published; a damaged key or
    list is a ValueError naming the file, as ``coursekit verify`` would say.
    """
    if folder is None or not (Path(folder) / PUBLIC_KEY_FILE).is_file():
        return Published(None, None, {}, f"no {PUBLIC_KEY_FILE} in {folder}")
    key = read_verifying_key(Path(folder) / PUBLIC_KEY_FILE)
    if isinstance(key, bytes):
        raise KeyFileError(
            f"{Path(folder) / PUBLIC_KEY_FILE} holds the HMAC key of earlier certificates, "
            "which must never be published: publish the Ed25519 public key (coursekit issuer-key)."
        )
    listed = revocation.read(Path(folder) / revocation.REVOKED_FILE)
    return Published(
        b64url(raw_public(key)),
        fingerprint(key),
        {id_: {"date": e.date, "reason": e.reason} for id_, e in listed.items()},
        f"{Path(folder) / PUBLIC_KEY_FILE} and {len(listed)} revoked",
    )
