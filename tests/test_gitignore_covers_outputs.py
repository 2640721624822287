"""Every file the guide's and the README's commands write with students' names or scores in
it is one git ignores, so a `git add .` in an instructor's course commits none of them; and
what the guide says to commit (the published key, the revocation list) is not ignored.

The commands are read from the documents' code blocks and parsed by coursekit's own parser,
so a default (``--out``) counts as the command would use it, and a new command or output
name in the guide without an ignore pattern fails here."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from coursekit.commands.cli import parser
from coursekit.grading.records.exports import file_stem

REPO = Path(__file__).resolve().parents[1]
DOCUMENTS = ("docs/instructor-guide.md", "README.md")
#: The commands with every output left to its default, as an instructor may run them.
DEFAULTS = (
    ["grade", "hand-ins", "--assignment", "01_accumulation"],
    *(["export", "--format", fmt] for fmt in ("csv", "lms", "gradescope", "html")),
    ["report"],
    ["certificate", "ada"],
    ["gradescope", "--assignment", "01_accumulation"],
)
#: What the guide tells the instructor to commit: the course's published certificate files.
COMMITTED = ("certificates/issuer-public-key.pem", "certificates/revoked.json")

needs_git = pytest.mark.skipif(
    shutil.which("git") is None or not (REPO / ".git").exists(),
    reason="needs git and the course's git repository",
)


def documented_commands() -> list[list[str]]:
    """Each ``coursekit ...`` command line in the documents' fenced code blocks."""
    commands = []
    for name in DOCUMENTS:
        text = (REPO / name).read_text(encoding="utf-8")
        for block in re.findall(r"^```[a-z]*\n(.*?)^```", text, re.M | re.S):
            for line in block.replace("\\\n", " ").splitlines():
                if re.match(r"\s*(\S*/)?coursekit\s+[a-z][a-z-]*(\s|$)", line):  # not its output
                    commands.append(shlex.split(line, comments=True)[1:])
    return commands


def written(argv: list[str]) -> list[str]:
    """The files ``coursekit ARGV`` writes that hold students' names, scores or the reference
    solutions (a folder's files as one example file in it)."""
    args = parser().parse_args(argv)
    if args.command == "grade":
        return [args.gradebook]
    if args.command == "report":
        return [args.out]
    if args.command == "gradescope":
        return [args.out]  # the reference solution, which students must never see
    if args.command == "certificate":
        page = Path(args.out or f"certificate-{file_stem(args.student)}.html")
        return [str(page.with_suffix(suffix)) for suffix in (".html", ".jwt", ".png")]
    if args.command == "export":
        out = Path(args.out)
        if args.format in ("csv", "lms"):
            default = "grades.csv" if args.format == "csv" else "grades-lms.csv"
            return [str(out if out.suffix == ".csv" else out / default)]
        return [
            str(
                out
                / ("ada_01_accumulation" + (".json" if args.format == "gradescope" else ".html"))
            )
        ]
    return []


def _ignored(paths: list[str]) -> set[str]:
    done = subprocess.run(
        ["git", "-C", str(REPO), "check-ignore", "--no-index", "--stdin"],
        input="".join(f"{path}\n" for path in paths),
        capture_output=True,
        text=True,
    )
    assert done.returncode in (0, 1), done.stderr  # 1: none of them is ignored
    return set(done.stdout.splitlines())


def test_the_documents_show_the_commands_that_write_student_data():
    commands = {argv[0] for argv in documented_commands()}
    assert {"grade", "export", "report", "certificate", "gradescope"} <= commands


@needs_git
def test_every_documented_output_with_student_data_is_ignored():
    commands = [*documented_commands(), *DEFAULTS]
    outputs = sorted({path for argv in commands for path in written(argv)})
    assert "report.html" in outputs and "lms-01.csv" in outputs  # the walk's two
    assert sorted(set(outputs) - _ignored(outputs)) == []


@needs_git
def test_the_published_certificate_files_are_not_ignored():
    assert _ignored(list(COMMITTED)) == set()
