"""Loaded before any other plugin (pyproject.toml's addopts: ``-p tests.fast_start``), in every
pytest process of the suite (its test processes, and the pytest runs tests start).

nbval, a plugin, imports nbformat and so jsonschema as pytest starts, and jsonschema then
builds the IRI grammars that no test's schema uses: about 1 to 2 s of CPU a process. So test
processes start as coursekit's own commands do (:mod:`coursekit.commands.quick_start`); the
kernels, JupyterLab and the grader's sandboxes the tests start are left as they are.
"""

from coursekit.commands.quick_start import skip_unused_iri_grammars

skip_unused_iri_grammars()
