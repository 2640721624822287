"""``coursekit site``: the generator, without a browser (tests/test_site_browser.py opens it).

The site is built once from the repository's notebooks (tests/helpers/site_build.py) with an
empty output cache but for one seeded cell, so no notebook runs here.
"""

from __future__ import annotations

import functools
import html
import json
import re
from html.parser import HTMLParser
from pathlib import Path

import nbformat
import pytest

from coursekit import course
from coursekit.authoring.build import read_source, render
from coursekit.commands.cli import main
from coursekit.commands.hub_links import nbgitpuller_link
from coursekit.site.build import MARKER, build_site
from coursekit.site.cells import Written, code_html, outputs_html
from coursekit.site.launch import launch_links
from coursekit.site.outputs import OutputCache, cell_keys, execute
from tests.helpers.site_build import HUB, REPO, SEEDED_MODULE, SEEDED_TEXT, built_site

pytestmark = pytest.mark.authoring
PACKAGE_ASSETS = REPO / "coursekit" / "site" / "assets"


#: Elements that start a new block of text; inline ones (a highlighted code's <span>s) run on.
_BLOCKS = frozenset(
    "address article aside blockquote br dd details div dl dt figcaption figure footer form "
    "h1 h2 h3 h4 h5 h6 header hr li main nav ol p pre script section summary table td th "
    "tr ul".split()
)


class _Text(HTMLParser):
    """The text a reader sees (and a script may hold) on a page, as the browser lays it out:
    ``loss.backward()`` highlighted as five <span>s reads as ``loss.backward()``, not as
    ``loss . backward ( )``; blocks are apart."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag in _BLOCKS:
            self.parts.append("\n")

    def handle_endtag(self, tag):
        self.handle_starttag(tag, [])

    def handle_data(self, data):
        self.parts.append(data)


def normal(text: str) -> str:
    return " ".join(text.split())


def site_text(out: Path) -> str:
    """Everything the site shows or ships that comes from the course, as text: each page's
    text and the search index. ``assets/`` holds the package's own files, copied as they are
    (checked below), the same for every course."""
    texts = []
    for path in sorted(out.rglob("*")):
        if path.suffix == ".html":
            parser = _Text()
            parser.feed(path.read_text(encoding="utf-8"))
            texts.append("".join(parser.parts))
        elif path.name == "search-index.js":
            raw = path.read_text(encoding="utf-8")
            texts.append(raw)
            entries = json.loads(raw.split("=", 1)[1].rstrip().rstrip(";"))
            texts.extend(" ".join(entry.values()) for entry in entries)
        elif path.is_file() and (out / "assets") in path.parents:
            if path.name != "pygments.css":
                packaged = PACKAGE_ASSETS / path.relative_to(out / "assets")
                assert path.read_bytes() == packaged.read_bytes(), path
        elif path.is_file() and path.parent.name != "outputs" and path.name != MARKER:
            raise AssertionError(f"the leak check does not read {path}: add it")
    return normal(html.unescape("\n".join(texts)))


@functools.cache
def generated(module: str, folder: str) -> nbformat.NotebookNode:
    """``folder``'s notebook of ``module`` as ``coursekit build`` makes it from notebooks/ now
    (not the committed copy, which a stale checkout could hold)."""
    path = REPO / "notebooks" / f"{module}.ipynb"
    text = render(read_source(path), f"notebooks/{path.name}", folder)
    return nbformat.reads(text, as_version=4)


def course_shown() -> str:
    """All the student's notebooks say, as one text: what every student sees anyway."""
    cells = [
        cell.source
        for module in course.MODULES
        for cell in generated(module.name, "exercises").cells
    ]
    return normal("\n".join(cells))


def answer_lines(module: str, shown: str) -> set[str]:
    """Lines of the module's solution cells that no exercise notebook shows: the answers.
    Cells are paired by id (``coursekit build`` keeps ids)."""
    by_id = {cell.id: cell.source for cell in generated(module, "exercises").cells}
    answers = set()
    for cell in generated(module, "solutions").cells:
        if cell.cell_type != "code" or by_id.get(cell.id) == cell.source:
            continue
        for line in cell.source.splitlines():
            line = normal(line)
            if re.search(r"\w", line) and line not in shown:
                answers.add(line)
    return answers


def test_no_answer_line_of_any_solution_appears_anywhere_in_the_site():
    text, shown = site_text(built_site().out), course_shown()
    checked = 0
    for module in course.MODULES:
        answers = answer_lines(module.name, shown)
        assert answers, f"{module.name}: no answer lines found, so this test would prove nothing"
        leaked = sorted(line for line in answers if line in text)
        assert not leaked, f"{module.name}: answer lines on the site: {leaked[:5]}"
        checked += len(answers)
    assert checked > 100


def test_the_leak_check_finds_answers_where_they_are(tmp_path):
    """The same reading finds every answer in a site page that holds a solution, shown as
    the site shows code (highlighted) or as plain text: the test above can fail."""
    module = course.MODULES[1].name
    answers = answer_lines(module, course_shown())
    code = "\n".join(cell.source for cell in generated(module, "solutions").cells)
    for page in (code_html(code), f"<pre>{html.escape(code)}</pre>"):
        (tmp_path / "page.html").write_text(page, encoding="utf-8")
        text = site_text(tmp_path)
        assert answers and all(line in text for line in answers)
    shown = [  # code cells the page shows (not the set-up cell, not the quiz's widget)
        cell.source
        for cell in generated(module, "exercises").cells
        if cell.cell_type == "code"
        and cell.id != "coursekit-setup"
        and ".show()" not in cell.source
    ]
    text = site_text(built_site().out)
    assert len(shown) > 5 and all(normal(source) in text for source in shown)  # real pages


def test_every_module_has_a_page_with_its_title_launch_buttons_and_quiz():
    site = built_site()
    for module in course.MODULES:
        page = (site.out / f"{module.name}.html").read_text(encoding="utf-8")
        assert f"<title>{module.name[:2]} {html.escape(module.title)} ·" in page
        colab = site.publication.colab_url("exercises", module.name)
        assert f'href="{html.escape(colab)}"' in page
        assert f'href="{html.escape(nbgitpuller_link(HUB, module.name))}"' in page
        assert "mybinder.org/v2/gh/" in page
        assert 'class="quiz-question" data-answer=' in page
        assert f"about {module.minutes} min of work" in page
        assert re.search(r"\d+ min read", page)
        assert 'class="on-this-page"' in page and '<li class="level-2">' in page
    for name in ("index.html", "faq.html", "pitfalls.html", "verify.html", "search-index.js"):
        assert (site.out / name).is_file(), name


def test_a_cached_output_is_shown_and_a_missing_one_is_noted():
    site = built_site()
    page = (site.out / f"{SEEDED_MODULE}.html").read_text(encoding="utf-8")
    cell = page.split(f'id="{site.seeded_cell}"', 1)[1].split('<div class="cell', 1)[0]
    assert SEEDED_TEXT in cell and '<img class="output" src="outputs/' in cell
    image = re.search(r'src="(outputs/[0-9a-f]+\.png)"', cell)[1]
    assert (site.out / image).read_bytes().startswith(b"\x89PNG")
    assert "not built yet" in page  # the other demonstrations, not run
    assert site.report.missing_outputs > 0 and not site.report.executed


def test_the_pitfalls_link_their_cells_and_the_faq_holds_every_quiz_question():
    from coursekit.quizzes import QUIZZES

    site = built_site()
    pitfalls = (site.out / "pitfalls.html").read_text(encoding="utf-8")
    for module, cell in re.findall(r'href="(\d\d_\w+)\.html#(m\d\d-\w+)"', pitfalls):
        assert f'id="{cell}"' in (site.out / f"{module}.html").read_text(encoding="utf-8"), cell
    faq = (site.out / "faq.html").read_text(encoding="utf-8")
    questions = sum(len(quiz.questions) for quiz in QUIZZES.values())
    assert faq.count('<details class="faq">') == questions


def test_the_verify_page_embeds_the_published_key_and_revocation_list():
    site = built_site()
    page = (site.out / "verify.html").read_text(encoding="utf-8")
    issuer = json.loads(re.search(r'<script type="application/json" id="issuer">(.*?)</script>',
                                  page, re.S)[1])  # fmt: skip
    assert issuer["fingerprint"] == site.genuine.statement.fingerprint
    assert list(issuer["revoked"]) == [site.revoked.statement.id]
    # the file picker offers every kind the page checks (a phone's picker hides the rest)
    accepted = re.search(r'id="certificate-file" accept="([^"]*)"', page)[1].split(",")
    assert {".png", ".jwt", ".json", ".txt"} <= set(accepted)


def test_the_search_index_holds_code_as_written():
    """A code cell is searched for as it reads (``torch.amp.GradScaler(``), not as the
    highlighter's tokens spaced apart (``torch . amp . GradScaler (``)."""
    raw = (built_site().out / "search-index.js").read_text(encoding="utf-8")
    entries = json.loads(raw.split("=", 1)[1].rstrip().rstrip(";"))
    text = normal(" ".join(e["text"] for e in entries if e["page"] == f"{SEEDED_MODULE}.html"))
    cells = [
        cell.source
        for cell in generated(SEEDED_MODULE, "exercises").cells
        if cell.cell_type == "code"
        and "(" in cell.source
        and cell.id != "coursekit-setup"
        and ".show()" not in cell.source  # the quiz's widget: the page shows the quiz itself
    ]
    assert len(cells) > 5 and [normal(s) for s in cells if normal(s) not in text] == []


def test_cell_keys_change_from_the_edited_cell_on():
    cells = [nbformat.v4.new_code_cell(s) for s in ("a = 1", "b = 2", "c = 3")]
    notebook = nbformat.v4.new_notebook(cells=cells)
    before = cell_keys("m", notebook)
    notebook.cells[1].source = "b = 20"
    after = cell_keys("m", notebook)
    assert before[0] == after[0] and before[1] != after[1] and before[2] != after[2]
    assert cell_keys("other", notebook)[0] != after[0]


def test_outputs_are_rendered_as_the_notebook_shows_them(tmp_path):
    cache = OutputCache(tmp_path)
    cache.put("ab12", [{"output_type": "stream", "name": "stdout", "text": "<x>\x1b[31m"}])
    written = Written()
    shown = outputs_html(cache.get("ab12"), demo=True, written=written)
    assert shown == '<pre class="output stream stdout">&lt;x&gt;</pre>'
    widget = {"output_type": "display_data", "data": {
        "application/vnd.jupyter.widget-view+json": {}, "text/plain": "VBox()"}}  # fmt: skip
    assert "interactive widget" in outputs_html([widget], demo=True, written=written)
    error = {"output_type": "error", "ename": "NotImplementedError", "evalue": "x", "traceback": []}
    assert "NotImplementedError: x" in outputs_html([error], demo=True, written=written)
    assert "not built yet" in outputs_html(None, demo=True, written=written)
    assert outputs_html(None, demo=False, written=written) == ""
    (tmp_path / "cd" / "cd34.json").parent.mkdir()
    (tmp_path / "cd" / "cd34.json").write_text("{damaged")
    assert cache.get("cd34") is None and cache.missing(["ab12", "cd34"]) == ["cd34"]


def test_launch_links_add_the_hub_only_when_named():
    publication = built_site().publication
    kinds = [link.kind for link in launch_links(publication, "01_accumulation")]
    assert kinds == ["colab", "binder"]
    links = launch_links(publication, "01_accumulation", HUB)
    assert links[2].url == nbgitpuller_link(HUB, "01_accumulation")
    assert links[1].url.endswith("?labpath=exercises%2F01_accumulation.ipynb")


# a template address of the test's own (the real one is written only in course.py)
TEMPLATE = "template-owner/template-course"


def test_the_command_warns_when_the_buttons_open_the_template(monkeypatch):
    from coursekit.commands.site import placeholder_note

    monkeypatch.setattr(course, "PLACEHOLDER_REPOSITORY", TEMPLATE)
    assert "template's placeholder" in placeholder_note(TEMPLATE.swapcase())
    assert placeholder_note("ada-lab/grad-accum") is None
    assert built_site().report.repository == built_site().publication.repository
    monkeypatch.setattr(course, "PLACEHOLDER_REPOSITORY", None)  # a course with none declared
    assert placeholder_note(TEMPLATE) is None


def test_the_site_never_replaces_a_folder_it_did_not_build(tmp_path):
    mine = tmp_path / "notes"
    mine.mkdir()
    (mine / "keep.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="not a site coursekit built"):
        build_site(REPO, mine, cache_dir=tmp_path / "c", run_notebooks=False,
                   certificates_dir=tmp_path, progress=lambda text: None)  # fmt: skip
    assert (mine / "keep.txt").read_text() == "mine"
    assert (built_site().out / MARKER).is_file()


def test_the_command_reports_bad_input_with_a_reason(tmp_path, capsys):
    mine = tmp_path / "notes"
    mine.mkdir()
    (mine / "keep.txt").write_text("mine")
    status = main(["site", "--out", str(mine), "--root", str(REPO), "--no-execute",
                   "--cache", str(tmp_path / "c"), "--certificates", str(tmp_path)])  # fmt: skip
    assert status == 2
    assert "is not a site coursekit built" in capsys.readouterr().err
    status = main(["site", "--out", str(tmp_path / "new"), "--root", str(REPO), "--hub", "hub",
                   "--no-execute", "--cache", str(tmp_path / "c")])  # fmt: skip
    assert status == 2 and "is not a hub address" in capsys.readouterr().err
    assert not (tmp_path / "new").exists() and (mine / "keep.txt").read_text() == "mine"


def test_a_run_that_stops_keeps_the_cells_before_it_and_nothing_after(tmp_path):
    """One small kernel run: the first cell's output is stored, the kernel then dies, and the
    cell after it stays out of the cache (it would be run again, not shown as empty)."""
    cells = ["print('ran', 6 * 7)", "import os\nos._exit(3)", "print('never')"]
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3"}
    cache = OutputCache(tmp_path)
    with pytest.raises(Exception, match="(?i)dead|died|kernel"):
        execute("tiny", notebook, cache)
    keys = cell_keys("tiny", notebook)
    assert cache.get(keys[0])[0]["text"] == "ran 42\n"
    assert cache.get(keys[2]) is None
