"""The launch buttons of a module's page: Colab, Binder and, when the instructor names one, a
JupyterHub through nbgitpuller.

Colab and Binder open the exercise of the repository ``coursekit build`` writes into the
notebooks (the README's badges name the same); the hub link is ``coursekit links``' own
(:func:`coursekit.commands.hub_links.nbgitpuller_link`), so the two never differ.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import quote

from coursekit.authoring.publication import Publication
from coursekit.commands.hub_links import CourseSource, nbgitpuller_link


@dataclass(frozen=True)
class Launch:
    label: str
    url: str
    kind: str  # "colab", "binder" or "hub": the button's CSS class and test hook


def binder_url(publication: Publication, module_name: str) -> str:
    """mybinder.org, building the repository's ``binder/`` environment, opening the exercise."""
    path = quote(f"exercises/{module_name}.ipynb", safe="")
    return (
        f"https://mybinder.org/v2/gh/{publication.repository}/{quote(publication.branch)}"
        f"?labpath={path}"
    )


def launch_links(
    publication: Publication,
    module_name: str,
    hub_url: str | None = None,
    hub_source: CourseSource | None = None,
) -> list[Launch]:
    links = [
        Launch("Open in Colab", publication.colab_url("exercises", module_name), "colab"),
        Launch("Launch on Binder", binder_url(publication, module_name), "binder"),
    ]
    if hub_url:
        link = nbgitpuller_link(hub_url, module_name, hub_source)
        links.append(Launch("Open on the course's JupyterHub", link, "hub"))
    return links
