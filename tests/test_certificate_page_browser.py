"""A certificate page, opened in headless Chromium as a student or an employer would.

What only a browser shows: the page lays out on one printed A4 sheet (landscape), the QR code
is drawn at a size a phone can read, and a name with a right-to-left override shows as its
escape, not reordered. A screenshot is kept in artifacts/browser/certificate.png for a person
to look at. Skipped, with the reason, where playwright or Debian's chromium is missing
(./scripts/setup --browser installs both where it can).
"""

from __future__ import annotations

import re
from datetime import datetime, timezone
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from coursekit.course import MODULES, TITLE, repository_url
from coursekit.grading.records import certificates, tracks
from coursekit.grading.records.credentials import issuer_for
from tests.helpers.lab_browser import CHROMIUM, CHROMIUM_ARGS, VIEWPORT, missing_browser_reason

REASON = missing_browser_reason()
pytestmark = [
    pytest.mark.browser,
    pytest.mark.grading,
    pytest.mark.skipif(REASON is not None, reason=f"browser test: {REASON}"),
]
ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts" / "browser"
CM_PX = 96 / 2.54  # CSS pixels per centimetre


def test_the_certificate_page_shows_every_field_and_prints_on_one_sheet(tmp_path):
    from playwright.sync_api import sync_playwright

    key = Ed25519PrivateKey.generate()
    issued = certificates.issue(
        name="Ada \u202eLovelace",
        coverage=tracks.coverage(),  # the whole course: the longest list of modules
        score_percent=92.6,
        pass_percent=70,
        key=key,
        issuer=issuer_for(key.public_key(), TITLE, repository_url()),
        issued=datetime.now(timezone.utc),
    )
    page_file = tmp_path / "certificate.html"
    page_file.write_text(issued.page, encoding="utf-8", newline="")
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=list(CHROMIUM_ARGS))
        try:
            tab = chromium.new_page(viewport=VIEWPORT)
            tab.goto(page_file.as_uri())
            tab.wait_for_load_state("load")
            shown = {
                field: tab.inner_text(f'span[data-field="{field}"]')
                for field in certificates.SHOWN_FIELDS
            }
            assert shown["name"] == "Ada \\u202eLovelace"  # the escape, not a reordered name
            graded = tracks.graded_modules()
            assert shown["modules"] == ", ".join(graded)
            named = tab.locator('span[data-field="module"]').all_inner_texts()
            assert named == [f"module {m.name[:2]}, {m.title}" for m in MODULES if m.name in graded]
            assert shown["issued_by"] == f"{TITLE} ({repository_url()})"
            assert shown["score"] == "92.6%" and shown["id"] == issued.statement.id
            assert shown["fingerprint"] == issued.statement.fingerprint
            assert tab.title() == "Certificate: Ada \\u202eLovelace"
            qr = tab.locator("svg.qr").bounding_box()
            assert qr and qr["width"] >= 6 * CM_PX and abs(qr["width"] - qr["height"]) < 1
            card = tab.locator(".card").bounding_box()
            assert card["x"] >= 0 and card["x"] + card["width"] <= VIEWPORT["width"]
            ARTIFACTS.mkdir(parents=True, exist_ok=True)
            tab.screenshot(path=str(ARTIFACTS / "certificate.png"), full_page=True)
            pdf = tab.pdf(prefer_css_page_size=True, print_background=True)
            assert len(re.findall(rb"/Type\s*/Page\b", pdf)) == 1  # one printed sheet
        finally:
            chromium.close()
