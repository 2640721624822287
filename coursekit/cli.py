"""``coursekit``: one sub-command per job (doctor, build, start)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def find_course_root(start: Path | None = None) -> Path:
    """The nearest folder, from ``start`` upwards, that holds ``notebooks/``."""
    here = Path(start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / "notebooks").is_dir():
            return folder
    raise SystemExit(
        f"coursekit: no course found at or above {here} (looked for a notebooks/ folder). "
        "Run this inside the course repository, or pass --root."
    )


def _doctor(args: argparse.Namespace) -> int:
    from coursekit.doctor import diagnose

    report = diagnose()
    print(report.render())
    return 0 if report.ok else 1


def _build(args: argparse.Namespace) -> int:
    from coursekit.authoring import MarkupError, build

    root = Path(args.root).resolve() if args.root else find_course_root()
    try:
        changes = build(root, check=args.check)
    except (MarkupError, FileNotFoundError, ValueError) as error:
        print(f"coursekit build: {error}", file=sys.stderr)
        return 2
    names = [str(path.relative_to(root)) for path in changes]
    if args.check:
        if names:
            print("Out of date; run `coursekit build` to regenerate:", file=sys.stderr)
            for name in names:
                print(f"  {name}", file=sys.stderr)
            return 1
        print("exercises/, solutions/ and the README table match notebooks/.")
        return 0
    print("\n".join(f"wrote {name}" for name in names) or "Everything was up to date.")
    return 0


def _start(args: argparse.Namespace) -> int:
    from coursekit.launch import start_lab

    root = Path(args.root).resolve() if args.root else find_course_root()
    return start_lab(root, port=args.port, open_browser=not args.no_browser)


def parser() -> argparse.ArgumentParser:
    main_parser = argparse.ArgumentParser(
        prog="coursekit", description="Gradient accumulation, hands-on: course tools."
    )
    commands = main_parser.add_subparsers(dest="command", required=True)

    doctor = commands.add_parser("doctor", help="report Python, torch, device, widgets, Colab")
    doctor.set_defaults(run=_doctor)

    build = commands.add_parser("build", help="write exercises/ and solutions/ from notebooks/")
    build.add_argument("--check", action="store_true", help="only report files that would change")
    build.add_argument("--root", help="course folder (default: found from the current folder)")
    build.set_defaults(run=_build)

    start = commands.add_parser("start", help="open the course in JupyterLab")
    start.add_argument("--port", type=int, default=8888, help="first port to try (default 8888)")
    start.add_argument("--no-browser", action="store_true", help="print the URL, open nothing")
    start.add_argument("--root", help="course folder (default: found from the current folder)")
    start.set_defaults(run=_start)
    return main_parser


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    raise SystemExit(main())
