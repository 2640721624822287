"""The gradebook: one SQLite file, every hand-in and every grading of it kept.

A *submission* is one hand-in file's content (its SHA-256) by one student for one
assignment; each time it is graded, a *grading* row is added. Grading the same file again
is skipped unless asked for, so re-running a grading run (or resuming a killed one) never
duplicates or loses a result: each result is written in one transaction as it arrives.
WAL mode and a busy timeout let two grading runs share the file safely. Every text is stored
losslessly (:func:`coursekit.grading.text.lossless`): a file name that is not UTF-8 cannot
stop a batch. A write that fails (a full disk, a read-only file) raises
:class:`GradebookError`, whose message says so; what was committed before is kept.

A hand-in the grader failed on (its own machinery, every try) is stored *not graded*, with
the reason (``gradings.not_graded``): its :class:`Grade` has no score (``score`` is None), it
counts as not yet graded (:meth:`Gradebook.is_graded`), so the next run grades it, and it
never hides a real grading of the same file made before.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from coursekit import __version__
from coursekit.grading.text import lossless, lossless_tree


class GradebookError(RuntimeError):
    """The gradebook cannot be opened or written; the message names the file and the cause."""


SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY,
    assignment TEXT NOT NULL,
    started_at TEXT NOT NULL,
    finished_at TEXT,
    specs TEXT NOT NULL,
    coursekit_version TEXT NOT NULL,
    seed INTEGER
);
CREATE TABLE IF NOT EXISTS submissions (
    id INTEGER PRIMARY KEY,
    assignment TEXT NOT NULL,
    student TEXT NOT NULL,
    sha256 TEXT NOT NULL,
    path TEXT NOT NULL,
    first_seen TEXT NOT NULL,
    UNIQUE (assignment, student, sha256)
);
CREATE TABLE IF NOT EXISTS gradings (
    id INTEGER PRIMARY KEY,
    submission_id INTEGER NOT NULL REFERENCES submissions(id),
    run_id INTEGER REFERENCES runs(id),
    graded_at TEXT NOT NULL,
    score REAL NOT NULL,
    max_score REAL NOT NULL,
    error TEXT,
    result TEXT NOT NULL,
    not_graded TEXT
);
CREATE INDEX IF NOT EXISTS gradings_by_submission ON gradings(submission_id);
"""


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


@dataclass(frozen=True)
class Grade:
    """The current grade of a student for an assignment (latest hand-in, latest grading)."""

    student: str
    assignment: str
    score: float | None  # None: not graded (the grader failed on it), never a 0
    max_score: float
    error: str | None
    graded_at: str
    sha256: str
    path: str
    result: dict
    not_graded: str | None = None  # why the grader could not grade it


def _private(path: Path) -> None:
    """Make the gradebook (and the WAL files SQLite makes beside it, which take its mode)
    readable and writable by its owner alone: it holds every run's seed and hidden specs,
    and hand-ins run as other users."""
    os.close(os.open(path, os.O_RDWR | os.O_CREAT, 0o600))
    for name in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):
        try:
            if name.stat().st_mode & 0o077:
                os.chmod(name, 0o600)
        except FileNotFoundError:
            continue


class Gradebook:
    """A SQLite gradebook file; safe to share between concurrent grading runs."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            _private(self.path)
            self._db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA busy_timeout=30000")
            self._db.execute("PRAGMA foreign_keys=ON")
            self._db.executescript(SCHEMA)
            self._add_missing_columns()
        except (OSError, sqlite3.Error) as error:
            raise GradebookError(f"the gradebook {self.path} cannot be opened: {error}.") from None

    def _add_missing_columns(self) -> None:
        """A gradebook written by an older coursekit gains the columns added since."""
        columns = {row[1] for row in self._db.execute("PRAGMA table_info(runs)")}
        if "seed" not in columns:
            self._db.execute("ALTER TABLE runs ADD COLUMN seed INTEGER")
        columns = {row[1] for row in self._db.execute("PRAGMA table_info(gradings)")}
        if "not_graded" not in columns:
            self._db.execute("ALTER TABLE gradings ADD COLUMN not_graded TEXT")

    def close(self) -> None:
        self._db.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def start_run(self, assignment: str, specs: dict, seed: int | None = None) -> int:
        """Record a grading run: its hidden specs and the seed that drew them."""
        with self._writing():
            cursor = self._db.execute(
                "INSERT INTO runs (assignment, started_at, specs, coursekit_version, seed) "
                "VALUES (?,?,?,?,?)",
                (assignment, _now(), json.dumps(specs), __version__, seed),
            )
        return int(cursor.lastrowid)

    def finish_run(self, run_id: int) -> None:
        with self._writing():
            self._db.execute("UPDATE runs SET finished_at = ? WHERE id = ?", (_now(), run_id))

    def is_graded(self, assignment: str, student: str, sha256: str) -> bool:
        """Whether this file of the student's has been graded (a grading the grader failed
        on does not count: the next run grades it)."""
        row = self._db.execute(
            "SELECT 1 FROM gradings g JOIN submissions s ON s.id = g.submission_id "
            "WHERE s.assignment = ? AND s.student = ? AND s.sha256 = ? "
            "AND g.not_graded IS NULL LIMIT 1",
            (assignment, student, sha256),
        ).fetchone()
        return row is not None

    def record(self, result, run_id: int | None) -> None:
        """Store one grading (and its submission, when new) in a single transaction. A
        result the grader failed on (``result.not_graded``) is stored as not graded: its
        score column holds 0 only because the column may not be empty; it is never read."""
        student, path = lossless(result.student), lossless(result.path)
        error = lossless(result.error) if result.error is not None else None
        not_graded = getattr(result, "not_graded", None)
        not_graded = lossless(not_graded) if not_graded is not None else None
        score = 0.0 if not_graded is not None else result.score
        document = json.dumps(lossless_tree(result.public()))
        with self._writing(), self._transaction():
            self._db.execute(
                "INSERT OR IGNORE INTO submissions (assignment, student, sha256, path, first_seen) "
                "VALUES (?,?,?,?,?)",
                (result.assignment, student, result.sha256, path, _now()),
            )
            (submission_id,) = self._db.execute(
                "SELECT id FROM submissions WHERE assignment = ? AND student = ? AND sha256 = ?",
                (result.assignment, student, result.sha256),
            ).fetchone()
            self._db.execute(
                "INSERT INTO gradings (submission_id, run_id, graded_at, score, max_score, error,"
                " result, not_graded) VALUES (?,?,?,?,?,?,?,?)",
                (
                    submission_id,
                    run_id,
                    _now(),
                    score,
                    result.max_score,
                    error,
                    document,
                    not_graded,
                ),
            )

    @contextlib.contextmanager
    def _writing(self):
        try:
            yield
        except sqlite3.Error as error:
            raise GradebookError(
                f"the gradebook {self.path} could not be written: {error}."
            ) from None

    @contextlib.contextmanager
    def _transaction(self):
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    def current_grades(self, assignment: str | None = None) -> list[Grade]:
        """One row per (student, assignment): the newest grading of the newest hand-in. A
        grading the grader failed on is the current one (not graded, no score) unless the
        same file was graded before: then that grading stands."""
        rows = self._db.execute(
            "SELECT s.student, s.assignment, g.score, g.max_score, g.error, g.graded_at, "
            "s.sha256, s.path, g.result, g.not_graded FROM gradings g JOIN submissions s "
            "ON s.id = g.submission_id "
            "WHERE (? IS NULL OR s.assignment = ?) ORDER BY s.first_seen, s.id, g.id",
            (assignment, assignment),
        ).fetchall()
        latest: dict[tuple[str, str], Grade] = {}
        for row in rows:
            not_graded = row[9]
            score = None if not_graded is not None else row[2]
            grade = Grade(
                row[0], row[1], score, *row[3:8], result=json.loads(row[8]), not_graded=not_graded
            )
            key = (grade.student, grade.assignment)
            before = latest.get(key)
            if (
                not_graded is not None
                and before is not None
                and before.not_graded is None
                and before.sha256 == grade.sha256
            ):
                continue  # this file was graded before: a failed regrading does not hide it
            latest[key] = grade
        return sorted(latest.values(), key=lambda g: (g.student, g.assignment))

    def attempts(self, student: str, assignment: str) -> int:
        (count,) = self._db.execute(
            "SELECT COUNT(*) FROM submissions WHERE student = ? AND assignment = ?",
            (student, assignment),
        ).fetchone()
        return int(count)

    def integrity(self) -> str:
        return self._db.execute("PRAGMA integrity_check").fetchone()[0]
