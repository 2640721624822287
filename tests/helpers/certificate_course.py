"""A course folder with a gradebook and a test issuer key, for the certificate tests.

Nothing of the working tree is read: the course is a temporary folder (the current folder
while a test runs), the signing key is made there, and ``~/.config/coursekit`` is pointed
there too. ``REPOSITORY`` is an instructor's own, not the template's placeholder, which
``coursekit certificate`` refuses to sign (tests of that refusal set it back).
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import coursekit.course
from coursekit.checks import questions_of
from coursekit.commands.cli import main
from coursekit.course import MODULES
from coursekit.grading.grader import GradeResult
from coursekit.grading.records.gradebook import Gradebook

POINTS = {m.name: sum(q.points for q in questions_of(m.name)) for m in MODULES}
WORKSHOP = ["01_accumulation", "02_loss_scaling"]
OWN_REPOSITORY = "ada-lab/grad-accum"


def result(student: str, assignment: str, score: float) -> GradeResult:
    return GradeResult(
        path=f"{student}.ipynb",
        student=student,
        assignment=assignment,
        sha256=f"{student}-{assignment}",
        score=score,
        max_score=POINTS[assignment],
        error=None,
        questions=[],
    )


def make_course(tmp_path: Path, monkeypatch) -> Path:
    """The course folder, which the test's fixture has made the current folder (certificate
    and verify read certificates/ from there up, never this working tree's), with a
    gradebook: ada has every module in full, wes the workshop's two modules (module 02 in
    part), lee module 01 alone; and the issuer's public key published in certificates/."""
    assert Path.cwd().resolve() == tmp_path.resolve(), "chdir into the course first"
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))  # no key of this machine
    monkeypatch.setattr(coursekit.course, "REPOSITORY", OWN_REPOSITORY)
    monkeypatch.delenv("COURSEKIT_KEY", raising=False)
    with Gradebook(tmp_path / "g.sqlite") as book:
        for name, points in POINTS.items():
            if points:
                book.record(result("ada", name, points), None)
        book.record(result("wes", "01_accumulation", POINTS["01_accumulation"]), None)
        book.record(result("wes", "02_loss_scaling", 8.0), None)
        book.record(result("lee", "01_accumulation", POINTS["01_accumulation"]), None)
    assert main(["issuer-key", "--key", "issuer.pem"]) == 0  # publishes certificates/
    return tmp_path


def certify(student: str, *options: str) -> int:
    argv = ["certificate", student, "--gradebook", "g.sqlite", "--key", "issuer.pem"]
    return main([*argv, "--out", f"out/{student}.html", *options])


def verify(path, *options: str) -> int:
    return main(["verify", str(path), *options])


def parts(token: str) -> tuple[dict, dict, bytes]:
    header, payload, signature = token.split(".")
    decode = lambda part: base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))  # noqa: E731
    return json.loads(decode(header)), json.loads(decode(payload)), decode(signature)


def encode(data) -> str:
    raw = data if isinstance(data, bytes) else json.dumps(data, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()
