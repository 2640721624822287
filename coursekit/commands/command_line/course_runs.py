"""What the course commands run: doctor, build, student-copy, submit, links and start.

Each takes the parsed options and returns the exit status; the command modules are imported
when their command runs, so one command never loads another's dependencies. Whatever a
command prints that a file or a person named goes through :func:`shown`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from coursekit.commands.command_line.course_root import course_root


def shown(text: object) -> str:
    """``text`` as the terminal should show it: each line escaped
    (:func:`coursekit.grading.text.for_terminal`), so no name, file name, feedback line or
    note a command prints can move the cursor, colour the terminal or reorder a line."""
    from coursekit.grading.text import for_terminal_lines

    return for_terminal_lines(text)


def doctor(args: argparse.Namespace) -> int:
    from coursekit.commands.doctor import diagnose

    report = diagnose()
    print(report.render())
    return 0 if report.ok else 1


def build(args: argparse.Namespace) -> int:
    from coursekit.authoring import MarkupError
    from coursekit.authoring import build as build_course
    from coursekit.authoring.publication import from_course, resolve

    root = course_root(args.root)
    publication = from_course() if args.repository_from == "course" else resolve(root)
    print(f"Repository: {publication.repository} (from {shown(publication.came_from)}).")
    conflict = publication.placeholder_conflict()
    if conflict and not args.check:
        print(f"Note: {shown(conflict)}", file=sys.stderr)
    try:
        changes = build_course(root, check=args.check, publication=publication)
    except (MarkupError, FileNotFoundError, ValueError) as error:
        print(f"coursekit build: {shown(error)}", file=sys.stderr)
        return 2
    names = [shown(path.relative_to(root)) for path in changes]
    if args.check:
        if names:
            print("Out of date; run `coursekit build` to regenerate:", file=sys.stderr)
            for name in names:
                print(f"  {name}", file=sys.stderr)
            return 1
        print(
            "exercises/, solutions/, the README table, the released demo cells' record and "
            "binder/requirements.txt match notebooks/ and coursekit/course.py."
        )
        return 0
    print("\n".join(f"wrote {name}" for name in names) or "Everything was up to date.")
    return 0


def student_copy(args: argparse.Namespace) -> int:
    from coursekit.authoring.student_copy import StudentCopyError, make_student_copy

    root = course_root(args.root)
    try:
        written = make_student_copy(root, Path(args.destination))
    except StudentCopyError as error:
        print(f"coursekit student-copy: {shown(error)}", file=sys.stderr)
        return 2
    print(
        f"wrote a student copy to {shown(Path(args.destination).resolve())}: "
        + ", ".join(shown(p.relative_to(Path(args.destination).resolve())) for p in written)
        + ". No solutions/ and no notebooks/: publish this folder, not the course."
    )
    return 0


def submit(args: argparse.Namespace) -> int:
    from coursekit.grading.submission import SubmissionError, describe, pack

    try:
        packed = pack(args.notebook, args.student, args.out)
    except SubmissionError as error:
        print(f"coursekit submit: {shown(error)}", file=sys.stderr)
        return 2
    print(shown(describe(packed)))
    return 0


def links(args: argparse.Namespace) -> int:
    from coursekit.commands.hub_links import course_source, labelled_links, placeholder_warning

    try:
        source = course_source(repository=args.repository, branch=args.branch)
        lines = labelled_links(args.hub, source)
    except ValueError as error:
        print(f"coursekit links: {shown(error)}", file=sys.stderr)
        return 2
    warning = None if args.repository is not None else placeholder_warning()
    if warning:
        print(f"coursekit links: warning: {warning}", file=sys.stderr)
    print(f"coursekit links: {shown(source.describe())}.", file=sys.stderr)
    print("\n".join(lines))
    return 0


def start(args: argparse.Namespace) -> int:
    from coursekit.commands.launch import start_lab

    root = course_root(args.root, marker="exercises")
    return start_lab(root, port=args.port, open_browser=not args.no_browser)
