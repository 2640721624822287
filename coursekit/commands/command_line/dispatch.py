"""What each ``coursekit`` command runs: one table, from the command's name to its function.

The names are those the options functions of :data:`~.main_parser.PARSERS` register;
``tests/test_cli_structure.py`` checks that both name the same commands. The run modules
import their command's dependencies only when it runs.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from coursekit.commands import site
from coursekit.commands.command_line import certificate_runs, course_runs, grading_runs

#: command name -> the function that runs it (parsed options in, exit status out)
RUNS: dict[str, Callable[[argparse.Namespace], int]] = {
    "doctor": course_runs.doctor,
    "build": course_runs.build,
    "student-copy": course_runs.student_copy,
    "submit": course_runs.submit,
    "grade": grading_runs.grade,
    "export": grading_runs.export,
    "gradescope": grading_runs.gradescope,
    "certificate": certificate_runs.certificate,
    "verify": certificate_runs.verify,
    "issuer-key": certificate_runs.issuer_key,
    "revoke": certificate_runs.revoke,
    "links": course_runs.links,
    "site": site.run,
    "report": grading_runs.report,
    "start": course_runs.start,
}


def run(args: argparse.Namespace) -> int:
    """Run the command ``args`` names (``args.command``, as the main parser sets it)."""
    return RUNS[args.command](args)
