"""What the warm parent imports once, while it is still trusted, before any hand-in arrives.

Every hand-in's process is forked from the warm parent, so what is imported here costs a
hand-in nothing, and is recorded by the seal of the harness (made after these imports, by
:func:`coursekit.grading.sandbox.instruments.prepare`) as the libraries' own.
"""

from __future__ import annotations


def preload() -> None:
    """Import (and warm) all that a hand-in's process needs: torch, IPython, the questions'
    code and the sandbox's own modules (confinement runs in the hand-in's process)."""
    import torch  # noqa: F401
    import torch.utils._device  # noqa: F401  (torch.set_default_device's, put back per test)
    from IPython.core.interactiveshell import InteractiveShell  # noqa: F401

    # (the runner's own imports, and the exercises': sealed whole, where a coursekit module
    # imported later is read for planted code at every comparison, harness_seal._foreign_code)
    import coursekit.checks  # noqa: F401  (the questions' code)
    import coursekit.grading.sandbox.confinement  # noqa: F401  (in the hand-in's process)
    import coursekit.grading.sandbox.gc_lock  # noqa: F401
    import coursekit.grading.sandbox.global_state  # noqa: F401
    import coursekit.grading.sandbox.landlock  # noqa: F401  (for confine)
    import coursekit.grading.sandbox.namespaces  # noqa: F401
    import coursekit.grading.sandbox.privileges  # noqa: F401
    import coursekit.grading.sandbox.runner  # noqa: F401  (the hand-in's command loop)
    import coursekit.grading.sandbox.seccomp  # noqa: F401
    import coursekit.notebook  # noqa: F401
    import coursekit.parameters  # noqa: F401
    from coursekit.grading.sandbox import frame_hook_guard, tampering, torch_registrations

    _import_lazy_ones()
    _register_lazy_kernels()
    _patch_modules_as_dynamo_does()
    _make_dynamo_disables()
    _hook_optimizer_steps()
    tampering.warm_up()
    torch_registrations.watch()  # before the seal: its wrappers are what the seal records
    frame_hook_guard.guard()  # so too the guarded setters of torch._dynamo's frame hooks


# What a hand-in's process would otherwise import itself, every time: IPython's shell imports
# these as it is made (its completer, magics...) and as it runs its first cell; torch, at the
# first test. Some 15 ms a hand-in, for nothing that differs between hand-ins.
LAZY_IMPORTS = (
    "IPython.core.application",
    "IPython.core.completer",
    "IPython.core.completerlib",
    "IPython.core.crashhandler",
    "IPython.core.logger",
    "IPython.core.magics",
    "IPython.core.oinspect",
    "IPython.utils.generics",
    "IPython.utils.wildcard",
    "torch.profiler._cupti_monitor",
)


def _register_lazy_kernels() -> None:
    """Kernels torch registers for its own operators only when first needed: ``vmap``'s
    Python decompositions (``torch.func``, a right way to answer module 6). Registered here,
    they are in the dispatcher's snapshot (:func:`coursekit.grading.sandbox.torch_registrations
    .dispatcher_snapshot`), so a hand-in that calls ``vmap`` changes nothing it compares."""
    try:
        from torch._functorch.predispatch import lazy_load_decompositions
    except ImportError:  # another release of torch: whatever it does lazily is compared
        return
    lazy_load_decompositions()


def _patch_modules_as_dynamo_does() -> None:
    """``torch.compile`` replaces ``nn.Module.__init__`` and ``__setstate__`` with wrappers
    that tag each module (torch._dynamo's generation tagging) the first time it runs. Done
    here, the wrappers are what the seal records, so a hand-in that compiles changes
    nothing it compares."""
    try:
        from torch._dynamo.mutation_guard import install_generation_tagging_init
    except ImportError:  # another release of torch: whatever it patches is compared
        return
    install_generation_tagging_init()


def _make_dynamo_disables() -> None:
    """Functions torch wraps with ``torch._disable_dynamo`` (``Optimizer.zero_grad``,
    ``state_dict``...) make their ``torch._dynamo.disable`` wrapper on first call and keep it
    as an attribute of the function they wrap. Made here, as torch makes them, they are what
    the seal records of those functions' attributes, so a hand-in that steps an optimizer
    changes nothing it compares (and one that sets its own is seen)."""
    import gc
    import types

    try:
        import torch._dynamo
    except ImportError:  # a torch without dynamo: no such wrappers
        return
    for item in gc.get_objects():
        if type(item) is not types.FunctionType or item.__code__.co_name != "inner":
            continue
        if not item.__code__.co_filename.endswith("/torch/_compile.py"):
            continue
        cells = dict(zip(item.__code__.co_freevars, item.__closure__ or (), strict=False))
        if "fn" not in cells or "recursive" not in cells:
            continue
        fn, recursive = cells["fn"].cell_contents, cells["recursive"].cell_contents
        if getattr(fn, "__dynamo_disable", None) is None:
            fn.__dynamo_disable = torch._dynamo.disable(fn, recursive, wrapping=False)


def _hook_optimizer_steps() -> None:
    """The first optimizer of each class torch makes wraps its class's ``step`` with the
    profiler's hook (``Optimizer._patch_step_function``). Done here for torch's own classes,
    as torch does it, the wrappers are what the seal records."""
    from torch.optim import Optimizer

    classes, seen = [Optimizer], set()
    while classes:
        cls = classes.pop()
        classes += cls.__subclasses__()
        if id(cls) in seen or cls is Optimizer or not cls.__module__.startswith("torch."):
            continue
        seen.add(id(cls))
        if not getattr(cls.step, "hooked", None):
            cls.step = Optimizer.profile_hook_step(cls.step)
            cls.step.hooked = True


def _import_lazy_ones() -> None:
    import importlib

    for name in LAZY_IMPORTS:
        try:
            importlib.import_module(name)
        except ImportError:  # another release of IPython or torch: imported when needed
            pass


def preload_course() -> None:
    """What the course's notebooks import, loaded once (a hand-in imports it again for free).

    Nothing here runs notebook code, and torch's random state is left as a fresh process has it.
    """
    import importlib

    import torch

    state = torch.random.get_rng_state()
    import matplotlib.pyplot  # noqa: F401

    for name in (
        "coursekit",
        "coursekit.plots",
        "coursekit.widgets",
        "coursekit.quizzes",
        "coursekit.batch_norm",
        "coursekit.contrastive",
        "coursekit.distributed",
        "coursekit.pipeline",
        "coursekit.zero",
        "coursekit.text",
        "coursekit.gpu",
    ):
        importlib.import_module(name)
    torch.random.set_rng_state(state)
