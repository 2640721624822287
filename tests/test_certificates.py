"""Certificates as signed Open Badges 3.0 credentials (issue 32).

Checked against oracles the course does not use to sign: 1EdTech's own JSON Schema
(vendored in tests/corpora/openbadges/), PyJWT for the VC-JWT, libsodium (PyNaCl) for the
raw Ed25519 signature, and Pillow for the baked badge's iTXt chunk. Forgeries are edits a
hostile student would try: a signed or shown field changed, a second block, duplicate keys,
look-alike letters, another key, a revoked certificate shown anyway.
"""

from __future__ import annotations

import base64
import json
import re
import zlib
from datetime import datetime, timezone
from pathlib import Path

import jwt
import nacl.exceptions
import nacl.signing
import pytest
import segno
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from jsonschema import Draft201909Validator
from PIL import Image

from coursekit.commands.cli import main
from coursekit.course import TITLE
from coursekit.grading.records import baking, certificates, legacy_certificates
from coursekit.grading.records.credentials import issuer_for
from coursekit.grading.records.tracks import coverage
from tests.helpers.certificate_course import (
    OWN_REPOSITORY,
    WORKSHOP,
    certify,
    encode,
    make_course,
    parts,
    verify,
)

pytestmark = pytest.mark.grading
SCHEMA = (
    Path(__file__).parent / "corpora" / "openbadges" / "ob_v3p0_achievementcredential_schema.json"
)


@pytest.fixture
def course(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # outside this working tree's certificates/
    return make_course(tmp_path, monkeypatch)


def published_raw_key(folder: Path) -> bytes:
    """The issuer's public key, read from the published JWK by hand (not by coursekit)."""
    jwk = json.loads((folder / "certificates" / "issuer-public-key.jwk").read_text())
    assert set(jwk) == {"kty", "crv", "x", "kid"}  # never the private part "d"
    return base64.urlsafe_b64decode(jwk["x"] + "=")


def base58_decode(text: str) -> bytes:
    alphabet = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"
    number = 0
    for ch in text:
        number = number * 58 + alphabet.index(ch)
    return number.to_bytes((number.bit_length() + 7) // 8, "big")


def libsodium_accepts(token: str, raw_key: bytes) -> bool:
    signing_input, _, signature = token.rpartition(".")
    try:
        nacl.signing.VerifyKey(raw_key).verify(
            signing_input.encode(), base64.urlsafe_b64decode(signature + "==")
        )
    except nacl.exceptions.BadSignatureError:
        return False
    return True


# ------------------------------------------------------------------ the standard


def test_the_credential_is_an_open_badge_that_1edtechs_schema_accepts(course, capsys):
    assert certify("wes", "--track", "workshop", "--pass-mark", "60") == 0
    token = (course / "out" / "wes.jwt").read_text().strip()
    header, credential, _ = parts(token)
    validator = Draft201909Validator(
        json.loads(SCHEMA.read_text()), format_checker=Draft201909Validator.FORMAT_CHECKER
    )
    assert [e.message for e in validator.iter_errors(credential)] == []
    # the validator is live: it refuses what the specification refuses
    assert not validator.is_valid({**credential, "validFrom": "5 December"})
    assert not validator.is_valid({k: v for k, v in credential.items() if k != "issuer"})
    assert not validator.is_valid({**credential, "type": ["VerifiableCredential"]})

    assert header == {"alg": "EdDSA", "kid": header["kid"], "typ": "JWT"}
    assert "OpenBadgeCredential" in credential["type"]
    subject = credential["credentialSubject"]
    assert subject["identifier"][0]["identityHash"] == "wes"
    achievement = subject["achievement"]
    assert achievement["tag"] == WORKSHOP and achievement["achievementType"] == "Certificate"
    assert "At least 60% of the points of 01_accumulation, 02_loss_scaling" in str(achievement)
    assert subject["result"][0]["value"] == "66.7"  # 18 of 27 points: modules 01 and 02 alone
    # the issuer is a did:key that resolves, offline, to the published key
    issuer = credential["issuer"]["id"]
    assert header["kid"] == f"{issuer}#{issuer.removeprefix('did:key:')}"
    multicodec = base58_decode(issuer.removeprefix("did:key:z"))
    assert multicodec == b"\xed\x01" + published_raw_key(course)
    # the claims a VC-JWT must carry repeat the credential's fields
    assert credential["iss"] == issuer and credential["jti"] == credential["id"]
    assert credential["sub"] == subject["id"] and isinstance(credential["nbf"], int)


def test_the_signature_verifies_with_libraries_that_did_not_sign_it(course, capsys):
    assert certify("ada") == 0
    token = (course / "out" / "ada.jwt").read_text().strip()
    pem = (course / "certificates" / "issuer-public-key.pem").read_bytes()
    claims = jwt.decode(
        token, pem, algorithms=["EdDSA"], options={"require": ["iss", "jti", "nbf", "sub"]}
    )
    assert claims["credentialSubject"]["identifier"][0]["identityHash"] == "ada"
    assert libsodium_accepts(token, published_raw_key(course))
    page = (course / "out" / "ada.html").read_text()
    summary = re.search(r'id="coursekit-summary">(.*?)</script>', page).group(1)
    assert libsodium_accepts(summary, published_raw_key(course))
    assert jwt.decode(summary, pem, algorithms=["EdDSA"])["name"] == "ada"
    with pytest.raises(jwt.InvalidAlgorithmError):  # no other algorithm is taken for it
        jwt.decode(token, pem, algorithms=["HS256"])


def _leaves(value, path=()):
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _leaves(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _leaves(item, (*path, index))
    else:
        yield path


def _changed(data, path):
    data = json.loads(json.dumps(data))
    *above, last = path
    holder = data
    for step in above:
        holder = holder[step]
    value = holder[last]
    holder[last] = (
        (not value)
        if isinstance(value, bool)
        else value + 1
        if isinstance(value, int)
        else value[:-1] + ("X" if value[-1:] != "X" else "Y")
    )
    return data


def test_any_change_to_a_signed_field_or_the_key_fails(course, capsys):
    assert certify("ada") == 0
    token = (course / "out" / "ada.jwt").read_text().strip()
    header, credential, _ = parts(token)
    head, _, signature = token.split(".")
    raw = published_raw_key(course)
    key = Ed25519PublicKey.from_public_bytes(raw)
    assert certificates.verify_token(token, key).genuine
    paths = list(_leaves(credential))
    assert len(paths) > 30
    for path in paths:  # every field, the issuer's among them
        forged = f"{head}.{encode(_changed(credential, path))}.{signature}"
        verdict = certificates.verify_token(forged, key)
        assert not verdict.genuine and "signature does not match" in verdict.reason, path
        assert not libsodium_accepts(forged, raw), path
    for path in list(_leaves(header)):
        forged = f"{encode(_changed(header, path))}.{token.split('.', 1)[1]}"
        assert not certificates.verify_token(forged, key).genuine, path
    # another key: the course's does not verify it, however the credential names its issuer
    assert main(["certificate", "ada", "--gradebook", "g.sqlite", "--key", "mallory.pem"]) == 0
    assert verify("certificate-ada.jwt") == 1
    assert "the signature does not match" in capsys.readouterr().out
    assert verify("out/ada.jwt", "--key", "mallory.pem") == 1


def test_a_signed_credential_that_contradicts_itself_is_refused(course, capsys):
    from coursekit.grading.records.keys import load_or_create_signing_key

    assert certify("ada") == 0
    token = (course / "out" / "ada.jwt").read_text().strip()
    header, credential, _ = parts(token)
    key = load_or_create_signing_key(course / "issuer.pem")

    def signed(header, payload: bytes) -> str:
        signing_input = f"{encode(header)}.{encode(payload)}"
        return f"{signing_input}.{encode(key.sign(signing_input.encode()))}"

    body = json.dumps(credential, separators=(",", ":")).encode()
    assert certificates.verify_token(signed(header, body), key.public_key()).genuine
    cases = {
        "iss": {**credential, "iss": "did:web:mallory.example"},
        "jti": {**credential, "jti": "urn:uuid:00000000-0000-4000-8000-000000000000"},
        "nbf": {**credential, "nbf": credential["nbf"] + 1},
        "issuer": {**credential, "issuer": {**credential["issuer"], "id": "did:web:x.example"}},
    }
    for what, payload in cases.items():
        made = signed(header, json.dumps(payload).encode())
        verdict = certificates.verify_token(made, key.public_key())
        assert not verdict.genuine, what
    duplicate = body.replace(b'"name":', b'"name":"Mallory","name":', 1)
    verdict = certificates.verify_token(signed(header, duplicate), key.public_key())
    assert not verdict.genuine and "twice" in verdict.reason
    later = {**credential, "validFrom": "2999-01-01T00:00:00Z"}
    later["awardedDate"], later["nbf"] = later["validFrom"], 32472144000
    verdict = certificates.verify_token(
        signed(header, json.dumps(later).encode()), key.public_key()
    )
    assert not verdict.genuine and "not valid before 2999-01-01" in verdict.reason
    for alg in ("none", "HS256"):
        verdict = certificates.verify_token(signed({**header, "alg": alg}, body), key.public_key())
        assert not verdict.genuine and "EdDSA" in verdict.reason


# ------------------------------------------------------------------ the page


def test_the_page_shows_what_was_signed_and_any_forgery_fails(course, capsys):
    assert certify("ada") == 0 and certify("wes", "--track", "workshop", "--pass-mark", "60") == 0
    capsys.readouterr()
    page = (course / "out" / "ada.html").read_text()
    other = (course / "out" / "wes.html").read_text()
    assert verify("out/ada.html") == 0
    out = capsys.readouterr().out
    assert out.startswith("Genuine: ada, Gradient accumulation, hands-on, 100.0%, ")
    assert "Covers module 00, Welcome; module 01, Accumulating gradients; module 02, " in out
    assert f"issued by {TITLE} (https://github.com/{OWN_REPOSITORY}); issuer did:key:z6Mk" in out
    published = (course / "certificates" / "issuer-public-key.pem").read_text().strip()
    assert published in page and 'data-field="fingerprint"' in page and "<svg" in page

    def block(text, kind):
        return re.search(rf'id="coursekit-{kind}">(.*?)</script>', text).group(1)

    shown = dict(re.findall(r'<span data-field="(\w+)">(.*?)</span>', page))
    forgeries = {
        f"shown {field}": page.replace(f'"{field}">{shown[field]}<', f'"{field}">{value}<')
        for field, value in [
            ("name", "Mallory"),
            ("score", "99.0%"),
            ("date", "2020-01-01"),
            ("id", "CK-0000-0000-0000-0000"),
            ("modules", "01_accumulation"),
            ("module", "module 09, Advanced topics"),
            ("issued_by", "Harvard University, https://harvard.edu"),
            ("fingerprint", "A" * 43),
        ]
    }
    first_module = '<span data-field="module">module 00, Welcome</span>; '
    assert first_module in page
    forgeries["a module left out"] = page.replace(first_module, "")
    forgeries["a module added"] = page.replace(first_module, first_module * 2)
    forgeries["homoglyph name"] = page.replace('"name">ada<', '"name">\u0430da<')  # Cyrillic a
    forgeries["another signed block"] = page.replace(
        block(page, "credential"), block(other, "credential")
    )
    forgeries["another summary"] = page.replace(block(page, "summary"), block(other, "summary"))
    forgeries["both blocks of another"] = forgeries["another signed block"].replace(
        block(page, "summary"), block(other, "summary")
    )
    forgeries["summary as the credential"] = page.replace(
        block(page, "credential"), block(page, "summary")
    )
    forgeries["two blocks"] = page.replace("</body>", other[other.index("<script") :])
    forgeries["text outside the fields"] = page.replace("has completed", "has not completed")
    forgeries["another QR code"] = page.replace("<svg", '<svg data-x="1"', 1)
    forgeries["old block added"] = page.replace("</body>", f"<p {legacy_certificates.BLOCK_ID}>")
    for what, forged in forgeries.items():
        assert forged != page, what
        path = course / "forged.html"
        path.write_text(forged, encoding="utf-8")
        assert verify(path) == 1, what
        assert "NOT genuine" in capsys.readouterr().out, what


def test_a_printed_page_is_checked_from_its_qr_code_text(course, capsys):
    assert certify("ada") == 0
    page = (course / "out" / "ada.html").read_text()
    summary = re.search(r'id="coursekit-summary">(.*?)</script>', page).group(1)
    code = segno.make(summary, error="l", micro=False)
    assert code.version <= certificates.QR_MAX_VERSION
    drawn = [[0] * len(code.matrix) for _ in code.matrix]  # the modules the page draws
    for x, y, run in re.findall(r"M(\d+) (\d+)h(\d+)v1", page):
        for column in range(int(x) - 4, int(x) - 4 + int(run)):
            drawn[int(y) - 4][column] = 1
    assert drawn == [[module & 1 for module in row] for row in code.matrix]
    (course / "scanned.txt").write_text(summary + "\n")
    capsys.readouterr()
    assert verify(course / "scanned.txt") == 0
    assert capsys.readouterr().out.startswith("Genuine: ada, ")
    header, claims, signature = parts(summary)
    claims["score"] = "99.0%"
    (course / "scanned.txt").write_text(f"{encode(header)}.{encode(claims)}.{encode(signature)}")
    assert verify(course / "scanned.txt") == 1


def test_a_name_too_long_for_a_qr_code_still_gets_a_page_that_verifies():
    key = Ed25519PrivateKey.generate()
    issued = certificates.issue(
        name="Ada " * 600,
        coverage=coverage("workshop"),
        score_percent=80.0,
        pass_percent=70.0,
        key=key,
        issuer=issuer_for(key.public_key(), TITLE, "https://example.edu"),
        issued=datetime.now(timezone.utc),
    )
    short = segno.make(f"{issued.statement.id} {issued.statement.fingerprint}", error="m")
    assert short.version <= certificates.QR_MAX_VERSION
    drawn = certificates.qr_svg(issued.summary, issued.statement)
    assert drawn in issued.page and f'viewBox="0 0 {short.symbol_size()[0]} ' in drawn
    assert certificates.verify(issued.page, key.public_key()).genuine


# ------------------------------------------------------------------ tracks


def test_a_workshop_certificate_counts_the_workshops_modules_alone(course, capsys):
    assert certify("wes") == 1  # the whole course: the missing modules are named
    err = capsys.readouterr().err
    assert "wes has no grade for 00_welcome, 03_batch_dependence, 04_distributed" in err
    assert certify("wes", "--track", "workshop") == 1  # 18 of 27 points
    assert "wes has 18 of 27 points (66.7%) in 01_accumulation, 02_loss_scaling" in (
        capsys.readouterr().err
    )
    assert certify("wes", "--track", "workshop", "--pass-mark", "60") == 0
    assert "wes, 66.7%" in capsys.readouterr().out
    assert verify("out/wes.html") == 0
    out = capsys.readouterr().out
    assert "hands-on: workshop, 66.7%" in out
    assert "Covers module 01, Accumulating gradients; module 02, Scaling the loss right;" in out
    assert certify("wes", "--modules", "02_loss_scaling,01_accumulation", "--pass-mark", "60") == 0
    assert verify("out/wes.html") == 0
    assert "hands-on: modules 01 and 02, 66.7%" in capsys.readouterr().out

    assert certify("lee", "--track", "workshop") == 1
    err = capsys.readouterr().err
    assert "lee has no grade for 02_loss_scaling, which this certificate covers" in err
    assert not (course / "out" / "lee.html").exists()


@pytest.mark.parametrize(
    ("options", "said"),
    [
        (["--track", "summer"], "no track named 'summer'"),
        (["--modules", "01_accumulation,09_nothing"], "'09_nothing' is not a graded module"),
        (["--modules", ","], "--modules names no module"),
        (["--track", "Bad Name", "--modules", "01_accumulation"], "not one coursekit takes"),
        (["--did-web", "https://example.edu"], "is not a did:web"),
        (["--pass-mark", "170"], "--pass-mark is a percentage"),
        (["--out", "ada.jwt"], "--out names the HTML page"),
    ],
)
def test_a_bad_track_or_option_is_named_with_what_to_do(course, capsys, options, said):
    assert certify("ada", *options) == 2
    assert said in capsys.readouterr().err


# ------------------------------------------------------------------ revocation, old certificates


def test_a_revoked_certificate_is_reported_revoked_in_every_form(course, capsys):
    assert certify("ada") == 0
    certificate_id = re.search(r"ID (CK-[\w-]+)", capsys.readouterr().out).group(1)
    for form in ("html", "jwt", "png"):
        assert verify(f"out/ada.{form}") == 0
    capsys.readouterr()
    assert main(["revoke", certificate_id.lower(), "--reason", "copied hand-ins"]) == 0
    assert main(["revoke", certificate_id]) == 0
    assert "already revoked" in capsys.readouterr().out
    for form in ("html", "jwt", "png"):
        assert verify(f"out/ada.{form}") == 1, form
        out = capsys.readouterr().out
        assert out.startswith("REVOKED: ada, ") and "copied hand-ins" in out, form
    assert main(["revoke", "CK-12"]) == 2
    assert "not a certificate ID" in capsys.readouterr().err
    (course / "certificates" / "revoked.json").write_text("{not json")
    assert verify("out/ada.html") == 2
    assert "is damaged" in capsys.readouterr().err


def test_a_certificate_of_an_earlier_release_still_verifies_with_the_old_key(course, capsys):
    old_key = bytes(range(32))
    (course / "instructor.key").write_text(old_key.hex())
    page, fields = legacy_certificates.issue(
        "ada", "Gradient accumulation, hands-on", 91.0, old_key
    )
    (course / "old.html").write_text(page, encoding="utf-8")
    assert verify("old.html", "--key", "instructor.key") == 0
    out = capsys.readouterr().out
    assert out.startswith("Genuine: ada, Gradient accumulation, hands-on, 91.0%, ")
    assert "Issued before public-key signatures" in out
    (course / "old-edited.html").write_text(page.replace(">ada<", ">eve<"), encoding="utf-8")
    assert verify("old-edited.html", "--key", "instructor.key") == 1
    assert verify("old.html", "--key", "certificates/issuer-public-key.pem") == 1
    assert "only the old HMAC key checks it" in capsys.readouterr().out
    assert verify("old.html") == 2  # no old key on this machine: said where to pass it
    assert "only the old HMAC key checks it" in capsys.readouterr().err
    assert main(["revoke", fields["id"]]) == 0
    assert (
        verify("old.html", "--key", "instructor.key", "--revoked", "certificates/revoked.json") == 1
    )
    # the old key signs nothing new
    assert main(["certificate", "ada", "--gradebook", "g.sqlite", "--key", "instructor.key"]) == 2
    assert "signs nothing new" in capsys.readouterr().err


# ------------------------------------------------------------------ badge, keys


def test_the_badge_image_carries_the_credential_as_open_badges_says(course, capsys):
    assert certify("ada") == 0
    png = (course / "out" / "ada.png").read_bytes()
    token = (course / "out" / "ada.jwt").read_text().strip()
    with Image.open(course / "out" / "ada.png") as image:  # Pillow: an independent reader
        assert image.size == (baking.SIZE_PX, baking.SIZE_PX)
        assert image.text == {"openbadgecredential": token}
    chunk = png[png.index(b"iTXt") + 4 :]
    assert chunk.startswith(b"openbadgecredential\0\0\0\0\0" + token.encode())  # uncompressed
    with pytest.raises(baking.BakingError, match="already holds"):
        baking.bake(png, token)
    start = png.index(b"iTXt") - 4
    end = png.index(b"IDAT") - 4  # the credential's chunk ends where the image data starts
    with pytest.raises(baking.BakingError, match="two credentials"):
        baking.credential_in(png[:end] + png[start:end] + png[end:])
    at = png.index(token.encode()) + 10
    damaged = png[:at] + bytes([png[at] ^ 1]) + png[at + 1 :]
    with pytest.raises(baking.BakingError, match="damaged"):
        baking.credential_in(damaged)
    with pytest.raises(baking.BakingError, match="cut short"):
        baking.credential_in(png[: end - 3])
    assert zlib.crc32(b"IEND") == int.from_bytes(png[-4:], "big")  # ends as PNG files end


def _same_bytes_other_text(part: str) -> list[str]:
    """Every other base64url text of ``part``'s bytes: its last character with other
    values in the bits that encode nothing (a lenient decoder reads them all alike)."""
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    unused_bits = 6 * len(part) - 8 * len(base64.urlsafe_b64decode(part + "=" * (-len(part) % 4)))
    value = alphabet.index(part[-1])
    variants = [
        part[:-1] + alphabet[(value & ~(2**unused_bits - 1)) | low] for low in range(2**unused_bits)
    ]
    decode = lambda text: base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))  # noqa: E731
    assert all(decode(text) == decode(part) for text in variants)  # the same bytes
    return [text for text in variants if text != part]


def test_only_the_canonical_base64url_of_a_signature_verifies(course, capsys):
    assert certify("ada") == 0
    token = (course / "out" / "ada.jwt").read_text().strip()
    page = (course / "out" / "ada.html").read_text()
    summary = re.search(r'id="coursekit-summary">(.*?)</script>', page).group(1)
    for name, signed in (("ada.jwt", token), ("scanned.txt", summary)):
        head, _, signature = signed.rpartition(".")
        others = _same_bytes_other_text(signature)
        assert len(others) >= 3  # an Ed25519 signature's last character has unused bits
        for other in others:
            (course / name).write_text(f"{head}.{other}\n")
            capsys.readouterr()
            assert verify(course / name) == 1, other
            assert "Genuine" not in capsys.readouterr().out
        (course / name).write_text(signed + "\n")
        assert verify(course / name) == 0


def _chunk(kind: bytes, data: bytes) -> bytes:
    return len(data).to_bytes(4, "big") + kind + data + zlib.crc32(kind + data).to_bytes(4, "big")


def test_a_badge_with_anything_beside_its_credential_claiming_to_be_one_is_refused(course, capsys):
    assert certify("ada") == 0
    png = (course / "out" / "ada.png").read_bytes()
    forged = (course / "out" / "ada.jwt").read_text().strip().replace("A", "B", 1)
    end = png.index(b"IEND") - 4
    extra = {
        "an Open Badges 2.0 keyword": _chunk(b"tEXt", b"openbadges\0" + forged.encode()),
        "a compressed copy": _chunk(b"zTXt", b"openbadgecredential\0\0" + zlib.compress(b"x")),
        "another case": _chunk(b"iTXt", b"OpenBadgeCredential\0\0\0\0\0" + forged.encode()),
        "a JWS under another keyword": _chunk(b"tEXt", b"Comment\0" + forged.encode()),
        "a compressed JWS": _chunk(b"zTXt", b"Comment\0\0" + zlib.compress(forged.encode())),
        "a private chunk": _chunk(b"obAd", b"openbadgecredential " + forged.encode()),
    }
    for what, chunk in extra.items():
        (course / "forged.png").write_bytes(png[:end] + chunk + png[end:])
        capsys.readouterr()
        assert verify(course / "forged.png") != 0, what
        assert "Genuine" not in capsys.readouterr().out, what
        with pytest.raises(baking.BakingError, match="claims to hold a badge credential"):
            baking.credential_in(png[:end] + chunk + png[end:])
    with pytest.raises(baking.BakingError, match="after its end"):
        baking.credential_in(png + _chunk(b"tEXt", b"openbadges\0" + forged.encode()))
    harmless = _chunk(b"tEXt", b"Software\0coursekit")  # other text is allowed
    token = (course / "out" / "ada.jwt").read_text().strip()
    assert baking.credential_in(png[:end] + harmless + png[end:]) == token


def test_key_files_are_checked_and_the_public_key_exported(course, capsys):
    capsys.readouterr()
    assert (
        main(
            [
                "issuer-key",
                "--key",
                "issuer.pem",
                "--did-web",
                "did:web:courses.ada-lab.eu",
                "--out",
                "pub",
            ]
        )
        == 0
    )
    document = json.loads((course / "pub" / "did.json").read_text())
    assert document["id"] == "did:web:courses.ada-lab.eu"
    assert document["assertionMethod"] == ["did:web:courses.ada-lab.eu#key-1"]
    assert "d" not in document["verificationMethod"][0]["publicKeyJwk"]
    assert certify("ada", "--did-web", "did:web:courses.ada-lab.eu") == 0
    assert verify("out/ada.jwt", "--key", "pub/issuer-public-key.jwk") == 0
    assert "; issuer did:web:courses.ada-lab.eu, key " in capsys.readouterr().out
    (course / "junk.pem").write_text("not a key")
    assert main(["certificate", "ada", "--gradebook", "g.sqlite", "--key", "junk.pem"]) == 2
    assert "is not an unencrypted Ed25519 private key" in capsys.readouterr().err
    assert verify("out/ada.html", "--key", "junk.pem") == 2
    assert "holds no Ed25519 public key" in capsys.readouterr().err
    (course / "nothing.html").write_text("<html>hello</html>")
    assert verify("nothing.html") == 1
    assert "not a coursekit certificate" in capsys.readouterr().out
    (course / "binary.html").write_bytes(b"\xff\xfe\x00")
    assert verify("binary.html") == 2


def test_the_help_names_the_command_functions_own_defaults(capsys):
    from coursekit.commands import certificate as instructor

    given = instructor.run_certificate.__kwdefaults__
    with pytest.raises(SystemExit):
        main(["certificate", "--help"])
    shown = " ".join(capsys.readouterr().out.split())
    assert f"(default {given['pass_percent']:g})" in shown
    assert f"default {given['gradebook']}" in shown
    with pytest.raises(SystemExit):
        main(["revoke", "--help"])
    shown = " ".join(capsys.readouterr().out.split())
    assert f"(default {instructor.run_revoke.__kwdefaults__['revoked_path']})" in shown
    assert instructor.run_issuer_key.__kwdefaults__["out"] == Path("certificates")
