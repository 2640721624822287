"""Coursekit's answers by other names: every coursekit function that passes a question's
public checks when a notebook's function calls it with the question's own arguments, by
name, and whether the grader's tripwires report that call under the question.

Run as a program (``python -m tests.helpers.answer_routes``; it prints one JSON line per
route found): it wraps coursekit's answers as the warm parent does, which changes coursekit's
modules for the rest of the process, so a test runs it in a process of its own.
"""

from __future__ import annotations

import contextlib
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
        return candidate(**{name: bound.arguments[name] for name in passed})
    finally:
        inside.pop()
"""


def passed_names(signature: inspect.Signature, candidate) -> list[str] | None:
    """The question's arguments ``candidate`` takes by name, or None where it needs one the
    question does not have (read before the tripwires are made: theirs is ``*args``)."""
    try:
        parameters = inspect.signature(candidate).parameters.values()
    except (TypeError, ValueError):
        return None
    named = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    required = [p.name for p in parameters if p.default is p.empty and p.kind in named]
    if not required or any(p.kind is p.POSITIONAL_ONLY for p in parameters):
        return None
    if any(name not in signature.parameters for name in required):
        return None
    return [p.name for p in parameters if p.kind in named and p.name in signature.parameters]


def adapter(
    signature: inspect.Signature, where: str, passed: list[str], inside: list
) -> types.FunctionType:
    """The notebook's answer that calls the function at ``where`` (``module.name``, looked up
    now: the tripwire, where one wraps it) with the question's arguments by name; ``inside``
    is not empty while it does."""
    module, _, name = where.rpartition(".")
    namespace = {"signature": signature, "candidate": getattr(sys.modules[module], name)}
    namespace.update(passed=passed, inside=inside)
    exec(compile(_ADAPTER, "<a student's notebook>", "exec"), namespace)
    return namespace["answer"]


def main() -> None:
    warnings.simplefilter("ignore")
    from coursekit.checks.registry import QUESTIONS, evaluate
    from coursekit.checks.result import Status
    from coursekit.grading.sandbox import tampering
    from coursekit.grading.sandbox.provenance import Provenance, made_private

    signatures = stub_signatures()
    calls = [
        (question, where, passed)
        for question, signature in signatures.items()
        for where, candidate in candidates()
        if (passed := passed_names(signature, candidate)) is not None
    ]
    record = made_private(Provenance())
    record.seal()
    judge = tampering.install_tripwires(QUESTIONS, record)
    # what the tripwires report while the notebook's function runs (the checks' own calls
    # of their references, made after it, are not the notebook's)
    reports: list = []
    inside: list = []
    judge(("reporter", lambda call: reports.append(call[0]) if inside else None))
    for question, where, passed in calls:
        answer = adapter(signatures[question], where, passed, inside)
        reports.clear()
        quiet = io.StringIO()
        with contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet):
            verdict = evaluate(question, answer)
        if verdict.status is Status.PASSED:
            route = {"question": question, "route": where, "reported": question in reports}
            print(json.dumps(route), flush=True)


if __name__ == "__main__":
    main()
