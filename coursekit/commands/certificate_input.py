"""What ``coursekit verify`` is given, told apart without guessing: a file, the text of a
certificate's QR code, or ``-`` for standard input.

Why a rule and not a try: a scanned QR code's text is some 800 characters, and opening it as
a file name fails with "File name too long"; a file could in principle be named like a
token. So the argument is read as text when it has the shape of what a certificate's QR
code holds, and as a path otherwise:

- a compact JWS (three base64url parts, the first a JSON object: the QR code's signed
  summary, or a credential pasted from a ``.jwt`` file), whitespace inside it ignored (a
  copy from a terminal may break it across lines; base64url holds none);
- the ID and key fingerprint alone (``CK-XXXX-XXXX-XXXX-XXXX FINGERPRINT``: the QR code of
  a certificate whose name is too long for a summary), which signs nothing and is refused
  with what to verify instead;
- a web address, which no coursekit QR code holds, is refused with what to give instead.

A file's content decides what it is, whatever its suffix: a PNG (the badge, credential baked
in), a certificate page, a compact JWS (``.jwt``), or JSON (``.json``: the JWS as a JSON
string, or a W3C ``EnvelopedVerifiableCredential`` holding it). Standard input may hold any
of these. Whatever cannot be read is a :class:`CertificateInputError` that says what was
expected; a text with the shape of a token that is also a file here is refused as ambiguous.
"""

from __future__ import annotations

import errno
import json
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from coursekit.grading.records import certificates
from coursekit.grading.records.baking import SIGNATURE, BakingError, credential_in
from coursekit.grading.records.keys import b64url_decode
from coursekit.grading.text import for_terminal

#: What verify takes, for the errors that say what was expected.
EXPECTED = (
    "give a certificate's page (.html), credential (.jwt or .json) or badge (.png) file, "
    "the text of its QR code, or - to read any of these from standard input"
)
#: More than any certificate (pages are tens of kB; a baked badge under 4 MB).
MAX_BYTES = certificates.MAX_PAGE_CHARS * 4
_JWS = re.compile(r"[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+")
_ID_AND_FINGERPRINT = re.compile(r"(CK-[0-9A-F]{4}-[0-9A-F]{4}-[0-9A-F]{4}-[0-9A-F]{4})\s+(\S+)")
_WEB_ADDRESS = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://\S*")
_ENVELOPED_PREFIX = "data:application/vc+jwt,"


class CertificateInputError(ValueError):
    """An argument or file that is no certificate verify can read; the message says why."""


@dataclass(frozen=True)
class CertificateText:
    """A certificate as read: ``kind`` is ``"page"`` (HTML) or ``"token"`` (a compact JWS:
    a credential or a QR summary); ``source`` names where it came from, for messages."""

    kind: str
    text: str
    source: str


def read_certificate(argument: str | Path, stdin: BinaryIO | None = None) -> CertificateText:
    """The certificate ``argument`` gives: ``-`` (standard input, or ``stdin``), the text of
    a QR code, or a file (a :class:`~pathlib.Path` is always a file)."""
    if isinstance(argument, Path):
        return _from_file(argument)
    if argument == "-":
        stream = stdin if stdin is not None else sys.stdin.buffer
        if stdin is None and sys.stdin.isatty():
            print(
                "coursekit verify: reading the certificate from standard input (end with Ctrl-D)",
                file=sys.stderr,
            )
        data = stream.read(MAX_BYTES + 1)
        if len(data) > MAX_BYTES:
            raise CertificateInputError("standard input holds far more than a certificate.")
        return _from_bytes(data, "standard input")
    text = argument.strip()
    if not text:
        raise CertificateInputError(f"the certificate argument is empty: {EXPECTED}.")
    if _is_certificate_text(text):
        if _exists(argument):
            raise CertificateInputError(
                f"{_short(argument)} is both a certificate's text and the name of a file here: "
                f"write ./{for_terminal(argument)} for the file."
            )
        return _from_text(text, "the text given")
    return _from_file(Path(argument))


def _is_certificate_text(text: str) -> bool:
    return bool(
        _is_jws(_joined(text))
        or _ID_AND_FINGERPRINT.fullmatch(text)
        or _WEB_ADDRESS.fullmatch(text)
    )


def _joined(text: str) -> str:
    """``text`` without whitespace: a token copied from a terminal may be broken across
    lines, and base64url holds no whitespace, so none of it is the token's."""
    return re.sub(r"\s+", "", text)


def _is_jws(text: str) -> bool:
    """Is ``text`` a compact JWS: three base64url parts, the first a JSON object (the JOSE
    header)? A file name such as ``eyes.of.march`` has the parts but no such header."""
    if not _JWS.fullmatch(text):
        return False
    try:
        header = json.loads(b64url_decode(text.split(".", 1)[0]))
    except ValueError:  # not base64url, not UTF-8 or not JSON
        return False
    return isinstance(header, dict)


def _exists(name: str) -> bool:
    try:
        return os.path.lexists(name)
    except (OSError, ValueError):
        return False


def _short(text: str, limit: int = 60) -> str:
    shown = for_terminal(text)
    return f"'{shown}'" if len(shown) <= limit else f"'{shown[: limit - 3]}...'"


def _from_text(text: str, source: str) -> CertificateText:
    """Text that is a certificate's (a compact JWS), or the refusal of a QR text that is
    none (the ID and fingerprint alone, a web address)."""
    if _is_jws(_joined(text)):
        return CertificateText("token", _joined(text), source)
    found = _ID_AND_FINGERPRINT.fullmatch(text)
    if found:
        raise CertificateInputError(
            f"{source} is the QR code of certificate {found.group(1)}, whose name was too "
            f"long for a signed summary: it holds the certificate's ID and its issuer key's "
            f"fingerprint ({for_terminal(found.group(2))}) alone, which nothing signs. Verify "
            "the certificate's page, .jwt or .png file instead."
        )
    if _WEB_ADDRESS.fullmatch(text):
        raise CertificateInputError(
            f"{source} is a web address ({_short(text)}); a coursekit certificate's QR code "
            "holds its signed summary itself, text that begins with eyJ. "
            f"{EXPECTED[0].upper()}{EXPECTED[1:]}."
        )
    raise CertificateInputError(f"{source} is no certificate: {EXPECTED}.")


def _from_file(path: Path) -> CertificateText:
    name = for_terminal(path)
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_BYTES + 1)
    except ValueError:  # a NUL character in the name
        raise CertificateInputError(f"{_short(str(path))} is no file name: {EXPECTED}.") from None
    except OSError as error:
        if error.errno == errno.ENAMETOOLONG:
            raise CertificateInputError(
                f"{_short(str(path))} is neither a file (too long for a file name) nor a "
                f"certificate's text: {EXPECTED}."
            ) from None
        if error.errno == errno.ENOENT:
            raise CertificateInputError(f"there is no file {name}: {EXPECTED}.") from None
        if error.errno == errno.EISDIR:
            raise CertificateInputError(f"{name} is a folder: {EXPECTED}.") from None
        raise CertificateInputError(f"cannot read {name} ({error.strerror}).") from None
    if len(data) > MAX_BYTES:
        raise CertificateInputError(f"{name} is far larger than any certificate.")
    return _from_bytes(data, name)


def _from_bytes(data: bytes, source: str) -> CertificateText:
    """What a file or standard input holds, by its content: a PNG badge, a page, a compact
    JWS, or JSON that holds one."""
    if not data.strip():
        raise CertificateInputError(f"{source} is empty: {EXPECTED}.")
    if data.startswith(SIGNATURE):
        try:
            return CertificateText("token", credential_in(data), source)
        except BakingError as error:
            raise CertificateInputError(f"{source}: {error}.") from None
    try:
        text = data.decode("utf-8")  # bytes as written: no newline translation
    except UnicodeDecodeError:
        raise CertificateInputError(
            f"{source} is not a certificate (neither text nor a PNG badge): {EXPECTED}."
        ) from None
    if certificates.kind_of(text) is not None:
        return CertificateText("page", text, source)
    stripped = text.strip()
    if stripped.startswith(("{", '"')):
        return CertificateText("token", _token_in_json(stripped, source), source)
    if _is_certificate_text(stripped):
        return _from_text(stripped, source)
    # HTML or any other text: verify says it holds no coursekit certificate
    return CertificateText("page", text, source)


def _token_in_json(text: str, source: str) -> str:
    """The compact JWS a JSON document holds: as a JSON string, or as the ``id`` of a W3C
    ``EnvelopedVerifiableCredential`` (``data:application/vc+jwt,<JWS>``)."""
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        raise CertificateInputError(f"{source} is not valid JSON: {EXPECTED}.") from None
    if isinstance(value, dict) and "EnvelopedVerifiableCredential" in _types(value):
        value = value.get("id")
        if isinstance(value, str) and value.startswith(_ENVELOPED_PREFIX):
            value = value.removeprefix(_ENVELOPED_PREFIX)
    if isinstance(value, str) and _is_jws(value.strip()):
        return value.strip()
    if isinstance(value, dict) and "credentialSubject" in value:
        raise CertificateInputError(
            f"{source} holds a credential's JSON without its signature: coursekit signs "
            "credentials as a JWT. Verify the .jwt file beside the certificate's page, or the "
            "page or badge itself."
        )
    raise CertificateInputError(
        f"{source} is JSON that holds no signed credential (a JWT as a JSON string, or an "
        f"EnvelopedVerifiableCredential): {EXPECTED}."
    )


def _types(value: dict) -> list:
    kinds = value.get("type", [])
    return [kinds] if isinstance(kinds, str) else kinds if isinstance(kinds, list) else []
