"""Every coursekit name a notebook of this or any earlier release uses still resolves; no
public name is also a module's; coursekit's modules import one another without cycles.

Why: notebooks and hand-ins from earlier releases keep circulating (a student's copy, an old
Colab link) while the package's layout changes underneath them. The names are read from the
notebooks themselves (current files and every version in git history), not from a list kept
by hand, so a name a notebook starts to use is guarded from its first release.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import json
import pkgutil
import re
import subprocess
import sys
import types
from pathlib import Path

import pytest

import coursekit
from coursekit.moved import MOVED, MovedModuleFinder
from tests.helpers.git_history import NOTEBOOK_FOLDERS, every_notebook_version
from tests.helpers.hand_ins import REPO

_DOTTED = re.compile(r"coursekit(?:\.\w+)+")
_RUN_MODULE = re.compile(r"-m[\"',\s]+(coursekit(?:\.\w+)+)")


def _cell_sources(notebook: dict) -> list[str]:
    sources = []
    for cell in notebook.get("cells", []):
        if cell.get("cell_type") == "code":
            source = cell.get("source", "")
            sources.append("".join(source) if isinstance(source, list) else source)
    return sources


def _python_of(source: str) -> ast.Module | None:
    """The cell as Python, its IPython lines (``!cmd``, ``%magic``) blanked; None if it is
    not Python (an exercise stub may hold a syntax error on purpose)."""
    lines = ["" if line.lstrip().startswith(("!", "%")) else line for line in source.split("\n")]
    try:
        return ast.parse("\n".join(lines))
    except SyntaxError:
        return None


def names_used(source: str) -> set[tuple[str, str]]:
    """(kind, dotted name) for each coursekit name the cell uses: ``module`` (imported),
    ``name`` (a module and an attribute path), ``run`` (``python -m``)."""
    used = {("run", m) for m in _RUN_MODULE.findall(source)}
    tree = _python_of(source)
    if tree is None:
        return used
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            used |= {("module", a.name) for a in node.names if a.name.startswith("coursekit")}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("coursekit"):
            used |= {("name", f"{node.module}.{a.name}") for a in node.names if a.name != "*"}
        elif isinstance(node, ast.Attribute):
            chain, at = [], node
            while isinstance(at, ast.Attribute):
                chain.append(at.attr)
                at = at.value
            if isinstance(at, ast.Name) and at.id == "coursekit":
                used.add(("name", ".".join(["coursekit", *reversed(chain)])))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if _DOTTED.fullmatch(node.value):  # run_workers("coursekit.workers....run", 2)
                used.add(("name", node.value))
        elif isinstance(node, ast.JoinedStr) and node.values:  # f"coursekit.x.{worker}"
            head = node.values[0]
            if isinstance(head, ast.Constant) and isinstance(head.value, str):
                found = _DOTTED.match(head.value)
                if found and head.value[found.end() :] == ".":
                    used.add(("name", found.group(0)))
    return used


def resolve(dotted: str):
    """The object ``dotted`` names, as Python would reach it: attributes, then submodules."""
    parts = dotted.split(".")
    value = importlib.import_module(parts[0])
    for at, part in enumerate(parts[1:], start=1):
        try:
            value = getattr(value, part)
        except AttributeError:
            value = importlib.import_module(".".join(parts[: at + 1]))
    return value


def _notebooks_now() -> dict[str, dict]:
    found = {}
    for folder in NOTEBOOK_FOLDERS:
        for path in sorted((REPO / folder).glob("*.ipynb")):
            found[str(path.relative_to(REPO))] = json.loads(path.read_text(encoding="utf-8"))
    return found


def _all_names(notebooks: dict[str, dict]) -> dict[tuple[str, str], str]:
    """(kind, name) -> the first notebook that uses it."""
    names: dict[tuple[str, str], str] = {}
    for where, notebook in notebooks.items():
        for source in _cell_sources(notebook):
            for used in names_used(source):
                names.setdefault(used, where)
    return names


def _check(kind: str, name: str):
    if kind == "run":  # what runpy does for python -m NAME (once imported, NAME's own spec)
        spec = importlib.util.find_spec(name)
        assert spec is not None and spec.loader.get_code(spec.name) is not None, name
    elif kind == "module":
        assert isinstance(importlib.import_module(name), types.ModuleType)
    else:
        resolve(name)


NOW = _all_names(_notebooks_now())


def test_the_notebooks_use_many_names_and_the_reader_finds_them():
    # the reader is tested on what it must find: a broken reader would pass everything below
    kinds = {kind for kind, _ in NOW}
    assert kinds == {"module", "name", "run"}, kinds
    assert ("name", "coursekit.workers.distributed.ddp_window_run") in NOW
    assert ("run", "coursekit.workers.torchrun_demo") in NOW
    assert len(NOW) > 100, len(NOW)


@pytest.mark.parametrize("kind, name", sorted(NOW), ids=[f"{k}:{n}" for k, n in sorted(NOW)])
def test_every_name_the_notebooks_use_resolves(kind, name):
    _check(kind, name)


def test_every_name_an_earlier_release_used_resolves():
    versions = every_notebook_version()
    if not versions:
        pytest.skip("needs the course's git history")
    names = _all_names(versions)
    assert ("name", "coursekit.distributed_workers.ddp_window_run") in names  # an old name
    broken = []
    for (kind, name), where in sorted(names.items()):
        try:
            _check(kind, name)
        except Exception as error:  # noqa: BLE001  (each broken name is listed)
            broken.append(f"{kind} {name} (blob {where}): {type(error).__name__}: {error}")
    assert not broken, "\n".join(broken)


def test_the_reader_sees_each_way_a_cell_names_coursekit():
    cell = (
        "import coursekit.plots\nfrom coursekit.zero import communication_formula as f\n"
        "coursekit.plots.plot_lines(1)\nrun_workers('coursekit.workers.zero_no_sync.run', 2)\n"
        "!torchrun --standalone -m coursekit.workers.torchrun_demo\n"
        "x = f'coursekit.workers.frameworks.{name}'\n"
    )
    assert names_used(cell) == {
        ("module", "coursekit.plots"),
        ("name", "coursekit.zero.communication_formula"),
        ("name", "coursekit.plots.plot_lines"),
        ("name", "coursekit.plots"),  # the chain's inner attribute, checked on its own too
        ("name", "coursekit.workers.zero_no_sync.run"),
        ("run", "coursekit.workers.torchrun_demo"),
        ("name", "coursekit.workers.frameworks"),
    }
    with pytest.raises((AttributeError, ImportError)):
        resolve("coursekit.workers.distributed.no_such_function")


@pytest.mark.parametrize("old", sorted(MOVED))
def test_an_old_module_name_is_the_moved_module_itself(old):
    module = importlib.import_module(old)
    assert module is importlib.import_module(MOVED[old])
    assert module.__spec__.name == MOVED[old] and module.__name__ == MOVED[old]
    # python -m OLD in a fresh process: runpy asks the finder's loader for OLD's code
    assert MovedModuleFinder().find_spec(old).loader.get_code(old) is not None


def test_python_dash_m_runs_a_module_by_its_old_name():
    done = subprocess.run(
        [sys.executable, "-m", "coursekit.torchrun_demo", "--help"],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert done.returncode == 0, done.stderr
    assert "torchrun" in done.stdout or "--device" in done.stdout


def _every_module() -> list[str]:
    names = ["coursekit"]
    for info in pkgutil.walk_packages(coursekit.__path__, "coursekit."):
        names.append(info.name)
    return names


def test_no_exported_name_is_shadowed_by_a_module_once_every_module_is_imported():
    # the grader's warm parent imports modules ahead of a hand-in: importing a submodule sets
    # the package attribute of its name, which would replace an exported function of that name
    for name in _every_module():
        importlib.import_module(name)
    for old in MOVED:
        importlib.import_module(old)
    for name in coursekit.__all__:
        value = getattr(coursekit, name)
        assert not isinstance(value, types.ModuleType), f"coursekit.{name} is a module"
        assert value is getattr(importlib.import_module(coursekit._EXPORTS[name]), name)
    top_level = {name.split(".")[1] for name in _every_module()[1:]}
    top_level |= {old.split(".")[1] for old in MOVED}
    assert not top_level & set(coursekit.__all__), top_level & set(coursekit.__all__)


def _imports_of(path: Path, module: str, is_package: bool, known: set[str]) -> set[str]:
    """The coursekit modules ``module`` imports, anywhere in it (functions too)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = module if is_package else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            for alias in node.names:
                found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base)
    return {name for name in found if name in known and name != module}


def test_coursekit_has_no_import_cycles():
    root = Path(coursekit.__file__).parent
    modules: dict[str, tuple[Path, bool]] = {}
    for path in root.rglob("*.py"):
        parts = path.relative_to(root.parent).with_suffix("").parts
        is_package = parts[-1] == "__init__"
        name = ".".join(parts[:-1] if is_package else parts)
        modules[name] = (path, is_package)
    graph = {m: _imports_of(p, m, pkg, set(modules)) for m, (p, pkg) in modules.items()}
    # a package's __init__ importing its own submodules, which import siblings through the
    # package, is how packages are built: only cycles between modules count
    cycles = [c for c in _strongly_connected(graph) if len(c) > 1]
    assert not cycles, cycles


def _strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm, iterative."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    found.append(sorted(component))
    return found
