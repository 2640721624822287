"""Provenance of objects that are not called: an import finder added to ``sys.meta_path``,
or data of the notebook's own class bound into a library callable.

A ``six`` finder, added when a library imports ``six``, is the library's doing and must not
flag an honest hand-in; an object of a class the notebook defined runs the notebook's code
through its special methods (``partial(operator.setitem, Evil())`` as a global hook), so it
is the notebook's, even where it is handed over as data.
"""

from __future__ import annotations

import functools
import operator
import os

import pytest
import torch

from coursekit.grading.sandbox.harness_seal import library_hook
from coursekit.grading.sandbox.provenance import Provenance

pytestmark = pytest.mark.grading


@pytest.fixture(scope="module")
def provenance():
    """Library code as the warm parent records it: torch's and the standard library's
    folders, and site-packages (where six lives), sealed before any cell below runs."""
    site = os.path.dirname(os.path.dirname(torch.__file__)) + "/"
    record = Provenance((site, os.path.dirname(os.__file__) + "/"))
    record.seal()
    return record


def _notebook(source: str) -> dict:
    namespace = {"__name__": "__main__"}
    exec(compile(source, "<cell>", "exec", dont_inherit=True), namespace)
    return namespace


def test_a_library_finder_on_meta_path_is_the_librarys(provenance):
    six = pytest.importorskip("six")
    finder = next((f for f in __import__("sys").meta_path if type(f).__module__ == "six"), None)
    finder = finder or six._SixMetaPathImporter("six")
    assert library_hook(finder, provenance)


def test_a_finder_of_the_notebooks_own_class_is_not(provenance):
    cell = _notebook(
        "class Finder:\n"
        "    def find_spec(self, name, path, target=None):\n"
        "        return None\n"
        "finder = Finder()\n"
    )
    assert not library_hook(cell["finder"], provenance)


def test_data_of_the_notebooks_class_bound_in_a_partial_is_the_notebooks(provenance):
    cell = _notebook(
        "class Evil(dict):\n    def __setitem__(self, key, value):\n        pass\nevil = Evil()\n"
    )
    hook = functools.partial(operator.setitem, cell["evil"])
    assert not provenance.is_library_callable(hook)
    assert provenance.is_library_callable(functools.partial(operator.setitem, {}))
    assert provenance.is_library_callable(functools.partial(torch.add, other=torch.ones(2)))
