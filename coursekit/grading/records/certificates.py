"""Completion certificates: a printable page, a wallet file and a baked badge, all one
signed Open Badges 3.0 credential.

Why one credential behind all three: whatever a student shares (the page, the ``.jwt`` file a
wallet imports, the PNG a profile shows), a verifier checks the same signature with the
course's published public key. The page shows the name, course, score, date, ID, modules
covered, issuer and the issuer key's fingerprint, and holds the credential in one
``<script>`` block. Its QR code carries a short signed summary of what the page shows
(:mod:`~coursekit.grading.records.summary`; the whole credential would need a code too dense
to scan from paper), so a printed copy can be checked too. :func:`verify` checks both
signatures and that they state the same, then renders the page anew from them and the key
and requires it to be the page given, byte for byte: an edit to what it shows, to a signed
block or anywhere else fails, and so does a second block.

The page itself, in each layout a release has issued, is
:mod:`~coursekit.grading.records.certificate_page`'s; names on it are shown as
:func:`~coursekit.grading.text.visible` writes them: a control, bidirectional or invisible
character appears as its escape (``\\u202e``), never raw.
Pages of earlier releases (HMAC) are checked by
:mod:`~coursekit.grading.records.legacy_certificates` with the old key.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass
from datetime import datetime

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from coursekit.grading.records import legacy_certificates
from coursekit.grading.records.certificate_page import (
    PAGE_FORMAT,
    QR_MAX_VERSION,
    SHOWN_BY_FORMAT,
    public_key_pem,
    qr_svg,
    render,
    shown_values,
)
from coursekit.grading.records.credentials import (
    CredentialError,
    Issuer,
    Statement,
    build,
    open_credential,
    sign,
)
from coursekit.grading.records.keys import b64url_decode, fingerprint
from coursekit.grading.records.revocation import Revoked
from coursekit.grading.records.summary import (
    SUMMARY_TYP,
    open_summary,
    sign_summary,
    summary_matches,
)
from coursekit.grading.records.tracks import Coverage

__all__ = [
    "MAX_PAGE_CHARS",
    "PAGE_FORMAT",
    "QR_MAX_VERSION",
    "SHOWN_FIELDS",
    "Issued",
    "Verdict",
    "issue",
    "kind_of",
    "public_key_pem",
    "qr_svg",
    "render",
    "verify",
    "verify_token",
]

BLOCK_ID = 'id="coursekit-credential"'
SUMMARY_ID = 'id="coursekit-summary"'
_BLOCK = re.compile(
    r'<script type="application/vc\+jwt" id="coursekit-credential">(.*?)</script>', re.S
)
_SUMMARY = re.compile(r'<script type="application/jwt" id="coursekit-summary">(.*?)</script>', re.S)
_SHOWN = re.compile(r'<span data-field="(\w+)">(.*?)</span>', re.S)
#: What a new page shows, in order (:mod:`~coursekit.grading.records.certificate_page`).
SHOWN_FIELDS = SHOWN_BY_FORMAT[PAGE_FORMAT]
_FORMAT = re.compile(r'<html lang="en" data-coursekit-page="([^"]*)">')
#: A certificate page is some tens of kB; anything far larger is not one.
MAX_PAGE_CHARS = 2 * 2**20


@dataclass(frozen=True)
class Verdict:
    """``genuine``: signed by the key and unedited. ``revoked``: the issuer's list names it."""

    genuine: bool
    reason: str
    fields: dict
    revoked: Revoked | None = None


@dataclass(frozen=True)
class Issued:
    page: str
    token: str  # the credential, a compact JWS (the .jwt file, the baked badge)
    summary: str  # the QR code's short signed summary
    statement: Statement


def issue(
    *,
    name: str,
    coverage: Coverage,
    score_percent: float,
    pass_percent: float,
    key: Ed25519PrivateKey,
    issuer: Issuer,
    issued: datetime,
) -> Issued:
    """Sign a certificate: the credential (compact JWS) and its page."""
    credential = build(
        name=name,
        achievement=coverage.achievement(pass_percent),
        score_percent=score_percent,
        issuer=issuer,
        issued=issued,
    )
    token = sign(credential, key)
    _, statement = open_credential(token, key.public_key())
    summary = sign_summary(statement, credential["id"], key)
    return Issued(render(token, summary, statement, key.public_key()), token, summary, statement)


def kind_of(page: str) -> str | None:
    """``"credential"`` (this release), ``"legacy"`` (HMAC) or None (no certificate)."""
    if BLOCK_ID in page:
        return "credential"
    if legacy_certificates.BLOCK_ID in page:
        return "legacy"
    return None


def _revoked(fields: dict, revoked: dict | None) -> Verdict:
    entry = (revoked or {}).get(fields["id"])
    if entry is None:
        return Verdict(True, "genuine", fields)
    reason = f"revoked by the issuer on {entry.date}" + (
        f": {entry.reason}" if entry.reason else ""
    )
    return Verdict(False, reason, fields, entry)


def verify_token(token: str, key: Ed25519PublicKey, revoked: dict | None = None) -> Verdict:
    """Is this compact JWS a genuine certificate? It may be the credential (a ``.jwt`` file,
    a baked badge's text) or the summary a page's QR code holds (scanned)."""
    try:
        if token.count(".") == 2 and f'"typ":"{SUMMARY_TYP}"' in _header_text(token):
            claims = open_summary(token, key)
            fields = {**{k: v for k, v in claims.items() if k not in ("iss", "jti")}}
            fields.update(issuer=claims["iss"], fingerprint=fingerprint(key))
        else:
            fields = open_credential(token, key)[1].fields()
    except CredentialError as error:
        return Verdict(False, str(error), {})
    return _revoked(fields, revoked)


def _header_text(token: str) -> str:
    try:
        return b64url_decode(token.strip().split(".")[0]).decode("utf-8", "replace")
    except ValueError:
        return ""


def verify(page: str, key: Ed25519PublicKey | bytes, revoked: dict | None = None) -> Verdict:
    """Is this certificate page genuine, unedited and not revoked? ``key`` is the issuer's
    public key, or the HMAC key of a page from an earlier release."""
    if len(page) > MAX_PAGE_CHARS:
        return Verdict(False, "the file is far larger than a certificate page", {})
    kind = kind_of(page)
    if kind == "legacy" and not isinstance(key, bytes):
        return Verdict(
            False,
            "this certificate was issued before public-key signatures: only the old HMAC "
            "key checks it (coursekit verify PAGE --key ~/.config/coursekit/instructor.key)",
            {},
        )
    if kind == "credential" and isinstance(key, bytes):
        return Verdict(
            False,
            "this certificate is signed with the issuer's Ed25519 key, and the key given is "
            "the HMAC key of earlier certificates: pass the course's issuer-public-key.pem",
            {},
        )
    if kind == "legacy":
        old = legacy_certificates.verify(page, key)
        return (
            _revoked(old.fields, revoked) if old.genuine else Verdict(False, old.reason, old.fields)
        )
    if kind is None:
        return Verdict(False, "this is not a coursekit certificate (no signed data in it)", {})
    formats = _FORMAT.findall(page)
    if len(formats) != 1 or formats[0] not in SHOWN_BY_FORMAT:
        return Verdict(
            False,
            f"the page is of a layout this release does not render "
            f"({', '.join(map(repr, formats)) or 'none stated'}); verify the certificate's "
            ".jwt file instead, or use the release that made it",
            {},
        )
    page_format = formats[0]
    blocks, summaries = _BLOCK.findall(page), _SUMMARY.findall(page)
    counts = (len(blocks), page.count(BLOCK_ID), len(summaries), page.count(SUMMARY_ID))
    if counts != (1, 1, 1, 1) or legacy_certificates.BLOCK_ID in page:
        return Verdict(
            False, "the page does not hold exactly one block of each kind of signed data", {}
        )
    try:
        credential, statement = open_credential(blocks[0], key)
    except CredentialError as error:
        return Verdict(False, str(error), {})
    signed = statement.fields()
    verdict = _revoked(signed, revoked)
    try:
        claims = open_summary(summaries[0], key)
    except CredentialError as error:
        return Verdict(False, f"the QR code's summary: {error}", signed)
    if not summary_matches(claims, credential["id"], statement):
        return Verdict(
            False, "the QR code's summary does not state what the credential states", signed
        )
    shown = [(name, html.unescape(value)) for name, value in _SHOWN.findall(page)]
    for name, expected in shown_values(statement, page_format).items():
        values = [value for field, value in shown if field == name]
        if values != expected:
            return Verdict(
                False,
                f"the {name} shown on the page ({', '.join(map(repr, values)) or 'none'}) is "
                f"not the signed one ({', '.join(map(repr, expected))})",
                signed,
            )
    if page.strip() != render(blocks[0], summaries[0], statement, key, page_format).strip():
        return Verdict(False, "the page was edited outside its signed fields", signed)
    return verdict
