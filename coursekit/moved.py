"""Module names of earlier releases that still import: each moved module answers to both.

Why: notebooks of earlier releases, and hand-ins made from them, name modules that now live in
packages by concern (``run_workers("coursekit.distributed_workers.ddp_window_run", 2)``,
``from coursekit.doctor import diagnose``, ``torchrun ... -m coursekit.torchrun_demo``,
``from coursekit import lm_memory``). A finder
at the end of ``sys.meta_path`` answers each old name with the very module object of its new
name, not a copy: a monkeypatch, a pickle or an ``isinstance`` sees one module whichever name
was used. ``tests/test_module_names.py`` reads every ``coursekit`` import in the notebooks of this
and every earlier release and checks that each resolves.

Two old module names are deliberately absent: ``coursekit.notebook_run`` and ``coursekit.quiz``
are also the names of functions that notebooks call (``coursekit.notebook_run(...)``,
``coursekit.quiz(...)``), and importing a module of the same name would replace the function
on the package. No notebook ever imported them as modules.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import sys

#: old dotted name -> where the module lives now
MOVED = {
    # the commands students and instructors run
    "coursekit.cli": "coursekit.commands.cli",
    "coursekit.class_report": "coursekit.commands.class_report",
    "coursekit.course_index": "coursekit.commands.course_index",
    "coursekit.doctor": "coursekit.commands.doctor",
    "coursekit.gradescope": "coursekit.commands.gradescope",
    "coursekit.hand_in": "coursekit.commands.hand_in",
    "coursekit.hub_links": "coursekit.commands.hub_links",
    "coursekit.launch": "coursekit.commands.launch",
    # the code multi-process demonstrations run in each process
    "coursekit.checkpoint_workers": "coursekit.workers.checkpointing",
    "coursekit.contrastive_workers": "coursekit.workers.contrastive",
    "coursekit.distributed_workers": "coursekit.workers.distributed",
    "coursekit.framework_workers": "coursekit.workers.frameworks",
    "coursekit.fsdp_precision_workers": "coursekit.workers.fsdp_precision",
    "coursekit.noise_scale_workers": "coursekit.workers.noise_scale",
    "coursekit.torchrun_demo": "coursekit.workers.torchrun_demo",
    "coursekit.zero_no_sync_workers": "coursekit.workers.zero_no_sync",
    # module 7's library, one package now (coursekit/real_model/)
    "coursekit.autotune": "coursekit.real_model.tuning",
    "coursekit.autotune_frameworks": "coursekit.real_model.finders",
    "coursekit.autotune_widget": "coursekit.real_model.widget",
    "coursekit.language_model": "coursekit.real_model.language_model",
    "coursekit.lm_data": "coursekit.real_model.data",
    "coursekit.lm_memory": "coursekit.real_model.memory",
    "coursekit.lm_plots": "coursekit.real_model.plots",
    "coursekit.lm_training": "coursekit.real_model.training",
    "coursekit.simulated_device": "coursekit.real_model.simulated_device",
}


class _SameModule:
    """Loads an old name as the module of its new name (imported once, shared). A loader by
    its methods, not by ``importlib.abc``: importing that imports ``random`` (through
    ``tempfile``), whose fork hook the grader's warm parent must register after its own
    (:mod:`coursekit.grading.sandbox.trusted_fork`)."""

    def __init__(self, target: str):
        self.target = target

    def create_module(self, spec):
        module = importlib.import_module(self.target)
        self._own_spec = module.__spec__
        return module

    def exec_module(self, module):
        # the import system stamped the old name's spec on the shared module: put its own back
        module.__spec__ = self._own_spec

    def get_code(self, fullname):
        """For ``python -m <old name>`` (runpy asks the loader for the code to run)."""
        return importlib.util.find_spec(self.target).loader.get_code(self.target)


class MovedModuleFinder:
    """Finds the modules named in :data:`MOVED` under their old names."""

    def find_spec(self, fullname, path=None, target=None):
        new = MOVED.get(fullname)
        if new is None:
            return None
        origin = importlib.util.find_spec(new).origin
        return importlib.machinery.ModuleSpec(fullname, _SameModule(new), origin=origin)


def install() -> None:
    """Add the finder once (``import coursekit`` calls this)."""
    if not any(isinstance(finder, MovedModuleFinder) for finder in sys.meta_path):
        sys.meta_path.append(MovedModuleFinder())
