"""The certificates an instructor has revoked: a list the course publishes beside its key.

Why a published file: a signature cannot be taken back, so ``verify`` must also ask whether
the issuer still stands by a certificate. ``coursekit revoke`` adds an ID to
``certificates/revoked.json`` (commit and publish it with ``issuer-public-key.pem``);
``verify`` reads the list published beside the key it was given, or the one it is pointed
at, and says "revoked" for an ID in it. The list is trusted as the key is: both come from
the course's repository.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import date
from pathlib import Path

REVOKED_FILE = "revoked.json"
_ID = re.compile(r"CK-[0-9A-F]{4}-[0-9A-F]{4}-[0-9A-F]{4}-[0-9A-F]{4}")
_MAX_LIST_BYTES = 16 * 2**20
_ABOUT = (
    "Certificates of this course that its instructor revoked (coursekit revoke). "
    "coursekit verify reports a certificate whose ID is here as revoked."
)


class RevocationError(ValueError):
    """A revocation list that cannot be read, or an ID that is not a certificate's."""


@dataclass(frozen=True)
class Revoked:
    id: str
    date: str
    reason: str


def check_id(certificate_id: str) -> str:
    """``certificate_id`` in upper case, if it is shaped as a certificate's ID."""
    normal = certificate_id.strip().upper()
    if not _ID.fullmatch(normal):
        raise RevocationError(
            f"{certificate_id!r} is not a certificate ID (they read CK-XXXX-XXXX-XXXX-XXXX, "
            "as printed on the certificate and by coursekit certificate)."
        )
    return normal


def read(path: Path) -> dict[str, Revoked]:
    """The revoked certificates in ``path`` by ID (none if the file does not exist)."""
    if not path.exists():
        return {}
    try:
        if path.stat().st_size > _MAX_LIST_BYTES:
            raise RevocationError(f"the revocation list {path} is too large to be one.")
        data = json.loads(path.read_text(encoding="utf-8"))
        entries = [Revoked(e["id"], e["date"], e.get("reason", "")) for e in data["revoked"]]
    except (OSError, ValueError, KeyError, TypeError, RecursionError) as error:
        if isinstance(error, RevocationError):
            raise
        raise RevocationError(
            f"the revocation list {path} is damaged (expected {{'revoked': [{{'id': ..., "
            "'date': ..., 'reason': ...}]}}): restore it from the course's repository."
        ) from None
    if not all(isinstance(v, str) for e in entries for v in (e.id, e.date, e.reason)):
        raise RevocationError(f"the revocation list {path} holds an entry that is not text.")
    return {e.id.strip().upper(): e for e in entries}  # as check_id writes an ID


def revoke(path: Path, certificate_id: str, reason: str, on: date | None = None) -> bool:
    """Add ``certificate_id`` to the list at ``path`` (made if missing). False if it was
    already there."""
    certificate_id = check_id(certificate_id)
    revoked = read(path)
    if certificate_id in revoked:
        return False
    revoked[certificate_id] = Revoked(certificate_id, (on or date.today()).isoformat(), reason)
    entries = [
        {"id": e.id, "date": e.date, "reason": e.reason}
        for e in sorted(revoked.values(), key=lambda e: (e.date, e.id))
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps({"about": _ABOUT, "revoked": entries}, indent=2, ensure_ascii=False)
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(text + "\n", encoding="utf-8")
    temporary.replace(path)  # never a half-written list
    return True
