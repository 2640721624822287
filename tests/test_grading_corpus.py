"""The autograder on a batch of correct, mistaken and hostile hand-ins, graded together.

One batch, as an instructor would run it: every hand-in gets its own result and a message a
student understands, correct ones keep full marks, the batch finishes, and nothing a
hand-in did reaches the gradebook, the files outside its scratch folder, or the reference.
"""

import json
import socket
import subprocess
import time

import pytest

from coursekit.cli import main
from coursekit.grading.gradebook import Gradebook
from tests.handins import ASSIGNMENT, REPO, corpus, write_corpus

pytestmark = [pytest.mark.grading, pytest.mark.module1]


def names_expected(outcome: str) -> list[str]:
    """Names of the corpus's hand-ins with that expected outcome (full, partial, zero)."""
    everything = corpus({key: REPO / key for key in ("gradebook", "outside", "reference")})
    return sorted(name for name, (_, expected, _) in everything.items() if expected == outcome)


LIMITS = ["--cell-timeout", "10", "--test-timeout", "5", "--timeout", "150"]


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    base = tmp_path_factory.mktemp("grading")
    forbidden = {
        "gradebook": base / "gradebook.sqlite",
        "outside": base / "outside.txt",
        "reference": REPO / "notebooks" / f"{ASSIGNMENT}.ipynb",
    }
    forbidden["socket"] = base / "outside.sock"
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(forbidden["socket"]))
    listener.listen()
    listener.setblocking(False)
    corpus = write_corpus(base / "hand-ins", forbidden)
    sleepers_before = _sleepers()
    started = time.monotonic()
    import contextlib
    import io

    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        status = main(
            [
                "grade",
                str(base / "hand-ins"),
                "--assignment",
                ASSIGNMENT,
                "--json",
                "--workers",
                "2",
                "--gradebook",
                str(forbidden["gradebook"]),
                "--root",
                str(REPO),
                *LIMITS,
            ]
        )
    results = {
        json.loads(line)["student"]: json.loads(line) for line in stdout.getvalue().splitlines()
    }
    return {
        "status": status,
        "results": results,
        "corpus": corpus,
        "forbidden": forbidden,
        "seconds": time.monotonic() - started,
        "sleepers_before": sleepers_before,
        "listener": listener,
    }


def _sleepers() -> int:
    done = subprocess.run(["pgrep", "-c", "-f", "sleep 300"], capture_output=True, text=True)
    return int(done.stdout.strip() or 0)


def test_the_batch_finishes_with_exit_zero_and_a_result_for_every_hand_in(graded):
    assert graded["status"] == 0
    assert set(graded["results"]) == set(graded["corpus"])
    for result in graded["results"].values():
        assert set(result) == {
            "path",
            "student",
            "assignment",
            "score",
            "max_score",
            "questions",
            "error",
        }
        assert result["max_score"] == 10.0


@pytest.mark.parametrize("name", names_expected("full"))
def test_correct_answers_keep_full_marks_whatever_else_the_notebook_does(graded, name):
    result = graded["results"][name]
    assert result["score"] == 10.0, result
    assert result["error"] is None


@pytest.mark.parametrize("name", names_expected("partial"))
def test_broken_answers_get_partial_credit_and_a_named_reason(graded, name):
    result = graded["results"][name]
    _, expected, text = graded["corpus"][name]
    assert expected == "partial"
    assert 0 < result["score"] < 10.0, result
    feedback = " ".join(q["feedback"] for q in result["questions"])
    assert text in feedback, feedback


@pytest.mark.parametrize("name", names_expected("zero"))
def test_files_that_are_not_this_assignments_notebook_get_zero_and_a_sentence(graded, name):
    result = graded["results"][name]
    _, _, text = graded["corpus"][name]
    assert result["score"] == 0.0
    assert text in result["error"]
    assert "Traceback" not in result["error"]


@pytest.mark.parametrize(
    ("patched", "plain"),
    [
        ("monkeypatch_torch", "window_not_divided"),
        ("monkeypatch_checks", "mistake_step_every_micro_batch"),
    ],
)
def test_monkeypatching_torch_or_the_checks_gains_nothing(graded, patched, plain):
    # The same wrong answers, with and without the patch: the same score.
    assert graded["results"][patched]["score"] == graded["results"][plain]["score"] < 10.0


def test_nothing_reached_the_gradebook_the_outside_or_the_reference(graded):
    forbidden = graded["forbidden"]
    with pytest.raises(BlockingIOError):  # no hand-in connected to the socket outside
        graded["listener"].accept()
    assert not forbidden["outside"].exists()
    assert forbidden["gradebook"].stat().st_mode & 0o777 != 0o777
    with Gradebook(forbidden["gradebook"]) as book:
        assert book.integrity() == "ok"
        assert len(book.current_grades(ASSIGNMENT)) == len(graded["corpus"])
    read = graded["results"]["read_reference"]
    assert read["score"] == 10.0  # and its cell failed: see the notes in the gradebook


def test_hidden_test_source_never_appears_in_feedback(graded):
    hidden_markers = ("BEGIN HIDDEN", "assert relative_error", "_expected")
    for result in graded["results"].values():
        text = json.dumps(result)
        assert not any(marker in text for marker in hidden_markers)


def test_no_process_a_hand_in_started_is_left_running(graded):
    assert _sleepers() <= graded["sleepers_before"]


def test_grading_again_is_idempotent(graded, capsys):
    gradebook = graded["forbidden"]["gradebook"]
    with Gradebook(gradebook) as book:
        before = book._db.execute("SELECT COUNT(*) FROM gradings").fetchone()[0]
    folder = graded["corpus"]["correct_minimal"][0].parent
    assert (
        main(
            [
                "grade",
                str(folder),
                "--assignment",
                ASSIGNMENT,
                "--json",
                "--gradebook",
                str(gradebook),
                "--root",
                str(REPO),
                *LIMITS,
            ]
        )
        == 0
    )
    again = {
        json.loads(line)["student"]: json.loads(line)
        for line in capsys.readouterr().out.splitlines()
    }
    assert again == graded["results"]
    with Gradebook(gradebook) as book:
        after = book._db.execute("SELECT COUNT(*) FROM gradings").fetchone()[0]
    assert after == before


def test_a_hand_in_cannot_claim_another_students_name(graded):
    assert graded["results"]["correct_minimal"]["score"] == 10.0
    assert graded["results"]["claims_another_name"]["student"] == "claims_another_name"


def test_hand_ins_that_reach_into_the_grader_are_flagged(graded):
    with Gradebook(graded["forbidden"]["gradebook"]) as book:
        notes = {g.student: g.result["notes"] for g in book.current_grades(ASSIGNMENT)}
    assert any(n.startswith("Flagged for review") for n in notes["monkeypatch_checks"])
    assert not any(n.startswith("Flagged for review") for n in notes["correct_minimal"])
