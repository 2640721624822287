"""A command's process starts without the IRI grammars no command uses.

``jsonschema``, which ``nbformat`` imports to validate notebooks, imports ``rfc3987_syntax``
wherever it is installed (``jupyter-events`` asks for it, so every JupyterLab install has
it), to check the ``iri`` and ``iri-reference`` formats. That module builds some 38 Earley
parsers with Lark as it is imported: about 1.9 s of CPU in every process that imports
nbformat, measured on this project's machines (python-jsonschema/jsonschema#1428 reports the
same). ``grade`` paid it once per run, the Gradescope bundle once per hand-in.

No schema a coursekit command validates uses those two formats: nbformat's notebook schemas
do not (``tests/test_quick_start.py`` reads them all), and coursekit validates nothing else
with jsonschema. So a command marks the module as absent before anything imports
jsonschema, which then leaves those two formats unchecked, exactly as it does wherever the
module is not installed. Only coursekit's own command processes do this: a notebook's
kernel, JupyterLab and the grader's sandboxes are left as they are.
"""

from __future__ import annotations

import sys


def skip_unused_iri_grammars() -> None:
    """Keep ``rfc3987_syntax`` from being imported in this process (see the module's
    docstring); nothing changes where jsonschema is already imported, or the module too."""
    if "jsonschema" not in sys.modules:
        sys.modules.setdefault("rfc3987_syntax", None)
