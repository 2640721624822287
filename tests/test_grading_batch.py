"""What ``grade`` does with the folder it is given: paths checked first, whose each hand-in is,
clashes named and never merged, files that are not hand-ins refused, and a gradebook that
fails mid-batch stopping the batch without losing a result or leaving a process behind."""

import json
import os
import random
import sqlite3
import subprocess
import tempfile

import pytest

from coursekit.commands.cli import main
from coursekit.grading.collect import collect
from coursekit.grading.grader import draw_specs
from coursekit.grading.records.gradebook import Gradebook
from tests.helpers.hand_ins import (
    ASSIGNMENT,
    IMPORTS,
    REPO,
    answers,
    gradebook_full_after,
    notebook,
    runners_left,
)

pytestmark = pytest.mark.grading


def _write(path, cells=None):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(notebook(cells or [IMPORTS, *answers()]))
    return path


def _grade(folders, gradebook, *extra):
    options = ["--assignment", ASSIGNMENT, "--gradebook", str(gradebook), "--root", str(REPO)]
    return main(["grade", *map(str, folders), *options, "--workers", "1", *extra])


def test_a_path_that_does_not_exist_stops_before_any_work(tmp_path, capsys):
    gradebook = tmp_path / "gradebook.sqlite"
    _write(tmp_path / "real" / "ada.ipynb")
    assert _grade([tmp_path / "real", tmp_path / "hand-ins"], gradebook) == 2
    err = capsys.readouterr().err
    assert f"{tmp_path / 'hand-ins'} does not exist" in err and "Running the reference" not in err
    assert not gradebook.exists()


def test_students_come_from_the_top_level_entry_under_the_folder(tmp_path):
    layout = [
        "zed/bob.ipynb",
        "cat/homework.ipynb",
        "dan/homework.ipynb",
        "ada.ipynb",
        "ada..ipynb",
        "eve/deep/down/work.ipynb",
        "fay-01_accumulation.coursekit.zip",
        "gus/.ipynb_checkpoints/old.ipynb",  # skipped: a hidden folder
        "__MACOSX/hal/._x.ipynb",  # skipped: macOS's zip litter
        "notes.txt",  # skipped: no hand-in
    ]
    for where in layout:
        (tmp_path / where).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / where).write_text("{}")
    found = collect([str(tmp_path)], ASSIGNMENT)
    assert {h.student: h.path[len(str(tmp_path)) + 1 :] for h in found.hand_ins} == {
        "zed": "zed/bob.ipynb",
        "cat": "cat/homework.ipynb",
        "dan": "dan/homework.ipynb",
        "ada": "ada.ipynb",
        "ada.": "ada..ipynb",
        "eve": "eve/deep/down/work.ipynb",
        "fay": "fay-01_accumulation.coursekit.zip",
    }
    assert found.problems == [] and found.missing == []


def test_clashes_links_and_odd_files_are_named_and_not_graded(tmp_path, capsys):
    folder = tmp_path / "hand-ins"
    _write(folder / "ivy.ipynb")
    one, two = _write(folder / "eve" / "one.ipynb"), _write(folder / "eve" / "two.ipynb")
    _write(folder / "kim.ipynb")
    _write(folder / "kim" / "01_accumulation.ipynb")  # kim twice: a file and a folder
    os.symlink(folder / "ivy.ipynb", folder / "mallory.ipynb")  # someone else's work
    os.mkfifo(folder / "pipe.ipynb")  # reading it would block the grader forever
    _write(folder / f"{ASSIGNMENT}.ipynb")  # whose?
    gradebook = tmp_path / "gradebook.sqlite"
    assert _grade([folder], gradebook, "--json") == 1  # graded what it could; says it did not all
    err = capsys.readouterr().err
    assert f"clash: 2 hand-ins are all eve's: {one}, {two}" in err
    assert "all kim's" in err
    assert "mallory.ipynb: a symbolic link, not graded" in err
    assert "pipe.ipynb: not a regular file, not graded" in err
    assert "cannot tell whose hand-in this is" in err
    with Gradebook(gradebook) as book:
        assert [g.student for g in book.current_grades()] == ["ivy"]


def _runners() -> int:
    return runners_left()


def _scratch() -> set[str]:
    """This run's host scratch folders: named after the grader, this process (another run's
    on the machine, live or left behind, are not this test's)."""
    mine = f"coursekit-hand-in-{os.getpid()}-"
    return {n for n in os.listdir(tempfile.gettempdir()) if n.startswith(mine)}


def test_a_gradebook_that_fails_mid_batch_stops_cleanly(tmp_path, monkeypatch, capsys):
    folder = tmp_path / "hand-ins"
    for name in ("ann", "ben", "cat"):
        _write(folder / f"{name}.ipynb")
    gradebook = tmp_path / "gradebook.sqlite"
    monkeypatch.setattr(Gradebook, "record", gradebook_full_after(1))
    scratch = _scratch()
    assert _grade([folder], gradebook) == 1
    assert "could not be written: database or disk is full" in capsys.readouterr().err
    assert _runners() == 0 and _scratch() == scratch
    with Gradebook(gradebook) as book:
        assert book.integrity() == "ok" and len(book.current_grades()) == 1


def _ended_pids(count: int) -> list[int]:
    """Ids of processes that have just ended: no process has them now."""
    ended = [subprocess.Popen(["true"]) for _ in range(count)]
    for process in ended:
        process.wait()
    return [process.pid for process in ended]


def test_the_next_run_removes_what_a_killed_run_left_and_nothing_else(tmp_path, monkeypatch):
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temporary))
    grader, runner, other = _ended_pids(3)
    left = [f"coursekit-hand-in-{grader}-{runner}-0123456789abcdef"]
    left += [f"coursekit-hand-in-{grader}-{runner}", f"coursekit-hand-in-{other}"]  # old names
    kept = [
        f"coursekit-hand-in-{os.getpid()}-{runner}",  # its grader is alive: that run's to remove
        f"coursekit-hand-in-{other}-{os.getpid()}",  # its owner is alive
    ]
    for name in left + kept:
        (temporary / name / "deep" / "er").mkdir(parents=True)
        (temporary / name / "deep" / "er" / "file").write_text("x")
    _write(tmp_path / "hand-ins" / "ada.ipynb")
    unusable = tmp_path / "a-folder"  # a gradebook that cannot be opened: grade stops there,
    unusable.mkdir()  # after it has removed the leftovers, first thing
    assert _grade([tmp_path / "hand-ins"], unusable) == 2
    assert sorted(os.listdir(temporary)) == sorted(kept)


def test_every_run_records_the_seed_that_draws_its_hidden_tests_again(tmp_path, capsys):
    _write(tmp_path / "hand-ins" / "ada.ipynb")
    gradebook = tmp_path / "gradebook.sqlite"
    assert _grade([tmp_path / "hand-ins"], gradebook, "--json") == 0  # no seed given
    assert _grade([tmp_path / "hand-ins"], gradebook, "--json", "--regrade", "--seed", "0") == 0
    printed = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    with sqlite3.connect(gradebook) as db:
        runs = db.execute("SELECT seed, specs FROM runs ORDER BY id").fetchall()
    assert [r["seed"] for r in printed] == [seed for seed, _ in runs]
    assert runs[1][0] == 0 and isinstance(runs[0][0], int)
    for seed, specs in runs:  # each run's specs are exactly what its seed draws
        assert json.loads(specs) == json.loads(
            json.dumps(draw_specs(ASSIGNMENT, random.Random(seed)))
        )
    with Gradebook(gradebook) as book:
        (grade,) = book.current_grades(ASSIGNMENT)
    assert grade.result["seed"] == 0 and grade.score == grade.max_score


def test_a_seed_out_of_range_is_refused_before_any_work(tmp_path, capsys):
    _write(tmp_path / "hand-ins" / "ada.ipynb")
    assert _grade([tmp_path / "hand-ins"], tmp_path / "g.sqlite", "--seed", "-1") == 2
    assert "--seed must be a whole number" in capsys.readouterr().err
    assert not (tmp_path / "g.sqlite").exists()


def test_one_warm_parent_serves_the_reference_and_every_hand_in(tmp_path, monkeypatch):
    from coursekit.grading.sandbox.warm_parent import WarmParent

    calls = {"start": 0, "fork": 0}
    start, fork = WarmParent.start, WarmParent.fork

    def counted(name, real):
        def wrapper(self, *args, **kwargs):
            calls[name] += 1
            return real(self, *args, **kwargs)

        return wrapper

    monkeypatch.setattr(WarmParent, "start", counted("start", start))
    monkeypatch.setattr(WarmParent, "fork", counted("fork", fork))
    for name in ("ann", "ben", "cat"):
        _write(tmp_path / "hand-ins" / f"{name}.ipynb")
    gradebook = tmp_path / "gradebook.sqlite"
    assert _grade([tmp_path / "hand-ins"], gradebook, "--workers", "2") == 0
    # no second cold start: one fork for the reference and each of the 3 hand-ins, and at most
    # one spare per grading thread (forked ahead while a hand-in was queued, then unused)
    assert calls["start"] == 1 and 4 <= calls["fork"] <= 4 + 2, calls
    with Gradebook(gradebook) as book:
        assert [g.score for g in book.current_grades()] == [10.0] * 3


def test_a_sandbox_that_fails_mid_batch_stops_it_and_marks_no_one_down(
    tmp_path, monkeypatch, capsys
):
    from coursekit.grading.sandbox.warm_parent import SandboxSetupError, WarmParent

    fork, calls = WarmParent.fork, []

    def fails_after_the_reference(self, fds, spare=False):
        calls.append(fds)
        if len(calls) > 1:
            raise SandboxSetupError("the grading sandbox's parent failed: test")
        return fork(self, fds, spare)

    monkeypatch.setattr(WarmParent, "fork", fails_after_the_reference)
    for name in ("ann", "ben"):
        _write(tmp_path / "hand-ins" / f"{name}.ipynb")
    gradebook = tmp_path / "gradebook.sqlite"
    assert _grade([tmp_path / "hand-ins"], gradebook) == 1
    err = capsys.readouterr().err
    assert "the grading sandbox failed" in err and "no one was marked down" in err
    with Gradebook(gradebook) as book:
        assert book.current_grades() == []  # no zero recorded for the machine's fault
    assert runners_left() == 0
