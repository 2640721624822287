"""A certificate as an Open Badges 3.0 ``OpenBadgeCredential``, signed as a VC-JWT (EdDSA).

Why this format: wallets, learning platforms and profile sites read Open Badges 3.0 (1EdTech),
a W3C Verifiable Credential, and anyone can check its signature with the issuer's public key.
The proof is a compact JWS (Open Badges 3.0, "JSON Web Token Proof Format"): the JOSE header
(``alg`` EdDSA, ``kid``, ``typ`` JWT and nothing else), the credential itself as the payload
with the claims ``iss``, ``jti``, ``nbf`` and ``sub`` copied from it, and an Ed25519
signature over both.

:func:`open_credential` is what ``coursekit verify`` trusts, and it trusts nothing in the
token but the signature under the key the verifier brings: the header must name that key,
the issuer must be that key's ``did:key`` (or a did:web signed under it), the claims must
repeat the credential's fields, and JSON with a duplicate key or a non-finite number is
refused (two parsers could read it two ways).
"""

from __future__ import annotations

import json
import math
import re
import secrets
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from coursekit.grading.records.keys import (
    b64url,
    b64url_decode,
    did_key,
    fingerprint,
    key_of_did_key,
    verification_method,
)

CONTEXT = (
    "https://www.w3.org/ns/credentials/v2",
    "https://purl.imsglobal.org/spec/ob/v3p0/context-3.0.3.json",
)
#: A compact JWS longer than this is no certificate of ours (a few kB at most).
MAX_TOKEN_CHARS = 64 * 1024
_ID = re.compile(r"CK-[0-9A-F]{4}-[0-9A-F]{4}-[0-9A-F]{4}-[0-9A-F]{4}")
_HEADER_KEYS = {"alg", "kid", "typ"}
#: How far ahead of the verifier's clock the issuer's may be: a certificate checked the
#: minute it is issued, on a machine whose clock is a little behind, is still valid.
CLOCK_SKEW = timedelta(minutes=5)


class CredentialError(ValueError):
    """A credential that is not genuine, or not one of ours; the message says which."""


@dataclass(frozen=True)
class Issuer:
    """Who signs: the DID (did:key of the key, or a did:web), shown name and address."""

    id: str
    name: str
    url: str


#: ``targetType`` of the Open Badges ``Alignment`` that names one module the achievement
#: covers (``targetCode`` its file stem, ``targetName`` its title); "ext:" marks a type of
#: our own, as the standard asks.
MODULE_TARGET_TYPE = "ext:CourseModule"


@dataclass(frozen=True)
class Statement:
    """What a genuine credential states, as the page and the terminal show it."""

    id: str  # CK-XXXX-XXXX-XXXX-XXXX, derived from the credential's urn:uuid
    name: str
    course: str
    score: str
    date: str
    modules: tuple[str, ...]
    issuer: str
    fingerprint: str
    #: each module's title, as signed (``""`` where the credential names none: those of
    #: earlier releases)
    module_titles: tuple[str, ...] = ()
    issuer_name: str = ""
    issuer_url: str = ""

    def module_lines(self) -> tuple[str, ...]:
        """Each module covered, as a reader names it: ``module 01, Accumulating gradients``."""
        titles = self.module_titles or ("",) * len(self.modules)
        return tuple(
            f"module {module.split('_')[0]}, {title}" if title else f"module {module}"
            for module, title in zip(self.modules, titles, strict=True)
        )

    def issued_by(self) -> str:
        """The issuer as a reader names it: ``Name (address)``, its DID where it states
        neither."""
        if self.issuer_name and self.issuer_url:
            return f"{self.issuer_name} ({self.issuer_url})"
        return self.issuer_name or self.issuer_url or self.issuer

    def fields(self) -> dict:
        return {
            "id": self.id,
            "name": self.name,
            "course": self.course,
            "score": self.score,
            "date": self.date,
            "modules": ", ".join(self.modules),
            "issuer": self.issuer,
            "fingerprint": self.fingerprint,
            "covered": "; ".join(self.module_lines()),
            "issued_by": self.issued_by(),
        }


def new_credential_id() -> str:
    return f"urn:uuid:{uuid.UUID(bytes=secrets.token_bytes(16), version=4)}"


def certificate_id(credential_id: str) -> str:
    """The short ID printed on the page: 64 random bits of the credential's UUID (the
    version and variant digits left out)."""
    digits = uuid.UUID(credential_id.removeprefix("urn:uuid:")).hex.upper()
    return f"CK-{digits[0:4]}-{digits[4:8]}-{digits[8:12]}-{digits[20:24]}"


def build(
    *,
    name: str,
    achievement: dict,  # Coverage.achievement(pass_percent)
    score_percent: float,
    issuer: Issuer,
    issued: datetime,
    credential_id: str | None = None,
) -> dict:
    """The unsigned ``OpenBadgeCredential``: ``achievement`` is what
    :meth:`~coursekit.grading.records.tracks.Coverage.achievement` returns."""
    valid_from = issued.astimezone(timezone.utc).replace(microsecond=0)
    stamp = valid_from.strftime("%Y-%m-%dT%H:%M:%SZ")
    score_id = f"{achievement['id']}-score"
    achievement = {
        **achievement,
        "resultDescription": [
            {
                "id": score_id,
                "type": ["ResultDescription"],
                "name": "Score",
                "resultType": "Percent",
                "valueMin": "0",
                "valueMax": "100",
            }
        ],
    }
    return {
        "@context": list(CONTEXT),
        "id": credential_id or new_credential_id(),
        "type": ["VerifiableCredential", "OpenBadgeCredential"],
        "name": achievement["name"],
        "issuer": {"id": issuer.id, "type": ["Profile"], "name": issuer.name, "url": issuer.url},
        "validFrom": stamp,
        "awardedDate": stamp,
        "credentialSubject": {
            "id": new_credential_id(),  # the recipient has no DID: an opaque, unlinkable one
            "type": ["AchievementSubject"],
            "identifier": [
                {
                    "type": "IdentityObject",
                    "identityHash": name,
                    "identityType": "name",
                    "hashed": False,
                }
            ],
            "achievement": achievement,
            "result": [
                {
                    "type": ["Result"],
                    "resultDescription": score_id,
                    "value": f"{score_percent:.1f}",
                }
            ],
        },
    }


def json_bytes(data: dict) -> bytes:
    """Compact UTF-8 JSON, as signed."""
    return json.dumps(data, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def sign(credential: dict, key: Ed25519PrivateKey) -> str:
    """The credential as a compact JWS (VC-JWT) signed with ``key``."""
    header = {"alg": "EdDSA", "kid": verification_method(credential["issuer"]["id"]), "typ": "JWT"}
    nbf = datetime.strptime(credential["validFrom"], "%Y-%m-%dT%H:%M:%SZ")
    claims = {
        "iss": credential["issuer"]["id"],
        "jti": credential["id"],
        "nbf": int(nbf.replace(tzinfo=timezone.utc).timestamp()),
        "sub": credential["credentialSubject"]["id"],
    }
    signing_input = f"{b64url(json_bytes(header))}.{b64url(json_bytes({**credential, **claims}))}"
    return f"{signing_input}.{b64url(key.sign(signing_input.encode('ascii')))}"


def _no_duplicates(pairs):
    keys = [key for key, _ in pairs]
    if len(keys) != len(set(keys)):
        duplicated = sorted({key for key in keys if keys.count(key) > 1})
        raise CredentialError(f"the signed data holds the key {duplicated[0]!r} twice")
    return dict(pairs)


def _refuse_constant(name: str):
    raise CredentialError(f"the signed data holds {name}, which JSON does not allow")


def strict_json(data: bytes) -> dict:
    """JSON with no duplicate key, no NaN or Infinity, as one object."""
    try:
        value = json.loads(
            data.decode("utf-8"),
            object_pairs_hook=_no_duplicates,
            parse_constant=_refuse_constant,
        )
    except CredentialError:
        raise
    except (ValueError, RecursionError):  # not UTF-8, not JSON, an integer of 5000 digits
        raise CredentialError("the signed data is damaged (not UTF-8 JSON)") from None
    if not isinstance(value, dict):
        raise CredentialError("the signed data is not a JSON object")
    return value


def _text(value: object, what: str) -> str:
    if not isinstance(value, str):
        raise CredentialError(f"the credential's {what} is missing or not text")
    return value


def open_credential(token: str, key: Ed25519PublicKey) -> tuple[dict, Statement]:
    """The credential in ``token`` and what it states, if ``key`` signed it; else
    :class:`CredentialError` naming what is wrong."""
    token = token.strip()
    if len(token) > MAX_TOKEN_CHARS or token.count(".") != 2:
        raise CredentialError("this is not a signed credential (a compact JWS)")
    header_part, payload_part, signature_part = token.split(".")
    try:
        header = strict_json(b64url_decode(header_part))
        payload_bytes = b64url_decode(payload_part)
        signature = b64url_decode(signature_part)
    except ValueError as error:
        raise CredentialError(f"the signed credential is damaged ({error})") from None
    if header.get("alg") != "EdDSA" or not set(header) <= _HEADER_KEYS:
        raise CredentialError(
            f"the credential is signed with {header.get('alg')!r}; coursekit certificates "
            "are signed with EdDSA (Ed25519) and nothing else is accepted"
        )
    try:
        key.verify(signature, f"{header_part}.{payload_part}".encode("ascii"))
    except InvalidSignature:
        raise CredentialError(
            "the signature does not match: the signed data was edited, or another key "
            f"signed it (this check used the key with fingerprint {fingerprint(key)})"
        ) from None
    payload = strict_json(payload_bytes)
    return payload, _statement(header, payload, key)


def _statement(header: dict, payload: dict, key: Ed25519PublicKey) -> Statement:
    issuer = payload.get("issuer")
    issuer_id = _text(issuer.get("id") if isinstance(issuer, dict) else None, "issuer")
    if issuer_id.startswith("did:key:"):
        try:
            named = key_of_did_key(issuer_id)
        except ValueError:
            raise CredentialError(f"the issuer {issuer_id!r} is not an Ed25519 did:key") from None
        if fingerprint(named) != fingerprint(key):
            raise CredentialError("the issuer named in the credential is another key")
    elif not issuer_id.startswith("did:web:"):
        raise CredentialError(f"the issuer {issuer_id!r} is neither a did:key nor a did:web")
    if header.get("kid") != verification_method(issuer_id) or header.get("typ", "JWT") != "JWT":
        raise CredentialError("the signature's header (kid, typ) does not name the issuer's key")
    subject = payload.get("credentialSubject")
    if not isinstance(subject, dict):
        raise CredentialError("the credential names no recipient")
    credential_id = _text(payload.get("id"), "id")
    valid_from = _text(payload.get("validFrom"), "validFrom")
    try:
        nbf = datetime.strptime(valid_from, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)
        short_id = certificate_id(credential_id)
    except ValueError:
        raise CredentialError(
            "the credential's id or validFrom is not one coursekit writes"
        ) from None
    expected = {
        "iss": issuer_id,
        "jti": credential_id,
        "sub": subject.get("id"),
        "nbf": int(nbf.timestamp()),
    }
    for claim, value in expected.items():
        if payload.get(claim) != value or isinstance(payload.get(claim), bool):
            raise CredentialError(f"the claim {claim!r} does not repeat the credential's field")
    if nbf > datetime.now(timezone.utc) + CLOCK_SKEW:
        raise CredentialError(f"the credential is not valid before {valid_from}")
    if "validUntil" in payload or "exp" in payload:
        raise CredentialError("the credential carries an expiry coursekit never writes")
    try:
        identity = subject["identifier"][0]
        name = identity["identityHash"]
        achievement = subject["achievement"]
        score = subject["result"][0]["value"]
        modules = tuple(achievement["tag"])
        course = achievement["name"]
    except (KeyError, IndexError, TypeError):
        raise CredentialError("the credential is not shaped as a coursekit certificate") from None
    if identity.get("identityType") != "name" or identity.get("hashed") is not False:
        raise CredentialError("the credential names its recipient in a way coursekit never writes")
    for what, value in (("name", name), ("course", course), ("score", score)):
        _text(value, what)
    if not all(isinstance(module, str) for module in modules):
        raise CredentialError("the credential's modules are not text")
    titles = _module_titles(achievement, modules)
    issuer_name, issuer_url = (
        _text(issuer.get(part, ""), f"issuer's {part}") for part in ("name", "url")
    )
    try:
        percent = float(score)
    except ValueError:
        percent = math.nan
    if not 0 <= percent <= 100 or f"{percent:.1f}" != score:
        raise CredentialError(f"the credential's score {score!r} is not a percentage")
    if not _ID.fullmatch(short_id):
        raise CredentialError("the credential's id is not one coursekit writes")
    return Statement(
        id=short_id,
        name=name,
        course=course,
        score=f"{score}%",
        date=valid_from[:10],
        modules=modules,
        issuer=issuer_id,
        fingerprint=fingerprint(key),
        module_titles=titles,
        issuer_name=issuer_name,
        issuer_url=issuer_url,
    )


def _module_titles(achievement: dict, modules: tuple[str, ...]) -> tuple[str, ...]:
    """Each covered module's title, from the achievement's module alignments (``""`` for a
    module with none: a credential of an earlier release has no alignment at all)."""
    alignment = achievement.get("alignment", [])
    if not isinstance(alignment, list) or not all(isinstance(a, dict) for a in alignment):
        raise CredentialError("the credential's alignment is not a list of objects")
    titles: dict[str, str] = {}
    for target in alignment:
        if target.get("targetType") != MODULE_TARGET_TYPE:
            continue  # an alignment of another kind is no module of ours
        code, title = target.get("targetCode"), target.get("targetName")
        if not isinstance(code, str) or not isinstance(title, str):
            raise CredentialError("the credential names a module without its code and title")
        if code not in modules or code in titles:
            raise CredentialError(
                f"the credential's alignment names the module {code!r} twice or beside the "
                "modules it covers"
            )
        titles[code] = title
    return tuple(titles.get(module, "") for module in modules)


def issuer_for(key: Ed25519PublicKey, name: str, url: str, did_web: str | None = None) -> Issuer:
    """The issuer a key signs as: its ``did:key``, or the did:web the instructor names."""
    return Issuer(id=did_web or did_key(key), name=name, url=url)
