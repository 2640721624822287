"""A workshop on a real JupyterHub, clicked through in headless Chromium as a student would.

The instructor publishes the student copy (``coursekit student-copy``) as a git repository
and prints the links with ``coursekit links --hub ... --repository ...``. A student opens
module 1's link, logs in, and nbgitpuller copies the course into their home and opens the
exercise in JupyterLab; they run the set-up and imports cells, solve the first exercise and
run its ``check(...)``, open the module's quiz (widgets, drawn by the image's JupyterLab
extension), and save. The instructor then commits a fix to the course, the student
clicks the same link again, and the fix arrives while their own work stays.

The hub (tests/helpers/hub.py) is JupyterHub with configurable-http-proxy, a dummy
authenticator and local processes for the students' servers, whose environment is built from
``binder/requirements.txt``; it sets ``NBGITPULLER_PARENTPATH``, as some hubs do, so the copy
lands one folder down and a link that ignored it would open nothing. Screenshots of each step
go to artifacts/browser/hub-*.png; the instructor guide shows them.

Skipped, with the reason, without Debian's chromium, playwright, or the hub's environment
(``./scripts/setup --browser``, run by ``./scripts/test``, installs all three where it can).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

from coursekit.commands.cli import main
from coursekit.commands.launch import NEWS_PLUGIN
from tests.helpers.hub import (
    PASSWORD,
    course_repository,
    git,
    missing_hub_reason,
    processes_of,
    running_hub,
)
from tests.helpers.lab_browser import (
    CHROMIUM,
    CHROMIUM_ARGS,
    VIEWPORT,
    WIDGET_ERROR,
    missing_browser_reason,
)

REASON = missing_browser_reason() or missing_hub_reason()
pytestmark = [
    pytest.mark.browser,
    pytest.mark.hub,
    pytest.mark.skipif(REASON is not None, reason=f"hub test: {REASON}"),
]
REPO = Path(__file__).resolve().parents[1]
ARTIFACTS = REPO / "artifacts" / "browser"
MODULE = "01_accumulation"
STUDENT = "ada"
PARENT = "workshop"  # NBGITPULLER_PARENTPATH on this hub
#: Backstops only: a step on an idle machine takes seconds (the instructor guide's "Times").
STEP_TIMEOUT_MS = 300_000

#: The student's answer to exercise 1.1, typed into its cell (the worked solution).
ANSWER = '''# Question: accumulate_window
def accumulate_window(model, loss_fn, micro_batches):
    """Leave in .grad the mean-loss gradient over all samples of the (equal-sized) micro-batches."""
    accum_steps = len(micro_batches)  # ada's answer
    for inputs, targets in micro_batches:
        loss = loss_fn(model(inputs), targets)
        (loss / accum_steps).backward()'''
#: What the instructor's later commit adds to the module's summary.
FIX = "- Added during the workshop: accumulation changes memory, not the gradient."
FIX_SHOWN = FIX.removeprefix("- ")  # Markdown: a list item


def module_link(hub_url: str, repository: Path, capsys) -> str:
    """Module 1's link, as ``coursekit links`` prints it for this hub and repository."""
    assert main(["links", "--hub", hub_url, "--repository", str(repository)]) == 0
    lines = capsys.readouterr().out.splitlines()
    (index,) = [i for i, line in enumerate(lines) if line.startswith(f"{MODULE}  ")]
    return lines[index + 1].strip()


def cell(page, index: int):
    """The notebook's cell ``index`` in the page (-1: the last)."""
    cells = page.locator(".jp-Notebook .jp-Cell")
    return cells.last if index == -1 else cells.nth(index)


def wait_for_exercise(page, folder: str) -> None:
    """Wait until JupyterLab shows the module's exercise with its kernel started and idle."""
    page.wait_for_url(f"**/lab/tree/{folder}/exercises/{MODULE}.ipynb*", timeout=STEP_TIMEOUT_MS)
    page.wait_for_selector(".jp-NotebookPanel .jp-Cell", timeout=STEP_TIMEOUT_MS)
    page.wait_for_function(
        """() => [...document.querySelectorAll('.jp-StatusBar-Widget, .jp-StatusBar-TextItem')]
                 .some(e => /\\| Idle/.test(e.innerText))""",
        timeout=STEP_TIMEOUT_MS,
    )


def run_cell(page, index: int) -> str:
    """Select cell ``index``, run it with Ctrl+Enter, and return its output's text once done."""
    target = cell(page, index)
    target.locator(".jp-InputPrompt").first.click()
    page.keyboard.press("Control+Enter")
    page.wait_for_function(
        """(i) => {
          const c = document.querySelectorAll('.jp-Notebook .jp-Cell')[i];
          const prompt = c.querySelector('.jp-InputPrompt').innerText;
          return /\\[\\d+\\]/.test(prompt);
        }""",
        arg=index,
        timeout=STEP_TIMEOUT_MS,
    )
    return (
        target.locator(".jp-OutputArea").inner_text()
        if target.locator(".jp-OutputArea").count()
        else ""
    )


def type_answer(page, index: int, text: str) -> None:
    """Replace the code of cell ``index`` as a student would: select all of it and type over.

    ``insert_text`` types the whole answer at once, without the editor's auto-indent and
    bracket closing, which would change what a person pastes.
    """
    cell(page, index).locator(".cm-content").click()
    page.keyboard.press("Control+a")
    page.keyboard.insert_text(text)
    page.keyboard.press("Escape")


def shot(page, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"hub-{name}.png"))


def shot_of(page, target, text: str, name: str) -> None:
    """A screenshot with ``target`` in view, once JupyterLab has drawn its ``text``.

    JupyterLab draws only the cells in view; a screenshot right after scrolling can be blank.
    """
    target.scroll_into_view_if_needed()
    target.get_by_text(text).first.wait_for(state="visible", timeout=STEP_TIMEOUT_MS)
    page.wait_for_timeout(300)  # the rest of the view
    shot(page, name)


def saved_notebook(path: Path, wait_s: float = STEP_TIMEOUT_MS / 1000) -> dict:
    """The notebook on disk once it holds the student's answer (Ctrl+S saves asynchronously)."""
    deadline = time.monotonic() + wait_s
    while True:
        notebook = json.loads(path.read_text())
        if "ada's answer" in "".join(notebook["cells"][10]["source"]) or (
            time.monotonic() > deadline
        ):
            return notebook
        time.sleep(0.2)


def test_a_student_clicks_a_module_link_works_and_gets_the_instructors_fix(tmp_path, capsys):
    from playwright.sync_api import sync_playwright

    repository = course_repository(tmp_path / "grad-accum")
    published = repository / "exercises" / f"{MODULE}.ipynb"
    (quiz,) = [
        i
        for i, c in enumerate(json.loads(published.read_text())["cells"])
        if "".join(c["source"]).startswith(f'coursekit.quiz("{MODULE}")')
    ]
    times = {}
    with running_hub(tmp_path / "hub", {"NBGITPULLER_PARENTPATH": PARENT}) as hub:
        link = module_link(hub.url, repository, capsys)
        query = parse_qs(urlsplit(link).query)
        assert query["repo"] == [str(repository)] and query["targetpath"] == ["grad-accum"]
        folder = f"{PARENT}/grad-accum"
        copy = hub.home(STUDENT) / folder
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=list(CHROMIUM_ARGS))
            page = browser.new_context(viewport=VIEWPORT).new_page()

            # 1. The link asks the student to log in, then starts their server, pulls, opens.
            page.goto(link)
            page.wait_for_selector("#username_input", timeout=STEP_TIMEOUT_MS)
            shot(page, "1-login")
            page.fill("#username_input", STUDENT)
            page.fill("#password_input", PASSWORD)
            start = time.monotonic()
            page.click("#login_submit")
            wait_for_exercise(page, folder)
            times["click to exercise"] = time.monotonic() - start
            assert (copy / "exercises" / f"{MODULE}.ipynb").is_file(), "not where the link opens"
            assert git(copy, "log", "--format=%s") == "The course, as published\n"
            disabled = page.evaluate(
                "() => JSON.parse(document.getElementById('jupyter-config-data').textContent)"
                ".disabledExtensions"
            )
            assert NEWS_PLUGIN in disabled, (
                f"JupyterLab would ask about its news feed: binder/postBuild disables {NEWS_PLUGIN}"
            )
            shot(page, "2-exercise-open")

            # 2. Set-up, parameters and imports cells, as the notebook's first steps say.
            for index in (0, 3, 4):
                output = run_cell(page, index)
                assert "Error" not in output and "Traceback" not in output, output
            # 3. The student answers exercise 1.1 and runs its check, then saves.
            type_answer(page, 10, ANSWER)
            run_cell(page, 10)
            start = time.monotonic()
            verdict = run_cell(page, 11)
            times["check"] = time.monotonic() - start
            assert "[passed] accumulate_window" in verdict, verdict
            shot(page, "3-checked")
            # The module's quiz: ipywidgets, drawn by the image's JupyterLab extension.
            run_cell(page, quiz)
            quiz_cell = cell(page, quiz)
            quiz_cell.locator(".widget-radio-box").first.wait_for(timeout=STEP_TIMEOUT_MS)
            assert page.get_by_text(WIDGET_ERROR).count() == 0
            page.keyboard.press("Control+s")
            notebook = saved_notebook(copy / "exercises" / f"{MODULE}.ipynb")
            assert "ada's answer" in "".join(notebook["cells"][10]["source"]), "not saved"

            # 4. The instructor fixes the module's summary and the README, and pushes.
            source = json.loads(published.read_text())
            summary = source["cells"][-1]
            assert "".join(summary["source"]).startswith("## Summary")
            summary["source"] = "".join(summary["source"]) + "\n" + FIX
            published.write_text(json.dumps(source, indent=1, ensure_ascii=False) + "\n")
            readme = repository / "README.md"
            readme.write_text(readme.read_text() + "\nWorkshop room: B 204.\n")
            git(repository, "commit", "-q", "-am", "A fix during the workshop")

            # 5. The same link again: the fix arrives, the student's work stays.
            start = time.monotonic()
            page.goto(link)
            wait_for_exercise(page, folder)
            times["second click"] = time.monotonic() - start
            page.get_by_text(FIX_SHOWN).first.wait_for(state="attached", timeout=STEP_TIMEOUT_MS)
            assert page.get_by_text("ada's answer").count() == 1, "the answer is not in the page"
            shot_of(page, cell(page, -1), FIX_SHOWN, "4-the-fix-arrived")
            shot_of(page, cell(page, 10), "ada's answer", "5-the-work-kept")
            browser.close()

        merged = json.loads((copy / "exercises" / f"{MODULE}.ipynb").read_text())
        assert "ada's answer" in "".join(merged["cells"][10]["source"]), "the student's work"
        assert FIX in "".join(merged["cells"][-1]["source"]), "the instructor's fix"
        assert (copy / "README.md").read_text().endswith("Workshop room: B 204.\n")
        assert "A fix during the workshop" in git(copy, "log", "--format=%s")
        marker = hub.marker
    print("times (s):", {step: round(seconds, 1) for step, seconds in times.items()})
    assert hub.leftovers == [], f"still running after the hub stopped: {hub.leftovers}"
    assert processes_of(marker) == {}
