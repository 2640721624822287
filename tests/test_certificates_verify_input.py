"""``coursekit verify`` takes a certificate in every form it circulates in (issue 43, item 3).

A file (page, ``.jwt``, ``.json``, ``.png``), the text a certificate's QR code holds given on
the command line (some 800 characters: never opened as a file name), and ``-`` for
standard input holding any of these. What is none of them gets a named error that says what
was expected, never a traceback or "File name too long". Every certificate here is signed
by a test key in a temporary course (tests/helpers/certificate_course.py).
"""

from __future__ import annotations

import io
import json
import re
import sys

import pytest

from coursekit.commands.certificate_input import read_certificate
from tests.helpers.certificate_course import certify, encode, make_course, parts, verify

pytestmark = pytest.mark.grading


@pytest.fixture(scope="module")
def signed(tmp_path_factory):
    """One course and one certificate for ada, made once: every test reads them in another
    form (each writes files of its own names beside them)."""
    folder = tmp_path_factory.mktemp("course")
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(folder)
        make_course(folder, patch)
        assert certify("ada") == 0
    return folder


@pytest.fixture
def course(signed, monkeypatch, capsys):
    monkeypatch.chdir(signed)  # outside this working tree's certificates/
    monkeypatch.setenv("XDG_CONFIG_HOME", str(signed / "config"))  # no key of this machine
    capsys.readouterr()
    return signed


def summary_of(course) -> str:
    """The text the page's QR code holds, as a phone's scanner reads it."""
    page = (course / "out" / "ada.html").read_text(encoding="utf-8")
    return re.search(r'id="coursekit-summary">(.*?)</script>', page).group(1)


def token_of(course) -> str:
    return (course / "out" / "ada.jwt").read_text().strip()


def genuine(capsys) -> bool:
    out, err = capsys.readouterr()
    return out.startswith("Genuine: ada, ") and err == ""


def refused(capsys, *said: str) -> str:
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("coursekit verify: "), err
    assert "Traceback" not in err and "File name too long" not in err
    for words in said:
        assert words in err, err
    return err


def test_the_qr_codes_text_is_verified_as_given_on_the_command_line(course, capsys):
    summary = summary_of(course)
    assert len(summary) > 255  # longer than any file name: once "File name too long"
    assert verify(summary) == 0 and genuine(capsys)
    assert verify(f"  {summary}\n") == 0 and genuine(capsys)  # as a scanner may copy it
    wrapped = "\n".join(summary[i : i + 80] for i in range(0, len(summary), 80))
    assert verify(wrapped) == 0 and genuine(capsys)  # as a terminal may wrap it
    assert verify(token_of(course)) == 0 and genuine(capsys)  # a .jwt's text, pasted
    # the text is checked as any certificate is: an edit fails
    header, claims, signature = parts(summary)
    forged = f"{encode(header)}.{encode({**claims, 'score': '99.0%'})}.{encode(signature)}"
    assert verify(forged) == 1
    assert "NOT genuine" in capsys.readouterr().out


@pytest.mark.parametrize("form", ["html", "jwt", "png", "qr", "json", "enveloped"])
def test_standard_input_takes_every_form(course, capsys, monkeypatch, form):
    data = {
        "html": (course / "out" / "ada.html").read_bytes(),
        "jwt": (course / "out" / "ada.jwt").read_bytes(),
        "png": (course / "out" / "ada.png").read_bytes(),
        "qr": summary_of(course).encode(),
        "json": json.dumps(token_of(course)).encode(),
        "enveloped": json.dumps(enveloped(token_of(course))).encode(),
    }[form]
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))
    assert verify("-") == 0 and genuine(capsys)


def enveloped(token: str) -> dict:
    """A credential as the W3C data model 2.0 carries a JWT in JSON."""
    return {
        "@context": "https://www.w3.org/ns/credentials/v2",
        "type": "EnvelopedVerifiableCredential",
        "id": f"data:application/vc+jwt,{token}",
    }


def test_a_json_file_holds_the_signed_credential_or_says_why_not(course, capsys):
    token = token_of(course)
    path = course / "ada.json"
    for document in (
        token,
        enveloped(token),
        {**enveloped(token), "type": ["X", "EnvelopedVerifiableCredential"]},
    ):
        path.write_text(json.dumps(document))
        assert verify(path) == 0 and genuine(capsys)
    path.write_text(json.dumps(parts(token)[1]))  # the credential's JSON, signature dropped
    assert verify(path) == 2
    refused(capsys, "without its signature", ".jwt file")
    path.write_text(json.dumps({"type": "EnvelopedVerifiableCredential", "id": "data:,x"}))
    assert verify(path) == 2
    refused(capsys, "holds no signed credential")
    path.write_text("{not json")
    assert verify(path) == 2
    refused(capsys, "is not valid JSON")


def test_what_is_no_certificate_is_named_with_what_verify_takes(course, capsys):
    expected = "give a certificate's page (.html), credential (.jwt or .json) or badge (.png)"
    assert verify("x" * 5000) == 2  # no file could have this name
    refused(capsys, "too long for a file name", expected, "- to read any of these")
    assert verify("no-such-certificate.html") == 2
    refused(capsys, "there is no file no-such-certificate.html", expected)
    assert verify(course / "out") == 2
    refused(capsys, "is a folder")
    assert verify("a\0b") == 2
    refused(capsys, "is no file name")
    assert verify("https://verify.example.org/#" + summary_of(course)) == 2
    refused(capsys, "is a web address", "holds its signed summary itself")
    assert verify(" ") == 2
    refused(capsys, "the certificate argument is empty", expected)
    (course / "empty.jwt").write_text("\n")
    assert verify("empty.jwt") == 2
    refused(capsys, "empty.jwt is empty", expected)
    (course / "blank.bin").write_bytes(b"\xff\xfe\x00")
    assert verify(course / "blank.bin") == 2
    refused(capsys, "neither text nor a PNG badge")


def test_the_qr_code_of_a_name_too_long_for_a_summary_says_what_to_verify(course, capsys):
    page = (course / "out" / "ada.html").read_text(encoding="utf-8")
    certificate_id = re.search(r'data-field="id">(CK-[\w-]+)<', page).group(1)
    fingerprint = re.search(r'data-field="fingerprint">([\w-]+)<', page).group(1)
    assert verify(f"{certificate_id} {fingerprint}") == 2  # what such a QR code holds
    refused(capsys, f"certificate {certificate_id}", "which nothing signs", ".png file instead")


def test_a_file_named_like_a_token_is_never_confused_with_one(course, capsys, monkeypatch):
    token = token_of(course)
    (course / "eyes.of.march").write_text(token)  # three parts, but no JOSE header: a name
    assert verify("eyes.of.march") == 0 and genuine(capsys)
    header, payload, signature = token.split(".")
    name = f"{header}.x.y"  # has a token's shape: read as text unless written as a path
    (course / name).write_text(token)
    assert verify(name) == 2
    refused(capsys, "both a certificate's text and the name of a file here", f"./{name}")
    assert verify(f"./{name}") == 0 and genuine(capsys)


def test_a_path_object_is_always_a_file_and_standard_input_may_be_handed_in(course):
    summary = summary_of(course)
    (course / "scanned.txt").write_text(summary)
    read = read_certificate(course / "scanned.txt")
    assert (read.kind, read.text, read.source) == ("token", summary, str(course / "scanned.txt"))
    read = read_certificate("-", io.BytesIO(summary.encode()))
    assert (read.kind, read.text, read.source) == ("token", summary, "standard input")
