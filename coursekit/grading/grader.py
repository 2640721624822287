"""``coursekit grade``: prepare the reference once, grade each hand-in in its own sandbox.

The reference is the source notebook's solution, run in a sandbox of its own on the very
specs (public and drawn-at-grading-time hidden ones) that each hand-in then gets. Judging
happens here, in the grader, never in a process that ran a hand-in's code.

A failure of the grader's own machinery on a hand-in (a bug, a runner that was never ready or
was lost) is no grade: the hand-in is graded again from the start on a fresh process, and if
it fails every time it is returned *not graded*, with the reason (:attr:`GradeResult.not_graded`),
never a score. Only the machine failing for hand-in after hand-in stops the batch.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import queue
import random
import re
import secrets
import stat
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import nbformat

from coursekit.authoring.build import read_source, render
from coursekit.authoring.demo_cells import DEMO_TAG, released_demos, skippable
from coursekit.authoring.released_demos import read_record
from coursekit.checks import QUESTIONS, questions_of
from coursekit.checks.memory_peak import MeasurementFailed
from coursekit.checks.question import Failure
from coursekit.grading.handin import HandIn, HandInError, read_hand_in
from coursekit.grading.judging import as_dict, judge_question, task_outputs
from coursekit.grading.sandbox.driver import (
    Limits,
    Options,
    SandboxSetupError,
    WarmParent,
    close_spares,
    keep_spares,
    run_hand_in,
)
from coursekit.grading.sandbox.errors import GraderFault, RunnerSetupError
from coursekit.grading.sandbox.lanes import Lanes
from coursekit.grading.text import capped_notes, for_terminal, lossless


class GraderError(RuntimeError):
    """The grader itself cannot run (not a problem of any one hand-in)."""


#: How many times a hand-in is graded afresh when the grader's own machinery fails on it.
MACHINERY_TRIES = 3
#: Hand-ins in a row the grader failed on (none graded between) that stop the batch: the
#: machine is failing, not one hand-in.
FAILING_IN_A_ROW = 4


@dataclass
class GradeResult:
    path: str
    student: str
    assignment: str
    sha256: str = ""
    score: float = 0.0
    max_score: float = 0.0
    questions: list[dict] = field(default_factory=list)
    error: str | None = None
    notes: list[str] = field(default_factory=list)  # cells that failed: context, no points
    seconds: float = 0.0
    seed: int | None = None  # the run's hidden draw: `grade --seed` reproduces its specs
    # set when the grader's own machinery failed on it every time: why. It has no score
    not_graded: str | None = None

    def public(self) -> dict:
        """The ``--json`` object: what a hand-in got, and why (notes: cells that failed,
        timed out or ended the process, and flags for review). A hand-in the grader failed
        on has no score (None) and says why in ``not_graded``."""
        return {
            "path": self.path,
            "student": self.student,
            "assignment": self.assignment,
            "score": None if self.not_graded else self.score,
            "not_graded": self.not_graded,
            "max_score": self.max_score,
            "questions": [
                {
                    **{k: q[k] for k in ("name", "score", "max_score", "feedback")},
                    "mistakes": list(q.get("mistakes", [])),
                }
                for q in self.questions
            ],
            "error": self.error,
            "notes": list(self.notes),
            "seed": self.seed,
            # 63 random bits: a JSON reader that holds numbers as doubles rounds the integer
            "seed_text": None if self.seed is None else str(self.seed),
        }


@dataclass
class Plan:
    """Everything a worker needs to grade hand-ins of one assignment (all plain data)."""

    assignment: str
    specs: dict[str, list[dict]]
    expected: dict[str, list[dict]]
    limits: Limits
    options: Options = field(default_factory=Options)
    confinement: dict = field(default_factory=dict)  # what the reference run's sandbox had
    closed: list = field(default_factory=list)  # folders made unreadable to other users
    seed: int | None = None  # the hidden draw's seed: the same seed draws the same specs
    demos: dict[str, str] = field(default_factory=dict)  # released demo cells: id -> source
    # every release's demo cells (notebooks/released-demos.json): id -> sha256 of each source
    earlier_demos: dict[str, list[str]] = field(default_factory=dict)

    @property
    def max_score(self) -> float:
        return float(sum(QUESTIONS[name].points for name in self.specs))

    def tasks(self) -> list[dict]:
        return [{"question": q, "spec": s} for q, specs in self.specs.items() for s in specs]


def draw_specs(assignment: str, rng: random.Random) -> dict[str, list[dict]]:
    """Public specs plus hidden ones drawn now, for each question of the assignment."""
    questions = questions_of(assignment)
    if not questions:
        raise GraderError(f"The assignment {assignment!r} has no graded questions.")
    return {q.name: q.public_specs() + q.hidden_specs(rng) for q in questions}


def _rendered(root: Path, assignment: str, folder: str) -> nbformat.NotebookNode:
    source = root / "notebooks" / f"{assignment}.ipynb"
    if not source.exists():
        raise GraderError(f"No source notebook {source} for the assignment {assignment!r}.")
    text = render(read_source(source), str(source.relative_to(root)), folder)
    return nbformat.reads(text, as_version=4)


def solution_cells(root: Path, assignment: str, demos: bool = False) -> list[str | None]:
    """The code cells of the source notebook's solution (no hidden tests, no markers); its
    demonstration cells are None (not run) unless ``demos``."""
    notebook = _rendered(root, assignment, "solutions")
    return [
        c.source if demos or DEMO_TAG not in c.metadata.get("tags", []) else None
        for c in notebook.cells
        if c.cell_type == "code"
    ]


def exercise_demos(root: Path, assignment: str) -> dict[str, str]:
    """The demonstration cells of the exercise notebook as released: cell id -> source."""
    return released_demos(_rendered(root, assignment, "exercises"))


def recorded_demos(root: Path, assignment: str) -> dict[str, list[str]]:
    """The demo cells of every release of the assignment, from the course's
    ``notebooks/released-demos.json``: cell id -> sha256 of each source.

    Without a readable record, only the current release's demo cells are skipped (a warning
    says so for a corrupt one): grading goes on, it only runs more demonstrations.
    """
    try:
        record = read_record(root)
    except FileNotFoundError:
        return {}
    except Exception as error:  # noqa: BLE001 - a bad record costs time, never a grade
        print(
            f"coursekit grade: {error} Until then only demo cells as in the current release "
            "are skipped.",
            file=sys.stderr,
        )
        return {}
    return {cell_id: list(hashes) for cell_id, hashes in record.get(assignment, {}).items()}


def prepare(
    root: Path,
    assignment: str,
    limits: Limits,
    seed: int | None = None,
    options: Options | None = None,
    warm: WarmParent | None = None,
) -> Plan:
    """Draw the specs and compute the reference's outputs on them, checked against coursekit.

    The course's folder is hidden from every sandbox (its ``notebooks/`` hold the reference).
    The reference runs without its demonstration cells, as an unchanged hand-in does.
    """
    if seed is None:
        seed = secrets.randbits(63)  # recorded with every grade, so a run can be repeated
    specs = draw_specs(assignment, random.Random(seed))
    options = options or Options()
    options = replace(options, hidden=(*options.hidden, str(root.resolve())))
    plan = Plan(assignment, specs, {}, limits, options, seed=seed)
    plan.demos = exercise_demos(root, assignment)
    plan.earlier_demos = recorded_demos(root, assignment)
    reference_limits = Limits(
        **{**asdict(limits), "hand_in_timeout_s": max(limits.hand_in_timeout_s, 600.0)}
    )
    cells = solution_cells(root, assignment)
    # coursekit's own answers on the same specs, computed here while a warm parent launched
    # by the caller is still importing torch in its own process (seconds, on another core)
    try:
        oracles = {
            name: [QUESTIONS[name].run(QUESTIONS[name].reference(), spec) for spec in tests]
            for name, tests in specs.items()
        }
    except MeasurementFailed as error:  # a memory test's fork, here: the machine's
        raise GraderError(f"The reference solution's memory test could not run: {error}") from None
    if warm is not None:
        warm.start()  # waits for it, unless it is ready (or starts it, unless launched)
    for tries_left in range(MACHINERY_TRIES - 1, -1, -1):
        try:
            run = run_hand_in(cells, plan.tasks(), reference_limits, options, warm=warm)
            break
        except (RunnerSetupError, GraderFault) as error:  # a fresh process may well work
            if not tries_left:
                raise GraderError(f"The grading sandbox could not be set up: {error}") from None
        except SandboxSetupError as error:
            raise GraderError(f"The grading sandbox could not be set up: {error}") from None
    plan.confinement = run.confinement
    plan.closed = close_to_hand_ins([root / "notebooks"], run.confinement)
    if run.failure or len(run.tasks) != len(plan.tasks()):
        raise GraderError(f"The reference solution of {assignment} could not run: {run.failure}")
    records = iter(run.tasks)
    for name, question_specs in specs.items():
        question = QUESTIONS[name]
        plan.expected[name] = []
        for spec, oracle in zip(question_specs, oracles[name], strict=True):
            record = next(records)
            if record.get("status") != "ok":
                raise GraderError(f"The reference solution fails {name} on {spec}: {record}")
            outputs = task_outputs(record)
            if outputs is None:
                raise GraderError(
                    f"The reference solution of {name} returned no outputs on {spec}."
                )
            try:
                question.judge(spec, outputs, oracle)
            except Failure as failure:
                raise GraderError(
                    f"The reference solution of {name} in notebooks/{assignment}.ipynb disagrees "
                    f"with coursekit's own on {spec}: {failure.message}"
                ) from None
            plan.expected[name].append(outputs)
    return plan


def close_to_hand_ins(paths, confinement: dict) -> list[str]:
    """Where hand-ins run as a user of their own on the host's files (no root of their own),
    take every permission of other users off ``paths`` (the course's ``notebooks/``, with the
    reference and the hidden tests; the hand-ins graded), so that ownership and permissions
    keep them out, not Landlock alone. Returns the paths changed (``grade`` says so)."""
    if not confinement.get("hand_in_user") or (confinement.get("root") or {}).get("root"):
        return []
    changed = []
    for path in paths:
        try:
            mode = os.stat(path).st_mode
            if mode & 0o007:
                os.chmod(path, stat.S_IMODE(mode) & ~0o007)
                changed.append(str(path))
        except OSError:
            continue
    return changed


# Code a notebook has no business running: it reaches into the grader's own machinery.
# Such hand-ins are still graded, and flagged for the instructor to read.
_SUSPICIOUS = re.compile(
    r"coursekit\.(checks|grading)|\bQUESTIONS\b|\.reference\(|gc\.get_objects|_getframe"
    r"|__globals__|\bf_back\b|\bf_locals\b|run_tasks|result\.json|progress\.txt"
    r"|_forward_pre_hooks|_forward_hooks|_backward_hooks|_post_accumulate_grad_hooks"
    r"|__self__|__closure__|_step_pre_hooks|optimizer_step_pre_hooks"
)


def suspicious(cells: list[str]) -> list[str]:
    """Sorted distinct matches of :data:`_SUSPICIOUS` in the hand-in's code."""
    return sorted({m.group(0) for source in cells for m in _SUSPICIOUS.finditer(source)})


def file_sha256(path: str | Path) -> str:
    """SHA-256 of a regular file's bytes ("" for anything else: a link, a FIFO, a folder)."""
    digest = hashlib.sha256()
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return ""
    with os.fdopen(descriptor, "rb") as handle:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            return ""
        while chunk := handle.read(2**20):
            digest.update(chunk)
    return digest.hexdigest()


FIRST_LINE_CHARS = 60  # of a cell's first line, in a note that names the cell


def cell_name(hand_in: HandIn, index: int) -> tuple[str, str]:
    """(the cell's number as the student counts it in JupyterLab, from the top with text
    cells too; a sentence that quotes its first line) for the hand-in's code cell ``index``."""
    positions = hand_in.cell_positions
    known = 0 <= index < len(positions)
    number = positions[index] if known else index + 1
    source = hand_in.cells[index] if 0 <= index < len(hand_in.cells) else ""
    first = next((line.strip() for line in source.splitlines() if line.strip()), "")
    if len(first) > FIRST_LINE_CHARS:
        first = first[: FIRST_LINE_CHARS - 1] + "…"
    shown = f'starts "{lossless(first)}"' if first else "is empty"
    counted = "cells counted from the top, text cells too" if known else "code cells counted"
    return str(number), f"That cell {shown} ({counted})."


def _cell_notes(run, hand_in: HandIn) -> list[str]:
    """One note per cell that failed, timed out or ended the process: no points, context.
    Each names the cell as the student sees it: its place among all cells, its first line."""
    notes = []
    for index, why in sorted(run.killed_cells.items()):
        number, first = cell_name(hand_in, index)
        notes.append(
            f"Cell {number} was skipped: {why}. Grading ran the rest of the notebook without "
            f"it. {first}"
        )
    for cell in run.cells:
        number, first = cell_name(hand_in, cell.get("index", 0))
        if cell.get("status") == "timeout":
            notes.append(
                f"Cell {number} took too long: it was stopped at the time limit for one cell. "
                f"{first}"
            )
        elif cell.get("status") == "error":
            error = str(cell.get("error", "an error"))[:300]  # the note keeps its first line
            notes.append(f"Cell {number} raised {error}. {first}")
    return notes


def cells_to_run(hand_in: HandIn, plan: Plan) -> list[str | None]:
    """The hand-in's code cells, with None for each demonstration cell grading may skip (left
    as this or an earlier release gave it, and nothing that runs uses its names)."""
    ids = list(hand_in.cell_ids) + [None] * (len(hand_in.cells) - len(hand_in.cell_ids))
    cells = list(zip(ids, hand_in.cells, strict=False))
    skip = skippable(cells, plan.demos, plan.earlier_demos)
    return [None if index in skip else source for index, source in enumerate(hand_in.cells)]


_JUDGING = threading.Lock()  # judges may seed torch's global generator: one at a time


def grade_path(path: str, student: str, plan: Plan, warm: WarmParent | None = None) -> GradeResult:
    """Grade one hand-in file. Never raises for a hand-in's sake: errors become results."""
    started = time.monotonic()
    result = GradeResult(
        path=lossless(path), student=student, assignment=plan.assignment, seed=plan.seed
    )
    result.max_score = plan.max_score
    result.sha256 = file_sha256(path)  # also for files that are no notebook: grade them once
    try:
        hand_in = read_hand_in(path, plan.assignment, student)
    except HandInError as error:
        result.error = lossless(error)
        result.questions = _zero(plan, "Not graded: see the error.")
        result.seconds = time.monotonic() - started
        return result
    result.sha256 = hand_in.sha256
    run = run_hand_in(
        cells_to_run(hand_in, plan), plan.tasks(), plan.limits, plan.options, warm=warm
    )
    result.notes = _cell_notes(run, hand_in)
    flags = [f"Flagged for review: {flag}." for flag in hand_in.flags]
    found = suspicious(hand_in.cells)
    if found:
        flags.insert(
            0,
            "Flagged for review: the notebook uses the grader's own machinery "
            f"({', '.join(found)}); an instructor will read it.",
        )
    flags += [
        f"Flagged for review: while it ran, {what}; an instructor will read it."
        for what in run.flags
    ]
    if run.flags_over_cap:
        flags.append(
            f"Flagged for review: {run.flags_over_cap} more flags came while it ran than this "
            "note shows (a notebook may send flags of its own to crowd out real ones)."
        )
    result.notes[:0] = flags
    if run.failure:
        result.error = run.failure
        result.questions = _zero(plan, "Not graded: see the error.")
    else:
        records = iter(run.tasks)
        for name, specs in plan.specs.items():
            question_records = [next(records) for _ in specs]
            with _JUDGING:
                graded = judge_question(
                    QUESTIONS[name],
                    specs,
                    question_records,
                    plan.expected[name],
                    plan.limits.task_timeout_s,
                )
            result.questions.append(as_dict(graded))
        result.score = round(sum(q["score"] for q in result.questions), 4)
        result.notes += _claim_notes(hand_in.claimed_passed, result.questions)
    result.notes = capped_notes(result.notes)
    result.seconds = time.monotonic() - started
    return result


def _claim_notes(claimed_passed: tuple[str, ...], questions: list[dict]) -> list[str]:
    """Questions a packed file's manifest says passed in the notebook, that lost points here.

    Not a flag: saved outputs may be older than the code, and hidden tests try more cases.
    """
    return [
        f"{q['name']}: its check showed [passed] in the notebook as packed, and grading took "
        "points off: the hidden tests try cases the public checks do not, or the code changed "
        "after its check ran."
        for q in questions
        if q["name"] in claimed_passed and q["score"] < q["max_score"]
    ]


def _zero(plan: Plan, feedback: str) -> list[dict]:
    return [
        {
            "name": name,
            "score": 0.0,
            "max_score": float(QUESTIONS[name].points),
            "feedback": feedback,
            "passed": 0,
            "total": len(specs),
            "mistakes": [],
        }
        for name, specs in plan.specs.items()
    ]


def grade_with_retries(
    path: str, student: str, plan: Plan, warm: WarmParent, tries: int = MACHINERY_TRIES
) -> GradeResult:
    """Grade one hand-in; where the grader's own machinery fails on it (an exception from the
    grader, a runner that was never ready or was lost), grade it again from the start on a
    fresh process, up to ``tries`` times in all. If every try fails, the result is *not
    graded* (:attr:`GradeResult.not_graded` says why), with no score and no questions: never
    a 0. A warm parent that cannot be started raises (:class:`SandboxSetupError`), which
    stops the batch; so does a stopped batch (``SystemExit``)."""
    why = "no try was made"
    for _ in range(max(1, tries)):
        if warm.stopped.is_set():
            raise SystemExit("grading was stopped")
        try:
            return grade_path(path, student, plan, warm)
        except RunnerSetupError as error:  # one runner's sandbox: a fresh one may work
            why = f"the sandbox was not ready ({error})"
            print(
                f"coursekit grade: the grader failed on {for_terminal(path)}: {why}",
                file=sys.stderr,
            )
        except SandboxSetupError:  # the warm parent: the machine's fault, for every hand-in
            raise
        except Exception as error:  # a grader bug, or its machinery lost the hand-in
            print(f"coursekit grade: the grader failed on {for_terminal(path)}:", file=sys.stderr)
            traceback.print_exc()
            why = f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
    return not_graded(path, student, plan, f"{why[:300]} ({max(1, tries)} tries)")


def not_graded(path: str, student: str, plan: Plan, why: str) -> GradeResult:
    """The result of a hand-in the grader failed on: no score, no questions, the reason."""
    result = GradeResult(
        path=lossless(path), student=student, assignment=plan.assignment, seed=plan.seed
    )
    result.sha256 = file_sha256(path)
    result.max_score = plan.max_score
    result.not_graded = lossless(why)
    result.error = (
        "Not graded: the grader failed on this hand-in (not the notebook's doing); it has no "
        f"score yet. Grading it again will grade it. Why: {result.not_graded}"
    )
    return result


def grade_all(
    hand_ins: Iterable[tuple[str, str]],
    plan: Plan,
    workers: int,
    on_result: Callable[[GradeResult], None],
    warm: WarmParent | None = None,
) -> None:
    """Grade (path, student) hand-ins, ``workers`` at a time, each in a process the warm
    parent forks; ``on_result`` runs here, one at a time, with every result, those not graded
    (:func:`grade_with_retries`) too. If it raises (or grading is interrupted, or the grader
    fails on :data:`FAILING_IN_A_ROW` hand-ins in a row), hand-ins still running are stopped
    (their sandboxes cleaned up) and none not yet started is begun; the exception then
    propagates."""
    hand_ins = list(hand_ins)
    if not hand_ins:
        return
    if warm is None:
        with WarmParent() as own:
            return grade_all(hand_ins, plan, workers, on_result, own)
    todo: queue.Queue = queue.Queue()
    for hand_in in hand_ins:
        todo.put(hand_in)
    done: queue.Queue = queue.Queue()
    # ``workers`` hand-ins at a time, each until its last test has answered; two grading
    # threads per worker, so the next hand-in starts while the last one finishes (its last
    # checks, its process ended, its answers judged: coursekit/grading/sandbox/lanes.py)
    lanes = Lanes(workers)

    def work() -> None:  # a grading thread: its hand-ins run in processes of their own
        # the next hand-in's runner is started while the last one is ended and judged
        keep_spares(lambda: not todo.empty(), lanes)
        try:
            while not warm.stopped.is_set():
                try:
                    path, student = todo.get_nowait()
                except queue.Empty:
                    return
                try:
                    done.put(grade_with_retries(path, student, plan, warm))
                except BaseException as error:  # noqa: BLE001 - stopped: told to the waiting side
                    done.put(error)
                    return
        finally:
            keep_spares(False)

    threads = [
        threading.Thread(target=work, name=f"grading-{n}", daemon=True)
        for n in range(max(1, min(2 * lanes.workers, len(hand_ins))))
    ]
    for thread in threads:
        thread.start()
    failing = 0  # hand-ins in a row the grader failed on
    try:
        for _ in hand_ins:
            while True:
                with contextlib.suppress(queue.Empty):
                    result = done.get(timeout=0.5)
                    break
            if isinstance(result, BaseException):
                raise result
            on_result(result)
            failing = failing + 1 if result.not_graded else 0
            if failing >= FAILING_IN_A_ROW:
                raise SandboxSetupError(
                    f"the grader failed on {failing} hand-ins in a row, each tried "
                    f"{MACHINERY_TRIES} times (the last: {result.not_graded})"
                )
    except BaseException:
        warm.stop()
        raise
    finally:
        for thread in threads:
            thread.join()
        close_spares(lanes)
