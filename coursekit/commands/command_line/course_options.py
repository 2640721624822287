"""Options and help of the commands that set up, build and open the course: doctor, build,
student-copy, submit, links and start. One function per command, each given the
sub-command action of the main parser (:mod:`.main_parser` calls them in help order)."""

from __future__ import annotations

import argparse

ROOT_HELP = "course folder (default: found from the current folder)"


def doctor(commands: argparse._SubParsersAction) -> None:
    commands.add_parser("doctor", help="report Python, torch, device, widgets, Colab")


def build(commands: argparse._SubParsersAction) -> None:
    build = commands.add_parser("build", help="write exercises/ and solutions/ from notebooks/")
    build.add_argument("--check", action="store_true", help="only report files that would change")
    build.add_argument("--root", help=ROOT_HELP)
    build.add_argument(
        "--repository-from",
        choices=("remote", "course"),
        default="remote",
        help="the Colab address: the git remote origin when it is on GitHub (default), or "
        "REPOSITORY in coursekit/course.py only (CI's sync check, whatever the clone's origin)",
    )


def student_copy(commands: argparse._SubParsersAction) -> None:
    copy = commands.add_parser(
        "student-copy", help="copy the course for students, without solutions/ or notebooks/"
    )
    copy.add_argument("destination", help="a new or empty folder")
    copy.add_argument("--root", help=ROOT_HELP)


def submit(commands: argparse._SubParsersAction) -> None:
    submit = commands.add_parser("submit", help="pack a saved notebook into a file to hand in")
    submit.add_argument("notebook", help="the .ipynb file you worked in, saved")
    submit.add_argument("--student", required=True, help="your name, as your instructor knows it")
    submit.add_argument("--out", help="folder to write to (default: the notebook's folder)")


def links(commands: argparse._SubParsersAction) -> None:
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


def start(commands: argparse._SubParsersAction) -> None:
    start = commands.add_parser("start", help="open the course in JupyterLab")
    start.add_argument("--port", type=int, default=8888, help="first port to try (default 8888)")
    start.add_argument("--no-browser", action="store_true", help="print the URL, open nothing")
    start.add_argument("--root", help=ROOT_HELP)
