"""The issuer's keys: an Ed25519 key pair that signs certificates, and the HMAC key of old ones.

Why a key pair: a certificate signed with a shared secret (HMAC, before this release) can be
checked only by whoever holds the secret, so a student could show it to nobody. Now the
instructor signs with a private key that stays on their machine (made on first use, mode
0600, never printed), and anyone checks with the public key the course publishes
(``certificates/issuer-public-key.pem``, also on every certificate page). The public key is
also named two standard ways: its RFC 7638 JWK thumbprint (the fingerprint people compare)
and a ``did:key`` (W3C DID method ``key``: the key itself, multicodec ``ed25519-pub``,
base58btc), which any Verifiable Credentials verifier resolves with no network.

The old 32-byte HMAC key is still read, to verify certificates issued before; it signs
nothing new.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
from pathlib import Path

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

KEY_ENV = "COURSEKIT_KEY"
#: The HMAC key of certificates issued before public-key signatures.
LEGACY_KEY_BYTES = 32
#: What ``coursekit issuer-key`` writes, and where ``verify`` looks for them by default.
PUBLISHED_DIR = "certificates"
PUBLIC_KEY_FILE = "issuer-public-key.pem"
PUBLIC_JWK_FILE = "issuer-public-key.jwk"
#: A key file is a few hundred bytes; anything much larger is not one.
_MAX_KEY_FILE_BYTES = 64 * 1024
_ED25519_MULTICODEC = b"\xed\x01"
_BASE58 = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"
_DID_WEB = re.compile(r"did:web:[A-Za-z0-9.-]+(%3[Aa][0-9]+)?(:[A-Za-z0-9._~-]+)*")


class KeyFileError(ValueError):
    """A key file that cannot be used; the message names it and says what to do."""


def _config_dir() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "coursekit"


def default_key_path() -> Path:
    """The private signing key: ``$COURSEKIT_KEY``, else
    ``~/.config/coursekit/issuer-ed25519.pem``."""
    if os.environ.get(KEY_ENV):
        return Path(os.environ[KEY_ENV])
    return _config_dir() / "issuer-ed25519.pem"


def legacy_key_path() -> Path:
    """Where the HMAC key of certificates issued before this release was made."""
    return _config_dir() / "instructor.key"


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def b64url_decode(text: str) -> bytes:
    """Strict, canonical base64url (RFC 7515: no padding, no other characters).

    The last character of a base64 text can carry unused bits; a decoder that ignores them
    reads several texts as the same bytes, so a signature edited in those bits would still
    verify. Only the one text that encodes the bytes back is accepted (RFC 4648 section 3.5)."""
    if not re.fullmatch(r"[A-Za-z0-9_-]*", text) or len(text) % 4 == 1:
        raise ValueError("not base64url")
    data = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    if b64url(data) != text:
        raise ValueError("not canonical base64url (unused bits set in its last character)")
    return data


def _read(path: Path) -> bytes:
    try:
        if path.stat().st_size > _MAX_KEY_FILE_BYTES:
            raise KeyFileError(f"{path} is too large to be a key file.")
        return path.read_bytes()
    except OSError as error:
        raise KeyFileError(f"cannot read the key file {path} ({error.strerror}).") from None


def _legacy_hmac_key(data: bytes) -> bytes | None:
    text = data.strip()
    if re.fullmatch(rb"[0-9a-fA-F]{%d}" % (2 * LEGACY_KEY_BYTES), text):
        return bytes.fromhex(text.decode("ascii"))
    return None


def load_or_create_signing_key(path: Path | None = None) -> Ed25519PrivateKey:
    """The private signing key at ``path``, or a new one written there (mode 0600)."""
    path = Path(path) if path else default_key_path()
    if path.exists():
        data = _read(path)
        if _legacy_hmac_key(data) is not None:
            raise KeyFileError(
                f"{path} is the HMAC key of certificates issued before public-key signatures: "
                "it still verifies those (coursekit verify OLD.html --key THAT-FILE) but signs "
                "nothing new. Pass --key with another file name (a key pair is made there)."
            )
        try:
            key = serialization.load_pem_private_key(data, password=None)
        except (ValueError, TypeError, UnsupportedAlgorithm):
            key = None
        if not isinstance(key, Ed25519PrivateKey):
            raise KeyFileError(
                f"{path} is not an unencrypted Ed25519 private key (PEM); it is damaged or "
                "another kind of file. Restore it from your backup, or pass --key NEW-FILE."
            )
        return key
    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(pem)
    except OSError as error:
        raise KeyFileError(
            f"cannot write a new signing key at {path} ({error.strerror}); pass --key with a "
            "file in a folder you can write."
        ) from None
    return key


def read_verifying_key(path: Path) -> Ed25519PublicKey | bytes:
    """The key in ``path`` a verifier checks with: an Ed25519 public key (PEM, or a JWK as
    ``issuer-key`` writes), the public half of an Ed25519 private key (the instructor's own
    file), or the old HMAC key (bytes) for certificates issued before."""
    data = _read(Path(path))
    legacy = _legacy_hmac_key(data)
    if legacy is not None:
        return legacy
    try:
        if data.lstrip().startswith(b"{"):
            return public_key_from_jwk(json.loads(data))
        if b"PRIVATE KEY" in data:
            key = serialization.load_pem_private_key(data, password=None)
            if isinstance(key, Ed25519PrivateKey):
                return key.public_key()
        else:
            key = serialization.load_pem_public_key(data)
            if isinstance(key, Ed25519PublicKey):
                return key
    except (ValueError, TypeError, UnsupportedAlgorithm, RecursionError):
        pass
    raise KeyFileError(
        f"{path} holds no Ed25519 public key (PEM or JWK) and no certificate key of an earlier "
        "release. Pass the course's published issuer-public-key.pem."
    )


def raw_public(key: Ed25519PublicKey) -> bytes:
    return key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def public_jwk(key: Ed25519PublicKey) -> dict:
    """The public key as a JWK (RFC 8037): never the private part."""
    return {"kty": "OKP", "crv": "Ed25519", "x": b64url(raw_public(key))}


def public_key_from_jwk(jwk: object) -> Ed25519PublicKey:
    if not isinstance(jwk, dict) or "d" in jwk:
        raise ValueError("not a public JWK")
    if jwk.get("kty") != "OKP" or jwk.get("crv") != "Ed25519" or not isinstance(jwk.get("x"), str):
        raise ValueError("not an Ed25519 JWK")
    raw = b64url_decode(jwk["x"])
    if len(raw) != 32:
        raise ValueError("an Ed25519 key is 32 bytes")
    return Ed25519PublicKey.from_public_bytes(raw)


def fingerprint(key: Ed25519PublicKey) -> str:
    """The RFC 7638 JWK thumbprint (SHA-256, base64url): the same from any JOSE library."""
    canonical = json.dumps(public_jwk(key), sort_keys=True, separators=(",", ":"))
    return b64url(hashlib.sha256(canonical.encode("ascii")).digest())


def _base58(data: bytes) -> str:
    number = int.from_bytes(data, "big")
    digits = ""
    while number:
        number, rest = divmod(number, 58)
        digits = _BASE58[rest] + digits
    return "1" * (len(data) - len(data.lstrip(b"\0"))) + digits


def _unbase58(text: str) -> bytes:
    number = 0
    for ch in text:
        number = number * 58 + _BASE58.index(ch)  # ValueError on a character not in base58
    body = number.to_bytes((number.bit_length() + 7) // 8, "big")
    return b"\0" * (len(text) - len(text.lstrip("1"))) + body


def did_key(key: Ed25519PublicKey) -> str:
    """``did:key:z6Mk...``: the public key as a DID that resolves with no network."""
    return "did:key:z" + _base58(_ED25519_MULTICODEC + raw_public(key))


def key_of_did_key(did: str) -> Ed25519PublicKey:
    """The Ed25519 key a ``did:key`` names (ValueError if it names none)."""
    if not did.startswith("did:key:z"):
        raise ValueError("not a did:key")
    data = _unbase58(did[len("did:key:z") :])
    if len(data) != 34 or not data.startswith(_ED25519_MULTICODEC):
        raise ValueError("not an Ed25519 did:key")
    return Ed25519PublicKey.from_public_bytes(data[2:])


def verification_method(issuer: str) -> str:
    """The ``kid`` a credential of this issuer is signed under (did:key: the key's own
    fragment; did:web: ``#key-1`` of the DID document ``issuer-key --did-web`` writes)."""
    if issuer.startswith("did:key:"):
        return f"{issuer}#{issuer[len('did:key:') :]}"
    return f"{issuer}#key-1"


def check_did_web(did: str) -> str:
    """``did`` if it is a did:web (``did:web:example.edu`` or ``did:web:example.edu:path``)."""
    if not _DID_WEB.fullmatch(did):
        raise ValueError(
            f"{did!r} is not a did:web. Write it as did:web:HOST, e.g. did:web:example.edu or "
            "did:web:example.edu:courses:accumulation (the DID document is then served at "
            "https://example.edu/courses/accumulation/did.json)."
        )
    return did


def did_web_document(did: str, key: Ed25519PublicKey) -> dict:
    """The DID document to serve for a did:web issuer (``/.well-known/did.json`` for a bare
    host, ``/PATH/did.json`` otherwise)."""
    method = verification_method(did)
    return {
        "@context": [
            "https://www.w3.org/ns/did/v1",
            "https://w3id.org/security/suites/jws-2020/v1",
        ],
        "id": did,
        "verificationMethod": [
            {
                "id": method,
                "type": "JsonWebKey2020",
                "controller": did,
                "publicKeyJwk": public_jwk(key),
            }
        ],
        "assertionMethod": [method],
        "authentication": [method],
    }


def export_public_key(
    key: Ed25519PublicKey, folder: Path, did_web: str | None = None
) -> list[Path]:
    """Write the public key (PEM and JWK), and a did:web's DID document, into ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    pem = key.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    written = [folder / PUBLIC_KEY_FILE, folder / PUBLIC_JWK_FILE]
    written[0].write_bytes(pem)
    jwk = {**public_jwk(key), "kid": verification_method(did_web or did_key(key))}
    written[1].write_text(json.dumps(jwk, indent=2) + "\n", encoding="utf-8")
    if did_web:
        written.append(folder / "did.json")
        document = did_web_document(did_web, key)
        written[2].write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    return written
