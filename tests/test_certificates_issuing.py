"""What a certificate names, and what it refuses to sign (issue 43, items 5 and 11).

A certificate cannot be changed once handed out, so ``coursekit certificate`` refuses to
sign a placeholder address (the template's REPOSITORY, a did:web on a host reserved for
examples) unless asked for a trial, and agrees with ``coursekit links`` on what a
placeholder is. The page names each module by number and title and names the issuer, from
the signed credential alone: a course.py renamed later changes no page already issued, and
pages of the earlier layout keep verifying.
"""

from __future__ import annotations

import json
import re
from datetime import datetime, timezone
from pathlib import Path

import pytest
from jsonschema import Draft201909Validator

import coursekit.course
from coursekit.commands.hub_links import placeholder_warning
from coursekit.commands.placeholders import is_example_host
from coursekit.course import MODULES, TITLE, module
from coursekit.grading.records.credentials import (
    CredentialError,
    build,
    issuer_for,
    open_credential,
    sign,
)
from coursekit.grading.records.keys import load_or_create_signing_key
from coursekit.grading.records.tracks import coverage
from tests.helpers.certificate_course import (
    OWN_REPOSITORY,
    certify,
    make_course,
    parts,
    verify,
)

pytestmark = pytest.mark.grading
CORPUS = Path(__file__).parent / "corpora"
SCHEMA = CORPUS / "openbadges" / "ob_v3p0_achievementcredential_schema.json"
OLD_LAYOUT = CORPUS / "certificates"  # a page of layout 1, issued by the previous release


@pytest.fixture
def course(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # outside this working tree's certificates/
    return make_course(tmp_path, monkeypatch)


def shown(page: str, field: str) -> list[str]:
    return re.findall(rf'<span data-field="{field}">(.*?)</span>', page)


# ------------------------------------------------------------------ placeholders (item 5)


def test_the_templates_placeholder_address_is_refused_and_named(course, monkeypatch, capsys):
    monkeypatch.setattr(coursekit.course, "REPOSITORY", coursekit.course.PLACEHOLDER_REPOSITORY)
    capsys.readouterr()
    assert certify("ada") == 2
    err = capsys.readouterr().err
    placeholder = coursekit.course.PLACEHOLDER_REPOSITORY
    assert f"https://github.com/{placeholder}, the course template's placeholder" in err
    assert f"REPOSITORY = {placeholder!r} in coursekit/course.py" in err
    assert "--allow-placeholder" in err and "cannot be changed once handed out" in err
    assert not (course / "out").exists()  # nothing signed, nothing written
    # a trial, asked for: signed, verified, and said to be a trial
    assert certify("ada", "--allow-placeholder") == 0
    assert "A trial certificate (--allow-placeholder)" in capsys.readouterr().out
    assert verify("out/ada.html") == 0


# a template's address of its own (the real one is written only in course.py)
TEMPLATE = "template-owner/template-course"


@pytest.mark.parametrize(
    "repository", [TEMPLATE, TEMPLATE.swapcase(), OWN_REPOSITORY, "ada/template-course"]
)
def test_certificate_and_links_agree_on_what_a_placeholder_is(course, monkeypatch, repository):
    monkeypatch.setattr(coursekit.course, "REPOSITORY", repository)
    monkeypatch.setattr(coursekit.course, "PLACEHOLDER_REPOSITORY", TEMPLATE)
    links_warn = placeholder_warning() is not None
    assert links_warn == (repository.lower() == TEMPLATE)
    assert certify("ada") == (2 if links_warn else 0)


@pytest.mark.parametrize(
    "did",
    [
        "did:web:example.edu",  # the example coursekit's own help gives
        "did:web:courses.example.org",
        "did:web:EXAMPLE.COM",
        "did:web:uni.test%3A8443:certificates",
        "did:web:localhost%3A8000",
    ],
)
def test_a_did_web_on_a_host_reserved_for_examples_is_refused(course, capsys, did):
    assert certify("ada", "--did-web", did) == 2
    err = capsys.readouterr().err
    assert f"the issuer {did}, whose host is reserved for examples" in err
    assert "(--did-web)" in err and not (course / "out").exists()


def test_only_reserved_hosts_count_as_examples():
    for host in ("example.org", "a.b.example.net", "uni.example", "host.invalid", "x.test."):
        assert is_example_host(host), host
    for host in ("notexample.org", "example.org.ada-lab.eu", "examples.com", "uni.edu"):
        assert not is_example_host(host), host


# ------------------------------------------------------------------ modules by name (item 11)


def test_a_one_module_certificate_names_the_module_and_its_issuer(course, capsys):
    assert certify("lee", "--modules", "01_accumulation") == 0
    out = capsys.readouterr().out
    title = module("01_accumulation").title  # the course's own list is the oracle
    assert title == "Accumulating gradients"
    assert f"covers module 01, {title}\n" in out
    page = (course / "out" / "lee.html").read_text(encoding="utf-8")
    assert shown(page, "course") == [f"{TITLE}: module 01, {title}"]
    assert shown(page, "module") == [f"module 01, {title}"]
    assert "modules 01<" not in page
    issuer = f"{TITLE} (https://github.com/{OWN_REPOSITORY})"
    assert shown(page, "issued_by") == [issuer]
    assert verify("out/lee.html") == 0
    said = capsys.readouterr().out
    assert f"Covers module 01, {title}; issued by {issuer}; issuer did:key:" in said
    # the credential states the title in Open Badges 3.0 terms, and stays valid
    _, credential, _ = parts((course / "out" / "lee.jwt").read_text().strip())
    validator = Draft201909Validator(
        json.loads(SCHEMA.read_text()), format_checker=Draft201909Validator.FORMAT_CHECKER
    )
    assert [e.message for e in validator.iter_errors(credential)] == []
    achievement = credential["credentialSubject"]["achievement"]
    assert [(a["targetCode"], a["targetName"]) for a in achievement["alignment"]] == [
        ("01_accumulation", title)
    ]
    assert achievement["name"] == f"{TITLE}: module 01, {title}"
    assert not validator.is_valid(  # the schema checks alignments: a live check
        {
            **credential,
            "credentialSubject": {
                **credential["credentialSubject"],
                "achievement": {
                    **achievement,
                    "alignment": [{"type": ["Alignment"], "targetName": title}],
                },
            },
        }
    )


def test_several_modules_are_each_named_in_course_order(course, capsys):
    assert certify("ada", "--modules", "05_capstone,01_accumulation,02_loss_scaling") == 0
    page = (course / "out" / "ada.html").read_text(encoding="utf-8")
    names = ["01_accumulation", "02_loss_scaling", "05_capstone"]
    expected = [f"module {m.name[:2]}, {m.title}" for m in MODULES if m.name in names]
    assert shown(page, "module") == expected and len(expected) == 3
    assert shown(page, "course") == [f"{TITLE}: modules 01, 02 and 05"]
    assert shown(page, "modules") == [", ".join(names)]  # the IDs, in the small print
    assert "covers " + "; ".join(expected) in capsys.readouterr().out


def test_a_page_shows_the_signed_titles_whatever_course_py_says_later(course, monkeypatch):
    assert certify("lee", "--modules", "01_accumulation") == 0
    renamed = tuple(coursekit.course.Module(m.name, "Renamed", m.learn, m.minutes) for m in MODULES)
    monkeypatch.setattr(coursekit.course, "MODULES", renamed)
    assert verify("out/lee.html") == 0
    assert verify("out/lee.jwt") == 0


def test_a_page_of_the_earlier_layout_still_verifies_and_edits_still_fail(course, capsys):
    page = (OLD_LAYOUT / "page-format-1.html").read_text(encoding="utf-8")
    assert 'data-coursekit-page="1"' in page and "modules 01</span>" in page
    key = str(OLD_LAYOUT / "issuer-public-key.pem")
    assert verify(OLD_LAYOUT / "page-format-1.html", "--key", key) == 0
    assert capsys.readouterr().out.startswith("Genuine: Ada Lovelace, ")
    for before, after in [
        ("Ada Lovelace</span>", "Ada Lovelacf</span>"),
        ("modules 01</span>", "module 01, Accumulating gradients</span>"),  # the new wording
        ('data-coursekit-page="1"', 'data-coursekit-page="2"'),  # rendered as the new layout
        ('data-coursekit-page="1"', 'data-coursekit-page="9"'),
    ]:
        assert before in page
        (course / "edited.html").write_text(page.replace(before, after), encoding="utf-8")
        assert verify(course / "edited.html", "--key", key) == 1, after
        assert "NOT genuine" in capsys.readouterr().out


def test_a_credential_naming_its_modules_inconsistently_is_refused(tmp_path):
    key = load_or_create_signing_key(tmp_path / "k.pem")
    achievement = coverage(None, "01_accumulation,02_loss_scaling").achievement(70)
    first = achievement["alignment"][0]
    cases = {
        "a module twice": [first, first],
        "a module not covered": [{**first, "targetCode": "03_batch_dependence"}],
        "no title": [{k: v for k, v in first.items() if k != "targetName"}],
        "not a list": {"0": first},
    }
    for alignment in cases.values():
        credential = build(
            name="ada",
            achievement={**achievement, "alignment": alignment},
            score_percent=90.0,
            issuer=_issuer(key),
            issued=_now(),
        )
        with pytest.raises(CredentialError):
            open_credential(sign(credential, key), key.public_key())
    # another kind of alignment (a skills framework, say) is no module and is let through
    other = {"type": ["Alignment"], "targetName": "Skill", "targetUrl": "https://x.org/s"}
    credential = build(
        name="ada",
        achievement={**achievement, "alignment": [*achievement["alignment"], other]},
        score_percent=90.0,
        issuer=_issuer(key),
        issued=_now(),
    )
    statement = open_credential(sign(credential, key), key.public_key())[1]
    assert statement.module_titles == ("Accumulating gradients", "Scaling the loss right")


def _issuer(key):
    return issuer_for(key.public_key(), TITLE, "https://github.com/ada-lab/grad-accum")


def _now():
    return datetime.now(timezone.utc)
