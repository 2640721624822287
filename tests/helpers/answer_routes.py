"""Coursekit's answers by other names: every coursekit function that passes a question's
public checks when a notebook's function calls it with the question's own arguments, by
name (one more argument it requires given ``False``; what it returns read through its
``as_dict()`` where that passes and the object does not), and whether the grader's
tripwires report that call as the runner counts it (``runner.counted``). Also every
unwatched answer a coursekit function or class still holds after the tripwires are made
(a default, a closure cell), which any cell could read.

Run as a program (``python -m tests.helpers.answer_routes``; it prints one JSON line per
route found): it wraps coursekit's answers as the warm parent does, which changes coursekit's
modules for the rest of the process, so a test runs it in a process of its own.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import inspect
import io
import json
import pkgutil
import re
import sys
import types
import warnings
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# packages with no answer in them (the grader, the course's build, the command line...)
SKIP = tuple(
    f"coursekit.{name}"
    for name in ("grading", "authoring", "commands", "site", "gpu_check", "colab_check")
)


def stub_signatures() -> dict[str, inspect.Signature]:
    """Each graded question's signature, from its stub in the student notebooks."""
    signatures = {}
    for path in sorted((REPO / "exercises").glob("*.ipynb")):
        for cell in json.loads(path.read_text())["cells"]:
            source = "".join(cell["source"])
            if cell["cell_type"] == "code" and source.startswith("# Question:"):
                name = source.split("\n", 1)[0].split(":", 1)[1].strip()
                namespace: dict = {}
                exec(re.sub(r"raise NotImplementedError.*", "pass", source), namespace)
                signatures[name] = inspect.signature(namespace[name])
    return signatures


def candidates() -> list[tuple[str, types.FunctionType]]:
    """Every function of coursekit's modules (module attributes: tripwires where wrapped)."""
    for info in pkgutil.walk_packages(importlib.import_module("coursekit").__path__, "coursekit."):
        if not info.name.startswith(SKIP):
            importlib.import_module(info.name)
    found: dict[int, tuple[str, types.FunctionType]] = {}
    for name, module in sorted(sys.modules.items()):
        if name.startswith("coursekit") and not name.startswith(SKIP):
            for attribute, value in vars(module).items():
                if type(value) is types.FunctionType and str(value.__module__).startswith(
                    "coursekit"
                ):
                    found.setdefault(id(value), (f"{name}.{attribute}", value))
    return list(found.values())


# the notebook's function: code of no library's, calling the candidate with the question's
# arguments by name
_ADAPTER = """
def answer(*args, **kwargs):
    bound = signature.bind(*args, **kwargs)
    bound.apply_defaults()
    inside.append(True)
    try:
        given = {name: bound.arguments[name] for name in passed}
        result = candidate(**given, **filled)
    finally:
        inside.pop()
    structured.append(callable(getattr(result, "as_dict", None)))
    return result.as_dict() if as_dict else result
"""


# what one more required argument is given, in turn (a flag; an empty spec or options)
FILLERS = (False, {})


def call_plans(signature: inspect.Signature, candidate) -> list[tuple[list[str], dict]]:
    """``(the question's arguments candidate takes by name, the one more it requires, given
    each of FILLERS)``; none where it needs more (read before the tripwires are made: theirs
    is ``*args``)."""
    try:
        parameters = inspect.signature(candidate).parameters.values()
    except (TypeError, ValueError):
        return None
    named = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    required = [p.name for p in parameters if p.default is p.empty and p.kind in named]
    if not required or any(p.kind is p.POSITIONAL_ONLY for p in parameters):
        return []
    extra = [name for name in required if name not in signature.parameters]
    if len(extra) > 1 or len(extra) == len(required):
        return []
    passed = [p.name for p in parameters if p.kind in named and p.name in signature.parameters]
    return [(passed, dict.fromkeys(extra, filler)) for filler in (FILLERS if extra else (0,))]


def adapter(
    signature: inspect.Signature,
    where: str,
    plan: tuple,
    inside: list,
    as_dict: bool,
    structured: list,
) -> types.FunctionType:
    """The notebook's answer that calls the function at ``where`` (``module.name``, looked up
    now: the tripwire, where one wraps it) as ``plan`` says; ``inside`` is not empty while
    it does; ``structured`` says, call by call, whether what it returned has an
    ``as_dict()``."""
    module, _, name = where.rpartition(".")
    namespace = {"signature": signature, "candidate": getattr(sys.modules[module], name)}
    namespace.update(passed=plan[0], filled=plan[1], inside=inside, as_dict=as_dict)
    namespace["structured"] = structured
    exec(compile(_ADAPTER, "<a student's notebook>", "exec"), namespace)
    return namespace["answer"]


def held_originals(originals) -> list[str]:
    """Where a coursekit function's defaults or closure cells, or a class's attributes,
    still hold an answer a tripwire wraps (``originals``: ids)."""
    from coursekit.grading.sandbox.tampering import _functions_of

    modules = [m for n, m in list(sys.modules.items()) if n.startswith("coursekit")]
    found = []
    for function in _functions_of(modules):
        held = [*(function.__defaults__ or ()), *(function.__kwdefaults__ or {}).values()]
        for cell in function.__closure__ or ():
            try:
                held.append(cell.cell_contents)
            except ValueError:
                continue
        if any(id(value) in originals for value in held):
            found.append(f"{function.__module__}.{function.__qualname__}")
    for module in modules:
        for value in list(vars(module).values()):
            if isinstance(value, type) and value.__module__ == module.__name__:
                for key, member in list(vars(value).items()):
                    member = getattr(member, "__func__", member)
                    if id(member) in originals:
                        found.append(f"{module.__name__}.{value.__qualname__}.{key}")
    return found


def main() -> None:
    warnings.simplefilter("ignore")
    from coursekit.checks.registry import QUESTIONS
    from coursekit.grading.sandbox import tampering
    from coursekit.grading.sandbox.provenance import Provenance, made_private

    signatures = stub_signatures()
    calls = [
        (question, where, plans)
        for question, signature in signatures.items()
        for where, candidate in candidates()
        if (plans := call_plans(signature, candidate))
    ]
    record = made_private(Provenance())
    record.seal()
    judge = tampering.install_tripwires(QUESTIONS, record)
    for where in held_originals(tampering._ORIGINALS):
        print(json.dumps({"held": where}), flush=True)
    # what the tripwires report while the notebook's function runs (the checks' own calls
    # of their references, made after it, are not the notebook's)
    reports: list = []
    inside: list = []
    judge(("reporter", lambda call: reports.append(call) if inside else None))
    modules = {name: question.module for name, question in QUESTIONS.items()}
    for question, where, plans in calls:
        for plan in plans:
            answer = functools.partial(adapter, signatures[question], where, plan, inside)
            if _passes(question, answer, where, reports, modules):
                break


def _passes(question: str, answer, where: str, reports: list, modules: dict) -> bool:
    """Whether the notebook's function ``answer(as_dict, structured)`` makes passes
    ``question``'s public checks, what it returns read as it is or through ``as_dict()``; a
    line is printed for a route, saying whether the runner counts the call
    (``runner.counted``)."""
    from coursekit.checks.registry import evaluate
    from coursekit.checks.result import Status
    from coursekit.grading.sandbox.runner import counted

    structured: list = []
    for as_dict in (False, True):
        reports.clear()
        quiet = io.StringIO()
        with contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet):
            try:
                verdict = evaluate(question, answer(as_dict, structured))
            except Exception:  # noqa: BLE001 - a candidate that breaks the check: no route
                return False
        if verdict.status is Status.PASSED:
            reported = any(counted(modules.get(q), modules[question], str(w)) for q, w in reports)
            route = {"question": question, "route": where, "reported": reported}
            print(json.dumps({**route, "as_dict": as_dict}), flush=True)
            return True
        if not any(structured):  # no answer in a structure to read
            return False
    return False


if __name__ == "__main__":
    main()
