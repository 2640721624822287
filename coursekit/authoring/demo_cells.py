"""Demonstration cells: cells that show, plot or check, and that grading does not need.

An author tags such a cell ``demo`` in ``notebooks/`` (``coursekit build`` keeps the tag).
The grader skips a hand-in's demo cell only while it is exactly as released (same cell id,
same source as this release or an earlier one, see ``released_demos``) and no cell that does
run uses a name it defines; every other cell runs. So a demo cell must define nothing a graded
cell needs: ``build --check`` refuses one that does.

Names are read from the code (``ast``, after IPython's own rewriting of magics). Where a cell
could reach names in ways the code does not show (``eval``, ``exec``, ``globals()``, ``import
__main__``, ``sys.modules["__main__"]``, ``get_ipython().user_ns``...), it is taken to need
every name, and no demo cell is skipped; ``from __main__ import a`` reads ``a``.
"""

from __future__ import annotations

import ast
import builtins
import functools
import hashlib
import re
import symtable
from collections.abc import Collection, Mapping

DEMO_TAG = "demo"
# Ways to reach the notebook's names that the code does not show by name.
_DYNAMIC = {"eval", "exec", "globals", "locals", "vars", "__import__", "__main__"}
_DYNAMIC |= {"__builtins__"}  # __builtins__.globals(), __builtins__.eval(...)
_DYNAMIC_ATTRIBUTES = {"__dict__", "f_globals", "__globals__", "_getframe", "f_back", "f_locals"}
# IPython's shell holds the namespace (get_ipython().user_ns, IPython.get_ipython()...), the
# garbage collector reaches every object (its dict included), dill pickles the namespace.
_DYNAMIC_ATTRIBUTES |= {"user_ns", "user_global_ns", "user_module", "ns_table", "all_ns_refs"}
_DYNAMIC_ATTRIBUTES |= {"get_ipython", "__import__", "get_objects", "get_referrers"}
_DYNAMIC_ATTRIBUTES |= {"dump_session", "load_session", "dump_module"}
# The notebook's namespace is the module __main__: `import __main__`, sys.modules["__main__"],
# importlib.import_module("__main__")... `from __main__ import a` reads a, and only a.
_MAIN = "__main__"
# Magics that read, clear or run code in the whole namespace: %who(s), %who_ls, %store, %run.
_NAMESPACE_MAGICS = {"who", "whos", "who_ls", "store", "run", "reset", "xdel"}
_MAGICS = {"run_line_magic", "run_cell_magic"}  # IPython's rewriting of %line and %%cell
_SHELL = {"system", "getoutput"}  # !command: runs no Python
EVERYTHING = None  # what names_used returns when it cannot tell


def _tree(source: str) -> ast.Module | None:
    try:
        from IPython.core.inputtransformer2 import TransformerManager

        source = TransformerManager().transform_cell(source)
    except Exception:  # noqa: BLE001 - IPython missing or its rewriting failed: plain Python
        pass
    try:
        return ast.parse(source)
    except (SyntaxError, ValueError):
        return None


def names_defined(source: str) -> set[str]:
    """Names a cell binds in the notebook's namespace (assignments, defs, classes, imports,
    loop and with targets, ``global`` names a function assigns), not its functions' locals."""
    return set(_names_defined(source))


# Reading a cell's names parses it (IPython's rewriting, ast, symtable): milliseconds a cell.
# The grader asks for every cell of every hand-in, most of them as released, so the answers
# are kept by source text (they depend on nothing else), a bounded number of them.
@functools.lru_cache(maxsize=1024)
def _names_defined(source: str) -> frozenset[str]:
    tree = _tree(source)
    return frozenset() if tree is None else frozenset(_bound(tree))


def _table(tree: ast.Module):
    try:
        return symtable.symtable(ast.unparse(tree), "<cell>", "exec")
    except (SyntaxError, ValueError, RecursionError):
        return None


def _bound(tree: ast.Module) -> set[str]:
    table = _table(tree)
    if table is None:
        return set()
    found = {
        symbol.get_name()
        for symbol in table.get_symbols()
        if symbol.is_assigned() or symbol.is_imported() or symbol.is_namespace()
    }
    scopes = list(table.get_children())
    while scopes:
        scope = scopes.pop()
        found |= {
            symbol.get_name()
            for symbol in scope.get_symbols()
            if symbol.is_declared_global() and symbol.is_assigned()
        }
        scopes.extend(scope.get_children())
    return found


def names_used(source: str) -> set[str] | None:
    """Every name a cell reads, anywhere in it (functions included: they run later), or
    :data:`EVERYTHING` (None) when it could reach names the code does not show."""
    used = _names_used(source)
    return EVERYTHING if used is EVERYTHING else set(used)


@functools.lru_cache(maxsize=1024)
def _names_used(source: str) -> frozenset[str] | None:
    tree = _tree(source)
    if tree is None:
        return frozenset()  # a cell that does not parse raises before it uses anything
    used: set[str] = set()
    bound: set[str] = set()
    for statement in tree.body:  # a name bound by an earlier statement is the cell's own
        alone = ast.Module(body=[statement], type_ignores=[])
        used |= _globals_read(alone) - bound
        bound |= _bound(alone)
    if _reaches_the_namespace(tree):
        return EVERYTHING
    used |= _read_from_main(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _calls_the_shell(node):
            strings = [a.value for a in node.args[1:] if isinstance(a, ast.Constant)]
            if node.func.attr in _MAGICS and _magic_name(node) in _NAMESPACE_MAGICS:
                return EVERYTHING
            if node.func.attr in _MAGICS:  # %time f(x): the magic's line is code too
                for text in strings:
                    inner = names_used(text) if isinstance(text, str) else set()
                    if inner is EVERYTHING:
                        return EVERYTHING
                    used |= inner
        elif isinstance(node, ast.Name) and node.id == "get_ipython":
            if not _is_shell_call(tree, node):
                return EVERYTHING
        elif isinstance(node, ast.Attribute) and node.attr in _DYNAMIC_ATTRIBUTES | _MAGICS:
            if not (node.attr in _MAGICS and _is_shell_attribute(tree, node)):
                return EVERYTHING
    if used & _DYNAMIC:
        return EVERYTHING
    return frozenset(used - set(dir(builtins)) - {"get_ipython"})


def _read_from_main(tree: ast.Module) -> set[str]:
    """The names ``from __main__ import a, b as c`` reads (a and b), anywhere in the cell."""
    return {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module == _MAIN
        for alias in node.names
    }


def _reaches_the_namespace(tree: ast.Module) -> bool:
    """Does the cell reach the notebook's namespace as a whole, not name by name?

    ``import __main__`` (``as m`` too), ``from __main__ import *``, the string ``"__main__"``
    anywhere but in ``__name__ == "__main__"`` (``sys.modules["__main__"]``,
    ``sys.modules.get("__main__")``, ``importlib.import_module("__main__")``,
    ``__import__("__main__")``, ``vars(sys.modules["__main__"])``...), ``sys.modules`` itself
    (``os.sys.modules``, ``from sys import modules``), ``import_module`` of a name the code
    does not show, ``builtins.globals()`` and the like, ``getattr(x, "__dict__")`` and the
    like, and ``dir()`` of nothing (the namespace's names).
    """
    sys_names = {"sys"} | _aliases(tree, "sys")  # import sys as s, from os import sys as s
    builtins_names = {"builtins", "__builtins__"} | _aliases(tree, "builtins")
    name_checks = _name_is_main_constants(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            if any(_is_main(alias.name) for alias in node.names):
                return True
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            module = node.module or ""
            for alias in node.names:
                if _is_main(module) and (alias.name == "*" or module != _MAIN):
                    return True
                if module == "sys" and alias.name == "modules":
                    return True
                if module == "builtins" and alias.name in _DYNAMIC:
                    return True
                if alias.name in _DYNAMIC_ATTRIBUTES:  # from sys import _getframe...
                    return True
                if alias.name == "get_ipython" and alias.asname not in (None, "get_ipython"):
                    return True
        elif isinstance(node, ast.Constant) and node.value == _MAIN:
            if id(node) not in name_checks:
                return True
        elif isinstance(node, ast.Attribute):
            if node.attr == "modules" and _is_sys(node.value, sys_names):
                return True
            if node.attr in _DYNAMIC and _names(node.value, builtins_names):
                return True
        elif isinstance(node, ast.Call):
            if _called(node, "import_module") and not _constant_string_first(node):
                return True
            if _called(node, "getattr", "attrgetter") and any(
                isinstance(a, ast.Constant) and a.value in _DYNAMIC_ATTRIBUTES | {"modules"}
                for a in node.args
            ):
                return True
            if _called(node, "dir") and not node.args:
                return True
    return False


def _aliases(tree: ast.Module, module: str) -> set[str]:
    """Names the cell binds to ``module``: ``import sys as s``, ``from os import sys as s``."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.asname or a.name for a in node.names if a.name == module}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module == "os":
            found |= {a.asname or a.name for a in node.names if a.name == module}
    return found


def _is_main(module: str) -> bool:
    return module == _MAIN or module.startswith(_MAIN + ".")


def _name_is_main_constants(tree: ast.Module) -> set[int]:
    """The ``"__main__"`` constants of ``__name__ == "__main__"`` tests, which read nothing."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and len(node.comparators) == 1:
            sides = [node.left, node.comparators[0]]
            if any(isinstance(side, ast.Name) and side.id == "__name__" for side in sides):
                found |= {id(side) for side in sides if isinstance(side, ast.Constant)}
    return found


def _names(node: ast.expr, names: set[str]) -> bool:
    return isinstance(node, ast.Name) and node.id in names


def _is_sys(node: ast.expr, sys_names: set[str]) -> bool:
    """Is ``node`` (the ``x`` of ``x.modules``) the module sys, as far as the code shows?
    ``sys`` or its alias, ``os.sys``, or anything a call returns (``import_module("sys")``);
    not ``torch.nn`` (``torch.nn.modules`` is a package)."""
    if isinstance(node, ast.Name):
        return node.id in sys_names
    if isinstance(node, ast.Attribute):
        return node.attr == "sys"
    return isinstance(node, ast.Call)


def _called(node: ast.Call, *names: str) -> bool:
    func = node.func
    return (isinstance(func, ast.Name) and func.id in names) or (
        isinstance(func, ast.Attribute) and func.attr in names
    )


def _constant_string_first(node: ast.Call) -> bool:
    return (
        bool(node.args)
        and isinstance(node.args[0], ast.Constant)
        and (isinstance(node.args[0].value, str))
    )


def _magic_name(node: ast.Call) -> str | None:
    first = node.args[0] if node.args else None
    return first.value if isinstance(first, ast.Constant) else None


def _globals_read(tree: ast.Module) -> set[str]:
    """Names read from the notebook's namespace, at top level or from inside functions
    and classes (a function's parameters and locals are its own)."""
    table = _table(tree)
    if table is None:
        return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}  # every name: safe
    found: set[str] = set()
    tables = [table]
    while tables:
        scope = tables.pop()
        top = scope.get_type() == "module"
        for symbol in scope.get_symbols():
            if symbol.is_referenced() and (top or symbol.is_global()):
                found.add(symbol.get_name())
        tables.extend(scope.get_children())
    return found


def _calls_the_shell(node: ast.Call) -> bool:
    """``get_ipython().run_line_magic(...)`` and the like, as IPython rewrites magics."""
    func = node.func
    return (
        isinstance(func, ast.Attribute)
        and func.attr in _MAGICS | _SHELL
        and isinstance(func.value, ast.Call)
        and isinstance(func.value.func, ast.Name)
        and func.value.func.id == "get_ipython"
    )


def _is_shell_attribute(tree: ast.Module, attribute: ast.Attribute) -> bool:
    return any(
        isinstance(node, ast.Call) and node.func is attribute and _calls_the_shell(node)
        for node in ast.walk(tree)
    )


def _is_shell_call(tree: ast.Module, name: ast.Name) -> bool:
    """Is this ``get_ipython`` only the start of a magic's or a shell command's call?"""
    return any(
        isinstance(node, ast.Call) and _calls_the_shell(node) and node.func.value.func is name
        for node in ast.walk(tree)
    )


def released_demos(notebook) -> dict[str, str]:
    """Cell id -> source of the notebook's code cells tagged ``demo``."""
    demos = {}
    for cell in notebook.get("cells", []):
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        tags = (cell.get("metadata") or {}).get("tags") or []
        if DEMO_TAG in tags and isinstance(cell.get("id"), str):
            demos[cell["id"]] = _text(cell.get("source", ""))
    return demos


def source_sha256(source: str) -> str:
    """The hex sha256 of a cell's source text (UTF-8), as ``released-demos.json`` holds it."""
    return hashlib.sha256(source.encode("utf-8", "surrogatepass")).hexdigest()


def _text(source) -> str:
    if isinstance(source, list):
        return "".join(str(part) for part in source)
    return source if isinstance(source, str) else ""


def skippable(
    cells: list[tuple[str | None, str]],
    demos: dict[str, str],
    earlier: Mapping[str, Collection[str]] | None = None,
) -> set[int]:
    """Indexes of ``cells`` ((cell id, source) of a hand-in's code cells) that grading may
    skip: demo cells left exactly as released whose names no running cell uses.

    ``demos`` are the current release's demo cells (id -> source); ``earlier`` the sha256 of
    each source any release gave a demo cell (id -> hashes, from ``released-demos.json``), so
    a hand-in made from an earlier release skips its demonstrations too.
    """
    earlier = earlier or {}

    def released(cell_id: str, source: str) -> bool:
        if demos.get(cell_id) == source:
            return True
        hashes = earlier.get(cell_id)
        return bool(hashes) and source_sha256(source) in hashes

    skip = {
        index
        for index, (cell_id, source) in enumerate(cells)
        if cell_id is not None
        and released(cell_id, source)
        and changes_global_state(source) is None
        and names_used(source) is not EVERYTHING
    }
    while skip:
        needed: set[str] = set()
        for index, (_, source) in enumerate(cells):
            if index in skip:
                continue
            used = names_used(source)
            if used is EVERYTHING:
                return set()
            needed |= used
        keep = {index for index in skip if names_defined(cells[index][1]) & needed}
        if not keep:
            return skip
        skip -= keep
    return skip


# What a demo cell may not do: change state that outlives it other than by the names it
# defines (grading skips it, so code that runs after it would see another world there).
_GLOBAL_STATE = re.compile(
    r"set_default_(dtype|device|tensor_type)|set_grad_enabled\(|use_deterministic_algorithms"
    r"|set_num_threads|set_flush_denormal|\bos\.environ|\bos\.(chdir|putenv)|\bsys\.(path|modules)"
    r"|\bimport\s+\*|\bglobals\(|\bexec\(|\bsetattr\(|\bbuiltins\b|%run\b"
)


def changes_global_state(source: str) -> str | None:
    """What a cell does that grading could not undo by skipping it (None: nothing seen)."""
    found = _GLOBAL_STATE.search(source)
    return found.group(0) if found else None


def demo_problems(notebook) -> list[tuple[str, str]]:
    """(cell id, why) for each demo cell that defines a name a cell grading runs needs
    (a graded question, the imports, the set-up), or that changes state beyond its names
    (default dtype, environment, imports by star...): grading skips demo cells, so the
    graded code would see another world there than in the notebook."""
    code = [c for c in notebook.get("cells", []) if c.get("cell_type") == "code"]
    demos = [c for c in code if DEMO_TAG in (c.get("metadata") or {}).get("tags", [])]
    needed: dict[str, str] = {}
    for cell in code:
        if cell in demos:
            continue
        used = names_used(_text(cell.get("source", "")))
        if used is EVERYTHING:
            return [(str(cell.get("id")), "it reads names dynamically (eval, globals()...)")]
        for name in used:
            needed.setdefault(name, str(cell.get("id")))
    problems = []
    for cell in demos:
        change = changes_global_state(_text(cell.get("source", "")))
        if change:
            problems.append(
                (str(cell.get("id")), f"it is tagged {DEMO_TAG} but changes state ({change})")
            )
            continue
        clash = sorted(names_defined(_text(cell.get("source", ""))) & set(needed))
        if clash:
            users = ", ".join(f"{name} (used by cell {needed[name]})" for name in clash)
            problems.append((str(cell.get("id")), f"it is tagged {DEMO_TAG} but defines {users}"))
    return problems
