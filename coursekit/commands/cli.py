"""``coursekit``: one sub-command per job (doctor, build, start, submit, grade, ...).

The entry point alone: the parser (every command's options and help) and the dispatch (what
each command runs) live in :mod:`coursekit.commands.command_line`. The names tests and
scripts import from here (``main``, ``parser``, ``find_course_root``, ``GRADE_EXAMPLES``)
stay here, and ``python -m coursekit.commands.cli`` runs ``main``.
"""

from __future__ import annotations

import sys

from coursekit.commands.command_line.course_root import find_course_root
from coursekit.commands.command_line.course_runs import shown
from coursekit.commands.command_line.dispatch import run
from coursekit.commands.command_line.grading_options import GRADE_EXAMPLES
from coursekit.commands.command_line.main_parser import parser, unknown_command
from coursekit.commands.command_line.version import source_version as _source_version  # noqa: F401
from coursekit.commands.quick_exit import end_now
from coursekit.commands.quick_start import skip_unused_iri_grammars
from coursekit.commands.real_python import start_again_at_the_real_path

__all__ = ["GRADE_EXAMPLES", "find_course_root", "main", "parser"]


def main(argv: list[str] | None = None) -> int:
    """Run ``coursekit`` with ``argv`` (default: the process's arguments); the exit status.

    Run as a program (no ``argv``) through a link to the course's ``.venv``, it starts again
    from the real path first: the grader's sandbox finds Python's modules only there
    (:mod:`coursekit.commands.real_python`), and once the command is done it ends without
    tearing torch down (:mod:`coursekit.commands.quick_exit`)."""
    if argv is None:
        start_again_at_the_real_path("coursekit.commands.cli", sys.argv[1:])
        skip_unused_iri_grammars()  # a program of its own: 1.9 s sooner (quick_start.py)
        status = _command(list(sys.argv[1:]))
        end_now(status)  # 0.7 s sooner where torch was imported (quick_exit.py)
        return status
    return _command(list(argv))


def _command(argv: list[str]) -> int:
    main_parser = parser()
    message = unknown_command(argv, main_parser)
    if message:
        print(shown(message), file=sys.stderr)
        return 2
    return run(main_parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
