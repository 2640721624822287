"""``coursekit`` started through a link to the course's ``.venv`` starts again from the real
path (the grader's sandbox finds Python's modules only there); called with arguments, as
tests and scripts call ``main``, it never replaces the process."""

import os
import sys

import pytest

from coursekit.commands import cli


class Replaced(Exception):
    """What the stand-in for os.execv raises: the process would have been replaced."""


@pytest.fixture
def linked_venv(tmp_path, monkeypatch):
    real = tmp_path / "course" / ".venv"
    (real / "bin").mkdir(parents=True)
    (real / "bin" / "python").write_text("#!/bin/sh\n")
    (real / "bin" / "python").chmod(0o755)
    link = tmp_path / "autograder" / "venv"
    link.parent.mkdir()
    link.symlink_to(real, target_is_directory=True)
    monkeypatch.setattr(sys, "prefix", str(link))
    monkeypatch.setattr(sys, "executable", str(link / "bin" / "python"))
    calls = []

    def execv(path, arguments):
        calls.append((str(path), list(arguments)))
        raise Replaced

    monkeypatch.setattr(os, "execv", execv)
    return real.resolve() / "bin" / "python", calls


def test_coursekit_run_through_a_linked_venv_starts_again_from_the_real_path(
    linked_venv, monkeypatch
):
    python, calls = linked_venv
    monkeypatch.setattr(sys, "argv", ["coursekit", "grade", "hand-ins/", "--workers", "2"])
    with pytest.raises(Replaced):
        cli.main()
    assert calls == [
        (
            str(python),
            [str(python), "-m", "coursekit.commands.cli", "grade", "hand-ins/", "--workers", "2"],
        )
    ]


def test_main_called_with_arguments_never_replaces_the_process(linked_venv, capsys):
    _, calls = linked_venv
    with pytest.raises(SystemExit):
        cli.main(["--version"])
    assert calls == []
