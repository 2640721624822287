"""``coursekit site``: the course as a static website, built offline from ``notebooks/``.

Why a generator of the course's own (Jinja2 pages, nbconvert's markdown filter, Pygments)
rather than Jupyter Book: Jupyter Book 2 (mystmd) downloads its theme when it builds, which
an offline machine cannot, and Jupyter Book 1 brings Sphinx and a stack of extensions; the
site also needs what neither has: the exercise notebooks made by ``coursekit build``'s own
pipeline (so no solution can reach a page), the quizzes and the certificate check working
without a server. Every library used here is already a dependency of the course's tools.

The site is flat (every page at its root), so it works from ``file://`` as from GitHub
Pages; data the scripts read is in ``.js`` files and inline JSON, never fetched.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from importlib.resources import files
from pathlib import Path

from jinja2 import Environment, FileSystemLoader, select_autoescape
from pygments.formatters import HtmlFormatter

from coursekit import course
from coursekit.authoring.publication import Publication, from_course, resolve
from coursekit.commands.hub_links import CourseSource
from coursekit.site.cells import Written
from coursekit.site.extras import faq_entries, pitfalls_html, published
from coursekit.site.launch import launch_links
from coursekit.site.module_page import module_page, plain_text
from coursekit.site.outputs import OutputCache, cell_keys, execute
from coursekit.site.sources import read_modules

ASSETS = ("site.css", "site.js", "verify.js")
#: Left in the built site so a later build knows the folder is one of ours to replace.
MARKER = ".coursekit-site"


@dataclass
class SiteReport:
    pages: list[Path] = field(default_factory=list)
    executed: list[str] = field(default_factory=list)  # modules run to fill the cache
    failed: list[str] = field(default_factory=list)  # of those, the ones that stopped early
    missing_outputs: int = 0  # demonstrations shown without their output
    certificates: str = ""
    repository: str = ""  # the GitHub owner/name the Colab and Binder buttons open


def _script_json(data) -> str:
    """JSON to put inside a <script> element: "</" cannot end the element early."""
    return json.dumps(data, ensure_ascii=False).replace("</", "<\\/")


def _environment() -> Environment:
    templates = files("coursekit.site").joinpath("templates")
    return Environment(
        loader=FileSystemLoader(str(templates)),
        autoescape=select_autoescape(["html"]),
        keep_trailing_newline=True,
    )


def _prepare(out: Path) -> None:
    """An empty ``out``: made, or emptied when a previous build made it; anything else in
    the way is a FileExistsError (never delete a folder that is not ours)."""
    if out.exists():
        if not out.is_dir() or (any(out.iterdir()) and not (out / MARKER).is_file()):
            raise FileExistsError(
                f"{out} exists and is not a site coursekit built: give an empty or new folder."
            )
        shutil.rmtree(out)
    out.mkdir(parents=True)
    (out / MARKER).write_text("built by coursekit site; replaced by the next build\n")


def build_site(
    root: Path,
    out: Path,
    *,
    cache_dir: Path | None = None,
    run_notebooks: bool = True,
    refresh: bool = False,
    hub_url: str | None = None,
    hub_source: CourseSource | None = None,
    certificates_dir: Path | None = None,
    publication: Publication | None = None,
    progress=print,
) -> SiteReport:
    """Write the site of the course at ``root`` into ``out``.

    Args:
        cache_dir: where demonstrations' outputs are kept (see ``outputs``).
        run_notebooks: run the exercise notebooks whose outputs the cache lacks; False
            builds from the cache alone, noting each demonstration without output.
        refresh: run every notebook again, whatever the cache holds.
        hub_url, hub_source: a JupyterHub for nbgitpuller buttons (as ``coursekit links``).
        certificates_dir: the published issuer key and revocation list
            (``root/certificates`` when None).
    """
    from coursekit.site.outputs import default_cache_dir

    root, out = Path(root), Path(out)
    if hub_url:  # a hub address nbgitpuller cannot use is refused before anything is written
        launch_links(from_course(), course.MODULES[0].name, hub_url, hub_source)
    publication = publication or resolve(root)
    cache = OutputCache(cache_dir or default_cache_dir())
    modules = read_modules(root, publication)
    report = SiteReport(repository=publication.repository)
    for source in modules:
        keys = cell_keys(source.name, source.exercise).values()
        if refresh or (run_notebooks and cache.missing(keys)):
            progress(f"running {source.name} for its outputs ...")
            try:
                execute(source.name, source.exercise, cache)
            except Exception as error:  # noqa: BLE001 - one notebook's failure costs its outputs
                progress(
                    f"{source.name} stopped before its end ({type(error).__name__}: "
                    f"{str(error)[:300]}); its page notes each demonstration left without output."
                )
                report.failed.append(source.name)
            report.executed.append(source.name)
    certificates = published(certificates_dir or root / "certificates")
    report.certificates = certificates.where
    _prepare(out)
    environment = _environment()
    common = {"course_title": course.TITLE, "modules": course.MODULES, "hub": bool(hub_url)}
    written, index, rows = Written(), [], []

    def write(name: str, template: str, **values) -> None:
        text = environment.get_template(template).render(**common, **values)
        (out / name).write_text(text, encoding="utf-8")
        report.pages.append(out / name)

    for number, source in enumerate(modules):
        page = module_page(source, cache, written)
        report.missing_outputs += page.missing_outputs
        write(
            f"{source.name}.html",
            "module.html",
            module=source.module,
            current=source.name,
            page=page,
            launches=launch_links(publication, source.name, hub_url, hub_source),
            previous=modules[number - 1].module if number else None,
            next=modules[number + 1].module if number + 1 < len(modules) else None,
        )
        rows.append({"module": source.module, "reading": page.reading_minutes})
        title = f"{source.name[:2]} {source.module.title}"
        for section in page.sections:
            index.append({"page": f"{source.name}.html", "title": title, **section})
    write("index.html", "index.html", rows=rows, current=None)
    pitfalls = pitfalls_html(root)
    if pitfalls is not None:
        body = pitfalls
        write("pitfalls.html", "simple.html", heading="The pitfalls", body=body, current=None)
        index.append(
            {"page": "pitfalls.html", "title": "The pitfalls", "anchor": "", "heading": "",
             "text": plain_text(body)}
        )  # fmt: skip
    entries = faq_entries()
    write("faq.html", "faq.html", entries=entries, current=None)
    for entry in entries:
        index.append(
            {"page": "faq.html", "title": "FAQ", "anchor": f"faq-{entry['module'].name}",
             "heading": plain_text(entry["question"]),
             "text": plain_text(entry["answer"] + " " + entry["why"])}
        )  # fmt: skip
    issuer = {
        "key": certificates.key_b64url,
        "fingerprint": certificates.fingerprint,
        "revoked": certificates.revoked,
    }
    write(
        "verify.html",
        "verify.html",
        published=certificates,
        issuer_json=_script_json(issuer),
        current=None,
    )
    _write_assets(out, written, index)
    return report


def _write_assets(out: Path, written: Written, index: list[dict]) -> None:
    (out / "assets").mkdir()
    source = files("coursekit.site").joinpath("assets")
    for name in ASSETS:
        (out / "assets" / name).write_bytes(source.joinpath(name).read_bytes())
    _copy_tree(source.joinpath("katex"), out / "assets" / "katex")  # typesets the math
    css = HtmlFormatter(cssclass="highlight").get_style_defs(".highlight")
    (out / "assets" / "pygments.css").write_text(css + "\n", encoding="utf-8")
    if written.files:
        (out / "outputs").mkdir()
        for name, data in written.files.items():
            (out / "outputs" / name).write_bytes(data)
    text = "window.COURSEKIT_SEARCH = " + json.dumps(index, ensure_ascii=False) + ";\n"
    (out / "search-index.js").write_text(text, encoding="utf-8")


def _copy_tree(source, target: Path) -> None:
    """A package folder (an importlib.resources Traversable) copied to ``target``."""
    target.mkdir(parents=True, exist_ok=True)
    for entry in source.iterdir():
        if entry.is_dir():
            _copy_tree(entry, target / entry.name)
        else:
            (target / entry.name).write_bytes(entry.read_bytes())
