"""Certificates of earlier releases: a page whose fields are signed with HMAC-SHA256.

Kept so that a certificate issued before public-key signatures still verifies with the old
key (``coursekit verify OLD.html --key ~/.config/coursekit/instructor.key``); nothing new is
issued this way (``issue`` stays for the tests that make such a page). The page shows the
name, score, date and ID and carries the same fields with the signature; ``verify``
recomputes it and checks that what the page shows is what was signed, and that the page is
exactly the one rendered from them.
"""

from __future__ import annotations

import hashlib
import hmac
import html
import json
import re
import secrets
from dataclasses import dataclass
from datetime import date

FIELDS = ("id", "name", "course", "score", "date")
_BLOCK = re.compile(
    r'<script type="application/json" id="coursekit-certificate">(.*?)</script>', re.S
)
_SHOWN = re.compile(r'<span data-field="(\w+)">(.*?)</span>', re.S)


BLOCK_ID = 'id="coursekit-certificate"'


@dataclass(frozen=True)
class Verdict:
    genuine: bool
    reason: str
    fields: dict


def _sign(fields: dict, key: bytes) -> str:
    message = json.dumps({k: fields[k] for k in FIELDS}, sort_keys=True, ensure_ascii=False)
    return hmac.new(key, message.encode("utf-8"), hashlib.sha256).hexdigest()


def new_id() -> str:
    raw = secrets.token_hex(8).upper()
    return f"CK-{raw[:4]}-{raw[4:8]}-{raw[8:12]}-{raw[12:]}"


def issue(name: str, course: str, score_percent: float, key: bytes, on: date | None = None):
    """The certificate's HTML and its fields (with the signature)."""
    fields = {
        "id": new_id(),
        "name": name,
        "course": course,
        "score": f"{score_percent:.1f}%",
        "date": (on or date.today()).isoformat(),
    }
    fields["signature"] = _sign(fields, key)
    return render(fields), fields


def _escape(text: str) -> str:
    """HTML-escaped, with a carriage return as ``&#13;``: reading a file with newline
    translation (the default) turns a raw one into a newline, and the page would no longer
    show what was signed."""
    return html.escape(text).replace("\r", "&#13;")


def render(fields: dict) -> str:
    def shown(name: str) -> str:
        return f'<span data-field="{name}">{_escape(fields[name])}</span>'

    block = json.dumps(fields, ensure_ascii=False).replace("</", "<\\/")
    title = _escape(fields["name"])
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Certificate: {title}</title>
<style>
@page {{ size: A4 landscape; margin: 0; }}
body {{ font-family: Georgia, serif; margin: 0; display: flex; min-height: 100vh;
       align-items: center; justify-content: center; background: #f4f1ea; }}
.card {{ width: 26cm; padding: 2.5cm; border: 10px double #6b5b3e; background: #fffdf7;
        text-align: center; }}
h1 {{ font-size: 2.4rem; letter-spacing: .1em; margin: 0 0 .6cm; }}
.name {{ font-size: 2.2rem; margin: .6cm 0; }}
.meta {{ margin-top: 1cm; font-size: .95rem; color: #555; font-family: monospace; }}
</style></head><body><div class="card">
<h1>Certificate of completion</h1>
<p>This certifies that</p>
<p class="name">{shown("name")}</p>
<p>has completed <b>{shown("course")}</b> with a score of <b>{shown("score")}</b>.</p>
<p>Date: {shown("date")}</p>
<p class="meta">Certificate ID {shown("id")}<br>
Check it with: coursekit verify this-file.html</p>
</div>
<script type="application/json" id="coursekit-certificate">{block}</script>
</body></html>
"""


def verify(page: str, key: bytes) -> Verdict:
    """Is this certificate page genuine and unedited?"""
    if page.count(BLOCK_ID) > 1:
        return Verdict(False, "the page holds more than one block of signed data", {})
    match = _BLOCK.search(page)
    if match is None:
        return Verdict(False, "this is not a coursekit certificate (no signed data in it)", {})
    try:
        fields = json.loads(match.group(1))
        signed = {name: str(fields[name]) for name in FIELDS}
        signature = str(fields["signature"])
    except (ValueError, KeyError, TypeError):
        return Verdict(False, "the signed data in the page is damaged", {})
    if not hmac.compare_digest(_sign(signed, key), signature):
        return Verdict(
            False,
            "the signature does not match: the signed data was edited, or "
            "another instructor's key signed it",
            signed,
        )
    shown = [(name, html.unescape(value)) for name, value in _SHOWN.findall(page)]
    for name in FIELDS:
        values = [value for field, value in shown if field == name]
        if values != [signed[name]]:
            return Verdict(
                False,
                f"the {name} shown on the page ({', '.join(map(repr, values)) or 'none'}) is "
                f"not the signed one ({signed[name]!r})",
                signed,
            )
    if page.strip() != render({**signed, "signature": signature}).strip():
        return Verdict(False, "the page was edited outside its signed fields", signed)
    return Verdict(True, "genuine", signed)
