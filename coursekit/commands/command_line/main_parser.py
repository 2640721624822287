"""The ``coursekit`` parser: every command's options, registered in the order help lists them.

Building it imports only the options modules (argparse and text): ``coursekit --help`` and a
mistyped command answer at once, without torch.
"""

from __future__ import annotations

import argparse
import difflib

from coursekit.commands.command_line import (
    certificate_options,
    course_options,
    grading_options,
)
from coursekit.commands.command_line.version import installed_version
from coursekit.commands.site import options as site_options

#: Each command's options, in the order ``coursekit --help`` lists the commands. Each adds
#: one sub-parser named for its command; :data:`~.dispatch.RUNS` says what that name runs.
PARSERS = (
    course_options.doctor,
    course_options.build,
    course_options.student_copy,
    course_options.submit,
    grading_options.grade,
    grading_options.export,
    grading_options.gradescope,
    certificate_options.certificate,
    certificate_options.verify,
    certificate_options.issuer_key,
    certificate_options.revoke,
    course_options.links,
    site_options,
    grading_options.report,
    course_options.start,
)


def parser() -> argparse.ArgumentParser:
    """The whole command line; ``parse_args`` names the command in ``command``."""
    main_parser = argparse.ArgumentParser(
        prog="coursekit", description="Gradient accumulation, hands-on: course tools."
    )
    main_parser.add_argument(
        "--version", action="version", version=f"coursekit {installed_version()}"
    )
    commands = main_parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add_command in PARSERS:
        add_command(commands)
    return main_parser


def command_names(main_parser: argparse.ArgumentParser) -> list[str]:
    """The commands ``main_parser`` knows, in help order."""
    return list(
        next(a for a in main_parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    )


def unknown_command(argv: list[str], main_parser: argparse.ArgumentParser) -> str | None:
    """A message for a first word that is no command (with the nearest one), else None."""
    words = [a for a in argv if not a.startswith("-")]
    if not words or argv[0].startswith("-"):
        return None
    choices = command_names(main_parser)
    if words[0] in choices:
        return None
    near = difflib.get_close_matches(words[0], choices, n=1)
    hint = f" Did you mean '{near[0]}'?" if near else ""
    return f"coursekit: no command '{words[0]}'.{hint} Commands: {', '.join(choices)}."
