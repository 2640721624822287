"""coursekit's commands start without jsonschema's IRI grammars (coursekit/commands/quick_start.py),
and lose nothing by it: no schema they validate uses the formats those grammars check."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

IRI_FORMATS = {"iri", "iri-reference"}


def _formats(schema) -> set[str]:
    """Every value of a ``format`` keyword in a JSON schema (not a property named "format")."""
    found = set()
    if isinstance(schema, dict):
        if isinstance(schema.get("format"), str):
            found.add(schema["format"])
        for key, value in schema.items():
            if key == "properties" and isinstance(value, dict):
                for prop in value.values():  # a property's name is no keyword
                    found |= _formats(prop)
            else:
                found |= _formats(value)
    elif isinstance(schema, list):
        for item in schema:
            found |= _formats(item)
    return found


def test_no_notebook_schema_uses_an_iri_format():
    schemas = sorted(Path(nbformat.__file__).parent.rglob("*.schema.json"))
    assert len(schemas) >= 5, schemas  # every nbformat version's schema was read
    for path in schemas:
        used = _formats(json.loads(path.read_text()))
        assert not used & IRI_FORMATS, f"{path} uses {used & IRI_FORMATS}: quick_start.py is wrong"


def test_the_format_walker_finds_a_format_keyword_and_skips_a_property_named_format():
    schema = {"properties": {"format": {"type": "string"}, "link": {"format": "iri"}}}
    assert _formats(schema) == {"iri"}


def _run(code: str, status: int = 0) -> str:
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == status, done.stderr[-2000:]
    return done.stdout.strip()


@pytest.mark.parametrize(
    ("argv", "status"), [(["coursekit", "--help"], 0), (["coursekit", "no-such-command"], 2)]
)
def test_a_command_run_as_a_program_marks_the_grammars_absent(argv, status):
    code = (  # read as the process ends (a program's main ends it: quick_exit.py)
        "import atexit, sys\n"
        "from coursekit.commands import cli\n"
        "mark = lambda: print(repr(sys.modules.get('rfc3987_syntax', 'absent')))\n"
        "atexit.register(mark)\n"
        f"sys.argv = {argv!r}\n"
        "cli.main()\n"
    )
    assert _run(code, status).splitlines()[-1] == "None"


def test_nbformat_still_validates_with_the_grammars_marked_absent():
    code = (
        "from coursekit.commands.quick_start import skip_unused_iri_grammars\n"
        "skip_unused_iri_grammars()\n"
        "import sys, nbformat\n"
        "nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell('x = 1')])\n"
        "nbformat.validate(nb)\n"
        "nb.cells[0]['cell_type'] = 'not a type'\n"
        "try:\n    nbformat.validate(nb)\nexcept nbformat.ValidationError:\n    print('refused')\n"
        "print(sys.modules['rfc3987_syntax'])\n"
    )
    assert _run(code).splitlines() == ["refused", "None"]


def test_where_jsonschema_is_already_imported_nothing_changes():
    code = (
        "import sys, jsonschema\n"
        "present = 'rfc3987_syntax' in sys.modules\n"
        "before = sys.modules.get('rfc3987_syntax')\n"
        "from coursekit.commands.quick_start import skip_unused_iri_grammars\n"
        "skip_unused_iri_grammars()\n"
        "same = ('rfc3987_syntax' in sys.modules) == present\n"
        "print(sys.modules.get('rfc3987_syntax') is before and same)\n"
    )
    assert _run(code) == "True"


def test_the_gradescope_bundle_marks_them_absent_too():
    code = (
        "import sys\n"
        "from coursekit.commands import gradescope\n"
        "gradescope.start_again_at_the_real_path = lambda *args: None\n"
        "seen = []\n"
        "mark = lambda: sys.modules.get('rfc3987_syntax', 'absent')\n"
        "gradescope.run_autograder = lambda root: seen.append(mark())\n"
        "gradescope.main()\n"
        "print(repr(seen))\n"
    )
    assert _run(code).splitlines()[-1] == "[None]"
