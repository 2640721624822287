"""The built site in headless Chromium, as a student, an instructor and an employer use it.

Every module page renders with its title and no console error, its launch buttons are the
links ``coursekit build`` and ``coursekit links`` make, a quiz answers, search finds a
section, and the certificate page says Genuine, Revoked or Not genuine as ``coursekit
verify`` does, for the same certificates and for damaged and forged ones (the page's
checker is JavaScript; here it is run against the Python verifier on the same inputs).
Screenshots go to artifacts/browser/site-*.png. Skipped, with the reason, where playwright
or Debian's chromium is missing.
"""

from __future__ import annotations

import json
import struct
import zlib
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from coursekit import course
from coursekit.commands.certificate_input import CertificateInputError, read_certificate
from coursekit.commands.hub_links import nbgitpuller_link
from coursekit.grading.records import baking, certificates, credentials, revocation
from coursekit.grading.records.keys import b64url
from coursekit.quizzes import QUIZZES
from tests.helpers.lab_browser import CHROMIUM, CHROMIUM_ARGS, VIEWPORT, missing_browser_reason
from tests.helpers.site_build import HUB, badge, built_site, issue

REASON = missing_browser_reason()
pytestmark = [
    pytest.mark.browser,
    pytest.mark.authoring,
    pytest.mark.skipif(REASON is not None, reason=f"browser test: {REASON}"),
]
ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts" / "browser"


@pytest.fixture(scope="module")
def tab():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=list(CHROMIUM_ARGS))
        try:
            page = chromium.new_page(viewport=VIEWPORT)
            page.errors = []
            page.on("console", lambda m: m.type == "error" and page.errors.append(m.text))
            page.on("pageerror", lambda error: page.errors.append(str(error)))
            yield page
        finally:
            chromium.close()


def open_page(tab, name: str):
    tab.goto((built_site().out / name).as_uri())
    tab.wait_for_load_state("load")


def shot(tab, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    tab.screenshot(path=str(ARTIFACTS / f"site-{name}.png"))


PHONE = {"width": 390, "height": 844}
#: Text that pokes past the right edge of the window, outside any box that scrolls sideways
#: on its own (a code cell, a displayed equation): the page scrolls sideways, which hides text.
SIDEWAYS = """() => {
  const width = document.documentElement.clientWidth, out = [];
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    const range = document.createRange();
    range.selectNodeContents(node);
    const box = range.getBoundingClientRect();
    if (box.width === 0 || box.right <= width + 0.5) continue;
    let scrolls = false;
    for (let up = node.parentElement; up && up !== document.body; up = up.parentElement)
      if (getComputedStyle(up).overflowX !== "visible") { scrolls = true; break; }
    if (!scrolls) out.push(node.textContent.trim().slice(0, 80));
  }
  return {wider: document.documentElement.scrollWidth > width, text: out.slice(0, 5)};
}"""
#: The "on this page" links that lead to no heading when followed (the browser's own reading
#: of the fragment, which an id with quotes or a "?" in it puts to the test).
DEAD_HEADINGS = """() => Array.from(document.querySelectorAll(".toc-narrow a")).filter(link => {
  location.hash = link.getAttribute("href");
  const target = document.querySelector(":target");
  return !target || !/^H[23]$/.test(target.tagName);
}).map(link => link.getAttribute("href"))"""


def test_every_page_renders_with_its_title_launch_links_and_no_console_error(tab):
    """Checked on a phone's screen (390 px wide): every page fits it, nothing scrolls the
    page sideways; the layout is the narrow one, where "on this page" is a folded list."""
    site, typeset = built_site(), 0
    tab.set_viewport_size(PHONE)
    for module in course.MODULES:
        open_page(tab, f"{module.name}.html")
        assert tab.evaluate(SIDEWAYS) == {"wider": False, "text": []}, module.name
        assert tab.title() == f"{module.name[:2]} {module.title} · {course.TITLE}"
        assert tab.locator("main .cell").count() > 5
        colab = tab.get_attribute("a.launch-button.colab", "href")
        assert colab == site.publication.colab_url("exercises", module.name)
        assert tab.get_attribute("a.launch-button.hub", "href") == nbgitpuller_link(
            HUB, module.name
        )
        assert tab.locator(".on-this-page a").count() >= 3
        assert tab.evaluate(DEAD_HEADINGS) == [], module.name
        typeset += tab.locator(".katex").count()
        assert tab.locator(".katex-error").all_inner_texts() == [], module.name  # math typesets
    for name in ("index.html", "faq.html", "pitfalls.html", "verify.html"):
        open_page(tab, name)
        assert tab.locator("h1").count() >= 1, name
        assert tab.evaluate(SIDEWAYS) == {"wider": False, "text": []}, name
        if name == "index.html":  # the modules' table fits too: nothing to scroll to in it
            assert tab.evaluate("(t => t.scrollWidth <= t.clientWidth)(document.querySelector"
                                "('.module-table'))")  # fmt: skip
            shot(tab, "index-phone")
    assert tab.errors == [] and typeset > 50
    open_page(tab, "02_loss_scaling.html")
    shot(tab, "module-phone")
    tab.set_viewport_size(VIEWPORT)
    open_page(tab, "01_accumulation.html")
    shot(tab, "module")


def test_choosing_a_quiz_option_says_right_or_wrong_and_why(tab):
    open_page(tab, "01_accumulation.html")
    question = QUIZZES["01_accumulation"].questions[0]
    box = tab.locator(".quiz-question").first
    assert not box.locator(".explanation").is_visible()
    wrong = next(i for i in range(len(question.options)) if i != question.answer)
    box.locator(f'.quiz-option[data-option="{wrong}"]').click()
    assert box.locator(".verdict").inner_text() == "Not quite."
    assert box.locator(".explanation").inner_text() == question.explanation
    box.locator(f'.quiz-option[data-option="{question.answer}"]').click()
    assert box.locator(".verdict").inner_text() == "Correct."
    box.scroll_into_view_if_needed()
    shot(tab, "quiz")
    assert tab.errors == []


def test_search_finds_a_section_of_another_module(tab):
    open_page(tab, "index.html")
    tab.fill("#search-box", "no_sync")
    links = tab.locator("#search-results a")
    assert links.count() >= 1
    assert any(h.startswith("04_distributed.html#") for h in
               links.evaluate_all("links => links.map(a => a.getAttribute('href'))"))  # fmt: skip


def test_served_over_http_as_a_web_host_serves_it(tab):
    """Over http (as GitHub Pages serves it, on a loopback address, which browsers hold as
    secure as https), a page loads with no failed request (a browser asks a server for
    /favicon.ico of its own accord) and the certificate check runs."""
    import functools
    import threading
    from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

    class Quiet(SimpleHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

    site = built_site()
    handler = functools.partial(Quiet, directory=str(site.out))
    with ThreadingHTTPServer(("127.0.0.1", 0), handler) as server:
        threading.Thread(target=server.serve_forever, daemon=True).start()
        try:
            base = f"http://127.0.0.1:{server.server_address[1]}/"
            for name in ("index.html", "01_accumulation.html", "verify.html"):
                tab.goto(base + name)
                tab.wait_for_load_state("load")
            tab.fill("#certificate-text", site.genuine.token)
            tab.click("#verify-button")
            assert _verdict(tab)[0] == "Genuine"
        finally:
            server.shutdown()
    assert tab.errors == []


def _verdict(tab) -> tuple[str, dict]:
    tab.wait_for_selector("#verdict:not([hidden])")
    fields = {
        element.get_attribute("data-field"): element.inner_text()
        for element in tab.locator(".verdict-fields dd").all()
    }
    return tab.inner_text(".verdict-word"), fields


def _paste(tab, text: str) -> tuple[str, dict]:
    if not tab.url.endswith("/verify.html"):
        open_page(tab, "verify.html")
    tab.evaluate("document.getElementById('verdict').hidden = true")
    tab.fill("#certificate-text", text)
    tab.click("#verify-button")
    return _verdict(tab)


def _changed(token: str, at: int) -> str:
    swap = "A" if token[at] != "A" else "B"
    return token[:at] + swap + token[at + 1 :]


def test_the_certificate_page_says_genuine_revoked_or_not_genuine(tab, tmp_path):
    site = built_site()
    word, fields = _paste(tab, site.genuine.token)
    assert word == "Genuine"
    signed = site.genuine.statement.fields()
    assert fields["name"] == "Ada Lovelace" and {"score", "date", "course", "id"} <= set(fields)
    assert {"covered", "modules"} & set(fields)
    assert all(value == signed[name] for name, value in fields.items()), (fields, signed)
    shot(tab, "verify-genuine")
    assert _paste(tab, site.genuine.summary)[0] == "Genuine"  # the QR code's text
    middle = len(site.genuine.token) // 2
    assert _paste(tab, _changed(site.genuine.token, middle))[0] == "Not genuine"
    shot(tab, "verify-forged")
    assert _paste(tab, site.revoked.token)[0] == "Revoked"
    # a name is shown as text, never run or parsed as HTML
    name = '<img src=x onerror="window.pwned=1"><script>window.pwned=2</script>&amp;'
    for signed in (issue(site.key, name).token, issue(site.key, name).summary):
        word, fields = _paste(tab, signed)
        assert (word, fields["name"]) == ("Genuine", name)
        assert tab.locator("#verdict img, #verdict script").count() == 0
        assert tab.evaluate("window.pwned") is None
    for name, token, word in (
        ("badge.png", site.genuine.token, "Genuine"),
        ("forged.png", _changed(site.genuine.token, middle), "Not genuine"),
    ):
        (tmp_path / name).write_bytes(badge(token))
        tab.evaluate("document.getElementById('verdict').hidden = true")
        tab.set_input_files("#certificate-file", str(tmp_path / name))
        assert _verdict(tab)[0] == word, name
    assert tab.errors == []


# --- the page's checker against coursekit verify, on the same inputs ---


def _signed(key, header: dict | bytes, payload: dict | bytes) -> str:
    parts = [p if isinstance(p, bytes) else credentials.json_bytes(p) for p in (header, payload)]
    signing_input = f"{b64url(parts[0])}.{b64url(parts[1])}"
    return f"{signing_input}.{b64url(key.sign(signing_input.encode('ascii')))}"


def _tokens(site) -> dict[str, str]:
    """Certificates, damaged ones, and ones the issuer's key signed but coursekit never writes."""
    key, token = site.key, site.genuine.token
    header_part, payload_part, signature = token.split(".")
    header = json.loads(credentials.b64url_decode(header_part))
    payload = json.loads(credentials.b64url_decode(payload_part))
    raw_payload = credentials.b64url_decode(payload_part)
    later = datetime.now(timezone.utc) + timedelta(days=2)

    def edited(**changes) -> str:
        return _signed(key, header, {**payload, **changes})

    subject = payload["credentialSubject"]

    def achieved(**changes) -> str:
        achievement = {**subject["achievement"], **changes}
        return edited(credentialSubject={**subject, "achievement": achievement})

    cases = {
        "genuine": token,
        "summary": site.genuine.summary,
        "revoked": site.revoked.token,
        "padded": token + "=",
        "spaces around": f"  {token}\n",
        "other key": _signed(Ed25519PrivateKey.generate(), header, payload),
        "summary, other key": _signed(Ed25519PrivateKey.generate(),
                                      *[json.loads(credentials.b64url_decode(p))
                                        for p in site.genuine.summary.split(".")[:2]]),  # fmt: skip
        "duplicate key": _signed(key, header, raw_payload[:-1] + b',"name":"x"}'),
        "NaN": _signed(key, header, raw_payload[:-1] + b',"x":NaN}'),
        "huge integer": _signed(key, header, raw_payload[:-1] + b',"x":' + b"9" * 4301 + b"}"),
        "big integer": _signed(key, header, raw_payload[:-1] + b',"x":' + b"9" * 4300 + b"}"),
        "big number": _signed(key, header, raw_payload[:-1] + b',"x":1e400}'),
        "header extra key": _signed(key, {**header, "x5u": "https://x"}, payload),
        "header no typ": _signed(key, {k: v for k, v in header.items() if k != "typ"}, payload),
        "header typ other": _signed(key, {**header, "typ": "JWS"}, payload),
        "header wrong kid": _signed(key, {**header, "kid": "did:key:z6Mk#x"}, payload),
        "alg none": _signed(key, {**header, "alg": "none"}, payload),
        "score 100.0": edited(credentialSubject={**subject, "result": [
            {**subject["result"][0], "value": "100.0"}]}),  # fmt: skip
        "score 100.5": edited(credentialSubject={**subject, "result": [
            {**subject["result"][0], "value": "100.5"}]}),  # fmt: skip
        "score -0.0": edited(credentialSubject={**subject, "result": [
            {**subject["result"][0], "value": "-0.0"}]}),  # fmt: skip
        "score 05.0": edited(credentialSubject={**subject, "result": [
            {**subject["result"][0], "value": "05.0"}]}),  # fmt: skip
        "tag a string": edited(credentialSubject={**subject, "achievement": {
            **subject["achievement"], "tag": "abc"}}),  # fmt: skip
        "tag numbers": edited(credentialSubject={**subject, "achievement": {
            **subject["achievement"], "tag": [1]}}),  # fmt: skip
        "no subject id": edited(sub=None, credentialSubject={
            k: v for k, v in subject.items() if k != "id"}),  # fmt: skip
        "nbf as bool": edited(nbf=True),
        "nbf as float": edited(nbf=float(payload["nbf"])),
        "lower-case stamp": edited(validFrom=payload["validFrom"].lower()),
        "not yet valid": edited(validFrom=later.strftime("%Y-%m-%dT%H:%M:%SZ"),
                                nbf=int(later.replace(microsecond=0).timestamp())),  # fmt: skip
        "expiry": edited(validUntil="2999-01-01T00:00:00Z"),
        "braced uuid": edited(id="urn:uuid:{" + payload["id"][9:] + "}",
                              jti="urn:uuid:{" + payload["id"][9:] + "}"),  # fmt: skip
        "issuer did:web": _signed(key, {**header, "kid": "did:web:example.edu#key-1"},
                                  {**payload, "iss": "did:web:example.edu",
                                   "issuer": {**payload["issuer"], "id": "did:web:example.edu"}}),
        "issuer other did": edited(issuer={**payload["issuer"], "id": "did:example:1"}),
        "alignment not a list": achieved(alignment={"a": 1}),
        "alignment of another module": achieved(alignment=[_module("09_x")]),
        "alignment twice": achieved(alignment=[_module("01_accumulation")] * 2),
        "alignment of another kind": achieved(alignment=[{"targetType": "CFItem"}]),
        "alignment without title": achieved(alignment=[{**_module("01_accumulation"),
                                                        "targetName": 1}]),
        "issuer name not text": edited(issuer={**payload["issuer"], "name": 7}),
        "issuer without name": edited(issuer={k: v for k, v in payload["issuer"].items()
                                              if k != "name"}),
        "hashed 0": edited(credentialSubject={**subject, "identifier": [
            {**subject["identifier"][0], "hashed": 0}]}),  # fmt: skip
        "not base64url": token.replace(".", ".*", 1),
        "two dots": header_part + "." + payload_part,
        "empty": "",
        "broken across lines": token[:50] + "\n" + token[50:120] + "\r\n  " + token[120:],
        "QR summary broken": site.genuine.summary[:30] + "\n" + site.genuine.summary[30:],
        "ID and fingerprint": f"{site.genuine.statement.id} {site.genuine.statement.fingerprint}",
        "web address": "https://example.org/certificate/1",
        "JSON string": json.dumps(token),
        "enveloped": json.dumps({"@context": [], "type": "EnvelopedVerifiableCredential",
                                 "id": "data:application/vc+jwt," + token}),
        "credential JSON unsigned": json.dumps(payload),
        "a certificate page": site.genuine.page,
        "some HTML": "<p>hello</p>",
    }  # fmt: skip
    # the signature's last character with its unused bits set: same bytes, another text
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    for name, signed in (("", token), ("summary, ", site.genuine.summary)):
        last = signed[-1]
        cases[f"{name}non-canonical signature"] = signed[:-1] + alphabet[alphabet.index(last) | 1]
    # the QR code's text edited, and signed with another algorithm's name
    summary_header, summary_payload = site.genuine.summary.split(".")[:2]
    cases["summary, changed payload"] = _changed(site.genuine.summary, len(summary_header) + 30)
    cases["summary, alg none"] = ".".join(
        [b64url(b'{"alg":"none","typ":"coursekit-summary+jwt"}'), summary_payload, ""]
    )
    cases["summary, revoked"] = site.revoked.summary
    cases["alg HS256"] = _signed(key, {**header, "alg": "HS256"}, payload)
    # a revoked certificate whose ID is written another way that names the same UUID
    revoked = json.loads(credentials.b64url_decode(site.revoked.token.split(".")[1]))
    other_spelling = "urn:uuid:" + revoked["id"][len("urn:uuid:") :].upper().replace("-", "")
    cases["revoked, ID spelt otherwise"] = _signed(
        key, header, {**revoked, "id": other_spelling, "jti": other_spelling}
    )
    for part, start in (("header", 5), ("payload", len(header_part) + 40),
                        ("signature", len(token) - 20)):  # fmt: skip
        cases[f"changed {part}"] = _changed(token, start)
    return cases


def _module(code: str) -> dict:
    return {"type": ["Alignment"], "targetType": "ext:CourseModule", "targetCode": code,
            "targetName": "A title", "targetUrl": "https://example.org"}  # fmt: skip


def _python_word(verdict: certificates.Verdict) -> str:
    return "genuine" if verdict.genuine else "revoked" if verdict.revoked else "not-genuine"


def _page_words(tab, texts: list[str] | None = None, images: list[bytes] | None = None):
    open_page(tab, "verify.html")
    if texts is not None:
        script = ("texts => Promise.all(texts.map(t => window.coursekitVerify.verifyText("
                  "t, window.coursekitVerify.issuer).then(r => r.verdict)))")  # fmt: skip
        return tab.evaluate(script, texts)
    script = ("images => Promise.all(images.map(b => window.coursekitVerify.verifyBytes("
              "new Uint8Array(b), window.coursekitVerify.issuer)"
              ".then(r => r.verdict)))")  # fmt: skip
    return tab.evaluate(script, [list(image) for image in images])


def _cli_word(site, path: Path) -> str:
    """What ``coursekit verify FILE`` says of a file, as the page words it."""
    public = site.key.public_key()
    revoked = revocation.read(site.out.parent / "published" / revocation.REVOKED_FILE)
    try:
        read = read_certificate(path)
    except CertificateInputError:
        return "not-genuine"  # refused, with the reason
    if read.kind == "page":  # the page sends certificate pages to coursekit verify
        return "not-checked" if certificates.kind_of(read.text) else "not-genuine"
    return _python_word(certificates.verify_token(read.text, public, revoked))


def test_the_page_and_coursekit_verify_agree_on_every_token(tab, tmp_path):
    site = built_site()
    cases = _tokens(site)
    expected = {}
    for number, (name, text) in enumerate(cases.items()):
        (tmp_path / f"{number}.jwt").write_text(text, encoding="utf-8")
        expected[name] = _cli_word(site, tmp_path / f"{number}.jwt")
    got = dict(zip(cases, _page_words(tab, list(cases.values())), strict=True))
    assert got == expected
    assert expected["genuine"] == "genuine" and expected["revoked"] == "revoked"
    assert expected["summary, revoked"] == expected["revoked, ID spelt otherwise"] == "revoked"
    assert sum(word == "genuine" for word in expected.values()) >= 5  # odd but signed forms
    assert tab.errors == []


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def test_the_page_and_coursekit_verify_agree_on_every_file(tab, tmp_path):
    site = built_site()
    token = site.genuine.token
    good = badge(token)
    end = good.rindex(b"IEND") - 4
    images = {
        "genuine": good,
        "revoked": badge(site.revoked.token),
        "no credential": baking.badge_image(),
        "two credentials": good[:end] + _chunk(b"iTXt", b"openbadgecredential\0\0\0\0\0" +
                                               token.encode()) + good[end:],  # fmt: skip
        "a second claim": good[:end] + _chunk(b"tEXt", b"OpenBadges\0x") + good[end:],
        "a token in a comment": good[:end] + _chunk(b"tEXt", b"Comment\0" + token.encode())
        + good[end:],
        "a compressed claim": good[:end]
        + _chunk(b"zTXt", b"Comment\0\0" + zlib.compress(b"open badge")) + good[end:],
        "a harmless comment": good[:end]
        + _chunk(b"zTXt", b"Comment\0\0" + zlib.compress(b"a medal")) + good[end:],
        "damaged crc": good[:40] + bytes([good[40] ^ 1]) + good[41:],
        "after the end": good + b"\0",
        "cut short": good[:-6],
        "an empty compressed comment": good[:end] + _chunk(b"zTXt", b"Comment") + good[end:],
        "a .jwt file": token.encode() + b"\n",
        "a .jwt file with a byte-order mark": b"\xef\xbb\xbf" + token.encode(),
        "a .jwt file, not UTF-8": token.encode() + b"\xff",
        "compressed credential": baking.badge_image()[:33] + _chunk(
            b"iTXt", b"openbadgecredential\0\1\0\0\0" + zlib.compress(token.encode()))
        + baking.badge_image()[33:],
    }  # fmt: skip
    expected = {}
    for number, (name, image) in enumerate(images.items()):
        (tmp_path / f"{number}.bin").write_bytes(image)
        expected[name] = _cli_word(site, tmp_path / f"{number}.bin")
    got = dict(zip(images, _page_words(tab, images=list(images.values())), strict=True))
    assert got == expected
    assert (
        expected["genuine"] == "genuine"
        and expected["harmless comment" if False else "a harmless comment"] == "genuine"
    )
    assert tab.errors == []
