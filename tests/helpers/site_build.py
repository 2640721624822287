"""One site of the course, built once per test process for tests/test_site*.py.

Built from the repository's notebooks with an empty output cache but for one seeded cell
(no notebook runs), a JupyterHub named, and a test issuer key in a temporary folder (never
the repository's certificates/): a genuine certificate, and one revoked in the published
list. Building takes a few seconds; both test files share it.
"""

from __future__ import annotations

import atexit
import base64
import functools
import shutil
import tempfile
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from coursekit.authoring.publication import Publication, from_course
from coursekit.course import TITLE, repository_url
from coursekit.grading.records import baking, certificates, revocation, tracks
from coursekit.grading.records.credentials import issuer_for
from coursekit.grading.records.keys import export_public_key
from coursekit.site import SiteReport, build_site
from coursekit.site.outputs import OutputCache, cell_keys
from coursekit.site.sources import read_modules

REPO = Path(__file__).resolve().parents[2]
HUB = "https://hub.example.org"
SEEDED_TEXT = "SEEDED-OUTPUT: 1 2 3"
SEEDED_MODULE = "01_accumulation"


@dataclass(frozen=True)
class BuiltSite:
    out: Path
    report: SiteReport
    publication: Publication
    key: Ed25519PrivateKey
    genuine: certificates.Issued
    revoked: certificates.Issued
    seeded_cell: str  # the id of the cell whose output the cache holds


def issue(key: Ed25519PrivateKey, name: str) -> certificates.Issued:
    return certificates.issue(
        name=name,
        coverage=tracks.coverage("workshop"),
        score_percent=91.5,
        pass_percent=70,
        key=key,
        issuer=issuer_for(key.public_key(), TITLE, repository_url()),
        issued=datetime.now(timezone.utc),
    )


def badge(token: str) -> bytes:
    return baking.bake(baking.badge_image(), token)


@functools.lru_cache(maxsize=1)
def built_site() -> BuiltSite:
    folder = Path(tempfile.mkdtemp(prefix="coursekit-site-test-"))
    atexit.register(shutil.rmtree, folder, True)
    key = Ed25519PrivateKey.generate()
    published = folder / "published"
    export_public_key(key.public_key(), published)
    genuine, revoked = issue(key, "Ada Lovelace"), issue(key, "Grace Hopper")
    revocation.revoke(published / revocation.REVOKED_FILE, revoked.statement.id, "issued in error")
    publication = from_course()
    cache = OutputCache(folder / "cache")
    source = next(m for m in read_modules(REPO, publication) if m.name == SEEDED_MODULE)
    keys = cell_keys(source.name, source.exercise)
    index = next(i for i in keys if "demo" in source.exercise.cells[i].metadata.get("tags", []))
    png = base64.b64encode(baking.badge_image()).decode("ascii")
    cache.put(
        keys[index],
        [
            {"output_type": "stream", "name": "stdout", "text": SEEDED_TEXT + "\n"},
            {"output_type": "display_data", "data": {"image/png": png}, "metadata": {}},
        ],
    )
    report = build_site(
        REPO,
        folder / "site",
        cache_dir=folder / "cache",
        run_notebooks=False,
        hub_url=HUB,
        certificates_dir=published,
        publication=publication,
        progress=lambda text: None,
    )
    return BuiltSite(
        folder / "site",
        report,
        publication,
        key,
        genuine,
        revoked,
        source.exercise.cells[index].id,
    )
