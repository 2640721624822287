"""The command line's parts agree: every command parsed is dispatched, and the reverse.

Why: the options (``command_line/*_options.py``, registered in ``PARSERS``) and what each
command runs (``RUNS``) are kept apart; a command added to one and not the other would
parse and then fail, or never be reachable.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from coursekit.commands.cli import main, parser
from coursekit.commands.command_line import dispatch
from coursekit.commands.command_line.main_parser import command_names

REPO = Path(__file__).resolve().parents[1]


def test_every_parsed_command_is_dispatched_in_help_order():
    assert command_names(parser()) == list(dispatch.RUNS)
    assert len(dispatch.RUNS) >= 14


def test_main_runs_the_function_registered_for_the_command(monkeypatch):
    seen = []
    monkeypatch.setitem(dispatch.RUNS, "revoke", lambda args: seen.append(args) or 7)
    assert main(["revoke", "CK-0000-0000-0000-0000", "--reason", "test"]) == 7
    assert seen[0].command == "revoke" and seen[0].reason == "test"


@pytest.mark.parametrize("name", list(dispatch.RUNS))
def test_every_command_has_help(name, capsys):
    with pytest.raises(SystemExit) as exited:
        main([name, "--help"])
    assert exited.value.code == 0
    assert capsys.readouterr().out.startswith(f"usage: coursekit {name}")


def test_help_needs_neither_torch_nor_the_instructor_extra():
    """Building the parser imports no command's dependencies: help answers at once, and
    where the instructor extra is missing."""
    script = (
        "import sys\n"
        "for name in ('torch', 'cryptography', 'segno'): sys.modules[name] = None\n"
        "from coursekit.commands.cli import main\n"
        "for command in ('certificate', 'verify', 'grade', 'build'):\n"
        "    try:\n"
        "        main([command, '--help'])\n"
        "    except SystemExit as exited:\n"
        "        assert exited.code == 0, command\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=REPO
    )
    assert done.returncode == 0, done.stderr
    assert "usage: coursekit verify" in done.stdout
