"""Gradescope's autograder format: one zip per assignment, graded by coursekit's own grader.

Gradescope's "Autograder Specifications"
(https://gradescope-autograders.readthedocs.io/en/latest/specs/) ask for a zip with
``setup.sh`` and ``run_autograder`` at its root. Gradescope unpacks it into
``/autograder/source`` and runs ``setup.sh`` once, when it builds the image (Ubuntu). For
each submission it puts the student's files in ``/autograder/submission/`` (an uploaded zip
unpacked there, folders and all), runs ``/autograder/run_autograder`` from ``/autograder``,
and reads ``/autograder/results/results.json``: ``score``, ``output`` (for the whole
submission), ``execution_time``, ``extra_data`` (for the instructor only) and ``tests``, each
with ``name``, ``score``, ``max_score``, ``output``, ``visibility`` and ``tags``. Students see
the tests that are not ``hidden`` and the output; what ``run_autograder`` prints goes to
``/autograder/results/stdout``, shown to the instructor (and to students only if
``stdout_visibility`` says so, which these results never do).

:func:`build_bundle` writes that zip. It carries the assignment's source notebook (the
reference solution, which the grader runs on every submission), the record of every release's
demo cells (``notebooks/released-demos.json``), a copy of coursekit's source
(``setup.sh`` installs it with the CPU build of the pinned torch), and the grading settings
(the limits). :func:`run_autograder` grades one submission with the same grader, judging and
feedback as ``coursekit grade``, on hidden tests drawn from a seed of its own: every
submission and resubmission meets a new draw, so what one run's feedback shows of its hidden
tests tells nothing about the next. The seed stays in the grading process's memory until the
results are written, then goes to the instructor's side only (stdout and ``extra_data``),
with the ``coursekit grade --seed`` command that grades the submission again on the same
tests. It writes ``results.json`` whatever the submission holds, as Gradescope's "Code
Autograder Best Practices" ask
(https://gradescope-autograders.readthedocs.io/en/latest/best_practices/): a missing,
unreadable or blank hand-in gets 0 and says why. Where the grader itself fails (or its Python
does not start, or is killed), no ``results.json`` is written: Gradescope records no score
("the autograder failed"), never a 0, and the autograder output says why. A hand-in
flagged for review also gets a hidden test of 0 points, "Flagged for review", tagged
``flagged-for-review``, that lists the flags for the instructor.

Example::

    build_bundle(Path("."), "01_accumulation", Path("autograder.zip"))
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shlex
import sys
import time
import traceback
import zipfile
from dataclasses import asdict
from pathlib import Path
from types import SimpleNamespace

from coursekit.commands.real_python import (  # noqa: F401  (python_at_its_real_path: tests)
    python_at_its_real_path,
    start_again_at_the_real_path,
)
from coursekit.grading.records.exports import points
from coursekit.grading.sandbox.driver import Limits

CONFIG = "coursekit-autograder.json"  # the grading settings, at the zip's root
COURSE = "course"  # the folder, in the zip, that holds notebooks/ (the assignment's, the record)
PACKAGE = "coursekit-src"  # the folder, in the zip, that holds coursekit's source
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
_ZIP_TIME = (1980, 1, 1, 0, 0, 0)  # the same inputs give the same zip
# judging.judge_test's words for a function that still raises NotImplementedError
_NOT_ATTEMPTED = "is not attempted"
_FLAG = "Flagged for review"  # how grader.grade_path begins each flag among its notes
FLAG_TAG = "flagged-for-review"  # the hidden test's tag: filter submissions by it
# What build_bundle returns as its "seed" (never written to the zip): `coursekit gradescope`
# prints the settings' seed.
MAX_NAMES = 10  # submission files named in a message, at most

SETUP_SH = """#!/usr/bin/env bash
# Gradescope runs this once, when it builds the autograder's image (Ubuntu 22.04).
# A virtual environment keeps pip off the system's Python (Ubuntu 24.04 refuses that).
set -euo pipefail
ROOT="${{AUTOGRADER_ROOT:-/autograder}}"
SOURCE="$ROOT/source"  # where Gradescope unpacks the zip
export DEBIAN_FRONTEND=noninteractive
apt-get update
apt-get install -y --no-install-recommends python3 python3-pip python3-venv
python3 -m venv "$ROOT/venv"
"$ROOT/venv/bin/python" -m pip install --upgrade pip
# torch first, from the CPU index: coursekit's "torch>=2.9" is then met, and pip fetches no
# CUDA build (gigabytes that a CPU-only container never uses).
"$ROOT/venv/bin/python" -m pip install --index-url {index} "torch=={torch}"
"$ROOT/venv/bin/python" -m pip install "$SOURCE/{package}"
"$ROOT/venv/bin/python" -c "import coursekit.checks, torch; print('torch', torch.__version__)"
"""

RUN_AUTOGRADER = """#!/usr/bin/env bash
# Gradescope runs this once per submission. AUTOGRADER_ROOT (default /autograder) lets the
# same script run in a folder laid out like Gradescope's (coursekit's tests do).
ROOT="${AUTOGRADER_ROOT:-/autograder}"
export AUTOGRADER_ROOT="$ROOT"
PYTHON="$ROOT/venv/bin/python"  # made by setup.sh (a link to another venv is followed there)
[ -x "$PYTHON" ] || PYTHON="$(command -v python3)"
mkdir -p "$ROOT/results"
if [ "$(id -u)" = 0 ]; then
  # Before any Python starts: the hand-in runs as another user, so none of this script,
  # the bundle (the reference solution), the submission or the results is its to read or
  # write. It may still pass through $ROOT to read and run $ROOT/venv (left as setup.sh
  # made it: readable by all).
  for path in "$ROOT/source" "$ROOT/results" "$ROOT/submission" "$ROOT/run_autograder"; do
    [ -e "$path" ] && chmod 700 "$path"
  done
  # Gradescope's record of the submitter and of earlier submissions' results
  [ -e "$ROOT/submission_metadata.json" ] && chmod 600 "$ROOT/submission_metadata.json"
  chmod 711 "$ROOT"
fi
rm -f "$ROOT/results/results.json"  # only this run's may stand
cd "$ROOT" || exit 1
"$PYTHON" -m coursekit.commands.gradescope
status=$?
if [ ! -s "$ROOT/results/results.json" ]; then
  # The grader failed (it said why above), or its Python could not start or was killed: no
  # results.json, so Gradescope records no score ("the autograder failed"), never a 0.
  rm -f "$ROOT/results/results.json"
  echo "Not graded: the autograder ended without a result (exit status $status). No score" \
    "was recorded; fix the autograder, then use Gradescope's regrade."
  [ "$status" -ne 0 ] || status=1
fi
exit "$status"
"""


# ---------------------------------------------------------------------------- the bundle


def torch_pin(root: Path) -> str:
    """The torch version ``scripts/setup`` pins (``COURSEKIT_TORCH:-X``): what the course is
    tested with, so the bundle installs the same."""
    setup = root / "scripts" / "setup"
    try:
        text = setup.read_text(encoding="utf-8")
    except OSError:
        text = ""
    found = re.search(r"COURSEKIT_TORCH:-([0-9][0-9A-Za-z.]*)\}", text)
    if not found:
        raise ValueError(
            f"No torch version is pinned in {setup} (a line with COURSEKIT_TORCH:-VERSION). "
            "Pass the version with --torch."
        )
    return found.group(1)


def setup_script(torch_version: str) -> str:
    """``setup.sh``: Python, the CPU build of ``torch_version``, then coursekit from the zip."""
    return SETUP_SH.format(index=CPU_INDEX, torch=torch_version, package=PACKAGE)


def _package_files(root: Path) -> dict[str, Path]:
    """Zip name -> file, for coursekit's source: ``pyproject.toml``, the README it names, and
    ``coursekit/`` without caches. Copied as source, not built into a wheel: copying needs
    no build tools (or network) here; the image build, which has both, installs it once."""
    files = {f"{PACKAGE}/{name}": root / name for name in ("pyproject.toml", "README.md")}
    package = root / "coursekit"
    for path in sorted(package.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
            files[f"{PACKAGE}/{path.relative_to(root).as_posix()}"] = path
    missing = [str(path) for path in files.values() if not path.is_file()]
    if missing or not (package / "__init__.py").is_file():
        raise ValueError(
            f"{root} is not a coursekit course with its package (missing: "
            f"{', '.join(missing) or package / '__init__.py'}). Run this in the course "
            "repository, or pass --root."
        )
    return files


def _add(archive: zipfile.ZipFile, name: str, data: bytes, mode: int = 0o644) -> None:
    info = zipfile.ZipInfo(name, _ZIP_TIME)
    info.external_attr = (0o100000 | mode) << 16  # a regular file, with its permissions
    info.compress_type = zipfile.ZIP_DEFLATED
    archive.writestr(info, data)


def build_bundle(
    root: Path,
    assignment: str,
    out: Path,
    limits: Limits | None = None,
    seed: int | None = None,
    torch_version: str | None = None,
) -> dict:
    """Write Gradescope's autograder zip for ``assignment`` to ``out``; return its settings.

    ``limits`` are those of ``coursekit grade`` (its defaults unless given); ``torch_version``
    defaults to the pin in ``scripts/setup``. Each submission draws its hidden tests from a
    seed of its own, so a bundle takes no ``seed``: one given is refused (ValueError), since a
    seed fixed in the zip would give every submission and resubmission the same draw. The
    settings hold no seed (an older bundle's ``seed`` key is read and never used).
    """
    from coursekit import __version__
    from coursekit.checks import questions_of

    root = Path(root).resolve()
    if not questions_of(assignment):
        raise ValueError(f"No graded assignment named {assignment!r}: check --assignment.")
    source = root / "notebooks" / f"{assignment}.ipynb"
    if not source.is_file():
        raise ValueError(f"No source notebook {source}: run this in the course repository.")
    limits = limits or Limits()
    if not (limits.wall_factor >= 1 and min(asdict(limits).values()) > 0):
        raise ValueError("Time and memory limits must be above 0, and the wall factor at least 1.")
    if torch_version is not None and not re.fullmatch(r"[0-9][0-9A-Za-z.+]*", torch_version):
        raise ValueError(f"{torch_version!r} is not a torch version (for example 2.13.0).")
    if seed is not None:
        raise ValueError(
            "A Gradescope bundle takes no --seed: each submission draws its hidden tests from "
            "a new seed, which its autograder output shows (so a seed fixed in the zip would "
            "give every submission the same hidden tests). To grade a submission again on the "
            "tests it met, run `coursekit grade` with that --seed (docs/instructor-guide.md, "
            "Gradescope)."
        )
    settings = {
        "assignment": assignment,
        "limits": asdict(limits),
        "torch": torch_version or torch_pin(root),
        "coursekit": __version__,
    }
    record = _record_bytes(root)
    files = _package_files(root)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(out, "w") as archive:
        _add(archive, "setup.sh", setup_script(settings["torch"]).encode(), 0o755)
        _add(archive, "run_autograder", RUN_AUTOGRADER.encode(), 0o755)
        _add(archive, CONFIG, (json.dumps(settings, indent=2) + "\n").encode())
        _add(archive, f"{COURSE}/notebooks/{source.name}", source.read_bytes())
        if record is not None:  # earlier releases' demo cells: skipped like the current ones
            _add(archive, f"{COURSE}/{record[0]}", record[1])
        for name, path in files.items():
            _add(archive, name, path.read_bytes())
    return settings


def _record_bytes(root: Path) -> tuple[str, bytes] | None:
    """(path, bytes) of ``notebooks/released-demos.json`` as it is, checked (a ValueError
    that says what to do if it is not a record); None for a course without one."""
    from coursekit.authoring.released_demos import RECORD, read_record

    try:
        read_record(root)
    except FileNotFoundError:
        return None
    return RECORD.as_posix(), (root / RECORD).read_bytes()


# ---------------------------------------------------------------------- one submission


class _NotGraded(Exception):
    """The submission cannot be graded; the message is for the student."""


def find_submission(folder: Path, assignment: str) -> Path:
    """The notebook or packed hand-in in Gradescope's submission folder, at any depth.

    Gradescope unpacks an uploaded zip there, so a folder zipped whole gives
    ``hw/01_accumulation.ipynb``. Files are found as ``coursekit grade`` finds them in a
    folder (:mod:`coursekit.grading.collect`): notebooks and packed hand-ins, none in a hidden
    folder (``.ipynb_checkpoints``) or macOS's ``__MACOSX``, none hidden itself. With several,
    the one whose name holds the assignment's (``00_welcome.ipynb``,
    ``ada-00_welcome.coursekit.zip``); otherwise the student is told which were found (those
    so named, if several are) and asked to upload one.
    """
    from coursekit.grading.collect import _files_under
    from coursekit.grading.packed import PACKED_SUFFIX
    from coursekit.grading.text import lossless

    found = sorted(_files_under(folder) if folder.is_dir() else [])
    if len(found) > 1:
        named = [path for path in found if assignment in path.name]
        found = named or found  # several named so: those are the ones to choose from
    if not found:
        raise _NotGraded(
            f"No notebook was found in the submission. Upload your {assignment}.ipynb (or the "
            f"{assignment} file `coursekit submit` made, ending in {PACKED_SUFFIX})."
        )
    if len(found) > 1:
        shown = [lossless(path.relative_to(folder).as_posix()) for path in found]
        names = ", ".join(shown[:MAX_NAMES])
        if len(shown) > MAX_NAMES:
            names += f" and {len(shown) - MAX_NAMES} more"
        raise _NotGraded(
            f"The submission holds several notebooks ({names}). Upload only your "
            f"{assignment} notebook."
        )
    return found[0]


def _zero_results(assignment: str, why: str) -> dict:
    """0 points on every question, and ``why`` for the whole submission."""
    try:
        from coursekit.checks import questions_of

        questions = questions_of(assignment)
    except Exception:  # the grader cannot even list its questions: still write results
        questions = []
    tests = [
        {
            "name": question.name,
            "score": 0.0,
            "max_score": float(question.points),
            "output": "Not graded: see the message above.",
            "visibility": "visible",
        }
        for question in questions
    ]
    return {"score": 0.0, "output": why, "visibility": "visible", "tests": tests}


def results_of(result) -> dict:
    """``results.json`` for one :class:`~coursekit.grading.grader.GradeResult`.

    The tests are ``coursekit export --format gradescope``'s (one per question: its score and
    feedback), with the mistakes the judge named added to each; the submission's output holds
    the score, the error if there is one, and the grader's notes (cells that failed or timed
    out, flags for review).
    """
    from coursekit.grading.records.exports import gradescope_results
    from coursekit.grading.text import lossless

    public = result.public()
    results = gradescope_results(
        SimpleNamespace(result=public, score=result.score, error=result.error)
    )
    for test, question in zip(results["tests"], public["questions"], strict=True):
        if question["mistakes"]:
            test["output"] += " Mistakes named: " + ", ".join(question["mistakes"]) + "."
    lines = [f"Score: {points(result.score)} / {points(result.max_score)}."]
    if result.error:
        lines.append(lossless(result.error))
    questions = public["questions"]
    if questions and not result.error and all(_NOT_ATTEMPTED in q["feedback"] for q in questions):
        lines.append(
            "No question was attempted: every function to write still raises "
            "NotImplementedError. Write your answers in the notebook, save it, and upload it "
            "again."
        )
    if result.notes:
        lines += ["", "About your hand-in (these cost no points; they may explain a failing test):"]
        lines += [f"- {lossless(note)}" for note in result.notes]
    results["output"] = "\n".join(lines)
    flags = flags_of(result)
    if flags:  # the student still reads them among the notes above; this is the instructor's
        results["tests"].append(
            {
                "name": _FLAG,
                "score": 0.0,
                "max_score": 0.0,
                "output": "An instructor should read this hand-in (it costs no points):\n"
                + "\n".join(f"- {flag}" for flag in flags),
                "visibility": "hidden",  # Gradescope shows hidden tests to instructors only
                "tags": [FLAG_TAG],
            }
        )
    return results


def flags_of(result) -> list[str]:
    """The grader's flags for review among a result's notes (each begins "Flagged for review"),
    as lossless text."""
    from coursekit.grading.text import lossless

    return [lossless(note) for note in result.notes if note.startswith(_FLAG)]


def _grade(root: Path, settings: dict, seed: int, extra: dict) -> dict:
    """Grade the one submission under ``root`` as ``coursekit grade`` would, its hidden tests
    drawn from ``seed``; its results. What is for the instructor alone goes into ``extra``
    (``extra_data``) as it is learnt: the file graded, then the flags."""
    from coursekit.grading.collect import student_for_file
    from coursekit.grading.handin import HandInError, read_hand_in
    from coursekit.grading.sandbox.warm_parent import WarmParent
    from coursekit.grading.text import lossless

    assignment = settings["assignment"]
    path = find_submission(root / "submission", assignment)
    student = lossless(student_for_file(path, assignment))
    extra["submission"] = lossless(path.relative_to(root / "submission").as_posix())
    warm = WarmParent()
    warm.launch()  # it imports torch while this process imports the grader
    try:
        try:  # before the reference runs: an unreadable file needs no sandbox to be told so
            read_hand_in(path, assignment, student)
        except HandInError as error:
            raise _NotGraded(str(error)) from None
        from coursekit.grading.grader import grade_with_retries, prepare
        from coursekit.grading.sandbox.driver import Options, describe_confinement, mode_of
        from coursekit.grading.sandbox.read_shield import Protected, shielding

        # not waited for here: prepare() computes coursekit's answers first, then waits
        course = root / "source" / COURSE
        # The seed stays in this process: no file or environment holds it, and the hand-in's
        # process (forked by the warm parent, a program of its own started before the seed
        # was drawn) is sent only the specs it draws, one test at a time. An older bundle's
        # settings["seed"] is not used: it would give every submission the same draw.
        # the whole bundle (reference, settings, coursekit's source), the results and the
        # submission are hidden from the hand-in, whatever confines it here
        hidden = tuple(str(root / name) for name in ("source", "results", "submission"))
        limits = Limits(**settings["limits"])
        # where the submission shares the container's files, they are checked (as its user)
        # to be closed to it before it runs; run_autograder has made them root's alone
        protected = Protected(required=[Path(h).resolve() for h in hidden])
        with shielding(protected, course):
            plan = prepare(
                course, assignment, limits, seed, options=Options(hidden=hidden), warm=warm
            )
            present, missing = describe_confinement(plan.confinement)
            print(f"Mode: {mode_of(plan.confinement)}.")
            print(f"Sandbox: {'; '.join(present)}.")
            for line in missing:
                print(f"Warning: the sandbox here has no {line}")
            # a failure of the grader's own machinery is graded again on a fresh process
            result = grade_with_retries(str(path), student, plan, warm)
            if result.not_graded:  # every try failed: the grader's failure, below
                raise RuntimeError(f"the grader failed on every try: {result.not_graded}")
    finally:
        warm.close()
    print(json.dumps(result.public(), indent=2))  # for the instructor: Gradescope's stdout
    flags = flags_of(result)
    if flags:
        extra["flags"] = flags
    return results_of(result)


def regrade_command(settings: dict, seed: int, submission: str = "SUBMISSION") -> str:
    """The ``coursekit grade`` command that grades a submission again on the hidden tests it
    met here (run in the course repository, at the commit the zip was built from)."""
    limits = Limits(**settings["limits"])
    return (
        f"coursekit grade {submission} --assignment {settings['assignment']} --seed {seed} "
        f"--regrade --gradebook gradescope-regrades.sqlite "
        f"--cell-timeout {limits.cell_timeout_s:g} --test-timeout {limits.task_timeout_s:g} "
        f"--timeout {limits.hand_in_timeout_s:g} --wall-factor {limits.wall_factor:g} "
        f"--memory-mb {limits.memory_bytes // 2**20}"
    )


def run_autograder(root: Path) -> dict | None:
    """Grade the submission in ``root/submission`` and write ``root/results/results.json``.

    Never raises for the submission's sake: a missing, unreadable or blank hand-in gets 0
    with a message that says why. A failure of the grader itself (in every one of its tries)
    is never a score: no ``results.json`` is written (one left from before is removed), so
    Gradescope shows the submission as not graded ("the autograder failed") and keeps no
    score for it; the reason and traceback go to stdout for the instructor, who can regrade
    it. Returns the results written, or None where none were.

    The hidden tests are drawn from a seed drawn here, for this run alone. It is kept in
    this process's memory until ``results.json`` is written, then printed (stdout, which
    Gradescope shows to the instructor) and recorded in ``extra_data`` (which students do
    not see); never in the output or a test that students see.
    """
    started = time.monotonic()
    seed = secrets.randbits(63)
    assignment = "?"
    extra: dict = {}
    try:
        settings = json.loads((root / "source" / CONFIG).read_text(encoding="utf-8"))
        assignment = settings["assignment"]
        results = _grade(root, settings, seed, extra)
    except _NotGraded as why:
        results = _zero_results(assignment, f"Score: 0. {why}")
    except Exception as error:  # the grader's failure, not the student's: no score at all
        traceback.print_exc(file=sys.stdout)
        (root / "results" / "results.json").unlink(missing_ok=True)
        print(
            f"Not graded: the grader itself failed ({type(error).__name__}), not because of "
            "the notebook. No results.json was written, so Gradescope records no score; "
            "regrade the submission once the autograder is fixed."
        )
        return None
    results["execution_time"] = round(time.monotonic() - started, 1)
    results["stdout_visibility"] = "hidden"  # the seed and the grader's own record: not theirs
    # The seed as a string too: it has 63 random bits, and a JSON reader that holds numbers
    # as doubles (JavaScript's, Gradescope's pages) rounds any integer above 2**53.
    results["extra_data"] = {"seed": seed, "seed_text": str(seed), **extra}
    # Written here, after _grade returned: grade_path returns only once every process of
    # the hand-in has ended, so nothing of the hand-in's is left to change results.json
    # (or read the seed) once it is written.
    out = root / "results" / "results.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    print(f"Seed of this submission's hidden tests: {seed} (extra_data.seed in results.json).")
    if "submission" in extra:  # a file was found (settings too): the command grades it again
        submission = shlex.quote(Path(extra["submission"]).name)
        print(
            "To grade it again on the same hidden tests, download the submission and run, in "
            "the course repository at the commit this zip was built from:\n  "
            + regrade_command(settings, seed, submission)
        )
    return results


def main() -> int:
    """``python -m coursekit.commands.gradescope``: what ``run_autograder`` runs."""
    start_again_at_the_real_path("coursekit.commands.gradescope", [])
    from coursekit.commands.quick_start import skip_unused_iri_grammars

    skip_unused_iri_grammars()  # 1.9 s sooner for each hand-in (quick_start.py)
    root = Path(os.environ.get("AUTOGRADER_ROOT") or "/autograder")
    results = run_autograder(root)
    if results is None:  # the grader failed: Gradescope shows it as not graded
        return 1
    print(f"Wrote {root / 'results' / 'results.json'}: {points(results['score'])} points.")
    return 0


if __name__ == "__main__":
    from coursekit.commands.quick_exit import end_now

    status = main()
    end_now(status)  # 0.7 s sooner for each hand-in (quick_exit.py)
    raise SystemExit(status)
