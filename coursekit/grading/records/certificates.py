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

Names are shown as :func:`~coursekit.grading.text.visible` writes them: a control,
bidirectional or invisible character appears as its escape (``\\u202e``), never raw.
Pages of earlier releases (HMAC) are checked by
:mod:`~coursekit.grading.records.legacy_certificates` with the old key.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass
from datetime import datetime

import segno
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from coursekit.grading.records import legacy_certificates
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
from coursekit.grading.text import visible

BLOCK_ID = 'id="coursekit-credential"'
SUMMARY_ID = 'id="coursekit-summary"'
_BLOCK = re.compile(
    r'<script type="application/vc\+jwt" id="coursekit-credential">(.*?)</script>', re.S
)
_SUMMARY = re.compile(r'<script type="application/jwt" id="coursekit-summary">(.*?)</script>', re.S)
_SHOWN = re.compile(r'<span data-field="(\w+)">(.*?)</span>', re.S)
#: What the page shows, in order; each is one ``data-field`` span.
SHOWN_FIELDS = ("name", "course", "score", "modules", "date", "id", "issuer", "fingerprint")
#: The page's layout, written on it: ``verify`` renders a page again and compares, so a
#: release that changes the layout must keep rendering pages of earlier formats.
PAGE_FORMAT = "1"
_FORMAT = re.compile(r'<html lang="en" data-coursekit-page="([^"]*)">')
#: Past this QR version (97 modules a side) a code printed 6.5 cm wide is hard to scan.
QR_MAX_VERSION = 20
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


def _shown(value: str) -> str:
    """What the page shows for a signed value: escaped where it would not show as itself,
    then HTML-escaped."""
    return html.escape(visible(value))


def qr_svg(summary: str, statement: Statement) -> str:
    """An inline SVG QR code of the signed summary; for one too long to scan from paper (a
    name of hundreds of characters), the ID and key fingerprint a verifier looks up instead.

    The SVG is written here from the code's modules (which the QR standard fixes for the
    text, error level and version), not by segno's SVG writer, whose output may change
    between its releases: ``verify`` renders the page again and needs the same bytes."""
    try:
        code = segno.make(summary, error="l", micro=False)
    except segno.DataOverflowError:
        code = None
    if code is None or code.version > QR_MAX_VERSION:
        code = segno.make(f"{statement.id} {statement.fingerprint}", error="m", micro=False)
    border, runs = 4, []
    for y, row in enumerate(code.matrix):
        x = 0
        while x < len(row):
            if row[x] & 1:
                start = x
                while x < len(row) and row[x] & 1:
                    x += 1
                runs.append(f"M{start + border} {y + border}h{x - start}v1h-{x - start}z")
            x += 1
    size = len(code.matrix) + 2 * border
    return (
        f'<svg class="qr" viewBox="0 0 {size} {size}" xmlns="http://www.w3.org/2000/svg" '
        f'shape-rendering="crispEdges"><rect width="{size}" height="{size}" fill="#fff"/>'
        f'<path fill="#000" d="{"".join(runs)}"/></svg>'
    )


def public_key_pem(key: Ed25519PublicKey) -> str:
    pem = key.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return pem.decode("ascii").strip()


def render(token: str, summary: str, statement: Statement, key: Ed25519PublicKey) -> str:
    """The page for a signed credential; the same bytes for the same credential and key."""
    fields = statement.fields()

    def shown(name: str) -> str:
        return f'<span data-field="{name}">{_shown(fields[name])}</span>'

    return f"""<!doctype html>
<html lang="en" data-coursekit-page="{PAGE_FORMAT}"><head><meta charset="utf-8">
<title>Certificate: {_shown(statement.name)}</title>
<style>
@page {{ size: A4 landscape; margin: 0; }}
body {{ font-family: Georgia, serif; margin: 0; display: flex; min-height: 100vh;
       align-items: center; justify-content: center; background: #f4f1ea; }}
.card {{ width: 26cm; padding: 1.6cm 2.2cm; border: 10px double #6b5b3e; background: #fffdf7;
        text-align: center; }}
h1 {{ font-size: 2.4rem; letter-spacing: .1em; margin: 0 0 .5cm; }}
.name {{ font-size: 2.2rem; margin: .5cm 0; overflow-wrap: anywhere; }}
.check {{ display: flex; gap: .8cm; align-items: center; margin-top: .8cm; text-align: left; }}
svg.qr {{ width: 6.5cm; height: 6.5cm; flex: none; }}
.meta {{ font-size: .8rem; color: #555; font-family: monospace; overflow-wrap: anywhere; }}
details {{ font-size: .75rem; color: #555; text-align: left; }}
</style></head><body><div class="card">
<h1>Certificate of completion</h1>
<p>This certifies that</p>
<p class="name">{shown("name")}</p>
<p>has completed <b>{shown("course")}</b> with a score of <b>{shown("score")}</b>.</p>
<p>Modules covered: {shown("modules")}</p>
<p>Date: {shown("date")}</p>
<div class="check">{qr_svg(summary, statement)}
<p class="meta">Certificate ID {shown("id")}<br>
Issuer {shown("issuer")}<br>
Issuer key (Ed25519) fingerprint {shown("fingerprint")}<br>
An Open Badges 3.0 credential, signed; the QR code holds a signed summary. Check either
with the course's published key: coursekit verify this-file.html</p></div>
<details><summary>Issuer public key</summary><pre>{public_key_pem(key)}</pre></details>
</div>
<script type="application/vc+jwt" id="coursekit-credential">{token}</script>
<script type="application/jwt" id="coursekit-summary">{summary}</script>
</body></html>
"""


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
    if formats and formats != [PAGE_FORMAT]:
        return Verdict(
            False,
            f"the page is of a layout this release does not render ({formats[0]!r}); verify "
            "the certificate's .jwt file instead, or use the release that made it",
            {},
        )
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
    for name in SHOWN_FIELDS:
        values = [value for field, value in shown if field == name]
        if values != [visible(signed[name])]:
            return Verdict(
                False,
                f"the {name} shown on the page ({', '.join(map(repr, values)) or 'none'}) is "
                f"not the signed one ({visible(signed[name])!r})",
                signed,
            )
    if page.strip() != render(blocks[0], summaries[0], statement, key).strip():
        return Verdict(False, "the page was edited outside its signed fields", signed)
    return verdict
