"""Where students get the course from: the GitHub repository the generated notebooks point to.

The Colab badges and the set-up cell name a GitHub ``owner/name``. An instructor who copies the
course pushes it to their own repository, whose ``origin`` remote already names it, so
``coursekit build`` reads the address from there. ``REPOSITORY`` in ``coursekit/course.py`` is
the fallback where that remote says nothing (no git, no ``origin``, or an ``origin`` that is not
on GitHub, such as a CI clone of a local path), so a build gives the same notebooks there only
if course.py names the same repository: ``build --check`` refuses a course.py that still holds
the template's placeholder while the remote names another repository.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from coursekit import course

# https://github.com/OWNER/NAME(.git), with an optional user (a token in CI), and the ssh forms
# git@github.com:OWNER/NAME(.git) and ssh://git@github.com/OWNER/NAME(.git).
_GITHUB_REMOTE = re.compile(
    r"^(?:https?://(?:[^@/]+@)?(?:www\.)?github\.com/|git@github\.com:|ssh://git@github\.com/)"
    r"(?P<owner>[A-Za-z0-9](?:[A-Za-z0-9-]*))/(?P<name>[A-Za-z0-9._-]+?)(?:\.git)?/?$"
)


def github_repository(url: str) -> str | None:
    """``owner/name`` of a GitHub remote URL (https or ssh, with or without ``.git``), else None.

    >>> github_repository("git@github.com:ada-lab/grad-accum.git")
    'ada-lab/grad-accum'
    """
    match = _GITHUB_REMOTE.match(url.strip())
    if match is None or match["name"] in {".", ".."}:
        return None
    return f"{match['owner']}/{match['name']}"


def origin_url(root: Path) -> str | None:
    """The URL of the ``origin`` remote of the git repository holding ``root``, or None where
    there is none (git missing, ``root`` outside a repository, or no remote named ``origin``)."""
    return find_origin(root)[0]


def find_origin(root: Path) -> tuple[str | None, str]:
    """(the ``origin`` URL or None, why there is none in words: "" when there is one)."""
    try:
        result = subprocess.run(
            ["git", "-C", str(root), "remote", "get-url", "origin"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except OSError:
        return None, "git could not be run, so no git remote origin was read"
    except subprocess.TimeoutExpired:
        return None, "git did not answer in 30 s, so no git remote origin was read"
    url = result.stdout.strip()
    if result.returncode == 0 and url:
        return url, ""
    said = " ".join(result.stderr.split())
    if "not a git repository" in said:
        return None, "the course is not in a git repository, so there is no git remote origin"
    if "no such remote" in said.lower() or (result.returncode == 0 and not url):
        return None, "no git remote origin"
    return None, f"git could not read the remote origin ({_without_credentials(said)[:200]})"


def _without_credentials(url: str) -> str:
    """``url`` without a user or token an https URL may carry (CI logs)."""
    return re.sub(r"//[^@/\s]+@", "//", url)


def placeholder_repository() -> str | None:
    """The address the course template ships with in course.py (None where it declares none)."""
    return course.PLACEHOLDER_REPOSITORY


@dataclass(frozen=True)
class Publication:
    """The repository and branch the notebooks name, and where the address was found."""

    repository: str  # GitHub owner/name
    branch: str
    remote: str | None = None  # the origin URL, whatever it is; None without one
    from_remote: bool = False  # True when ``repository`` was read from ``remote``
    no_remote: str = "no git remote origin"  # why ``remote`` is None, in words

    @property
    def came_from(self) -> str:
        """Where ``repository`` was found, in words, for ``coursekit build`` to print."""
        if self.from_remote:
            return f"the git remote origin, {_without_credentials(self.remote or '')}"
        if self.remote is None:
            return f"REPOSITORY in coursekit/course.py; {self.no_remote}"
        return (
            "REPOSITORY in coursekit/course.py; the git remote origin is "
            f"{_without_credentials(self.remote)}, which is not a GitHub repository address"
        )

    def repository_url(self) -> str:
        return f"https://github.com/{self.repository}"

    def git_requirement(self) -> str:
        """The pip requirement that installs coursekit from the repository's branch."""
        return f"coursekit @ git+{self.repository_url()}@{self.branch}"

    def colab_url(self, folder: str, module_name: str) -> str:
        return (
            f"https://colab.research.google.com/github/{self.repository}/blob/{self.branch}/"
            f"{folder}/{module_name}.ipynb"
        )

    def placeholder_conflict(self) -> str | None:
        """Why course.py must be edited before the notebooks are committed, or None.

        A build that read the address from the remote writes notebooks that a build without
        that remote (a CI clone, a copy without git) cannot reproduce while course.py still
        holds the template's placeholder.
        """
        placeholder = placeholder_repository()
        if not self.from_remote or placeholder is None or course.REPOSITORY != placeholder:
            return None
        if self.repository == course.REPOSITORY:
            return None
        return (
            f"coursekit/course.py still holds the template's REPOSITORY = {placeholder!r}, but "
            f"the git remote origin is {self.repository_url()}. A build without that remote (a "
            "CI clone, a copy without git) would point Colab at the placeholder. Set "
            f'REPOSITORY = "{self.repository}" in coursekit/course.py, then run `coursekit build`.'
        )


def from_course() -> Publication:
    """The address course.py states, ignoring any remote."""
    return Publication(course.REPOSITORY, course.BRANCH, no_remote="any git remote ignored")


def resolve(root: Path) -> Publication:
    """The address the course at ``root`` is published under: its GitHub ``origin`` remote,
    else ``REPOSITORY`` in course.py.

    A remote that names course.py's repository in other letter case (GitHub ignores case) keeps
    course.py's spelling, so the generated notebooks do not change for it.
    """
    remote, why = find_origin(root)
    found = github_repository(remote) if remote else None
    if found is None:
        return Publication(course.REPOSITORY, course.BRANCH, remote=remote, no_remote=why or "")
    if found.lower() == course.REPOSITORY.lower():
        found = course.REPOSITORY
    return Publication(found, course.BRANCH, remote=remote, from_remote=True)
