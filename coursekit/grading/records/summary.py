"""The short signed summary a certificate page's QR code carries.

Why not the credential itself: signed, it is some 2.6 kB, which needs a QR code of version
37 or more (165 modules a side), too dense to scan from paper. The summary states what the
page shows (ID, name, course, score, date, modules) and the issuer, in a compact JWS under
the same Ed25519 key (under 1 kB: version 20 or less). Its ``typ`` header,
``coursekit-summary+jwt``, keeps it from passing as a credential, and a credential from
passing as it. ``coursekit verify`` takes the scanned text.
"""

from __future__ import annotations

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from coursekit.grading.records.credentials import (
    MAX_TOKEN_CHARS,
    CredentialError,
    Statement,
    certificate_id,
    json_bytes,
    strict_json,
)
from coursekit.grading.records.keys import b64url, b64url_decode, fingerprint, key_of_did_key

SUMMARY_TYP = "coursekit-summary+jwt"


def sign_summary(statement: Statement, credential_id: str, key: Ed25519PrivateKey) -> str:
    """A short compact JWS of what the page shows, for its QR code: the full credential
    (some 2.6 kB) would need a QR code too dense to scan from paper; this one (under 1 kB)
    lets a printed copy be checked. Its ``typ`` keeps it from passing as a credential."""
    header = {"alg": "EdDSA", "typ": SUMMARY_TYP}
    claims = {"iss": statement.issuer, "jti": credential_id, **_summary_fields(statement)}
    signing_input = f"{b64url(json_bytes(header))}.{b64url(json_bytes(claims))}"
    return f"{signing_input}.{b64url(key.sign(signing_input.encode('ascii')))}"


def _summary_fields(statement: Statement) -> dict:
    fields = statement.fields()
    return {name: fields[name] for name in ("id", "name", "course", "score", "date", "modules")}


def open_summary(token: str, key: Ed25519PublicKey) -> dict:
    """The fields a QR summary states, if ``key`` signed it (else CredentialError)."""
    parts = token.strip().split(".")
    if len(token) > MAX_TOKEN_CHARS or len(parts) != 3:
        raise CredentialError("this is not a signed certificate summary (a compact JWS)")
    try:
        header = strict_json(b64url_decode(parts[0]))
        payload_bytes, signature = b64url_decode(parts[1]), b64url_decode(parts[2])
    except ValueError as error:
        raise CredentialError(f"the signed summary is damaged ({error})") from None
    if header != {"alg": "EdDSA", "typ": SUMMARY_TYP}:
        raise CredentialError("this is not a coursekit certificate summary")
    try:
        key.verify(signature, f"{parts[0]}.{parts[1]}".encode("ascii"))
    except InvalidSignature:
        raise CredentialError(
            "the summary's signature does not match: it was edited, or another key signed it "
            f"(this check used the key with fingerprint {fingerprint(key)})"
        ) from None
    claims = strict_json(payload_bytes)
    names = {"iss", "jti", "id", "name", "course", "score", "date", "modules"}
    if set(claims) != names or not all(isinstance(v, str) for v in claims.values()):
        raise CredentialError("the summary is not shaped as a coursekit certificate's")
    try:
        matching = claims["id"] == certificate_id(claims["jti"])
        if claims["iss"].startswith("did:key:"):
            matching = matching and fingerprint(key_of_did_key(claims["iss"])) == fingerprint(key)
        elif not claims["iss"].startswith("did:web:"):
            matching = False
    except ValueError:
        matching = False
    if not matching:
        raise CredentialError("the summary's ID or issuer is not its credential's")
    return claims


def summary_matches(claims: dict, credential_id: str, statement: Statement) -> bool:
    """Does a QR summary state exactly what the credential states?"""
    expected = {"iss": statement.issuer, "jti": credential_id, **_summary_fields(statement)}
    return claims == expected
