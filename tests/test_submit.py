"""Handing in a packed notebook: `coursekit submit` and `coursekit.submit(...)` pack it, and
the grader reads packed files as untrusted zips, names the student from the file, and flags
a manifest that disagrees with what it was handed.

The notebook packed here ran for real (one module 0 exercise, through nbclient); the grading
run is module 0's, the fastest, with every kind of packed hand-in in one folder.
"""

import contextlib
import hashlib
import io
import json
import re
import shutil
import zipfile
from datetime import datetime
from pathlib import Path

import nbformat
import pytest

import coursekit
from coursekit.commands import hand_in
from coursekit.commands.cli import main
from coursekit.grading.collect import student_for_file
from coursekit.grading.grader import _claim_notes
from coursekit.grading.handin import HandInError, read_hand_in
from coursekit.grading.packed import MANIFEST, PackedFileError, disagreements, unpack
from coursekit.grading.records.gradebook import Gradebook
from coursekit.grading.submission import SubmissionError, pack, packed_name, saved_checks
from tests.corpora import student_code
from tests.helpers import kernels
from tests.helpers.hand_ins import IMPORTS, REPO, answers, notebook

pytestmark = pytest.mark.grading
WELCOME = "00_welcome"


def welcome_cells(variant: str = "correct") -> list[str]:
    answer = student_code.BY_QUESTION["effective_batch_size"][variant]
    return [
        "from coursekit import check",
        f"# Question: effective_batch_size\n{answer}",
        'check("effective_batch_size", effective_batch_size)',
    ]


@pytest.fixture(scope="module")
def executed(tmp_path_factory) -> Path:
    """A module 0 notebook with the right answer, saved, run top to bottom in a kernel that
    JupyterLab would have started (its last cell packs it), and saved again."""
    path = tmp_path_factory.mktemp("work") / f"{WELCOME}.ipynb"
    cells = [*welcome_cells(), 'import coursekit\ncoursekit.submit("ada")']
    nb = nbformat.reads(notebook(cells, WELCOME), as_version=4)
    nbformat.write(nb, path)
    with pytest.MonkeyPatch.context() as env:
        env.setenv("JPY_SESSION_NAME", str(path))  # what JupyterLab's server tells a kernel
        kernels.execute(nb, timeout_s=600)
    nbformat.write(nb, path)
    return path


@pytest.mark.slow  # over 4 s: out of the quick run (-m 'not slow')
def test_the_last_cell_packs_its_own_notebook_as_saved_and_says_so(executed):
    cell = json.loads(executed.read_text())["cells"][-1]
    printed = "".join("".join(o.get("text", "")) for o in cell["outputs"])
    assert f"Packing {executed} as saved on disk (save first" in printed
    # saved before anything ran: the check is "not run", and the runs since are pointed out
    assert "Packed 00_welcome for ada: 0 of 1 checks passed" in printed
    assert "effective_batch_size (not run)" in printed
    assert "Warning: cells ran after the last save (In [1] to In [3]" in printed


def with_outputs(cells_and_outputs: list[tuple[str, str | None]], assignment: str) -> dict:
    """A notebook whose code cells show the given printed text, as if run and saved."""
    nb = json.loads(notebook([source for source, _ in cells_and_outputs], assignment))
    for count, (cell, (_, printed)) in enumerate(
        zip(nb["cells"], cells_and_outputs, strict=True), 1
    ):
        if printed is not None:
            cell["execution_count"] = count
            cell["outputs"] = [{"output_type": "stream", "name": "stdout", "text": printed}]
    return nb


def write(path: Path, nb: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(nb))
    return path


def text(path: Path, content: str) -> Path:
    path.write_text(content)
    return path


def members(packed: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(packed) as archive:
        return {name: archive.read(name) for name in archive.namelist()}


def repack(packed: Path, target: Path, notebook=None, **manifest_changes) -> Path:
    """A copy of a packed file with its notebook or manifest fields replaced (tampering)."""
    content = members(packed)
    manifest = json.loads(content.pop(MANIFEST)) | manifest_changes
    (name, data), *_ = content.items()
    with zipfile.ZipFile(target, "w") as archive:
        archive.writestr(MANIFEST, json.dumps(manifest))
        archive.writestr(name, notebook if notebook is not None else data)
    return target


# --------------------------------------------------------------------------------- packing


def test_a_packed_file_holds_the_notebook_unchanged_and_a_manifest(executed, tmp_path):
    packed = pack(executed, "ada", tmp_path / "out")
    assert packed == tmp_path / "out" / "ada-00_welcome.coursekit.zip"
    content = members(packed)
    assert set(content) == {MANIFEST, "00_welcome.ipynb"}
    assert content["00_welcome.ipynb"] == executed.read_bytes()
    manifest = json.loads(content[MANIFEST])
    assert manifest["assignment"] == WELCOME and manifest["student"] == "ada"
    assert manifest["notebook_sha256"] == hashlib.sha256(executed.read_bytes()).hexdigest()
    assert manifest["checks"] == {"effective_batch_size": "passed"}
    assert (manifest["checks_passed"], manifest["checks_total"]) == (1, 1)
    assert manifest["coursekit_version"] == coursekit.__version__
    datetime.fromisoformat(manifest["created_at"].replace("Z", "+00:00"))
    unpacked = unpack(packed.read_bytes())
    assert unpacked.notebook == executed.read_bytes()
    assert unpacked.manifest == manifest and unpacked.problems == []
    assert disagreements(manifest, unpacked.notebook, "ada", WELCOME) == []
    # packed next to the notebook by default, and packing again replaces the file
    assert pack(executed, "ada") == executed.parent / packed_name("ada", WELCOME)
    assert pack(executed, "ada").exists()


def test_checks_are_read_from_the_saved_outputs():
    nb = with_outputs(
        [
            (IMPORTS, ""),
            *[(cell, "") for cell in answers()],
            ('check("accumulate_window", accumulate_window)', "[failed] accumulate_window: ..."),
            ('check("train_accumulated", train_accumulated)', None),
            ('check("plan_micro_batch", plan_micro_batch)', "[not attempted] plan_micro_batch:"),
            ("print(coursekit.evaluate('accumulate_window', f))", "[passed] accumulate_window: 4"),
            ('check("accumulate_window", accumulate_window)', "[passed] accumulate_window: 4 of 4"),
        ],
        "01_accumulation",
    )
    checks = saved_checks(nb)
    assert checks == {
        "accumulate_window": "passed",  # the check run last counts; an evaluate() print does not
        "train_accumulated": "not run",
        "plan_micro_batch": "not attempted",
    }
    nb["cells"][-1]["execution_count"] = 1  # ... run before the failing one: that one counts
    assert saved_checks(nb)["accumulate_window"] == "failed"
    crashed = nb["cells"][-3]
    crashed["outputs"] = [{"output_type": "error", "ename": "NameError", "evalue": "x"}]
    assert saved_checks(nb)["plan_micro_batch"] == "error"


def blank_exercise(tmp_path: Path) -> Path:
    return Path(shutil.copy(REPO / "exercises" / "01_accumulation.ipynb", tmp_path))


@pytest.mark.parametrize(
    ("make", "student", "message"),
    [
        (lambda d: d / "missing.ipynb", "ada", "There is no file"),
        (lambda d: d, "ada", "is a folder"),
        (lambda d: write(d / "notes.txt", {}), "ada", "is not a notebook (a .ipynb file)"),
        (lambda d: text(d / "e.ipynb", ""), "ada", "is empty on disk"),
        (lambda d: text(d / "j.ipynb", "{oops"), "ada", "damaged"),
        (
            lambda d: write(d / "x.ipynb", nbformat.v4.new_notebook()),
            "ada",
            "is not a course notebook: it has no coursekit assignment tag",
        ),
        (blank_exercise, "ada", "exercise as handed out"),
        (lambda d: write(d / "p.coursekit.zip", {}), "ada", "is already packed"),
        (lambda d: write(d / "ok.ipynb", with_outputs([("1", "1")], WELCOME)), "", "Give your"),
        (lambda d: write(d / "ok.ipynb", with_outputs([("1", "1")], WELCOME)), "a/b", "'a_b'"),
        (lambda d: write(d / "ok.ipynb", with_outputs([("1", "1")], WELCOME)), "..", "file name"),
        (lambda d: write(d / "ok.ipynb", with_outputs([("1", "1")], WELCOME)), "A L", "'A_L'"),
    ],
)
def test_what_cannot_be_packed_is_refused_with_what_to_do(tmp_path, make, student, message):
    path = make(tmp_path)
    with pytest.raises(SubmissionError, match=re.escape(message)):
        pack(path, student, tmp_path / "out")
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_the_command_says_what_it_packed_and_what_to_do_next(executed, tmp_path, capsys):
    assert main(["submit", str(executed), "--student", "ada", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    packed = tmp_path / "ada-00_welcome.coursekit.zip"
    assert "Packed 00_welcome for ada: 1 of 1 checks passed" in out
    assert str(packed) in out and hashlib.sha256(packed.read_bytes()).hexdigest() in out
    assert "Next: hand in this file" in out and "Warning" not in out

    verdict = "[failed] effective_batch_size: public check 1 of 3 fails."
    failing = write(
        tmp_path / "ben" / f"{WELCOME}.ipynb",
        with_outputs([(welcome_cells()[1], ""), (welcome_cells()[2], verdict)], WELCOME),
    )
    assert main(["submit", str(failing), "--student", "ben"]) == 0  # a warning, not a refusal
    out = capsys.readouterr().out
    assert "0 of 1 checks passed" in out
    assert "Warning: not passed in the saved notebook: effective_batch_size (failed)" in out

    assert main(["submit", str(tmp_path / "nope.ipynb"), "--student", "ada"]) == 2
    assert "coursekit submit: There is no file" in capsys.readouterr().err


# -------------------------------------------------------------------- in a notebook's cell


def test_coursekit_submit_finds_the_notebook_or_says_what_to_pass(executed, tmp_path, capsys):
    assert coursekit.submit is hand_in.submit
    found, _ = hand_in.find_notebook({"__session__": str(executed)}, tmp_path)
    assert found == executed  # JupyterLab tells the kernel its notebook's path

    folder = tmp_path / "my-work"
    shutil.copy(executed, folder.mkdir() or folder)
    write(folder / "01_accumulation.ipynb", json.loads(notebook(answers())))
    found, why = hand_in.find_notebook({"effective_batch_size": len}, folder)
    assert found == folder / f"{WELCOME}.ipynb"  # the notebook whose answers this kernel holds
    found, why = hand_in.find_notebook({}, folder)
    assert found is None
    assert "00_welcome.ipynb, 01_accumulation.ipynb" in why and 'notebook="' in why
    assert "no course notebook here" in hand_in.find_notebook({}, tmp_path / "out")[1]

    assert coursekit.submit("ada", notebook=executed, out_dir=tmp_path / "out") is not None
    assert "Packed 00_welcome for ada" in capsys.readouterr().out
    assert coursekit.submit("ada", notebook=tmp_path / "nope.ipynb") is None
    assert "Not packed: There is no file" in capsys.readouterr().out


def test_on_colab_the_student_is_told_how_to_hand_in(monkeypatch, tmp_path):
    monkeypatch.setenv("COLAB_RELEASE_TAG", "test")
    found, why = hand_in.find_notebook({}, tmp_path)
    assert found is None and "File > Download > Download .ipynb" in why


def test_cells_run_after_the_last_save_are_warned_about(executed):
    saved = max(c["execution_count"] or 0 for c in json.loads(executed.read_text())["cells"])
    assert hand_in.unsaved_runs(executed, saved + 1) == ""  # saved just before this cell
    warning = hand_in.unsaved_runs(executed, saved + 4)
    assert f"In [{saved + 1}] to In [{saved + 3}]" in warning and "save (Ctrl+S)" in warning


# ------------------------------------------------------------- reading untrusted packed files


def zip_of(entries: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in entries.items():
            archive.writestr(name, data)
    return buffer.getvalue()


def encrypted(data: bytes) -> bytes:
    """The same zip with its member marked encrypted (zipfile cannot write one)."""
    data = bytearray(data)
    for header, offset in ((b"PK\x03\x04", 6), (b"PK\x01\x02", 8)):
        data[data.index(header) + offset] |= 0x1
    return bytes(data)


NB = notebook(welcome_cells(), WELCOME).encode()


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (zip_of({"../../etc/cron.d/x.ipynb": NB}), "points out of its folder"),
        (zip_of({"/abs.ipynb": NB}), "points out of its folder"),
        (zip_of({"a\\..\\b.ipynb": NB}), "points out of its folder"),
        (zip_of({f"{i}.txt": b"" for i in range(9)} | {"a.ipynb": NB}), "holds 10 files"),
        (zip_of({"a.ipynb": b" " * (21 * 2**20)}), "unpacks to 21 MiB"),
        (zip_of({"a.ipynb": NB, "b.ipynb": NB}), "holds 2 notebooks"),
        (zip_of({MANIFEST: b"{}"}), "holds 0 notebooks"),
        (encrypted(zip_of({"a.ipynb": NB})), "is encrypted"),
        (b"PK\x03\x04 not really a zip", "not a zip file that can be read"),
        (zip_of({"a.ipynb": NB})[:-30], "not a zip file that can be read"),
    ],
    ids=[
        "traversal",
        "absolute",
        "backslashes",
        "many",
        "bomb",
        "two",
        "none",
        "encrypted",
        "not-zip",
        "cut",
    ],
)
def test_unsafe_or_broken_zips_are_refused_without_extracting(data, message):
    with pytest.raises(PackedFileError, match=message):
        unpack(data)


def test_a_member_that_lies_about_its_content_is_damaged():
    data = bytearray(zip_of({"a.ipynb": NB}))
    data[data.index(b"PK\x03\x04") + 40] ^= 0xFF  # inside the compressed stream
    with pytest.raises(PackedFileError, match="damaged|not a zip"):
        unpack(bytes(data))


def test_no_manifest_or_extra_files_are_flagged_not_refused():
    unpacked = unpack(zip_of({"a.ipynb": NB, "notes/readme.txt": b"hi"}))
    assert unpacked.notebook == NB and unpacked.manifest is None
    assert "no manifest.json" in unpacked.problems[0]
    assert "'notes/readme.txt'" in unpacked.problems[1]
    assert "cannot be read" in unpack(zip_of({"a.ipynb": NB, MANIFEST: b"[1]"})).problems[0]


@pytest.mark.parametrize(
    ("path", "student"),
    [
        ("hand-ins/ada-01_accumulation.coursekit.zip", "ada"),
        ("hand-ins/ada/01_accumulation.coursekit.zip", "ada"),
        ("hand-ins/mary-jane-01_accumulation.coursekit.zip", "mary-jane"),
        ("hand-ins/ada-00_welcome.coursekit.zip", "ada"),  # refused later: another assignment
        ("hand-ins/ada-01_accumulation.zip", "ada"),
        ("hand-ins/ada.zip", "ada"),
        ("hand-ins/ada-01_accumulation.ipynb", "ada-01_accumulation"),  # notebooks: as before
    ],
)
def test_the_student_of_a_packed_file_comes_from_its_name(path, student):
    assert student_for_file(Path(path), "01_accumulation") == student
    name = packed_name(student, "01_accumulation")
    assert student_for_file(Path("hand-ins") / name, "01_accumulation") == student


def test_read_hand_in_flags_a_manifest_that_disagrees(executed, tmp_path):
    packed = pack(executed, "ada", tmp_path)
    assert read_hand_in(packed, WELCOME).flags == ()
    assert read_hand_in(packed, WELCOME).claimed_passed == ("effective_batch_size",)
    renamed = shutil.copy(packed, tmp_path / "bob-00_welcome.coursekit.zip")
    (flag,) = read_hand_in(renamed, WELCOME).flags
    assert "names the student 'ada'" in flag and "graded as bob's" in flag
    edited = repack(packed, tmp_path / "cyd.zip", notebook=NB)
    flags = read_hand_in(edited, WELCOME).flags
    assert any("changed after `coursekit submit` packed it" in f for f in flags)
    other = pack(write(tmp_path / "w" / "01.ipynb", json.loads(notebook(answers()))), "ada")
    with pytest.raises(HandInError, match="is the 01_accumulation assignment"):
        read_hand_in(other, WELCOME)


# ------------------------------------------------------------------------ grading, end to end


@pytest.fixture(scope="module")
def graded(executed, tmp_path_factory):
    base = tmp_path_factory.mktemp("grade")
    folder = base / "hand-ins"
    folder.mkdir()
    # Two run in the sandbox (one round of two workers); the others are refused before it.
    right = pack(executed, "ada", folder)  # ada-00_welcome.coursekit.zip, clean
    wrong = notebook(welcome_cells("world_size_ignored"), WELCOME).encode()
    # ben's: the notebook edited after packing, in ada's packed file with the assignment edited
    repack(right, folder / "ben-00_welcome.coursekit.zip", notebook=wrong, assignment="01_x")
    other = json.loads(notebook(answers()))  # module 1's answers, handed in for module 0
    pack(write(base / "eve" / "01_accumulation.ipynb", other), "eve")
    shutil.copy(base / "eve" / "eve-01_accumulation.coursekit.zip", folder)
    write(folder / "ivy.ipynb", other)  # a plain notebook, alongside
    (folder / "gus-00_welcome.coursekit.zip").write_bytes(zip_of({"../gus.ipynb": NB}))
    (folder / "lms-export.zip").write_bytes(zip_of({"x.ipynb": NB}))  # not a packed hand-in
    gradebook = base / "gradebook.sqlite"
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        status = main(
            [
                "grade",
                str(folder),
                "--assignment",
                WELCOME,
                "--json",
                "--workers",
                "2",
                "--gradebook",
                str(gradebook),
                "--root",
                str(REPO),
            ]
        )
    assert status == 0
    results = {r["student"]: r for r in map(json.loads, stdout.getvalue().splitlines())}
    with Gradebook(gradebook) as book:
        notes = {g.student: g.result["notes"] for g in book.current_grades(WELCOME)}
    return {"results": results, "notes": notes, "gradebook": gradebook, "base": base}


def flags(graded, student) -> list[str]:
    return [n for n in graded["notes"][student] if n.startswith("Flagged for review")]


@pytest.mark.slow  # over 4 s: out of the quick run (-m 'not slow')
def test_packed_and_plain_hand_ins_are_graded_together_named_by_file(graded):
    results = graded["results"]
    assert set(results) == {"ada", "ben", "eve", "gus", "ivy"}  # lms-export.zip is no hand-in
    ada = results["ada"]
    assert ada["score"] == ada["max_score"] > 0 and ada["error"] is None
    assert ada["path"].endswith("ada-00_welcome.coursekit.zip") and graded["notes"]["ada"] == []
    assert "This notebook is the 01_accumulation assignment" in results["ivy"]["error"]


def test_a_notebook_changed_after_packing_is_graded_as_handed_in_and_flagged(graded):
    assert 0 < graded["results"]["ben"]["score"] < graded["results"]["ben"]["max_score"]
    changed, student, assignment = flags(graded, "ben")
    assert "changed after `coursekit submit` packed it" in changed
    assert "names the student 'ada'" in student and "graded as ben's" in student
    assert "names the assignment '01_x'" in assignment and "graded as 00_welcome" in assignment
    assert len(graded["notes"]["ben"]) == 3  # no claims noted: they were about another notebook


def test_a_packed_notebook_of_another_assignment_is_refused_by_name(graded):
    eve = graded["results"]["eve"]
    assert eve["score"] == 0.0
    assert "This notebook is the 01_accumulation assignment" in eve["error"]


def test_an_unsafe_packed_file_costs_only_its_own_points(graded):
    gus = graded["results"]["gus"]
    assert gus["score"] == 0.0 and "points out of its folder" in gus["error"]
    assert not (graded["base"] / "gus.ipynb").exists()


def test_passed_checks_that_lost_points_are_noted_without_a_flag(tmp_path):
    stale = with_outputs(
        [(c, "[passed] effective_batch_size: 3 of 3") for c in welcome_cells("world_size_ignored")],
        WELCOME,
    )  # saved outputs say passed, but the code is wrong (it changed after its check ran)
    hand_in = read_hand_in(pack(write(tmp_path / "w.ipynb", stale), "fay"), WELCOME)
    assert hand_in.flags == () and hand_in.claimed_passed == ("effective_batch_size",)
    lost = {"name": "effective_batch_size", "score": 0.5, "max_score": 1.0}
    (note,) = _claim_notes(hand_in.claimed_passed, [lost])
    assert note.startswith("effective_batch_size: its check showed [passed]")
    assert _claim_notes(hand_in.claimed_passed, [lost | {"score": 1.0}]) == []


def test_flags_reach_the_feedback_page(graded, tmp_path):
    out = tmp_path / "html"
    assert main(["export", "--gradebook", str(graded["gradebook"]), "--format", "html",
                 "--out", str(out)]) == 0  # fmt: skip
    page = (out / f"ben_{WELCOME}.html").read_text()
    assert "About your hand-in" in page and "Flagged for review" in page
