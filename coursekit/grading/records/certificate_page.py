"""The printable certificate page: rendered from the signed credential alone, the same bytes
every time, in each layout a release has issued.

Why from the signed data alone: :func:`~coursekit.grading.records.certificates.verify`
renders the page again from its signed blocks and the key and requires the very bytes it
was given, so whatever a page shows was signed. A page states its layout
(``data-coursekit-page``); a new layout gets a new number and the old ones keep rendering,
so every certificate ever handed out still verifies.

- Layout ``1``: the modules by their IDs (``01_accumulation, 02_loss_scaling``).
- Layout ``2`` (this release): each module by number and title, as signed in the
  credential's alignments ("module 01, Accumulating gradients"), and who issued it (the
  issuer's name and address); the IDs stay in the small print.
"""

from __future__ import annotations

import html

import segno
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from coursekit.grading.records.credentials import Statement
from coursekit.grading.text import visible

#: The layout new pages get.
PAGE_FORMAT = "2"
#: What a page of each layout shows, in order; each is one ``data-field`` span, except
#: ``module``: one span per module covered.
SHOWN_BY_FORMAT = {
    "1": ("name", "course", "score", "modules", "date", "id", "issuer", "fingerprint"),
    "2": (
        "name",
        "course",
        "score",
        "module",
        "issued_by",
        "date",
        "id",
        "modules",
        "issuer",
        "fingerprint",
    ),
}
#: Past this QR version (97 modules a side) a code printed 6.5 cm wide is hard to scan.
QR_MAX_VERSION = 20

_STYLE = """@page {{ size: A4 landscape; margin: 0; }}
body {{ font-family: Georgia, serif; margin: 0; display: flex; min-height: 100vh;
       align-items: center; justify-content: center; background: #f4f1ea; }}
.card {{ width: 26cm; padding: 1.6cm 2.2cm; border: 10px double #6b5b3e; background: #fffdf7;
        text-align: center; }}
h1 {{ font-size: 2.4rem; letter-spacing: .1em; margin: 0 0 .5cm; }}
.name {{ font-size: 2.2rem; margin: .5cm 0; overflow-wrap: anywhere; }}
.check {{ display: flex; gap: .8cm; align-items: center; margin-top: .8cm; text-align: left; }}
svg.qr {{ width: 6.5cm; height: 6.5cm; flex: none; }}
.meta {{ font-size: .8rem; color: #555; font-family: monospace; overflow-wrap: anywhere; }}
details {{ font-size: .75rem; color: #555; text-align: left; }}
"""


def shown_values(statement: Statement, page_format: str) -> dict[str, list[str]]:
    """What each ``data-field`` of a page of ``page_format`` shows, as the page writes it
    (a control or invisible character as its escape): one value a field, one a module."""
    fields = statement.fields()
    values = {
        name: [visible(fields[name])] for name in SHOWN_BY_FORMAT[page_format] if name != "module"
    }
    if "module" in SHOWN_BY_FORMAT[page_format]:
        values["module"] = [visible(line) for line in statement.module_lines()]
    return values


def _escaped(value: str) -> str:
    """What the page shows for a signed value: escaped where it would not show as itself,
    then HTML-escaped."""
    return html.escape(visible(value))


def qr_svg(summary: str, statement: Statement) -> str:
    """An inline SVG QR code of the signed summary; for one too long to scan from paper (a
    name of hundreds of characters), the ID and key fingerprint a verifier looks up instead.

    The SVG is written here from the code's modules (which the QR standard fixes for the
    text, error level and version), not by segno's SVG writer, whose output may change
    between its releases: ``verify`` renders the page again and needs the same bytes."""
    try:
        code = segno.make(summary, error="l", micro=False)
    except segno.DataOverflowError:
        code = None
    if code is None or code.version > QR_MAX_VERSION:
        code = segno.make(f"{statement.id} {statement.fingerprint}", error="m", micro=False)
    border, runs = 4, []
    for y, row in enumerate(code.matrix):
        x = 0
        while x < len(row):
            if row[x] & 1:
                start = x
                while x < len(row) and row[x] & 1:
                    x += 1
                runs.append(f"M{start + border} {y + border}h{x - start}v1h-{x - start}z")
            x += 1
    size = len(code.matrix) + 2 * border
    return (
        f'<svg class="qr" viewBox="0 0 {size} {size}" xmlns="http://www.w3.org/2000/svg" '
        f'shape-rendering="crispEdges"><rect width="{size}" height="{size}" fill="#fff"/>'
        f'<path fill="#000" d="{"".join(runs)}"/></svg>'
    )


def public_key_pem(key: Ed25519PublicKey) -> str:
    pem = key.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return pem.decode("ascii").strip()


def render(
    token: str,
    summary: str,
    statement: Statement,
    key: Ed25519PublicKey,
    page_format: str = PAGE_FORMAT,
) -> str:
    """The page of layout ``page_format`` for a signed credential; the same bytes for the
    same credential, key and layout. A KeyError for a layout no release wrote."""
    return _LAYOUTS[page_format](token, summary, statement, key)


def _layout_1(token: str, summary: str, statement: Statement, key: Ed25519PublicKey) -> str:
    fields = statement.fields()

    def shown(name: str) -> str:
        return f'<span data-field="{name}">{_escaped(fields[name])}</span>'

    return f"""<!doctype html>
<html lang="en" data-coursekit-page="1"><head><meta charset="utf-8">
<title>Certificate: {_escaped(statement.name)}</title>
<style>
{_STYLE.format()}</style></head><body><div class="card">
<h1>Certificate of completion</h1>
<p>This certifies that</p>
<p class="name">{shown("name")}</p>
<p>has completed <b>{shown("course")}</b> with a score of <b>{shown("score")}</b>.</p>
<p>Modules covered: {shown("modules")}</p>
<p>Date: {shown("date")}</p>
<div class="check">{qr_svg(summary, statement)}
<p class="meta">Certificate ID {shown("id")}<br>
Issuer {shown("issuer")}<br>
Issuer key (Ed25519) fingerprint {shown("fingerprint")}<br>
An Open Badges 3.0 credential, signed; the QR code holds a signed summary. Check either
with the course's published key: coursekit verify this-file.html</p></div>
<details><summary>Issuer public key</summary><pre>{public_key_pem(key)}</pre></details>
</div>
<script type="application/vc+jwt" id="coursekit-credential">{token}</script>
<script type="application/jwt" id="coursekit-summary">{summary}</script>
</body></html>
"""


def _layout_2(token: str, summary: str, statement: Statement, key: Ed25519PublicKey) -> str:
    fields = statement.fields()

    def shown(name: str) -> str:
        return f'<span data-field="{name}">{_escaped(fields[name])}</span>'

    modules = "; ".join(
        f'<span data-field="module">{_escaped(line)}</span>' for line in statement.module_lines()
    )
    return f"""<!doctype html>
<html lang="en" data-coursekit-page="2"><head><meta charset="utf-8">
<title>Certificate: {_escaped(statement.name)}</title>
<style>
{_STYLE.format()}.covers {{ overflow-wrap: anywhere; }}
</style></head><body><div class="card">
<h1>Certificate of completion</h1>
<p>This certifies that</p>
<p class="name">{shown("name")}</p>
<p>has completed <b>{shown("course")}</b> with a score of <b>{shown("score")}</b>.</p>
<p class="covers">Covers {modules}.</p>
<p>Issued by {shown("issued_by")} on {shown("date")}.</p>
<div class="check">{qr_svg(summary, statement)}
<p class="meta">Certificate ID {shown("id")}<br>
Modules {shown("modules")}<br>
Issuer {shown("issuer")}<br>
Issuer key (Ed25519) fingerprint {shown("fingerprint")}<br>
An Open Badges 3.0 credential, signed; the QR code holds a signed summary. Check either
with the course's published key: coursekit verify this-file.html</p></div>
<details><summary>Issuer public key</summary><pre>{public_key_pem(key)}</pre></details>
</div>
<script type="application/vc+jwt" id="coursekit-credential">{token}</script>
<script type="application/jwt" id="coursekit-summary">{summary}</script>
</body></html>
"""


_LAYOUTS = {"1": _layout_1, "2": _layout_2}
