"""``coursekit``: one sub-command per job (doctor, build, start, submit, grade, ...)."""

from __future__ import annotations

import argparse
import difflib
import os
import sys
from pathlib import Path


def _version() -> str:
    """The installed distribution's version, without importing torch.

    A source checkout that was never installed has no distribution metadata; its
    ``pyproject.toml`` states the version instead.
    """
    from importlib import metadata

    try:
        return metadata.version("coursekit")
    except metadata.PackageNotFoundError:
        return _source_version(Path(__file__).resolve().parents[2] / "pyproject.toml")


def _source_version(pyproject: Path) -> str:
    """``[project] version`` from a checkout's ``pyproject.toml``, or ``unknown``."""
    try:
        text = pyproject.read_text(encoding="utf-8")
    except OSError:
        return "unknown"
    try:
        import tomllib  # Python 3.11+
    except ModuleNotFoundError:  # Python 3.10: the version line of the [project] table
        import re

        project = re.search(r"^\[project\]$(.*?)(?=^\[|\Z)", text, re.M | re.S)
        found = project and re.search(r'^version\s*=\s*"([^"]+)"', project.group(1), re.M)
        return found.group(1) if found else "unknown"
    try:
        return str(tomllib.loads(text)["project"]["version"])
    except (tomllib.TOMLDecodeError, KeyError, TypeError):
        return "unknown"


def find_course_root(start: Path | None = None, marker: str = "notebooks") -> Path:
    """The nearest folder, from ``start`` upwards, that holds ``marker/``.

    Instructors' commands need ``notebooks/`` (the sources and reference solutions);
    ``start`` needs only ``exercises/``, so it also works in a student copy published
    without the sources.
    """
    here = Path(start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / marker).is_dir():
            return folder
    raise SystemExit(
        f"coursekit: no course found at or above {here} (looked for a {marker}/ folder). "
        "Run this inside the course repository, or pass --root."
    )


def _shown(text: object) -> str:
    """``text`` as the terminal should show it: each line escaped
    (:func:`coursekit.grading.text.for_terminal`), so no name, file name, feedback line or
    note a command prints can move the cursor, colour the terminal or reorder a line."""
    from coursekit.grading.text import for_terminal_lines

    return for_terminal_lines(text)


def _doctor(args: argparse.Namespace) -> int:
    from coursekit.commands.doctor import diagnose

    report = diagnose()
    print(report.render())
    return 0 if report.ok else 1


def _build(args: argparse.Namespace) -> int:
    from coursekit.authoring import MarkupError, build
    from coursekit.authoring.publication import from_course, resolve

    root = Path(args.root).resolve() if args.root else find_course_root()
    publication = from_course() if args.repository_from == "course" else resolve(root)
    print(f"Repository: {publication.repository} (from {_shown(publication.came_from)}).")
    conflict = publication.placeholder_conflict()
    if conflict and not args.check:
        print(f"Note: {_shown(conflict)}", file=sys.stderr)
    try:
        changes = build(root, check=args.check, publication=publication)
    except (MarkupError, FileNotFoundError, ValueError) as error:
        print(f"coursekit build: {_shown(error)}", file=sys.stderr)
        return 2
    names = [_shown(path.relative_to(root)) for path in changes]
    if args.check:
        if names:
            print("Out of date; run `coursekit build` to regenerate:", file=sys.stderr)
            for name in names:
                print(f"  {name}", file=sys.stderr)
            return 1
        print(
            "exercises/, solutions/, the README table, the released demo cells' record and "
            "binder/requirements.txt match notebooks/ and coursekit/course.py."
        )
        return 0
    print("\n".join(f"wrote {name}" for name in names) or "Everything was up to date.")
    return 0


def _student_copy(args: argparse.Namespace) -> int:
    from coursekit.authoring.student_copy import StudentCopyError, make_student_copy

    root = Path(args.root).resolve() if args.root else find_course_root()
    try:
        written = make_student_copy(root, Path(args.destination))
    except StudentCopyError as error:
        print(f"coursekit student-copy: {_shown(error)}", file=sys.stderr)
        return 2
    print(
        f"wrote a student copy to {_shown(Path(args.destination).resolve())}: "
        + ", ".join(_shown(p.relative_to(Path(args.destination).resolve())) for p in written)
        + ". No solutions/ and no notebooks/: publish this folder, not the course."
    )
    return 0


def _start(args: argparse.Namespace) -> int:
    from coursekit.commands.launch import start_lab

    root = Path(args.root).resolve() if args.root else find_course_root(marker="exercises")
    return start_lab(root, port=args.port, open_browser=not args.no_browser)


def _submit(args: argparse.Namespace) -> int:
    from coursekit.grading.submission import SubmissionError, describe, pack

    try:
        packed = pack(args.notebook, args.student, args.out)
    except SubmissionError as error:
        print(f"coursekit submit: {_shown(error)}", file=sys.stderr)
        return 2
    print(_shown(describe(packed)))
    return 0


def _grade(args: argparse.Namespace) -> int:
    from coursekit.grading.sandbox.warm_parent import WarmParent

    root = Path(args.root).resolve() if args.root else find_course_root()
    # A mistyped path is found before anything is imported or started: in well under a
    # second, not after torch has loaded (run_grade checks again, for callers of its own).
    missing = [item for item in args.hand_ins if not os.path.lexists(item)]
    if missing:
        for item in missing:
            print(f"coursekit grade: {_shown(item)} does not exist.", file=sys.stderr)
        print(
            "coursekit grade: nothing was graded or written; check the paths and run it again.",
            file=sys.stderr,
        )
        return 2
    if args.workers < 1:
        print("coursekit grade: --workers must be at least 1.", file=sys.stderr)
        return 2
    if not (args.wall_factor >= 1 and min(args.cell_timeout, args.test_timeout, args.timeout) > 0):
        print(
            "coursekit grade: time limits must be above 0 and --wall-factor at least 1.",
            file=sys.stderr,
        )
        return 2
    if args.seed is not None and not 0 <= args.seed < 2**63:
        print(
            "coursekit grade: --seed must be a whole number from 0 to 2**63 - 1.", file=sys.stderr
        )
        return 2
    limits = _limits(args)
    # The sandboxes' warm parent imports torch in its own process while this one imports the
    # grader: the first result comes seconds sooner. It is ended however grading ends.
    warm = WarmParent()
    warm.launch()
    try:
        return _run_grade(root, args, limits, warm)
    finally:
        warm.close()


def _run_grade(root: Path, args: argparse.Namespace, limits, warm) -> int:
    from coursekit.commands.grade import run_grade
    from coursekit.grading.sandbox.driver import Options

    return run_grade(
        root,
        args.hand_ins,
        args.assignment,
        Path(args.gradebook),
        args.workers,
        args.json,
        limits,
        regrade=args.regrade,
        options=Options(unconfined=args.unconfined),
        seed=args.seed,
        warm=warm,
    )


def _export(args: argparse.Namespace) -> int:
    from coursekit.commands.instructor import run_export

    return run_export(Path(args.gradebook), args.format, Path(args.out), args.assignment)


def _given(**options) -> dict:
    """The options given on the command line (not None), so that every other one takes the
    command function's own default."""
    return {name: value for name, value in options.items() if value is not None}


def _path_or_none(value: str | None) -> Path | None:
    return Path(value) if value else None


def _certificate_command(name: str):
    """A certificate command, or None (with the reason printed) where the ``instructor``
    extra it needs is not installed."""
    try:
        from coursekit.commands import certificate
    except ModuleNotFoundError as error:
        print(
            f"coursekit: certificates need the {(error.name or '?').split('.')[0]} package, not "
            "installed here. "
            'Install the instructor extra: pip install "coursekit[instructor]"',
            file=sys.stderr,
        )
        return None
    return getattr(certificate, name)


def _certificate(args: argparse.Namespace) -> int:
    run_certificate = _certificate_command("run_certificate")
    if run_certificate is None:
        return 2
    return run_certificate(
        student=args.student,
        **_given(
            gradebook=_path_or_none(args.gradebook),
            pass_percent=args.pass_mark,
            out=_path_or_none(args.out),
            key_path=_path_or_none(args.key),
            track=args.track,
            modules=args.modules,
            did_web=args.did_web,
        ),
    )


def _verify(args: argparse.Namespace) -> int:
    run_verify = _certificate_command("run_verify")
    if run_verify is None:
        return 2
    return run_verify(
        certificate=Path(args.certificate),
        **_given(key_path=_path_or_none(args.key), revoked_path=_path_or_none(args.revoked)),
    )


def _issuer_key(args: argparse.Namespace) -> int:
    run_issuer_key = _certificate_command("run_issuer_key")
    if run_issuer_key is None:
        return 2
    return run_issuer_key(
        **_given(
            out=_path_or_none(args.out), key_path=_path_or_none(args.key), did_web=args.did_web
        )
    )


def _revoke(args: argparse.Namespace) -> int:
    run_revoke = _certificate_command("run_revoke")
    if run_revoke is None:
        return 2
    return run_revoke(
        certificate_id=args.certificate_id,
        **_given(reason=args.reason, revoked_path=_path_or_none(args.revoked)),
    )


def _limits(args: argparse.Namespace):
    """The sandbox limits ``grade`` and ``gradescope`` take from the same options."""
    from coursekit.grading.sandbox.driver import Limits

    return Limits(
        cell_timeout_s=args.cell_timeout,
        task_timeout_s=args.test_timeout,
        hand_in_timeout_s=args.timeout,
        wall_factor=args.wall_factor,
        memory_bytes=args.memory_mb * 2**20,
    )


def _gradescope(args: argparse.Namespace) -> int:
    from coursekit.commands.gradescope import build_bundle

    root = Path(args.root).resolve() if args.root else find_course_root()
    limits = _limits(args)
    try:
        settings = build_bundle(
            root, args.assignment, Path(args.out), limits, args.seed, args.torch
        )
    except ValueError as error:
        print(f"coursekit gradescope: {_shown(error)}", file=sys.stderr)
        return 2
    print(
        f"wrote {_shown(Path(args.out).resolve())}: {args.assignment}, "
        f"torch {settings['torch']} (CPU), "
        "hidden tests drawn anew for every submission (its seed is in the autograder's "
        "output, which students do not see). A hand-in is stopped after "
        f"{args.timeout:g} s of CPU time ({args.timeout * args.wall_factor:g} s of wall-clock "
        "time at most), plus the reference solution's run on each submission: set Gradescope's "
        "autograder timeout above that (docs/instructor-guide.md, Gradescope)."
    )
    return 0


#: Shown under ``coursekit grade --help``, one command a line; a test parses each one.
GRADE_EXAMPLES = (
    "coursekit grade hand-ins/01 --assignment 01_accumulation --gradebook grades.sqlite",
    "coursekit grade hand-ins/01 --assignment 01_accumulation --workers 2 --regrade",
    "coursekit export --format html --out feedback/ --gradebook grades.sqlite",
    "coursekit export --format lms --assignment 01_accumulation --out lms-01.csv "
    "--gradebook grades.sqlite",
)


def _report(args: argparse.Namespace) -> int:
    from coursekit.commands.class_report import students_of, write_report
    from coursekit.grading.records.exports import name_warnings
    from coursekit.grading.records.gradebook import GradebookError

    try:
        written = write_report(Path(args.gradebook), Path(args.out), args.assignment)
        students = students_of(Path(args.gradebook), args.assignment)
    except (ValueError, GradebookError) as error:
        print(f"coursekit report: {_shown(error)}", file=sys.stderr)
        return 2
    lines, _ = name_warnings(students, "the report counts them apart, under the same name.")
    for line in lines:
        print(f"coursekit report: warning: {line}", file=sys.stderr)
    print(f"wrote {_shown(written)}: open it in a browser.")
    return 0


def _links(args: argparse.Namespace) -> int:
    from coursekit.commands.hub_links import course_source, labelled_links, placeholder_warning

    try:
        source = course_source(repository=args.repository, branch=args.branch)
        links = labelled_links(args.hub, source)
    except ValueError as error:
        print(f"coursekit links: {_shown(error)}", file=sys.stderr)
        return 2
    warning = None if args.repository is not None else placeholder_warning()
    if warning:
        print(f"coursekit links: warning: {warning}", file=sys.stderr)
    print(f"coursekit links: {_shown(source.describe())}.", file=sys.stderr)
    print("\n".join(links))
    return 0


def parser() -> argparse.ArgumentParser:
    main_parser = argparse.ArgumentParser(
        prog="coursekit", description="Gradient accumulation, hands-on: course tools."
    )
    main_parser.add_argument("--version", action="version", version=f"coursekit {_version()}")
    commands = main_parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    doctor = commands.add_parser("doctor", help="report Python, torch, device, widgets, Colab")
    doctor.set_defaults(run=_doctor)

    build = commands.add_parser("build", help="write exercises/ and solutions/ from notebooks/")
    build.add_argument("--check", action="store_true", help="only report files that would change")
    build.add_argument("--root", help="course folder (default: found from the current folder)")
    build.add_argument(
        "--repository-from",
        choices=("remote", "course"),
        default="remote",
        help="the Colab address: the git remote origin when it is on GitHub (default), or "
        "REPOSITORY in coursekit/course.py only (CI's sync check, whatever the clone's origin)",
    )
    build.set_defaults(run=_build)

    copy = commands.add_parser(
        "student-copy", help="copy the course for students, without solutions/ or notebooks/"
    )
    copy.add_argument("destination", help="a new or empty folder")
    copy.add_argument("--root", help="course folder (default: found from the current folder)")
    copy.set_defaults(run=_student_copy)

    submit = commands.add_parser("submit", help="pack a saved notebook into a file to hand in")
    submit.add_argument("notebook", help="the .ipynb file you worked in, saved")
    submit.add_argument("--student", required=True, help="your name, as your instructor knows it")
    submit.add_argument("--out", help="folder to write to (default: the notebook's folder)")
    submit.set_defaults(run=_submit)

    grade = commands.add_parser(
        "grade",
        help="grade a folder of hand-ins into the gradebook",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n" + "\n".join(f"  {line}" for line in GRADE_EXAMPLES),
    )
    grade.add_argument(
        "hand_ins", nargs="+", metavar="HAND_IN", help="notebooks, packed hand-ins or folders"
    )
    grade.add_argument("--assignment", required=True, help="module notebook, e.g. 01_accumulation")
    grade.add_argument("--workers", type=int, default=1, help="hand-ins graded at once")
    grade.add_argument("--gradebook", default="gradebook.sqlite", help="SQLite gradebook file")
    grade.add_argument("--json", action="store_true", help="one JSON object per hand-in")
    grade.add_argument("--regrade", action="store_true", help="grade unchanged hand-ins again")
    grade.add_argument(
        "--seed",
        type=int,
        help="draw the hidden tests from this seed (a run prints its seed; each grade records it)",
    )
    grade.add_argument("--cell-timeout", type=float, default=60.0, help="CPU seconds per cell")
    grade.add_argument("--test-timeout", type=float, default=30.0, help="CPU seconds per test")
    grade.add_argument("--timeout", type=float, default=300.0, help="CPU seconds per hand-in")
    grade.add_argument(
        "--wall-factor",
        type=float,
        default=10.0,
        help="code that waits without computing is ended after this many times its CPU limit "
        "in wall-clock time (default 10)",
    )
    grade.add_argument("--memory-mb", type=int, default=3072, help="memory per hand-in")
    grade.add_argument("--root", help="course folder (default: found from the current folder)")
    grade.add_argument(
        "--unconfined",
        action="store_true",
        help="run hand-ins even where their reads cannot be confined: as your own user with "
        "no namespaces (not root, and no user namespaces), or on this machine's files with no "
        "Landlock while grade finds the course or other hand-ins readable to them (it names "
        "each): only for hand-ins you trust",
    )
    grade.set_defaults(run=_grade)

    export = commands.add_parser(
        "export", help="grades as CSV, a CSV for Canvas or Moodle, Gradescope JSON or HTML pages"
    )
    export.add_argument(
        "--format",
        choices=["csv", "lms", "gradescope", "html"],
        default="csv",
        help="csv: every grade; lms: student, score, out of (one assignment, or the course "
        "total without --assignment); gradescope; html: feedback pages",
    )
    export.add_argument("--out", default="grades", help="file (.csv) or folder to write")
    export.add_argument("--assignment", help="only this assignment")
    export.add_argument("--gradebook", default="gradebook.sqlite")
    export.set_defaults(run=_export)

    gradescope = commands.add_parser(
        "gradescope", help="write a Gradescope autograder zip that grades one assignment"
    )
    gradescope.add_argument("--assignment", required=True, help="module notebook, e.g. 00_welcome")
    gradescope.add_argument("--out", default="autograder.zip", help="zip file to write")
    gradescope.add_argument(
        "--seed",
        type=int,
        help="refused: every submission draws its hidden tests from a seed of its own (the "
        "guide says how to grade one again with the same draw)",
    )
    gradescope.add_argument("--torch", help="torch version to install (default: scripts/setup's)")
    gradescope.add_argument("--cell-timeout", type=float, default=60.0, help="CPU s per cell")
    gradescope.add_argument("--test-timeout", type=float, default=30.0, help="CPU s per test")
    gradescope.add_argument("--timeout", type=float, default=300.0, help="CPU s per hand-in")
    gradescope.add_argument(
        "--wall-factor", type=float, default=3.0, help="wall-clock limit, times the CPU limit"
    )
    gradescope.add_argument("--memory-mb", type=int, default=3072, help="memory per hand-in")
    gradescope.add_argument("--root", help="course folder (default: found from the current folder)")
    gradescope.set_defaults(run=_gradescope)

    # Defaults are the command functions' own (instructor.run_*): an option not given is not
    # passed. The help names them; importing instructor here would load torch for every command.
    certificate = commands.add_parser(
        "certificate",
        help="signed certificate (page, Open Badges credential, badge) for a student who passed",
    )
    certificate.add_argument("student")
    certificate.add_argument(
        "--pass-mark", type=float, help="percent of the covered modules' points (default 70)"
    )
    certificate.add_argument(
        "--out", help="HTML page to write; the .jwt credential and .png badge go beside it"
    )
    certificate.add_argument("--gradebook", help="default gradebook.sqlite")
    certificate.add_argument(
        "--key", help="private signing key (Ed25519, made on first use in ~/.config/coursekit)"
    )
    certificate.add_argument(
        "--track", help="a track of coursekit/course.py TRACKS, or the name for --modules"
    )
    certificate.add_argument(
        "--modules", help="modules covered, e.g. 01_accumulation,02_loss_scaling (default: all)"
    )
    certificate.add_argument(
        "--did-web", help="issue as this did:web (e.g. did:web:example.edu), not the key's did:key"
    )
    certificate.set_defaults(run=_certificate)

    verify = commands.add_parser(
        "verify", help="check a certificate offline with the issuer's public key"
    )
    verify.add_argument(
        "certificate", help="the page (.html), credential (.jwt), badge (.png) or scanned QR text"
    )
    verify.add_argument(
        "--key",
        help="the issuer's public key (default: certificates/issuer-public-key.pem of the "
        "course), or the old HMAC key for certificates issued before",
    )
    verify.add_argument(
        "--revoked", help="revocation list (default: revoked.json beside the key, if any)"
    )
    verify.set_defaults(run=_verify)

    issuer_key = commands.add_parser(
        "issuer-key", help="export the certificate issuer's public key for the course to publish"
    )
    issuer_key.add_argument("--out", help="folder (default certificates/)")
    issuer_key.add_argument("--key", help="private signing key (as for certificate)")
    issuer_key.add_argument("--did-web", help="also write did.json for this did:web issuer")
    issuer_key.set_defaults(run=_issuer_key)

    revoke = commands.add_parser("revoke", help="revoke a certificate (the published list)")
    revoke.add_argument("certificate_id", help="its ID, CK-XXXX-XXXX-XXXX-XXXX")
    revoke.add_argument("--reason", help="shown by verify")
    revoke.add_argument("--revoked", help="the list (default certificates/revoked.json)")
    revoke.set_defaults(run=_revoke)

    links = commands.add_parser(
        "links",
        help="each module's name and nbgitpuller link, to open the course on a JupyterHub",
    )
    links.add_argument(
        "--hub", required=True, help="the JupyterHub's address, e.g. https://hub.example.org"
    )
    links.add_argument(
        "--repository",
        help="the repository students get: a URL, [user@]host:path or an absolute path that "
        "git clones on the hub, e.g. "
        "https://gitlab.example.org/ada/grad-accum.git or /srv/courses/grad-accum "
        "(default: REPOSITORY in coursekit/course.py, on GitHub)",
    )
    links.add_argument("--branch", help="its branch (default: BRANCH in coursekit/course.py)")
    links.set_defaults(run=_links)

    report = commands.add_parser(
        "report",
        help="one HTML page of how the class did: scores, common mistakes, hand-ins to read",
    )
    report.add_argument("--assignment", help="only this assignment (default: every graded one)")
    report.add_argument("--out", default="report.html", help="HTML file to write")
    report.add_argument("--gradebook", default="gradebook.sqlite")
    report.set_defaults(run=_report)

    start = commands.add_parser("start", help="open the course in JupyterLab")
    start.add_argument("--port", type=int, default=8888, help="first port to try (default 8888)")
    start.add_argument("--no-browser", action="store_true", help="print the URL, open nothing")
    start.add_argument("--root", help="course folder (default: found from the current folder)")
    start.set_defaults(run=_start)
    return main_parser


def _unknown_command(argv: list[str], main_parser: argparse.ArgumentParser) -> str | None:
    """A message for a first word that is no command (with the nearest one), else None."""
    words = [a for a in argv if not a.startswith("-")]
    if not words or argv[0].startswith("-"):
        return None
    choices = next(
        a.choices for a in main_parser._actions if isinstance(a, argparse._SubParsersAction)
    )
    if words[0] in choices:
        return None
    near = difflib.get_close_matches(words[0], list(choices), n=1)
    hint = f" Did you mean '{near[0]}'?" if near else ""
    return f"coursekit: no command '{words[0]}'.{hint} Commands: {', '.join(choices)}."


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    main_parser = parser()
    message = _unknown_command(argv, main_parser)
    if message:
        print(_shown(message), file=sys.stderr)
        return 2
    args = main_parser.parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    raise SystemExit(main())
