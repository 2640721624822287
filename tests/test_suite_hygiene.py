"""The suite reads no instructor's or student's state: not the signing keys in
``~/.config/coursekit`` (conftest.py gives the session a configuration folder of its own), and
not the ``certificates/`` an instructor commits in this working tree (tests that run
certificate or verify do it from a folder of their own, ``outside_the_course``)."""

from __future__ import annotations

import ast
import os
from pathlib import Path

from coursekit.grading.records import keys

REPO = Path(__file__).resolve().parents[1]
TESTS = Path(__file__).resolve().parent
#: The commands that read ``certificates/`` from the current folder up.
READS_PUBLISHED = {"certificate", "verify"}


def test_the_signing_keys_are_the_sessions_own_not_the_instructors():
    real = Path(os.path.expanduser("~/.config")).resolve()
    assert "COURSEKIT_KEY" not in os.environ
    for path in (keys.default_key_path(), keys.legacy_key_path()):
        assert not path.resolve().is_relative_to(real / "coursekit"), path
        assert Path(os.environ["XDG_CONFIG_HOME"]) in path.parents


def test_the_only_configuration_folder_coursekit_reads_is_the_one_conftest_moves():
    """A second place under ``~/.config`` (another key, a setting) would reach the
    instructor's own files from the tests: conftest.py must move it too, so it is listed here
    first. (Caches under ``~/.cache`` hold no one's course state.)"""
    found = set()
    for path in sorted((REPO / "coursekit").rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        for needle in ('".config"', "'.config'", "XDG_CONFIG_HOME", "user_config_dir"):
            if needle in text:
                found.add(path.relative_to(REPO).as_posix())
    assert found == {"coursekit/grading/records/keys.py"}


def _commands_run(tree: ast.AST) -> set[str]:
    """The commands a test file runs through coursekit's ``main``: the first items of its
    list literals (``main(["verify", ...])``, ``argv = ["certificate", ...]``), where the
    file calls ``main`` at all (a list merely parsed is run by no one)."""
    calls_main = any(
        isinstance(node, ast.Call)
        and (getattr(node.func, "id", None) == "main" or getattr(node.func, "attr", None) == "main")
        for node in ast.walk(tree)
    )
    names = set()
    for node in ast.walk(tree) if calls_main else ():
        if isinstance(node, ast.List) and node.elts and isinstance(node.elts[0], ast.Constant):
            if isinstance(node.elts[0].value, str):
                names.add(node.elts[0].value)
    return names


def test_every_test_file_that_runs_certificate_or_verify_runs_it_outside_this_tree():
    """certificate and verify find the course's published key from the current folder up:
    run in this working tree they read the instructor's certificates/ (a warning about
    "another key", or a revocation list of theirs). A file that runs them chdirs first."""
    unguarded = []
    for path in sorted(TESTS.glob("test_*.py")):
        text = path.read_text(encoding="utf-8")
        if not READS_PUBLISHED & _commands_run(ast.parse(text)):
            continue
        if "outside_the_course" not in text and "monkeypatch.chdir(" not in text:
            unguarded.append(path.name)
    assert unguarded == []
