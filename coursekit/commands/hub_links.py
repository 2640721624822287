"""nbgitpuller links: one click opens a module's exercise on a JupyterHub.

A workshop on a JupyterHub that has nbgitpuller installed needs no git from students: the
link clones the course repository into their home folder (on later clicks it pulls new
commits, keeping their own changes by nbgitpuller's automatic merging) and opens the notebook
in JupyterLab.

The link follows nbgitpuller's documented options (https://nbgitpuller.readthedocs.io,
"Options in an nbgitpuller URL"): ``HUB/hub/user-redirect/git-pull`` with

- ``repo``: the repository to clone. Any address ``git clone`` takes on the hub, so a
  course kept off GitHub works too (``coursekit links --repository``);
- ``branch``: always given, since nbgitpuller's default has changed between releases;
- ``targetpath``: the folder the copy lands in, always given. Without it nbgitpuller takes
  the address's last part as it is: ``course.git`` for ``https://host/x/course.git`` (read in
  nbgitpuller 1.3.0's ``handlers.py``), a folder the link's notebook path would not name;
- ``app=lab`` and ``subpath``: the notebook to open in JupyterLab, relative to that folder.
  nbgitpuller joins them itself, with the parent folder a hub may set in
  ``NBGITPULLER_PARENTPATH``; a ``urlpath`` would bypass that folder and open nothing.

``tests/test_hub_workshop.py`` clicks these links on a real JupyterHub.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import quote, urlsplit

from coursekit import course
from coursekit.commands.placeholders import placeholder_repository

#: Address forms ``git clone`` takes that a hub can reach: a URL, or scp-like ``[user@]host:path``
#: (git reads an address as scp-like when a colon comes before any slash; it refuses a host
#: that starts with "-").
_URL_SCHEMES = ("https", "http", "git", "ssh", "file")
_SCP_LIKE = re.compile(r"^(?:[A-Za-z0-9._-]+@)?[A-Za-z0-9][A-Za-z0-9._-]+:.+$")
#: What a folder name may hold: nbgitpuller's status page puts the folder into the address it
#: redirects to as it is (its index.js), so "#", "?" or "%" would break the redirect.
_UNSAFE_IN_FOLDER = re.compile(r"[^A-Za-z0-9._-]+")
#: Branch names git refuses (``git check-ref-format --branch``'s rules, in short).
_BAD_BRANCH = re.compile(r"[\x00-\x20\x7f~^:?*\[\\]|\.\.|@\{|//|^[-/.]|[/.]$|\.lock$|/\.|^@$")


@dataclass(frozen=True)
class CourseSource:
    """What the links pull: a repository, its branch, and the folder the copy lands in."""

    repository: str
    branch: str
    folder: str

    def describe(self) -> str:
        """One line for the instructor: where a click takes the course from, and to."""
        return (
            f"these links clone {self.repository} (branch {self.branch}) into the folder "
            f"{self.folder}/ of each student's home on the hub (under NBGITPULLER_PARENTPATH "
            "where the hub sets one), and open the module there"
        )


def course_source(*, repository: str | None = None, branch: str | None = None) -> CourseSource:
    """The repository and branch the links pull: course.py's unless given.

    A ValueError, saying what to give instead, for an address ``git clone`` on a hub cannot
    use (empty, a relative path: relative to what, on the hub?), one that would show a
    password or token to every student, or a branch name git refuses.
    """
    address = (repository if repository is not None else course.repository_url()).strip()
    branch = (branch if branch is not None else course.BRANCH).strip()
    if not branch:
        raise ValueError("the branch is empty: give the branch students should get, e.g. main")
    if _BAD_BRANCH.search(branch):
        raise ValueError(
            f"{branch!r} is not a name git allows for a branch (no spaces, no ~^:?*[\\, "
            "no '..'): give the branch's name as `git branch` shows it"
        )
    _check_repository(address)
    return CourseSource(address, branch, repository_folder(address))


def repository_folder(repository: str) -> str:
    """The folder a clone of ``repository`` gets: its last part, without ``.git``, with any
    character a hub's redirect or JupyterLab would trip on replaced by "-".

    >>> repository_folder("https://gitlab.example.org/ada/grad-accum.git/")
    'grad-accum'
    """
    path = urlsplit(repository).path if "://" in repository else repository
    path = path.replace("\\", "/").rstrip("/").removesuffix("/.git")
    last = path.rsplit("/", 1)[-1].rsplit(":", 1)[-1]
    folder = _UNSAFE_IN_FOLDER.sub("-", last.removesuffix(".git")).strip("-.")
    if not folder:
        raise ValueError(
            f"{repository!r} names no folder to clone into: give the repository's full "
            "address, e.g. https://github.com/ada-lab/grad-accum"
        )
    return folder


def _check_repository(address: str) -> None:
    example = "e.g. https://github.com/ada-lab/grad-accum or /srv/courses/grad-accum.git"
    if not address:
        raise ValueError(f"the repository is empty: give its address, {example}")
    if any(character.isspace() for character in address):
        raise ValueError(f"{address!r} has a space in it: give the repository's address, {example}")
    if "://" in address:
        parts = urlsplit(address)
        if parts.scheme not in _URL_SCHEMES or not (parts.netloc or parts.scheme == "file"):
            raise ValueError(
                f"{address!r} is not an address git can clone: use one of "
                f"{', '.join(s + '://' for s in _URL_SCHEMES)}, {example}"
            )
        if parts.query or parts.fragment:
            raise ValueError(f"{address!r} has a query or fragment: give the repository alone")
        # GitHub and GitLab take a token as the user name too: over http(s) any user name
        # may be one. ssh's user name (git@) is no secret.
        if parts.password is not None or (parts.username and parts.scheme in ("http", "https")):
            raise ValueError(
                "the repository's address holds a user name, password or token, which every "
                "student would see in the links: give an address the students' servers can "
                "clone without one"
            )
        return
    if address.startswith("/") or _SCP_LIKE.match(address):
        return  # a path on the hub's machine, or ssh's [user@]host:path
    raise ValueError(
        f"{address!r} is a relative path, which each student's server would read from its own "
        f"folder: give a URL or an absolute path on the hub's machine, {example}"
    )


def nbgitpuller_link(hub_url: str, module_name: str, source: CourseSource | None = None) -> str:
    """The link that pulls the course onto ``hub_url`` and opens ``exercises/<module>.ipynb``.

    ``source``: what to pull; course.py's repository and branch when None.

    Example::

        >>> nbgitpuller_link("https://hub.example.org", "01_accumulation")  # doctest: +SKIP
        'https://hub.example.org/hub/user-redirect/git-pull?repo=https%3A%2F%2Fgithub.com%2F...'
    """
    hub = _hub_base(hub_url)
    source = source or course_source()
    return (
        f"{hub}/hub/user-redirect/git-pull"
        f"?repo={quote(source.repository, safe='')}"
        f"&branch={quote(source.branch, safe='')}"
        f"&targetpath={quote(source.folder, safe='')}"
        "&app=lab"
        f"&subpath={quote(f'exercises/{module_name}.ipynb', safe='/')}"
    )


def hub_links(hub_url: str, source: CourseSource | None = None) -> list[str]:
    """One :func:`nbgitpuller_link` per module of the course, in the course's order."""
    source = source or course_source()
    return [nbgitpuller_link(hub_url, module.name, source) for module in course.MODULES]


def labelled_links(hub_url: str, source: CourseSource | None = None) -> list[str]:
    """What ``coursekit links`` prints: each module's name and title, its link below it.

    Example::

        01_accumulation  Accumulating gradients
            https://hub.example.org/hub/user-redirect/git-pull?repo=...
    """
    links = hub_links(hub_url, source)
    return [
        f"{module.name}  {module.title}\n    {link}"
        for module, link in zip(course.MODULES, links, strict=True)
    ]


def placeholder_warning() -> str | None:
    """Why the links would pull the course template instead of this course, or None
    (:func:`~coursekit.commands.placeholders.placeholder_repository`, as ``certificate``)."""
    if placeholder_repository() is None:
        return None
    return (
        f"these links pull {course.repository_url()}, the course template's placeholder "
        "(REPOSITORY in coursekit/course.py), not your course: set REPOSITORY there to the "
        "GitHub owner/name your students should get, or give --repository, then make the "
        "links again."
    )


def _hub_base(hub_url: str) -> str:
    """The hub's address without a trailing slash; a ValueError for one that is no web URL."""
    parts = urlsplit(hub_url.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(
            f"{hub_url!r} is not a hub address: give its full URL with http:// or https://, "
            "e.g. https://hub.example.org"
        )
    if parts.query or parts.fragment:
        raise ValueError(
            f"{hub_url!r} has a query or fragment: give only the hub's address, "
            "e.g. https://hub.example.org"
        )
    return hub_url.strip().rstrip("/")
