"""The autograder on a batch of correct, blank, mistaken and hostile hand-ins, graded together.

One batch, as an instructor would run it: every hand-in gets its own result and a message a
student understands, correct ones keep full marks, the batch finishes, and nothing a
hand-in did reaches the gradebook, the files outside its scratch folder, the reference,
another process, a socket on the host, or another student's grade. When ``grade`` exits, no
process it started is alive and no scratch folder is left (tests/corpora/hostile.py has the
attacks).
"""

import contextlib
import io
import json
import os
import secrets
import socket
import subprocess
import sys
import tempfile
import time

import pytest

from coursekit.commands.cli import main
from coursekit.grading.records.gradebook import Gradebook
from tests.corpora.handins import LAYOUT, corpus, write_corpus
from tests.corpora.hostile import MARKERS
from tests.helpers.hand_ins import ASSIGNMENT, REPO, runners_left

pytestmark = [pytest.mark.grading, pytest.mark.module1]


def names_expected(outcome: str) -> list[str]:
    """Names of the corpus's hand-ins with that expected outcome (full, partial, zero)."""
    everything = corpus({key: REPO / key for key in ("gradebook", "outside", "reference")})
    return sorted(name for name, (_, expected, _) in everything.items() if expected == outcome)


# A notebook that only waits (sleep_forever) is ended at wall_factor x its CPU limit: 3 x 6 s
# here, rather than the default 10 x, to keep the batch short. The CPU limits are small too (a
# looping hand-in spends them, twice per test): module 1's right answers use a few milliseconds
# of CPU per test and well under a second per cell, so none comes near them, and
# CPU time does not grow with the machine's load.
LIMITS = ["--cell-timeout", "6", "--test-timeout", "2", "--timeout", "150", "--wall-factor", "3"]


def _scratch_folders() -> set[str]:
    """What this run can leave in the temporary folder: host scratch folders named after its
    grader (``coursekit-hand-in-<this process>-<runner or warm parent>``), and one-process
    store folders of this process (``coursekit-store-<this process>-...``). A hand-in's own
    stores live in its scratch. Another run's on the machine (another test run's, live or
    killed) are not this run's: that run, or the next, removes them."""
    mine = (f"coursekit-hand-in-{os.getpid()}-", f"coursekit-store-{os.getpid()}-")
    return {n for n in os.listdir(tempfile.gettempdir()) if n.startswith(mine)}


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    base = tmp_path_factory.mktemp("grading")
    forbidden = {
        "gradebook": base / "gradebook.sqlite",
        "outside": base / "outside.txt",
        "reference": REPO / "notebooks" / f"{ASSIGNMENT}.ipynb",
        "socket": base / "outside.sock",
        "dgram": base / "outside.dgram",
    }
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(forbidden["socket"]))
    os.chmod(forbidden["socket"], 0o600)  # root-only, as the systemd or Docker sockets are
    listener.listen()
    listener.setblocking(False)
    mailbox = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    mailbox.bind(str(forbidden["dgram"]))
    os.chmod(forbidden["dgram"], 0o600)
    mailbox.setblocking(False)
    secret = f"coursekit-secret-{secrets.token_hex(8)}"
    holder = subprocess.Popen(  # another process on the host, a secret in its command line
        [sys.executable, "-c", "import time; time.sleep(1800)", secret],
        env={**os.environ, "COURSEKIT_SECRET": secret},
    )
    corpus = write_corpus(base / "hand-ins", forbidden)
    sleepers_before = _sleepers()
    scratch_before = _scratch_folders()
    started = time.monotonic()
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
    left = {
        "sleepers": _sleepers(),
        "runners": runners_left(),
        "scratch": _scratch_folders() - scratch_before,
    }
    results = {
        json.loads(line)["student"]: json.loads(line) for line in stdout.getvalue().splitlines()
    }
    yield {
        "status": status,
        "stdout": stdout.getvalue(),
        "results": results,
        "corpus": corpus,
        "forbidden": forbidden,
        "seconds": time.monotonic() - started,
        "sleepers_before": sleepers_before,
        "left": left,
        "listener": listener,
        "mailbox": mailbox,
        "secret": secret,
        "base": base,
    }
    holder.kill()
    holder.wait()


def _processes(pattern: str) -> int:
    done = subprocess.run(["pgrep", "-c", "-f", pattern], capture_output=True, text=True)
    return int(done.stdout.strip() or 0)


def _sleepers() -> int:
    return _processes("sleep 300") + _processes("sleep 2999")


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
            "notes",
            "seed",
            "seed_text",  # the seed as text too: a JSON reader with doubles rounds it
            "not_graded",
        }
        assert result["not_graded"] is None  # the grader's machinery failed on none of them
        assert result["max_score"] == 10.0
    assert len({r["seed"] for r in graded["results"].values()}) == 1  # one draw for the batch


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


@pytest.mark.parametrize("name", names_expected("blank"))
def test_the_exercise_as_handed_out_gets_zero_and_says_not_attempted(graded, name):
    result = graded["results"][name]
    assert result["score"] == 0.0 and result["error"] is None
    assert all("not attempted" in q["feedback"] for q in result["questions"])


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
    with pytest.raises(BlockingIOError):  # nor sent it a datagram
        graded["mailbox"].recv(100)
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
    # counted as grade returned, before anything else could end them
    assert graded["left"]["sleepers"] <= graded["sleepers_before"]
    assert graded["left"]["runners"] == 0


def test_no_scratch_folder_is_left_behind(graded):
    assert graded["left"]["scratch"] == set()


def test_no_attack_got_through(graded):
    everything = json.dumps(graded["results"])
    for marker in MARKERS:
        assert marker not in everything, marker
    assert graded["secret"] not in graded["stdout"]
    with Gradebook(graded["forbidden"]["gradebook"]) as book:
        rows = book._db.execute("SELECT result FROM gradings").fetchall()
    assert not any(graded["secret"] in row for (row,) in rows)


@pytest.mark.parametrize("name", ["fill_disk", "many_files"])
def test_a_hand_in_fills_only_its_own_capped_scratch(graded, name):
    notes = " ".join(graded["results"][name]["notes"])
    assert "No space left on device" in notes, notes


def test_notes_are_capped_however_a_hand_in_shapes_them(graded):
    for name in ("patched_dumps_notes", "long_errors"):
        notes = graded["results"][name]["notes"]
        assert len(notes) <= 41 and all(len(n) <= 500 for n in notes), name
    with Gradebook(graded["forbidden"]["gradebook"]) as book:
        sizes = [len(r) for (r,) in book._db.execute("SELECT result FROM gradings")]
    assert max(sizes) < 100_000


def test_forged_results_gain_nothing_and_are_flagged(graded):
    forged = graded["results"]["forged_results"]
    assert forged["score"] == graded["results"]["zed"]["score"] < 10.0  # the same wrong answers
    assert any("gc.get_objects" in n and n.startswith("Flagged") for n in forged["notes"])


@pytest.mark.parametrize(
    ("name", "seen"),
    [
        ("calls_the_reference", "its accumulate_window called coursekit's own answer"),
        ("imports_the_answer", "its train_accumulated is coursekit's own answer"),
        ("partial_of_the_answer", "its train_accumulated is coursekit's own answer"),
        ("man_in_the_middle", "it called gc.get_objects"),  # the flags got through it
        ("man_in_the_middle", "its accumulate_window called coursekit's own answer"),
        ("torch_callable_patch", "it changed torch.Tensor.register_post_accumulate_grad_hook"),
    ],
)
def test_what_the_instruments_see_is_flagged(graded, name, seen):
    assert any(seen in n and n.startswith("Flagged") for n in graded["results"][name]["notes"])


def test_a_flood_of_fake_flags_cannot_hide_the_real_ones_unseen(graded):
    notes = graded["results"]["flag_flood"]["notes"]
    assert any("more flags came while it ran than this note shows" in n for n in notes)


def test_writing_into_the_grading_channel_costs_that_cell_and_is_flagged(graded):
    result = graded["results"]["deep_result_frame"]
    assert result["score"] == 10.0
    assert any("wrote into the channel" in n and n.startswith("Flagged") for n in result["notes"])


def test_the_student_is_the_top_level_entry_under_the_folder(graded):
    results = graded["results"]
    assert results["bob"]["score"] == 10.0 and results["zed"]["score"] < 10.0
    assert results["zed"]["path"].endswith("zed/bob.ipynb")
    assert results["cat"]["score"] == 10.0 and results["dan"]["score"] < 10.0
    assert results["ada"]["score"] == 10.0 and results["ada."]["score"] < 10.0
    odd = list(LAYOUT)[-1]
    assert odd.startswith("\\udcff") and results[odd]["score"] == 10.0


def test_every_export_works_and_nothing_is_overwritten(graded, tmp_path):
    gradebook = str(graded["forbidden"]["gradebook"])
    outputs = {
        "csv": tmp_path / "grades.csv",
        "gradescope": tmp_path / "gs",
        "html": tmp_path / "html",
    }
    for fmt, out in outputs.items():
        assert main(["export", "--format", fmt, "--out", str(out), "--gradebook", gradebook]) == 0
    students = len(graded["corpus"])
    assert (
        len(list((tmp_path / "gs").iterdir()))
        == len(list((tmp_path / "html").iterdir()))
        == students
    )
    pages = {p.name: p.read_text(encoding="utf-8") for p in (tmp_path / "html").iterdir()}
    ada = [text for name, text in pages.items() if name.startswith("ada")]
    assert len(ada) == 2 and sum("10 / 10 points" in text for text in ada) == 1
    assert any("\\ud800" in text for text in pages.values())  # the surrogate, as an escape


def test_json_carries_the_notes_an_instructor_must_see(graded):
    results = graded["results"]
    assert any("time limit" in n for n in results["infinite_loop"]["notes"])
    assert any("skipped" in n for n in results["os_exit"]["notes"])
    assert any(n.startswith("Flagged") for n in results["monkeypatch_checks"]["notes"])


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
