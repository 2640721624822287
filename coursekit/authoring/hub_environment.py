"""``binder/requirements.txt``: what a JupyterHub's single-user image needs for the course.

On a hub, nbgitpuller copies the course's *files* into each student's home; the *environment*
(Python packages) comes from the image the hub starts for every student. That image must hold:

- coursekit, from where the set-up cell would install it (the same address), with the
  ``lab`` extra (JupyterLab, ipykernel) and ``frameworks`` (module 5's Accelerate and
  Lightning, module 7's peft);
- torch at the version CI tests (coursekit itself accepts a range, so Colab keeps its torch);
- ipywidgets 8, the version the course's widgets are tested with in JupyterLab 4 (the browser
  test draws them all, the hub test the quiz); coursekit's own range also admits Colab's 7.7;
- nbgitpuller, which the links need, and ``jupyterhub``, whose ``jupyterhub-singleuser`` the
  hub starts for each student.

repo2docker (which BinderHub runs, and which can build a Zero to JupyterHub
``singleuser.image``) installs ``binder/requirements.txt`` and runs ``binder/postBuild``; a
Dockerfile on the Jupyter Docker stacks installs it with ``pip install -r``.
``coursekit build`` writes the file from course.py, so the coursekit line follows
``REPOSITORY``, ``BRANCH`` and ``INSTALL_FROM`` as the set-up cell does, and ``build --check``
names it when it is out of date.
``scripts/setup --browser`` builds the hub test's environment from this very file
(:func:`local_requirements` swaps only the coursekit line for the checkout).
"""

from __future__ import annotations

import re
from pathlib import Path

from coursekit.authoring.publication import Publication, from_course

#: The file, relative to the course folder.
REQUIREMENTS = Path("binder") / "requirements.txt"
#: The torch CI tests the course with: the default of ``scripts/setup`` (a test keeps them equal).
TESTED_TORCH = "2.13.0"
#: coursekit's extras a hub needs: JupyterLab and the frameworks modules 5 and 7 compare.
EXTRAS = "lab,frameworks"
_COURSEKIT_LINE = re.compile(r"^coursekit\[(?P<extras>[^\]]*)\]\s*@\s*\S+\s*$")


def hub_requirements(
    publication: Publication | None = None, install_from: str | None = None
) -> str:
    """The text of ``binder/requirements.txt`` for the course published at ``publication``.

    ``install_from``: course.py's ``INSTALL_FROM`` (a wheel's URL, or a Google Drive path that
    only Colab can read); None installs from the publication's repository.
    """
    publication = publication or from_course()
    source = publication.git_requirement().removeprefix("coursekit @ ")
    note = []
    if install_from is not None and install_from.startswith("http"):
        source = install_from
    elif install_from is not None:  # a Drive path: a hub's image build cannot read it
        note = [
            f"# INSTALL_FROM in coursekit/course.py is {install_from}, which only Colab can read:",
            "# put the wheel where the image build can download it and name it below instead.",
        ]
    return "\n".join(
        [
            "# The single-user environment of a JupyterHub for this course (written by",
            "# `coursekit build` from coursekit/course.py: edit that, not this file).",
            "# repo2docker builds an image from it and binder/postBuild (BinderHub does; so can",
            "# you, for Zero to JupyterHub's singleuser.image). On a Jupyter Docker stacks image:",
            "# `pip install -r binder/requirements.txt`, then run binder/postBuild.",
            "# The course's tests build a hub's environment from this file and click its links.",
            "#",
            "# torch: the version the course's CI tests. From PyPI on Linux x86-64 this is the",
            "# CUDA build (several GB; it also runs on CPU-only nodes). For a CPU-only hub, write",
            f"# torch=={TESTED_TORCH}+cpu, and add a line of its own:",
            "# --extra-index-url https://download.pytorch.org/whl/cpu",
            f"torch=={TESTED_TORCH}",
            *note,
            f"coursekit[{EXTRAS}] @ {source}",
            "# ipywidgets 8: the version the course's widgets are tested with in JupyterLab 4",
            "# (coursekit alone also accepts Colab's 7.7).",
            "ipywidgets>=8",
            "# the course's links (`coursekit links --hub ...`) open modules through nbgitpuller",
            "nbgitpuller>=1.2",
            "# jupyterhub-singleuser, which the hub starts for each student: pin it to the hub's",
            "# major version (e.g. jupyterhub==5.*); JupyterHub warns when the two majors differ",
            "jupyterhub",
            "",
        ]
    )


def local_requirements(text: str, checkout: Path) -> str:
    """``text`` with its coursekit line installing ``checkout`` (editable) instead.

    The tests cannot reach the course's GitHub repository, and must test this checkout's
    coursekit anyway; every other line is kept as written. A ValueError where the text has
    no coursekit line, or more than one.
    """
    lines = text.splitlines()
    found = [i for i, line in enumerate(lines) if _COURSEKIT_LINE.match(line.strip())]
    if len(found) != 1:
        raise ValueError(
            f"{REQUIREMENTS} should hold one `coursekit[...] @ ...` line; it holds {len(found)}"
        )
    extras = _COURSEKIT_LINE.match(lines[found[0]].strip())["extras"]
    lines[found[0]] = f"-e {Path(checkout).resolve()}[{extras}]"
    return "\n".join(lines) + "\n"


def write_local_requirements(target: Path) -> None:
    """Write this checkout's :func:`local_requirements` to ``target`` (``scripts/setup``)."""
    root = Path(__file__).resolve().parents[2]
    text = (root / REQUIREMENTS).read_text(encoding="utf-8")
    Path(target).write_text(local_requirements(text, root), encoding="utf-8")
