"""One notebook cell as HTML: markdown as nbconvert renders it, code highlighted, outputs
from the cache.

Markdown goes through nbconvert's own mistune filter, which gives each heading an ``id``
(the "on this page" links) and leaves ``$...$`` math as its TeX text. Outputs are shown as
the notebook shows them, richest kind first; what a static page cannot show (an ipywidget,
which needs a kernel) is replaced by a note saying where to use it.
"""

from __future__ import annotations

import base64
import hashlib
import html
import re
from dataclasses import dataclass, field

from nbconvert.filters.markdown_mistune import markdown2html_mistune
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import PythonLexer

WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_FORMATTER = HtmlFormatter(nowrap=False, cssclass="highlight")


@dataclass
class Written:
    """Files a page's outputs need (images), by name under the site's ``outputs/`` folder."""

    files: dict[str, bytes] = field(default_factory=dict)


def markdown_html(source: str) -> str:
    return markdown2html_mistune(source)


def code_html(source: str) -> str:
    return highlight(source, PythonLexer(), _FORMATTER)


def _text(value) -> str:
    return "".join(value) if isinstance(value, list) else str(value)


def _pre(text: str, kind: str) -> str:
    return f'<pre class="output {kind}">{html.escape(_ANSI.sub("", text))}</pre>'


def _image(data: str, suffix: str, written: Written, prefix: str) -> str:
    raw = base64.b64decode(data) if suffix == "png" else data.encode("utf-8")
    name = f"{hashlib.sha256(raw).hexdigest()[:20]}.{suffix}"
    written.files[name] = raw
    return f'<img class="output" src="{prefix}outputs/{name}" alt="Output of the cell above">'


def output_html(output: dict, written: Written, prefix: str = "") -> str:
    """One output of a code cell; ``prefix`` is the page's path back to the site's root."""
    kind = output.get("output_type")
    if kind == "stream":
        return _pre(_text(output.get("text", "")), "stream " + str(output.get("name", "")))
    if kind == "error":
        return _pre(f"{output.get('ename', 'Error')}: {output.get('evalue', '')}", "error")
    data = output.get("data", {})
    if WIDGET_MIME in data:
        return (
            '<p class="note">An interactive widget is here in the notebook: open the '
            "notebook (the buttons at the top) to use it.</p>"
        )
    if "image/png" in data:
        return _image(_text(data["image/png"]), "png", written, prefix)
    if "image/svg+xml" in data:
        return _image(_text(data["image/svg+xml"]), "svg", written, prefix)
    if "text/html" in data:
        return f'<div class="output html">{_text(data["text/html"])}</div>'
    if "text/markdown" in data:
        return f'<div class="output markdown">{markdown_html(_text(data["text/markdown"]))}</div>'
    if "text/plain" in data:
        return _pre(_text(data["text/plain"]), "plain")
    return ""


def outputs_html(outputs: list | None, *, demo: bool, written: Written, prefix: str = "") -> str:
    """All outputs of a cell; for a demonstration not yet run, a note that says so."""
    if outputs is None:
        if not demo:
            return ""
        return (
            '<p class="note missing-output">This demonstration\'s output is not built yet '
            "(coursekit site runs the notebooks to make it). Open the notebook to run it.</p>"
        )
    return "".join(output_html(output, written, prefix) for output in outputs)
