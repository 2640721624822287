"""nbgitpuller links: one click opens a module's exercise on a JupyterHub.

A workshop on a JupyterHub that has nbgitpuller installed needs no git from students: the
link clones the course repository into their home folder (on later clicks it pulls new
commits, keeping their own changes by nbgitpuller's automatic merging) and opens the notebook
in JupyterLab.

The link follows nbgitpuller's documented format (https://nbgitpuller.readthedocs.io, "Options
in an nbgitpuller URL", and its link generator, docs/_static/link_gen/link.js in
jupyterhub/nbgitpuller): ``HUB/hub/user-redirect/git-pull`` with the query parameters ``repo``
(the repository to clone), ``branch`` (nbgitpuller's own default is ``master``, so it is always
given) and ``urlpath`` (``lab/tree/<repository folder>/<file>`` for JupyterLab; the folder is
the repository's name, where nbgitpuller clones it).
"""

from __future__ import annotations

from urllib.parse import quote, urlsplit

from coursekit import course


def nbgitpuller_link(hub_url: str, module_name: str) -> str:
    """The link that pulls the course onto ``hub_url`` and opens ``exercises/<module>.ipynb``.

    Example::

        >>> nbgitpuller_link("https://hub.example.org", "01_accumulation")  # doctest: +SKIP
        'https://hub.example.org/hub/user-redirect/git-pull?repo=https%3A%2F%2Fgithub.com%2F...'
    """
    hub = _hub_base(hub_url)
    repository = course.repository_url()
    folder = repository.rstrip("/").rsplit("/", 1)[-1].removesuffix(".git")
    return (
        f"{hub}/hub/user-redirect/git-pull"
        f"?repo={quote(repository, safe='')}"
        f"&branch={quote(course.BRANCH, safe='')}"
        f"&urlpath={quote(f'lab/tree/{folder}/exercises/{module_name}.ipynb', safe='/')}"
    )


def hub_links(hub_url: str) -> list[str]:
    """One :func:`nbgitpuller_link` per module of the course, in the course's order."""
    return [nbgitpuller_link(hub_url, module.name) for module in course.MODULES]


def labelled_links(hub_url: str) -> list[str]:
    """What ``coursekit links`` prints: each module's name and title, its link below it.

    Example::

        01_accumulation  Accumulating gradients
            https://hub.example.org/hub/user-redirect/git-pull?repo=...
    """
    links = hub_links(hub_url)
    return [
        f"{module.name}  {module.title}\n    {link}"
        for module, link in zip(course.MODULES, links, strict=True)
    ]


def placeholder_warning() -> str | None:
    """Why the links would pull the course template instead of this course, or None."""
    placeholder = getattr(course, "PLACEHOLDER_REPOSITORY", None)
    if placeholder is None or course.REPOSITORY.lower() != placeholder.lower():
        return None  # GitHub ignores case in owner/name
    return (
        f"these links pull {course.repository_url()}, the course template's placeholder "
        "(REPOSITORY in coursekit/course.py), not your course: set REPOSITORY there to the "
        "GitHub owner/name your students should get, then make the links again."
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
