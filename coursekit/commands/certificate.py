"""The instructor's certificate commands: certificate, verify, issuer-key, revoke.

Apart from :mod:`coursekit.commands.instructor` (export) because they need the ``instructor``
extra (``cryptography`` for Ed25519, ``segno`` for the QR code), which a course that only
grades and exports does not. Whatever they print that a page could shape (a student's name,
a certificate's fields) goes through :func:`~coursekit.grading.text.for_terminal`.
"""

from __future__ import annotations

import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import BinaryIO

from coursekit.commands.certificate_input import CertificateInputError, read_certificate
from coursekit.commands.placeholders import did_web_host, is_example_host, placeholder_repository
from coursekit.course import TITLE, repository_url
from coursekit.grading.records import certificates, exports, revocation, tracks
from coursekit.grading.records.baking import (
    badge_image,
    bake,
)
from coursekit.grading.records.credentials import CredentialError, issuer_for
from coursekit.grading.records.gradebook import Gradebook
from coursekit.grading.records.keys import (
    PUBLIC_KEY_FILE,
    PUBLISHED_DIR,
    KeyFileError,
    check_did_web,
    did_key,
    export_public_key,
    fingerprint,
    legacy_key_path,
    load_or_create_signing_key,
    read_verifying_key,
)
from coursekit.grading.records.revocation import REVOKED_FILE, RevocationError
from coursekit.grading.text import for_terminal, shown_differently

_HIDDEN = "control, bidirectional or invisible characters"


def _quoted(name: str) -> str:
    return f"'{for_terminal(name)}'"


def _published(name: str) -> Path | None:
    """``certificates/NAME`` in the current folder or the nearest one above that has it."""
    here = Path.cwd().resolve()
    for folder in (here, *here.parents):
        if (folder / PUBLISHED_DIR / name).is_file():
            return folder / PUBLISHED_DIR / name
    return None


def _error(command: str, message: object) -> int:
    print(f"coursekit {command}: {for_terminal(message)}", file=sys.stderr)
    return 2


def run_certificate(
    *,
    student: str,
    gradebook: Path = Path("gradebook.sqlite"),
    pass_percent: float = 70.0,
    out: Path | None = None,
    key_path: Path | None = None,
    track: str | None = None,
    modules: str | None = None,
    did_web: str | None = None,
    allow_placeholder: bool = False,
) -> int:
    """Sign a certificate for ``student`` over the modules covered (the whole course, a track
    or ``modules``): the printable page (``out``), the Open Badges credential beside it
    (``.jwt``, for a wallet) and a badge image with the credential baked in (``.png``).

    Refused while the addresses it would sign are placeholders (the template's REPOSITORY, an
    example did:web), unless ``allow_placeholder`` (a trial): a signed credential cannot be
    changed once handed out."""
    if not gradebook.exists():
        return _error("certificate", f"no gradebook at {gradebook}.")
    if not 0 <= pass_percent <= 100:
        return _error("certificate", "--pass-mark is a percentage, from 0 to 100.")
    if out is not None and out.suffix.lower() in (".jwt", ".jws", ".png"):
        return _error(
            "certificate", "--out names the HTML page (the .jwt and .png are written beside it)."
        )
    try:
        coverage = tracks.coverage(track, modules)
        if did_web:
            check_did_web(did_web)
    except ValueError as error:
        return _error("certificate", error)
    with Gradebook(gradebook) as book:
        current = {g.assignment: g for g in book.current_grades() if g.student == student}
    # a hand-in the grader failed on has no score: no grade yet, never a 0
    current = {name: g for name, g in current.items() if g.score is not None}
    missing = [name for name in coverage.modules if name not in current]
    if missing:
        print(
            f"coursekit certificate: {for_terminal(student)} has no grade for "
            f"{', '.join(missing)}, which this certificate covers ({coverage.title}). Grade "
            "those hand-ins first, or certify other modules (--track, --modules).",
            file=sys.stderr,
        )
        return 1
    score = sum(current[name].score for name in coverage.modules)
    maximum = coverage.points()
    percent = 100 * score / maximum if maximum else 0.0
    if percent > 100:
        return _error(
            "certificate",
            f"{student}'s grades add up to {score:g} of {maximum:g} points: the questions' "
            "points changed since they were graded. Grade those modules again (--regrade).",
        )
    if percent < pass_percent:
        print(
            f"coursekit certificate: {for_terminal(student)} has {score:g} of {maximum:g} points "
            f"({percent:.1f}%) in {', '.join(coverage.modules)}, below the pass mark of "
            f"{pass_percent:g}%.",
            file=sys.stderr,
        )
        return 1
    placeholders = _placeholders(did_web)
    if placeholders and not allow_placeholder:
        return _error(
            "certificate",
            f"refused: this certificate would sign {'; and '.join(placeholders)}. A signed "
            "certificate cannot be changed once handed out: set the address, or pass "
            "--allow-placeholder for a trial certificate.",
        )
    try:
        key = load_or_create_signing_key(key_path)
    except KeyFileError as error:
        return _error("certificate", error)
    issuer = issuer_for(key.public_key(), TITLE, repository_url(), did_web)
    try:
        issued = certificates.issue(
            name=student,
            coverage=coverage,
            score_percent=percent,
            pass_percent=pass_percent,
            key=key,
            issuer=issuer,
            issued=datetime.now(timezone.utc),
        )
    except CredentialError as error:  # a name of tens of thousands of characters
        return _error("certificate", f"cannot sign this certificate: {error}.")
    page = out or Path(f"certificate-{exports.file_stem(student)}.html")
    wallet, badge = page.with_suffix(".jwt"), page.with_suffix(".png")
    try:
        page.parent.mkdir(parents=True, exist_ok=True)
        page.write_text(issued.page, encoding="utf-8", newline="")  # the bytes signed, anywhere
        wallet.write_text(issued.token + "\n", encoding="ascii")
        badge.write_bytes(bake(badge_image(), issued.token))
    except OSError as error:
        return _error("certificate", f"cannot write {error.filename} ({error.strerror}).")
    shown = issued.statement
    print(
        f"wrote {for_terminal(page)}: {for_terminal(student)}, {shown.score}, ID {shown.id}\n"
        f"  and {for_terminal(wallet)} (the Open Badges credential, for a wallet), "
        f"{for_terminal(badge)} (the badge, credential baked in)\n"
        f"  covers {for_terminal('; '.join(shown.module_lines()))}\n"
        f"  {for_terminal(_issuer_line(shown.fields()))}"
    )
    if placeholders:
        print(
            "  A trial certificate (--allow-placeholder): it signs a placeholder address; "
            "issue the real ones once it is set."
        )
    published = _published(PUBLIC_KEY_FILE)
    if published is None:
        print(
            "  Publish the public key once so anyone can verify: coursekit issuer-key "
            "--out certificates/ and commit certificates/ with the course."
        )
    elif not _same_key(published, key.public_key()):
        print(
            f"coursekit certificate: warning: {for_terminal(published)} is another key than the "
            "one that signed this certificate: verify will reject it until you publish this "
            "key (coursekit issuer-key --out certificates/).",
            file=sys.stderr,
        )
    if shown_differently(student):
        print(
            f"coursekit certificate: warning: the name {_quoted(student)} holds {_HIDDEN} "
            "(escaped here and on the page); the credential signs it as given.",
            file=sys.stderr,
        )
    return 0


def _placeholders(did_web: str | None) -> list[str]:
    """Each placeholder address a certificate would sign, with the setting that sets it."""
    found = []
    repository = placeholder_repository()
    if repository is not None:
        found.append(
            f"{repository_url()}, the course template's placeholder (REPOSITORY = "
            f"{repository!r} in coursekit/course.py), as the issuer's address and in the "
            "achievement's ID: set REPOSITORY to your course's GitHub owner/name"
        )
    if did_web and is_example_host(did_web_host(did_web)):
        found.append(
            f"the issuer {did_web}, whose host is reserved for examples and cannot serve its "
            "DID document (--did-web): give your own domain's did:web, or leave --did-web out "
            "to issue as the key's did:key"
        )
    return found


def _issuer_line(fields: dict) -> str:
    """Who issued a certificate, by name and address where it states them, then its DID and
    key: ``issued by Course (https://...); issuer did:key:..., key FINGERPRINT``."""
    by = fields.get("issued_by")
    named = f"issued by {by}; " if by and by != fields["issuer"] else ""
    return f"{named}issuer {fields['issuer']}, key {fields['fingerprint']}"


def _same_key(path: Path, key) -> bool:
    try:
        published = read_verifying_key(path)
    except KeyFileError:
        return False
    return not isinstance(published, bytes) and fingerprint(published) == fingerprint(key)


def _verifying_key(key_path: Path | None, legacy: bool):
    """(key, where it came from) for ``verify``; KeyFileError says what to pass."""
    if key_path is not None:
        return read_verifying_key(key_path), key_path
    if legacy:
        if legacy_key_path().exists():
            return read_verifying_key(legacy_key_path()), legacy_key_path()
        raise KeyFileError(
            "this certificate was issued before public-key signatures; only the old HMAC key "
            f"checks it, and there is none at {legacy_key_path()}: pass it with --key."
        )
    published = _published(PUBLIC_KEY_FILE)
    if published is None:
        raise KeyFileError(
            f"no public key to check with: pass --key {PUBLIC_KEY_FILE} (the course publishes "
            f"it in {PUBLISHED_DIR}/ of its repository), or run this inside the course."
        )
    return read_verifying_key(published), published


def run_verify(
    *,
    certificate: str | Path,
    key_path: Path | None = None,
    revoked_path: Path | None = None,
    stdin: BinaryIO | None = None,
) -> int:
    """Is a certificate genuine, unedited and not revoked? Checked offline with the public
    key alone. ``certificate``: a file (page, ``.jwt`` or ``.json`` credential, baked
    ``.png``), the text of its QR code, or ``-`` for standard input (``stdin`` where given);
    :func:`~coursekit.commands.certificate_input.read_certificate` tells them apart."""
    try:
        read = read_certificate(certificate, stdin)
    except CertificateInputError as error:
        return _error("verify", error)
    kind, text = read.kind, read.text
    legacy = kind == "page" and certificates.kind_of(text) == "legacy"
    try:
        key, key_from = _verifying_key(key_path, legacy)
    except KeyFileError as error:
        return _error("verify", error)
    if revoked_path is not None and not revoked_path.is_file():
        return _error("verify", f"no revocation list at {revoked_path}; check the path.")
    beside = key_from.parent / REVOKED_FILE
    listed = revoked_path or (beside if beside.is_file() else _published(REVOKED_FILE))
    try:
        revoked = revocation.read(listed) if listed else {}
    except RevocationError as error:
        return _error("verify", error)
    if kind == "token" and isinstance(key, bytes):
        return _error("verify", f"{key_from} is an HMAC key; pass the issuer's public key.")
    if kind == "token":
        verdict = certificates.verify_token(text, key, revoked)
    else:
        verdict = certificates.verify(text, key, revoked)
    f = {name: for_terminal(value) for name, value in verdict.fields.items()}
    if verdict.genuine or verdict.revoked:
        word = "Genuine" if verdict.genuine else "REVOKED"
        print(f"{word}: {f['name']}, {f['course']}, {f['score']}, {f['date']}, ID {f['id']}.")
        if "modules" in f:
            print(f"Covers {f.get('covered') or f['modules']}; {_issuer_line(f)}.")
        else:
            print("Issued before public-key signatures; checked with the old HMAC key.")
        where = f"the revocation list {for_terminal(listed)}" if listed else "no revocation list"
        print(f"Checked with the key in {for_terminal(key_from)} and {where}.")
    if verdict.revoked:  # signed by the issuer, who no longer stands by it
        print(f"It was {for_terminal(verdict.reason)}.")
        return 1
    if not verdict.genuine:
        print(f"NOT genuine: {for_terminal(verdict.reason)}.")
        return 1
    return 0


def run_issuer_key(
    *, out: Path = Path(PUBLISHED_DIR), key_path: Path | None = None, did_web: str | None = None
) -> int:
    """Export the issuer's public key (made on first use) for the course to publish."""
    try:
        if did_web:
            check_did_web(did_web)
        key = load_or_create_signing_key(key_path).public_key()
    except ValueError as error:
        return _error("issuer-key", error)
    try:
        written = export_public_key(key, out, did_web)
    except OSError as error:
        return _error("issuer-key", f"cannot write {error.filename} ({error.strerror}).")
    print(f"wrote {', '.join(for_terminal(path) for path in written)}")
    print(f"fingerprint {fingerprint(key)}; issuer {did_web or did_key(key)}")
    print("Commit them with the course: verify checks certificates against this key.")
    if did_web:
        print(f"Serve did.json where {did_web} resolves (https://HOST/.well-known/did.json).")
    return 0


def run_revoke(
    *, certificate_id: str, reason: str = "", revoked_path: Path = Path(PUBLISHED_DIR, REVOKED_FILE)
) -> int:
    """Add a certificate to the course's published revocation list."""
    try:
        added = revocation.revoke(revoked_path, certificate_id, reason)
    except RevocationError as error:
        return _error("revoke", error)
    except OSError as error:
        return _error("revoke", f"cannot write {error.filename} ({error.strerror}).")
    normal = certificate_id.strip().upper()
    if not added:
        print(f"{normal} was already revoked in {for_terminal(revoked_path)}.")
        return 0
    print(
        f"revoked {normal} in {for_terminal(revoked_path)}: commit and publish it with the "
        "course, and verify reports the certificate as revoked."
    )
    return 0
