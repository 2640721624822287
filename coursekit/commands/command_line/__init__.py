"""The ``coursekit`` command line, in parts: what each command accepts, and what it runs.

:mod:`coursekit.commands.cli` is the entry point (``coursekit = coursekit.commands.cli:main``);
it reads the command line with :func:`main_parser.parser` and hands the result to
:func:`dispatch.run`. Apart, so that a reader finds a command's options and help in one file
and what it does in another, and so that building the parser (``coursekit --help``) imports
nothing heavy:

- ``main_parser``: the top-level parser and ``PARSERS``, every command's options in help order;
- ``course_options``, ``grading_options``, ``certificate_options``: each command's
  arguments and help, one function per command, grouped by who runs them;
- ``dispatch``: ``RUNS``, the function each command name runs;
- ``course_runs``, ``grading_runs``, ``certificate_runs``: those functions, which map the
  options onto the command modules of :mod:`coursekit.commands` (imported when run);
- ``course_root`` (finding the course folder) and ``version``.

A new command is one options function added to ``PARSERS`` and one run function added to
``RUNS``; ``tests/test_cli_structure.py`` checks that the two name the same commands.
"""
