"""``coursekit site --out DIR``: the course as a static website (see :mod:`coursekit.site`).

Its options are registered here (``options``), its run is ``run_site``; the parser imports
this module for help alone, so nothing heavy is imported at the top.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def options(commands: argparse._SubParsersAction) -> None:
    site = commands.add_parser(
        "site",
        help="build the course as a static website (modules, quizzes, certificate check)",
        description="Build the course as a static website in --out: a page per module with "
        "the demonstrations' outputs (run once, then cached), launch buttons, the quizzes, "
        "search, the pitfalls, an FAQ and a page that verifies certificates. Solutions "
        "never reach it.",
    )
    site.add_argument(
        "--out", required=True, help="folder to write the site to (new, or one it built before)"
    )
    site.add_argument("--root", help="course folder (default: found from the current folder)")
    site.add_argument(
        "--cache",
        help="where demonstrations' outputs are kept (default: ~/.cache/coursekit/site-outputs)",
    )
    site.add_argument(
        "--no-execute",
        action="store_true",
        help="run no notebook: show the outputs the cache has, a note for the rest",
    )
    site.add_argument("--refresh", action="store_true", help="run every notebook again")
    site.add_argument("--hub", help="a JupyterHub for nbgitpuller buttons, as in coursekit links")
    site.add_argument("--repository", help="the repository hub buttons pull (as coursekit links)")
    site.add_argument("--branch", help="its branch (as coursekit links)")
    site.add_argument(
        "--certificates",
        help="folder with the published issuer-public-key.pem and revoked.json "
        "(default: certificates/ of the course)",
    )


def placeholder_note(repository: str) -> str | None:
    """Why the site's launch buttons would open the course template instead of this course
    (its REPOSITORY still the template's, and no GitHub remote origin), or None."""
    from coursekit.authoring.publication import placeholder_repository

    placeholder = placeholder_repository()
    if placeholder is None or repository.lower() != placeholder.lower():
        return None
    return (
        f"warning: the launch buttons open github.com/{repository}, the course template's "
        "placeholder (REPOSITORY in coursekit/course.py), not your course: set REPOSITORY "
        "there to your course's GitHub owner/name (or add it as the git remote origin), then "
        "build the site again."
    )


def run_site(
    *,
    out: Path,
    root: Path | None = None,
    cache: Path | None = None,
    run_notebooks: bool = True,
    refresh: bool = False,
    hub: str | None = None,
    repository: str | None = None,
    branch: str | None = None,
    certificates: Path | None = None,
) -> int:
    """Build the site; the exit status (2, with the reason, for input it cannot use)."""
    from coursekit.commands.command_line.course_root import course_root
    from coursekit.commands.hub_links import course_source
    from coursekit.grading.records.keys import KeyFileError
    from coursekit.grading.records.revocation import RevocationError
    from coursekit.grading.text import for_terminal_lines
    from coursekit.site import build_site

    def say(text: str) -> None:
        print(f"coursekit site: {for_terminal_lines(text)}", file=sys.stderr)

    try:
        folder = course_root(str(root) if root else None)
        source = course_source(repository=repository, branch=branch) if hub else None
        report = build_site(
            folder,
            Path(out),
            cache_dir=Path(cache) if cache else None,
            run_notebooks=run_notebooks,
            refresh=refresh,
            hub_url=hub,
            hub_source=source,
            certificates_dir=Path(certificates) if certificates else None,
            progress=say,
        )
    except (ValueError, FileNotFoundError, FileExistsError, KeyFileError, RevocationError) as error:
        say(str(error))
        return 2
    pages = len(report.pages)
    say(f"wrote {pages} pages to {out}; certificates checked with {report.certificates}.")
    note = placeholder_note(report.repository)
    if note:
        say(note)
    if report.missing_outputs:
        say(
            f"{report.missing_outputs} demonstrations have no output yet (their pages say so): "
            "run coursekit site without --no-execute to make them."
        )
    return 0


def run(args: argparse.Namespace) -> int:
    return run_site(
        out=Path(args.out),
        root=Path(args.root) if args.root else None,
        cache=Path(args.cache) if args.cache else None,
        run_notebooks=not args.no_execute,
        refresh=args.refresh,
        hub=args.hub,
        repository=args.repository,
        branch=args.branch,
        certificates=Path(args.certificates) if args.certificates else None,
    )
