"""What a hand-in can reach in its own process without replacing anything (issue 40, classes
b, c and d), tested in memory: torch and interpreter state a cell leaves on
(coursekit/grading/sandbox/global_state.py), library code made to run the notebook's
(provenance.py, harness_seal.py), and coursekit's answers called through library callers
(tampering.py's tripwires). Notebook code here is compiled as a cell is, under a name of its
own and over a namespace of its own; the grading runs that put the same attacks in every
mode are in tests/test_grading_harness.py (tests/corpora/hostile.py)."""

from __future__ import annotations

import functools
import importlib.util
import multiprocessing.pool
import os
import sys
import threading
import time
import types

import pytest
import torch
import torch._dynamo  # noqa: F401  (as the warm parent has it, before the provenance fixture)
import torch.utils._device  # noqa: F401  (as the warm parent has it: preload.py)

from coursekit.grading.sandbox import global_state, harness_seal, tampering, torch_registrations
from coursekit.grading.sandbox.provenance import Provenance

pytestmark = pytest.mark.grading


def _folders(*extra: str) -> tuple[str, ...]:
    return (
        os.path.dirname(os.path.dirname(torch.__file__)) + "/",
        os.path.dirname(os.__file__) + "/",
        *extra,
    )


@pytest.fixture(scope="module")
def provenance():
    """Library code as the warm parent records it, before any of this file's cells run."""
    record = Provenance(_folders())
    record.seal()
    return record


def cell(source: str, namespace: dict | None = None) -> dict:
    """Run ``source`` as a notebook cell would run: code of its own, a namespace of its own."""
    namespace = {"__name__": "__main__"} if namespace is None else namespace
    exec(compile(source, "<cell>", "exec", dont_inherit=True), namespace)
    return namespace


# ------------------------------------------------------ class b: state a cell leaves on

_LEAVES_STATE_ON = """
import gc, sys, threading, torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
class Zeros(TorchDispatchMode):  # every result a zero
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        return out.zero_() if isinstance(out, torch.Tensor) and out.is_floating_point() else out
class Nothing(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))
Nothing().__enter__()
Zeros().__enter__()
module = sys.modules["torch.nn.modules.module"]
module.register_module_forward_pre_hook(lambda m, inputs: None)
module.register_module_full_backward_hook(lambda m, gi, go: gi)
sys.modules["torch.optim.optimizer"].register_optimizer_step_post_hook(lambda o, a, k: None)
torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t * 0).__enter__()
torch._C._dispatch_tls_set_dispatch_key_excluded(torch._C.DispatchKey.AutogradCPU, True)
torch._C._functorch._vmap_increment_nesting(2, "error")  # a vmap level never left
gc.callbacks.append(lambda phase, info: None)
sys.setprofile(lambda frame, event, arg: None)
threading.settrace(lambda frame, event, arg: None)
"""

_CHANGES_SETTINGS = """
import torch
torch.set_default_dtype(torch.float64)
torch.set_grad_enabled(False)
torch._C._set_deterministic_algorithms(True)  # as torch.use_deterministic_algorithms does
torch.backends.cudnn.benchmark = True
torch.set_float32_matmul_precision("medium")
torch.set_flush_denormal(True)
torch.autograd.set_detect_anomaly(True)
torch.autocast("cpu", dtype=torch.bfloat16).__enter__()
torch.inference_mode().__enter__()
torch.set_default_device("meta")
"""


def _computes_as_before() -> None:
    x = torch.ones(2, requires_grad=True)
    y = (x * 3.0).sum()
    assert y.device.type == "cpu" and y.dtype == torch.float32 and y.item() == 6.0
    y.backward()
    assert x.grad.tolist() == [3.0, 3.0]
    assert (torch.full((1,), 1e-39) * 1.0).item() != 0.0  # denormals kept


def test_torch_and_interpreter_state_a_cell_leaves_is_put_back_and_named(provenance):
    baseline = global_state.take()
    profile = sys.getprofile()
    try:
        cell(_LEAVES_STATE_ON)
        found = global_state.restore(baseline, provenance)
    finally:
        sys.setprofile(profile)  # whatever happened above, this test process carries on
        global_state.restore(baseline, provenance)
    said = "\n".join(found)
    for expected in (
        "torch function mode on (__main__.Nothing)",
        "torch dispatch mode on (__main__.Zeros)",
        "global hook in torch.nn.modules.module._global_forward_pre_hooks",
        "global hook in torch.nn.modules.module._global_backward_hooks",
        "global hook in torch.optim.optimizer._global_optimizer_post_hooks",
        "saved-tensor hooks",
        "dispatch keys",
        "torch.func transform level",
        "gc callback",
        "profile function (sys.setprofile)",
        "trace function for new threads",
    ):
        assert expected in said, said
    _computes_as_before()
    assert global_state.restore(baseline, provenance) == []  # all of it was put back


@pytest.mark.parametrize(
    "source",
    [
        "warnings.filters.insert(0, Kept(('ignore', None, Warning, None, 0)))",
        "logging.getLogger('torch')._cache[5] = Kept()",  # a level cache, emptied
        "logging.getLogger('x.y')._cache[5] = Kept()",
    ],
)
def test_what_put_back_takes_off_is_held_not_finalized_inside_it(provenance, source):
    """Found by review: put-back let go of the warnings filters it replaced, and a filter of
    the notebook's class, finalized there, ran its code inside put-back, after the checks
    (it rebound the graded function after its check, and set a global hook). What put-back
    takes off is held for the process's life."""
    baseline = global_state.take()
    made = cell(
        "import logging, warnings\n"
        "RAN = []\n"
        "class Kept(tuple):\n"
        "    def __del__(self):\n"
        "        RAN.append('finalized')\n" + source + "\n"
    )
    try:
        global_state.restore(baseline, provenance)
        assert made["RAN"] == []
    finally:
        global_state.restore(baseline, provenance)


def test_settings_a_cell_changes_are_put_back_without_a_flag(provenance):
    baseline = global_state.take()
    try:
        cell(_CHANGES_SETTINGS)
        found = global_state.restore(baseline, provenance)
        _computes_as_before()
        assert torch.get_float32_matmul_precision() == "highest"
        assert not torch.are_deterministic_algorithms_enabled()
        assert not torch.is_autocast_enabled("cpu") and not torch.is_anomaly_enabled()
    finally:
        global_state.restore(baseline, provenance)
    # an honest notebook may work in float64 or without grad in a cell: put back, not flagged
    assert found == []


_LOGS_INSIDE_BACKWARD = """
import logging, torch, warnings
warnings.showwarning = lambda *args, **kwargs: None  # runs wherever torch warns
warnings.simplefilter("always")  # a setting: put back, not named
class Doubles(logging.Handler):  # runs inside every backward: autograd logs each node
    def emit(self, record):
        pass
graph_log = logging.getLogger("torch.autograd.graph")
graph_log.setLevel(logging.DEBUG)
graph_log.addHandler(Doubles())
logging.getLogger().addFilter(lambda record: True)
"""


def test_a_logging_handler_inside_torchs_computation_is_named_and_taken_off(provenance):
    """torch's autograd engine hooks every node of the graph when ``torch.autograd.graph``
    logs at DEBUG, so a handler there runs the notebook's code in the middle of a hidden
    test's backward. Levels are settings (put back, not flagged: ``logging.basicConfig``
    in a cell is honest); a handler or filter of the notebook's is named and taken off."""
    import logging

    baseline = global_state.take()
    graph_log = logging.getLogger("torch.autograd.graph")
    try:
        cell(_LOGS_INSIDE_BACKWARD)
        found = global_state.restore(baseline, provenance)
        assert not graph_log.isEnabledFor(logging.DEBUG) and graph_log.handlers == []
        cell(
            "import logging\nlogging.basicConfig(level=logging.DEBUG)\n"
            "logging.captureWarnings(True)\n"
        )
        honest = global_state.restore(baseline, provenance)
    finally:
        global_state.restore(baseline, provenance)
    assert sorted(found) == [
        "it added a logging filter of its own to the root logger",
        "it added a logging handler of its own to torch.autograd.graph",
        "it set warnings.showwarning to code of its own",
    ]
    assert honest == [] and not logging.getLogger().isEnabledFor(logging.DEBUG)


_SWAPS_A_TORCH_LOGGER = """
import logging
class Doubles(logging.Handler):
    def emit(self, record):
        pass
table = logging.Logger.manager.loggerDict
stand_in = logging.Logger("torch.autograd.graph")  # torch's name, another object
stand_in.addHandler(Doubles())
table["torch.autograd.graph"] = stand_in  # as many loggers as before, in the same order
"""

_A_NEW_TORCH_LOGGER = """
import logging
class Doubles(logging.Handler):
    def emit(self, record):
        pass
logging.getLogger("torch.made_by_the_cell").addHandler(Doubles())
"""


_SWAPS_THE_ROOT_LOGGER = """
import logging
class Doubles(logging.Handler):
    def emit(self, record):
        pass
stand_in = logging.RootLogger(logging.WARNING)
stand_in.addHandler(Doubles())
logging.Logger.manager.root = logging.root = logging.Logger.root = stand_in
"""


# found by review: the same object in the table, of another class
_MAKES_A_PLACEHOLDER_A_LOGGER = """
import logging
class Doubles(logging.Handler):
    def emit(self, record):
        pass
stand_in = logging.Logger.manager.loggerDict["torch.placeholder_of_the_test"]
stand_in.__class__ = logging.Logger
logging.Logger.__init__(stand_in, "torch.placeholder_of_the_test")
stand_in.addHandler(Doubles())
"""


@pytest.mark.parametrize(
    "source",
    [
        _SWAPS_A_TORCH_LOGGER,
        _A_NEW_TORCH_LOGGER,
        _SWAPS_THE_ROOT_LOGGER,
        _MAKES_A_PLACEHOLDER_A_LOGGER,
    ],
)
def test_a_logger_replaced_or_made_after_the_last_look_is_seen(provenance, source):
    """``put_back`` reads torch's loggers again only when the root logger or the logger
    table changed (the same names and loggers, in the same order): a logger put in
    another's place, or a new one, is read, and its handler named and taken off."""
    import logging

    manager = logging.Logger.manager
    table, root = manager.loggerDict, manager.root
    kept = table.get("torch.autograd.graph")
    assert isinstance(kept, logging.Logger)  # made as torch.autograd.graph is imported
    logging.getLogger("torch.placeholder_of_the_test.child")  # its parent: a placeholder
    baseline = global_state.take()
    assert global_state.restore(baseline, provenance) == []  # the table as seen: kept
    try:
        namespace = cell(source)
        found = global_state.restore(baseline, provenance)
        logger = namespace.get("stand_in") or logging.getLogger("torch.made_by_the_cell")
        assert logger.handlers == []
    finally:
        table["torch.autograd.graph"] = kept
        table.pop("torch.made_by_the_cell", None)
        table.pop("torch.placeholder_of_the_test", None)
        table.pop("torch.placeholder_of_the_test.child", None)
        manager.root = logging.root = logging.Logger.root = root
        global_state.restore(baseline, provenance)
    name = {
        _SWAPS_A_TORCH_LOGGER: "torch.autograd.graph",
        _A_NEW_TORCH_LOGGER: "torch.made_by_the_cell",
        _SWAPS_THE_ROOT_LOGGER: "the root logger",
        _MAKES_A_PLACEHOLDER_A_LOGGER: "torch.placeholder_of_the_test",
    }[source]
    expected = [f"it added a logging handler of its own to {name}"]
    if source is _MAKES_A_PLACEHOLDER_A_LOGGER:  # the placeholder's own table, left on it
        expected.insert(0, f"it set attributes of its own on {name}")
    assert found == expected


_CHANGES_A_HELD_LOGGER_IN_PLACE = {  # each after a clean put-back: (source, named?)
    "a handler appended to its own list": ("log.handlers.append(Doubles())", True),
    "a handler swapped in its own list": ("log.handlers[0] = Doubles()", True),
    "a filter appended to its own list": ("log.filters.append(lambda record: True)", True),
    "its handlers list replaced": ("log.__dict__['handlers'] = [Doubles()]", True),
    "an attribute over a method": ("log.callHandlers = lambda record: None", True),
    "its class changed": ("log.__class__ = type('Other', (logging.Logger,), {})", True),
    # data, no code of the notebook's: put back, not named
    "its keys in another order": ("p = log.__dict__.pop('propagate'); log.propagate = p", False),
    "its dict replaced by one holding more": ("log.__dict__ = {**log.__dict__, 'x': 1}", False),
}


@pytest.mark.parametrize("change", sorted(_CHANGES_A_HELD_LOGGER_IN_PLACE))
def test_a_logger_changed_in_place_after_a_clean_put_back_is_put_back(provenance, change):
    """``put_back`` decides "every logger as take() read it" in a few passes in C and goes
    logger by logger only when that fails: each change to a logger held since take() is
    still seen after a put-back that found nothing, and put back (named where it holds
    code of the notebook's); its level cache, filled since, is emptied every time."""
    import logging

    log = logging.getLogger("torch.autograd.graph")
    library_handler = logging.NullHandler()  # one the logger had before any cell
    log.addHandler(library_handler)
    handlers, filters, kind = list(log.handlers), list(log.filters), type(log)
    baseline = global_state.take()
    keys = list(vars(log))
    assert global_state.restore(baseline, provenance) == []
    log._cache[logging.DEBUG] = True  # as isEnabledFor leaves it while logging is on
    assert global_state.restore(baseline, provenance) == []
    assert log._cache == {}
    source, named = _CHANGES_A_HELD_LOGGER_IN_PLACE[change]
    prelude = "import logging\nclass Doubles(logging.Handler):\n    def emit(self, r): pass\n"
    try:
        cell(prelude + source, {"log": log})
        assert (
            list(vars(log)) != keys
            or type(log) is not kind
            or log.handlers != handlers
            or (log.filters != filters)
        )
        found = global_state.restore(baseline, provenance)
        again = global_state.restore(baseline, provenance)
        after = type(log), list(log.handlers), list(log.filters), list(vars(log))
    finally:
        log.__class__ = kind
        global_state.restore(baseline, provenance)
        log.removeHandler(library_handler)
    if named:
        assert len(found) == 1 and "torch.autograd.graph" in found[0], found
    else:
        assert found == []
    assert again == []
    assert after == (kind, handlers, filters, keys)


def test_the_loggers_check_runs_from_the_private_copy(provenance, monkeypatch):
    """The runner runs put-back from a private copy of this module's globals
    (``tampering.private_copy``), which re-makes the module's functions, not its classes'
    methods: the C-level check of the loggers is functions only, so rebinding the names it
    calls in the shared module (as a cell could) does not blind it."""
    import logging

    state = tampering.private_copy(global_state)
    baseline = state.take()
    assert state.restore(baseline, provenance) == []
    monkeypatch.setattr(global_state, "_IS_NOT", lambda a, b: False)
    monkeypatch.setattr(global_state, "_loggers_unchanged", lambda quick: True)
    # (a method would be the shared class's, whatever copy calls it)
    monkeypatch.setattr(global_state._LoggersAtTake, "unchanged", lambda s: True, raising=False)
    log = logging.getLogger("torch.autograd.graph")
    cell(
        "import logging\n"
        "class Doubles(logging.Handler):\n"
        "    def emit(self, record):\n"
        "        pass\n"
        "log.handlers.append(Doubles())\n",
        {"log": log},
    )
    try:
        found = state.restore(baseline, provenance)
    finally:
        monkeypatch.undo()
        global_state.restore(baseline, provenance)
    assert found == ["it added a logging handler of its own to torch.autograd.graph"]
    assert log.handlers == []


_A_LOGGER_OF_ITS_OWN_CLASS = """
import logging
RAN = []
class Spy(logging.Logger):  # every attribute the grader could read, the notebook's code
    def __getattribute__(self, name):
        RAN.append(name)
        return object.__getattribute__(self, name)
class Doubles(logging.Handler):
    def emit(self, record):
        pass
logging.setLoggerClass(Spy)
try:
    spy = logging.getLogger("torch.spied_by_the_cell")
finally:
    logging.setLoggerClass(logging.Logger)
object.__getattribute__(spy, "handlers").append(Doubles())
RAN.clear()
"""


def test_loggers_are_read_without_running_the_notebooks_code(provenance):
    """A torch logger made of the notebook's own ``Logger`` class (``setLoggerClass``): the
    grader reads its handlers from its own dict, so no ``__getattribute__`` of the
    notebook's runs inside the restore, and the handler is still named and taken off."""
    import logging

    baseline = global_state.take()
    namespace = {"__name__": "__main__"}
    try:
        cell(_A_LOGGER_OF_ITS_OWN_CLASS, namespace)
        found = global_state.restore(baseline, provenance)
        ran = list(namespace["RAN"])
        handlers = object.__getattribute__(namespace["spy"], "handlers")
    finally:
        global_state.restore(baseline, provenance)
        logging.Logger.manager.loggerDict.pop("torch.spied_by_the_cell", None)
    assert ran == []
    assert found == [
        "it made torch.spied_by_the_cell of a class of its own",
        "it added a logging handler of its own to torch.spied_by_the_cell",
    ]
    assert handlers == []


_A_TORCH_LOGGER_HIDING_ITS_DICT = """
import logging
RAN = []
class Doubles(logging.Handler):  # runs inside every backward: autograd logs each node
    def emit(self, record):
        pass
Hider = type("Hider", (logging.Logger,), {
    "__dict__": property(lambda self: RAN.append("__dict__") or {}),  # shadows the real one
    1: "a name that is not a str",  # a name a careful reader skips
})
graph_log = logging.getLogger("torch.autograd.graph")
graph_log.addHandler(Doubles())
graph_log.__class__ = Hider  # torch's own logger, of the notebook's class from now on
"""


def test_a_torch_logger_whose_class_hides_its_dict_is_read_all_the_same(provenance):
    """A class may shadow ``__dict__`` with a property and hold a name that is not a
    ``str``: the grader passes both over and reads the logger's real dict through C's own
    getset, so the handler is still named and taken off, and nothing of the notebook's
    runs. (Before, the grader took such a logger for one with no dict, and left it be.)"""
    import logging

    graph_log = logging.getLogger("torch.autograd.graph")
    baseline = global_state.take()
    assert global_state.restore(baseline, provenance) == []  # its class, as first seen
    namespace = {"__name__": "__main__"}
    try:
        cell(_A_TORCH_LOGGER_HIDING_ITS_DICT, namespace)
        found = global_state.restore(baseline, provenance)
        handlers = object.__getattribute__(graph_log, "handlers")
    finally:
        graph_log.__class__ = logging.Logger
        global_state.restore(baseline, provenance)
    assert namespace["RAN"] == []
    assert found == [
        "it changed the class of torch.autograd.graph",
        "it added a logging handler of its own to torch.autograd.graph",
    ]
    assert handlers == []


_LOGGING_REACHED = """
import logging, warnings
RAN = []
class Doubles(logging.Handler):
    def emit(self, record):
        RAN.append("handler")
graph_log = logging.getLogger("torch.autograd.graph")
"""

# found by review: ways into what logging runs or reads inside torch's computation, beyond a
# handler on a logger the table lists, and put-back steps that ran the notebook's code
_LOGGING_ROUTES = {
    "a method shadowed in the logger's dict": (
        "graph_log.callHandlers = lambda record: RAN.append('callHandlers')\n",
        ["it set torch.autograd.graph.callHandlers to code of its own"],
    ),
    "a parent of its own": (
        "evil = logging.Logger('evil')\nevil.addHandler(Doubles())\ngraph_log.parent = evil\n",
        ["it changed torch.autograd.graph.parent"],
    ),
    "a handler, then torch's logger swapped out of the table": (
        "graph_log.addHandler(Doubles())\n"
        "table = logging.Logger.manager.loggerDict\n"
        "table['torch.autograd.graph'] = logging.Logger('torch.autograd.graph')\n",
        ["it added a logging handler of its own to torch.autograd.graph"],
    ),
    "a handler, then torch's logger deleted from the table": (
        "graph_log.addHandler(Doubles())\n"
        "del logging.Logger.manager.loggerDict['torch.autograd.graph']\n",
        ["it added a logging handler of its own to torch.autograd.graph"],
    ),
    "a class whose handlers are a property": (
        "H = type('H', (logging.Logger,), {'handlers': property(lambda s: [Doubles()])})\n"
        "graph_log.__class__ = H\n",
        ["it changed the class of torch.autograd.graph"],
    ),
    "a handler, then the table replaced by a dict of its own class": (
        "graph_log.addHandler(Doubles())\n"
        "manager = logging.Logger.manager\n"
        "manager.loggerDict = type('Table', (dict,), {})(manager.loggerDict)\n",
        [
            "it replaced logging's table of loggers",
            "it added a logging handler of its own to torch.autograd.graph",
        ],
    ),
    "a level cache of its own class": (
        "class Cache(dict):\n"
        "    def clear(self):\n        RAN.append('clear')\n"
        "    def __getitem__(self, key):\n"
        "        RAN.append('getitem')\n        raise KeyError(key)\n"
        "logging.root._cache = Cache()\nlogging.root.setLevel(5)\n",
        ["it changed the root logger._cache"],
    ),
    "warnings' _filters_mutated": (
        "warnings._filters_mutated = lambda: RAN.append('_filters_mutated')\n"
        "warnings.filters.insert(0, ('ignore', None, Warning, None, 0))\n",
        ["it set warnings._filters_mutated to code of its own"],
    ),
    "warnings' filters as a list of its own class": (
        "class Filters(list):\n"
        "    def __len__(self):\n        RAN.append('__len__')\n        return 0\n"
        "    def __iter__(self):\n        RAN.append('__iter__')\n        return iter(())\n"
        "warnings.filters = Filters(warnings.filters)\n",
        ["it replaced warnings.filters with an object of its own"],
    ),
}


@pytest.mark.parametrize("route", sorted(_LOGGING_ROUTES))
def test_what_logging_runs_inside_torch_is_put_back_without_running_the_notebook(provenance, route):
    """Whatever a cell changes of torch's loggers (their dict, class, parent, the table
    that lists them, their level caches) or of warnings' functions and filters is put back
    and named, and putting it back runs none of the cell's code; afterwards, a torch
    logger's record runs none of it either."""
    import logging
    import warnings

    manager = logging.Logger.manager
    table, graph_log = manager.loggerDict, logging.getLogger("torch.autograd.graph")
    filters, mutated = warnings.filters, warnings._filters_mutated
    source, expected = _LOGGING_ROUTES[route]
    baseline = global_state.take()
    namespace = {"__name__": "__main__"}
    try:
        cell(_LOGGING_REACHED + source, namespace)
        namespace["RAN"].clear()
        found = global_state.restore(baseline, provenance)
        during = list(namespace["RAN"])
        graph_log.warning("torch logs, as in a hidden test")  # (at WARNING: emitted)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
        after = list(namespace["RAN"])[len(during) :]
    finally:
        table["torch.autograd.graph"] = graph_log
        manager.loggerDict, warnings.filters, warnings._filters_mutated = table, filters, mutated
        global_state.restore(baseline, provenance)
    assert during == [], f"put-back ran the notebook's {during}"
    assert after == [], f"after put-back, torch's logging ran the notebook's {after}"
    assert sorted(found) == sorted(expected)


_SILENCED_ROUTES = {  # found by review: what logging and warnings run, from a cell
    "torch's handler given an emit of its own": (
        "logging.getLogger('torch').handlers[0].emit = lambda record: RAN.append('emit')\n",
        [],
    ),
    "torch's formatter given a format of its own": (
        "formatter = logging.getLogger('torch').handlers[0].formatter\n"
        "formatter.format = lambda record: RAN.append('format') or ''\n",
        [],
    ),
    "logging's last resort given an emit of its own": (
        "logging.lastResort.emit = lambda record: RAN.append('lastResort')\n",
        [],
    ),
    "linecache's getline of its own": (
        "import linecache\nlinecache.getline = lambda *args: RAN.append('getline') or ''\n",
        [],
    ),
    "a stderr of its own": (
        "import sys\n"
        "class Stream:\n"
        "    def write(self, text):\n        RAN.append('write')\n        return len(text)\n"
        "    def flush(self):\n        pass\n"
        "sys.stderr = Stream()\n",
        ["it changed sys.stderr"],
    ),
    "a warnings module of its own": (
        "import sys, types\n"
        "fake = types.ModuleType('warnings')\nfake.__dict__.update(vars(warnings))\n"
        "fake._showwarnmsg = lambda message: RAN.append('showwarnmsg')\n"
        "fake._filters_mutated = lambda: RAN.append('_filters_mutated')\n"
        "sys.modules['warnings'] = fake\n",
        ["it changed sys.modules['warnings']"],
    ),
    "the class new loggers are made of": (
        "class Made(logging.Logger):\n"
        "    def warning(self, *args, **kwargs):\n        RAN.append('Made.warning')\n"
        "logging.Logger.manager.loggerClass = Made\n",
        ["it set the class logging makes new loggers of (setLoggerClass)"],
    ),
    "a method on a torch logger made before its module": (
        "made = logging.getLogger('torch.made_before_its_module')\n"
        "made.warning = lambda *args, **kwargs: RAN.append('warning')\n",
        ["it set attributes of its own on torch.made_before_its_module"],
    ),
    "a class of its own for a torch logger made before its module": (
        "class Made(logging.Logger):\n"
        "    def warning(self, *args, **kwargs):\n        RAN.append('Made.warning')\n"
        "logging.getLogger('torch.made_before_its_module').__class__ = Made\n",
        ["it made torch.made_before_its_module of a class of its own"],
    ),
    # found by the third review: logging turned back on, and modules of a class of its own
    "logging turned back on": (
        "logging.disable(logging.NOTSET)\n"
        "formatter = logging.getLogger('torch').handlers[0].formatter\n"
        "formatter.format = lambda record: RAN.append('format') or ''\n",
        [],
    ),
    "levels cached while logging was on": (
        "manager = logging.Logger.manager\nsilenced = manager.disable\n"
        "manager.disable = 0  # set around logging.disable: no cache emptied\n"
        "for name in ('torch', 'torch.autograd.graph'):\n"
        "    made = logging.getLogger(name)\n    level = made.__dict__['level']\n"
        "    made.setLevel(logging.DEBUG)\n"
        "    [made.isEnabledFor(n) for n in (10, 20, 30, 40, 50)]\n"
        "    made.__dict__['level'] = level\n"
        "formatter = logging.getLogger('torch').handlers[0].formatter\n"
        "formatter.format = lambda record: RAN.append('format') or ''\n"
        "manager.disable = silenced\n",
        [],
    ),
    "the types module of a class of its own": (
        "import types\n"
        "class Spying(types.ModuleType):\n"
        "    def __getattribute__(self, name):\n"
        "        RAN.append(name)\n        return types.ModuleType.__getattribute__(self, name)\n"
        "types.__class__ = Spying\n",
        ["it changed the class of module types"],
    ),
    "the warnings module of a class of its own": (
        "import types\n"
        "class Loud(types.ModuleType):\n"
        "    def __getattribute__(self, name):\n"
        "        if name == 'filters':\n            return []\n"
        "        if name == '_showwarnmsg':\n"
        "            return lambda message: RAN.append('showwarnmsg')\n"
        "        return types.ModuleType.__getattribute__(self, name)\n"
        "warnings.__class__ = Loud\n",
        ["it changed the class of module warnings"],
    ),
}


@pytest.mark.parametrize("route", sorted(_SILENCED_ROUTES))
def test_with_logging_off_and_warnings_ignored_nothing_of_the_cells_runs_after_put_back(
    provenance, route
):
    """The runner turns logging off and ignores warnings before the first cell
    (``global_state.silence``), and put-back keeps them so: what logging or warnings would
    run (a handler's or formatter's attributes, linecache, the last resort) never runs,
    and what library code writes to or looks up (stderr, the warnings module, the class of
    loggers made later, a torch logger made before its module) is put back and named."""
    import linecache
    import logging
    import sys
    import warnings

    torch_handler = logging.getLogger("torch").handlers[0]
    saved = (
        dict(vars(torch_handler)),
        dict(vars(torch_handler.formatter)),
        dict(vars(logging.lastResort)),
        linecache.getline,
        list(warnings.filters),
        logging.Logger.manager.disable,
    )
    source, expected = _SILENCED_ROUTES[route]
    namespace = {"__name__": "__main__"}
    try:
        global_state.silence()
        baseline = global_state.take()
        # a clean put-back first, as before every test: what it remembers as passed (the
        # loggers, the modules' classes) must not hide the cell's change
        assert global_state.restore(baseline, provenance) == []
        cell(_LOGGING_REACHED + source, namespace)
        namespace["RAN"].clear()
        found = global_state.restore(baseline, provenance)
        during = list(namespace["RAN"])
        logging.getLogger("torch.autograd.graph").warning("torch logs, as in a hidden test")
        logging.getLogger("torch.made_before_its_module").warning("a module imported later")
        logging.getLogger().warning("a record of the root logger")
        torch_file = torch.nn.functional.__file__
        warnings.warn_explicit("torch warns", UserWarning, torch_file, 5)
        with warnings.catch_warnings():
            pass
        after = list(namespace["RAN"])[len(during) :]
    finally:
        vars(torch_handler).clear()
        vars(torch_handler).update(saved[0])
        vars(torch_handler.formatter).clear()
        vars(torch_handler.formatter).update(saved[1])
        vars(logging.lastResort).clear()
        vars(logging.lastResort).update(saved[2])
        linecache.getline = saved[3]
        logging.Logger.manager.loggerDict.pop("torch.made_before_its_module", None)
        global_state.restore(baseline, provenance)
        warnings.filters[:] = saved[4]
        warnings._filters_mutated()
        logging.disable(saved[5])
    assert sys.modules["warnings"] is warnings and type(sys.stderr) is not object
    assert during == [], f"put-back ran the notebook's {during}"
    assert after == [], f"after put-back, logging or warnings ran the notebook's {after}"
    assert found == expected


def test_a_hook_keyed_by_an_object_of_the_notebooks_is_taken_off_without_running_it(
    provenance,
):
    """Torch's global hooks are dicts keyed by handle numbers: one keyed by an object of
    the notebook's class is compared by identity, never hashed, and what is taken off is
    held, so neither its ``__hash__`` nor its ``__del__`` runs inside put-back (either
    could change a setting after settings were put back)."""
    baseline = global_state.take()
    namespace = {"__name__": "__main__"}
    source = (
        "import torch\n"
        "RAN, ARMED = [], [False]\n"
        "hooks = torch.nn.modules.module._global_forward_hooks\n"
        "class Key:\n"
        "    def __hash__(self):\n"
        "        RAN.append('__hash__')\n"
        "        if ARMED[0]:\n            torch.set_default_dtype(torch.float64)\n"
        "        return 1\n"
        "    def __eq__(self, other):\n        return self is other\n"
        "    def __del__(self):\n"
        "        RAN.append('__del__')\n"
        "        if ARMED[0]:\n            torch.set_grad_enabled(False)\n"
        "hooks[Key()] = print\n"
        "ARMED[0] = True\n"
    )
    try:
        cell(source, namespace)
        namespace["RAN"].clear()
        global_state.restore(baseline, provenance)
        ran = list(namespace["RAN"])
        hooks = dict(torch.nn.modules.module._global_forward_hooks)
        settings = torch.get_default_dtype(), torch.is_grad_enabled()
    finally:
        global_state.restore(baseline, provenance)
        if "ARMED" in namespace:  # the key lives on in the baseline: its __del__ runs later,
            namespace["ARMED"][0] = False  # in this test process, once the baseline goes
    assert ran == [], f"put-back ran the notebook's {ran}"
    assert hooks == {} and settings == (torch.float32, True)


# Where put-back looks a name up or writes one: (how a cell reaches that dict, the name,
# what the cell changes there too, so that put-back writes the name back).
_NAME_DICTS = {
    "a hook module's globals": (
        "vars(sys.modules['torch.nn.modules.module'])",
        "_global_forward_hooks",
        "",
    ),
    "sys.modules": ("sys.modules", "warnings", ""),
    "sys": ("vars(sys)", "stdout", ""),
    "torch.utils._device": ("vars(sys.modules['torch.utils._device'])", "CURRENT_DEVICE", ""),
    "warnings": ("vars(warnings)", "showwarning", "warnings.showwarning = print\n"),
    "logging's manager": ("vars(logging.Logger.manager)", "loggerDict", ""),
    "torch._C": ("vars(torch._C)", "_dispatch_library", ""),
    "torch's default device context": (
        "_thread._local.__getattribute__(torch._GLOBAL_DEVICE_CONTEXT, '__dict__')",
        "device_context",
        "",
    ),
    "threading (its trace hooks)": ("vars(threading)", "_trace_hook", ""),
    "torch.library.Library's members": (
        "next(d for d in gc.get_referents(torch.library.Library) if type(d) is dict"
        " and 'define' in d)",
        "define",
        "",
    ),
}


@pytest.mark.parametrize("put_back_before", [False, True], ids=["first", "after a clean one"])
@pytest.mark.parametrize("where", sorted(_NAME_DICTS))
def test_a_key_that_collides_with_a_name_put_back_reads_never_runs(
    provenance, where, put_back_before
):
    """A key of the notebook's class whose hash is that of a name put-back looks up, put
    ahead of the name in the dict's probe order (the name taken out and put back after
    it), is compared with the name at every lookup: its ``__eq__`` would run inside
    put-back, after the checks before it (found by review: it put a global hook back on).
    Put-back takes such keys out of the dicts it reads by name without comparing them, and
    names them; in a class's members, which it cannot rewrite, it reads the name as an
    item. After a put-back that found every such dict names only, each is read again only
    if its version tag moved (dict_versions.py): the key is found that way too."""
    reach, name, change = _NAME_DICTS[where]
    baseline = global_state.take()
    if put_back_before:
        assert global_state.restore(baseline, provenance) == []
    namespace = {"__name__": "__main__"}
    source = (
        "import _thread, gc, logging, sys, threading, torch, torch.library, warnings\n"
        "RAN, ARMED = [], [False]\n"
        f"held = {reach}\n"
        "class Key:\n"
        f"    def __hash__(self):\n        return hash({name!r})\n"
        "    def __eq__(self, other):\n"
        "        if ARMED[0]:\n"
        "            RAN.append(other)\n"
        "            torch.nn.modules.module.register_module_forward_hook(lambda *a: None)\n"
        "        return False\n"
        f"value = held.pop({name!r}, Key)\n"
        "held[Key()] = None\n"
        f"if value is not Key:\n    held[{name!r}] = value  # after the key, as a lookup probes\n"
        f"{change}"
        "ARMED[0] = True\n"
    )
    try:
        cell(source, namespace)
        found = global_state.restore(baseline, provenance)
        ran = list(namespace["RAN"])
        hooks = dict(torch.nn.modules.module._global_forward_hooks)
        again = global_state.restore(baseline, provenance)
    finally:
        namespace.get("ARMED", [None])[0] = False
        held = namespace.get("held")
        if held is not None:  # a class's members: taken out here (and its lookups reset)
            for key in [k for k in list(held) if type(k) is not str]:
                del held[key]
            torch.library.Library.define = torch.library.Library.define
        global_state.restore(baseline, provenance)
    assert ran == [], f"put-back ran the notebook's __eq__ against {ran}"
    assert hooks == {}
    assert any("a key that is not a name" in text for text in found), found
    if "members" not in where:  # a module's or an object's dict: the key taken out
        assert all(type(k) is str for k in namespace["held"])
        assert again == []


_RUNS_ITS_CODE_IN_PUT_BACK = {
    # a cycle freed by a collection, renewed each time, with a collection at every object
    "a collection": (
        "class Phoenix:\n"
        "    def __init__(self):\n        self.me = self\n"
        "    def __del__(self):\n        act()\n        Phoenix()\n"
        "Phoenix()\n"
        "gc.set_threshold(1)\n"
    ),
    # the old value of a setting put-back writes over, let go of there
    "logging.disable's level": (
        "class Level(int):\n    def __del__(self):\n        act()\n"
        "logging.Logger.manager._disable = Level(50)\n"
    ),
    "a new torch logger's level": (
        "class Level(int):\n    def __del__(self):\n        act()\n"
        "logging.getLogger('torch.zz_new').level = Level(0)\n"
    ),
    # threading.enumerate enters a lock a cell can rebind (a thread running, so that the
    # threads are read at all)
    "threading's lock": (
        "import threading, time\n"
        "REAL = threading._active_limbo_lock\n"
        "class Lock:\n"
        "    def __enter__(self):\n        act()\n        return REAL.__enter__()\n"
        "    def __exit__(self, *exc):\n        return REAL.__exit__(*exc)\n"
        "threading.Thread(target=time.sleep, args=(30,), daemon=True).start()\n"
        "threading._active_limbo_lock = Lock()\n"
    ),
    # pybind11 builds DispatchKey.__members__ anew from a dict a cell can write
    "torch's dispatch keys by name": (
        "class Key(str):\n"
        "    def __hash__(self):\n        act()\n        return str.__hash__(self)\n"
        "entries = torch._C.DispatchKey.__dict__['__entries']\n"
        "entries[Key('Zzz')] = entries['CPU']\n"
        "torch._C._dispatch_tls_set_dispatch_key_excluded(torch._C.DispatchKey.AutogradCPU, True)\n"
    ),
}


@pytest.mark.parametrize("route", sorted(_RUNS_ITS_CODE_IN_PUT_BACK))
def test_put_back_lets_nothing_of_the_notebooks_run_inside_it(provenance, route):
    """Found by review: code of the notebook's ran inside put-back, after the hooks had been
    checked, by a collection, by an old value let go of, by a table torch rebuilds from a
    dict a cell can write. None of it runs now; gc thresholds are put back as a setting."""
    import gc
    import logging

    baseline = global_state.take()
    threshold = gc.get_threshold()
    namespace = {"__name__": "__main__"}
    # (counted only inside put-back: a collection the test's own steps set off before it
    # runs its notebook's code outside it, which is no finding)
    source = (
        "import gc, logging, sys, torch\n"
        "RAN, ARMED = [], [False]\n"
        "def act():\n"
        "    frame = sys._getframe()\n"
        "    while frame is not None and frame.f_code is not PUT_BACK:\n"
        "        frame = frame.f_back\n"
        "    if ARMED[0] and frame is not None:\n"
        "        RAN.append(1)\n"
        "        torch.nn.modules.module.register_module_forward_hook(lambda *a: None)\n"
        + _RUNS_ITS_CODE_IN_PUT_BACK[route]
        + "ARMED[0] = True\n"
    )
    namespace["PUT_BACK"] = global_state.restore.__code__
    entries = torch._C.DispatchKey.__dict__["__entries"]
    lock = threading._active_limbo_lock
    try:
        cell(source, namespace)
        global_state.restore(baseline, provenance)
        ran = len(namespace["RAN"])
        hooks = dict(torch.nn.modules.module._global_forward_hooks)
        now = gc.get_threshold()
    finally:
        namespace.get("ARMED", [None])[0] = False
        for key in [k for k in list(entries) if type(k) is not str]:
            del entries[key]
        logging.Logger.manager.loggerDict.pop("torch.zz_new", None)
        threading._active_limbo_lock = lock
        gc.set_threshold(*threshold)
        global_state.restore(baseline, provenance)
    assert ran == 0, f"put-back ran the notebook's code {ran} time(s)"
    assert hooks == {}
    assert now == threshold


def test_a_setting_that_holds_an_object_is_put_back_without_running_it(provenance):
    """Some of torch's settings take any object (``torch._C._set_graph_exec_group``):
    put back by identity, the object held, so neither its ``__ne__`` nor its ``__del__``
    runs inside put-back."""
    if not hasattr(torch._C, "_set_graph_exec_group"):
        pytest.skip("this torch has no object-valued setting to try")
    baseline = global_state.take()
    namespace = cell(
        "import torch\n"
        "RAN = []\n"
        "class Group:\n"
        "    def __eq__(self, other):\n        RAN.append('__eq__'); return True\n"
        "    def __ne__(self, other):\n        RAN.append('__ne__'); return False\n"
        "    def __del__(self):\n        RAN.append('__del__')\n"
        "torch._C._set_graph_exec_group(Group())\n"
    )
    try:
        global_state.restore(baseline, provenance)
        ran, now = list(namespace["RAN"]), torch._C._get_graph_exec_group()
    finally:
        global_state.restore(baseline, provenance)
    assert ran == [], f"put-back ran the notebook's {ran}"
    assert now is None


def test_torchs_own_logging_settings_are_put_back_without_a_flag(provenance):
    """``torch._logging.set_logs`` sets attributes of torch's loggers with functions of
    torch's own (a new ``isEnabledFor`` each time): an honest cell, put back unflagged."""
    import logging

    baseline = global_state.take()
    try:
        cell("import logging, torch\ntorch._logging.set_logs(dynamo=logging.INFO)\n")
        found = global_state.restore(baseline, provenance)
        cell("import torch\ntorch._logging.set_logs(graph_breaks=True, recompiles=True)\n")
        found += global_state.restore(baseline, provenance)
    finally:
        torch._logging.set_logs()
        global_state.restore(baseline, provenance)
    assert found == []
    assert logging.getLogger("torch._dynamo").level == logging.NOTSET


_HIDDEN_TIMERS = {
    "a Timer": "timer.start()\n",
    "its ident blanked": "timer.start()\ntimer._ident = None\n",
    "taken out of threading's table": (
        "timer.start()\ntime.sleep(0.2)\nthreading._active.pop(timer.ident, None)\n"
    ),
    "its run handed to _thread": "_thread.start_new_thread(timer.run, ())\n",
}


@pytest.mark.parametrize("how", sorted(_HIDDEN_TIMERS))
def test_a_timer_that_calls_the_notebooks_code_is_named(provenance, how):
    """Found by review: a ``threading.Timer`` keeps its function in ``function``, not in
    ``_target``, and waits in the library's frames: it passed as the library's, then turned
    a global hook on in the middle of a test; and one hidden from threading's tables (its
    ident blanked, taken out of ``_active``, its ``run`` started by ``_thread``) was not
    found at all. What threading will call for a thread object is judged, and the object is
    also read from threading's own frames (their ``self``)."""
    baseline = global_state.take()
    namespace = cell(
        "import _thread, threading, time\n"
        "timer = threading.Timer(60, lambda: None)\n"
        "timer.daemon = True\n" + _HIDDEN_TIMERS[how] + "time.sleep(0.2)\n"  # (waiting by now)
    )
    try:
        found = global_state.restore(baseline, provenance)
    finally:
        timer = namespace["timer"]
        if how == "taken out of threading's table":  # (threading deletes it as it ends)
            threading._active.setdefault(timer.ident, timer)
        timer.cancel()
        time.sleep(0.1)  # (its wait ends: the thread ends)
        global_state.restore(baseline, provenance)
    assert any(text.startswith("a thread it started") for text in found), found


def test_a_librarys_thread_handed_the_notebooks_data_is_not_named(provenance):
    """What a thread is handed or holds as data (a model to save, an attribute set on it)
    is not code it will run: judging it flagged honest threads (found by review)."""
    baseline = global_state.take()
    namespace = cell(
        "import threading, torch\n"
        "class Net(torch.nn.Linear):\n"
        "    def forward(self, x):\n        return super().forward(x) * 2\n"
        "model = Net(2, 1)  # the notebook's own model\n"
        "stop = threading.Event()\n"
        "waiter = threading.Thread(target=stop.wait, args=(60,), kwargs={}, daemon=True)\n"
        "waiter.model = model\n"
        "waiter.start()\n"
        "saver = threading.Thread(target=stop.wait, args=(60, model), daemon=True)\n"
    )
    try:
        found = global_state.restore(baseline, provenance)
    finally:
        namespace["stop"].set()
        namespace["waiter"].join(10)
        global_state.restore(baseline, provenance)
    assert found == []


def test_a_thread_of_the_notebooks_is_named_and_a_librarys_is_not(provenance):
    baseline = global_state.take()
    stop = threading.Event()
    library_thread = threading.Thread(target=stop.wait, daemon=True)  # a library's own code
    namespace = cell(
        "import threading\n"
        "def spin(stop):\n"
        "    while not stop.wait(0.01):\n"
        "        pass\n"
        "thread = threading.Thread(target=spin, args=(STOP,), name='spinner', daemon=True)\n"
        "thread.start()\n",
        {"__name__": "__main__", "STOP": stop},
    )
    library_thread.start()
    try:
        found = global_state.restore(baseline, provenance)
    finally:
        stop.set()
        namespace["thread"].join(5)
        library_thread.join(5)
    assert found == ["a thread it started (spinner) still runs beside the tests"]


_RUNS_CODE_WHEN_LOOKED_AT = """
import gc, threading, torch
from torch.overrides import TorchFunctionMode
RAN = []
class Spinner(threading.Thread):  # every attribute read, and its run(), the notebook's
    def __getattribute__(self, name):
        if name not in ("_started", "_tstate_lock", "_is_stopped", "_ident", "_native_id"):
            RAN.append(f"thread.{name}")
        return object.__getattribute__(self, name)
    def run(self):
        while not STOP.wait(0.01):
            pass
class Callback:
    def __eq__(self, other):
        RAN.append("callback ==")
        return True
    __hash__ = object.__hash__
    def __call__(self, phase, info):
        pass
class Named(type):
    def __getattribute__(cls, name):
        RAN.append(f"mode class.{name}")
        return type.__getattribute__(cls, name)
class Mode(TorchFunctionMode, metaclass=Named):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))
spinner = Spinner(name="spinner", daemon=True)
spinner.start()
gc.callbacks.append(Callback())
Mode().__enter__()
RAN.clear()  # what the cell itself did
"""


def test_putting_state_back_runs_none_of_the_notebooks_code(provenance):
    """What the grader reads of a thread, a gc callback or a mode's class is read through
    ``object``'s and ``type``'s own lookups: a notebook's ``__getattribute__`` or ``__eq__``
    would run inside the grader's check, with the grader's frames on the stack."""
    baseline = global_state.take()
    stop = threading.Event()
    namespace = {"__name__": "__main__", "STOP": stop}
    try:
        cell(_RUNS_CODE_WHEN_LOOKED_AT, namespace)
        found = global_state.restore(baseline, provenance)
        ran = list(namespace["RAN"])
    finally:
        stop.set()
        global_state.restore(baseline, provenance)
        namespace["spinner"].join(5)
    assert ran == []
    said = "\n".join(found)
    for expected in ("a thread it started (spinner)", "gc callback", "(__main__.Mode)"):
        assert expected in said, said


# torch.add registered as mul's kernel by sched.run, under 600 more calls of sched.run
_UNDER_600_SCHEDULERS = (
    "lib = torch.library.Library('aten', 'IMPL')\n"
    "s = sched.scheduler()\n"
    "s.enter(0, 0, lib.impl, ('mul.Tensor', torch.add, 'CPU'))\n"
    "for _ in range(600):\n"
    "    outer = sched.scheduler()\n"
    "    outer.enter(0, 0, s.run)\n"
    "    s = outer\n"
    "s.run()\n"
)


def _three_times_three() -> float:
    return (torch.full((1,), 3.0) * torch.full((1,), 3.0)).item()


@pytest.mark.parametrize(
    "source, named",
    [
        (  # through torch.library
            "lib = torch.library.Library('aten', 'IMPL')\n"
            "lib.impl('mul.Tensor', lambda a, b: a + b, 'CPU')\n",
            "Library.impl mul.Tensor",
        ),
        (  # a handle the notebook made through torch._C._dispatch_library itself
            "lib = torch._C._dispatch_library('IMPL', 'aten', '', '<cell>', 1)\n"
            "lib.impl('mul.Tensor', torch._C.DispatchKey.CPU, lambda a, b: a + b)\n",
            "DispatchModule.impl mul.Tensor",
        ),
        # handed to library code that calls what it is given, never naming it (review)
        (
            "lib = torch.library.Library('aten', 'IMPL')\n"
            "weakref.finalize(lib, lib.impl, 'mul.Tensor', lambda a, b: a + b, 'CPU')()\n",
            "Library.impl mul.Tensor",
        ),
        (
            "lib = torch._C._dispatch_library('IMPL', 'aten', '', '<cell>', 1)\n"
            "weakref.finalize(lib, lib.impl, 'mul.Tensor', torch._C.DispatchKey.CPU,\n"
            "                 lambda a, b: a + b)()\n",
            "DispatchModule.impl mul.Tensor",
        ),
        (
            "lib = torch.library.Library('aten', 'IMPL')\n"
            "with contextlib.ExitStack() as stack:\n"
            "    stack.callback(lib.impl, 'mul.Tensor', lambda a, b: a + b, 'CPU')\n",
            "Library.impl mul.Tensor",
        ),
        (
            "lib = torch.library.Library('aten', 'IMPL')\n"
            "t = threading.Thread(target=lib.impl, args=('mul.Tensor', lambda a, b: a + b,\n"
            "                                              'CPU'))\n"
            "t.start()\n"
            "t.join()\n",
            "Library.impl mul.Tensor",
        ),
        (
            "lib = torch._C._dispatch_library('IMPL', 'aten', '', '<cell>', 1)\n"
            "t = threading.Timer(0, lib.impl, args=('mul.Tensor', torch._C.DispatchKey.CPU,\n"
            "                                       lambda a, b: a + b))\n"
            "t.start()\n"
            "t.join()\n",
            "DispatchModule.impl mul.Tensor",
        ),
        # by library code that names what it calls, but handed the notebook's kernel
        # (second review of this session's change)
        (
            "lib = torch.library.Library('aten', 'IMPL')\n"
            "class R:\n"
            "    def __reduce_ex__(self, protocol):\n"
            "        return (lib.impl, ('mul.Tensor', lambda a, b: a + b, 'CPU'))\n"
            "copy.deepcopy(R())\n",
            "Library.impl mul.Tensor",
        ),
        (
            "lib = torch.library.Library('aten', 'IMPL')\n"
            "loop = asyncio.new_event_loop()\n"
            "loop.call_soon(lib.impl, 'mul.Tensor', lambda a, b: a + b, 'CPU')\n"
            "loop.run_until_complete(asyncio.sleep(0))\n"
            "loop.close()\n",
            "Library.impl mul.Tensor",
        ),
        (
            "lib = torch.library.Library('aten', 'IMPL')\n"
            "unittest.mock.Mock(side_effect=lib.impl)('mul.Tensor', lambda a, b: a + b, 'CPU')\n",
            "Library.impl mul.Tensor",
        ),
        (
            "lib = torch._C._dispatch_library('IMPL', 'aten', '', '<cell>', 1)\n"
            "with concurrent.futures.ThreadPoolExecutor(1) as pool:\n"
            "    pool.submit(lib.impl, 'mul.Tensor', torch._C.DispatchKey.CPU,\n"
            "                lambda a, b: a + b).result()\n",
            "DispatchModule.impl mul.Tensor",
        ),
        # a library's function as the kernel, under more library frames than are read
        (_UNDER_600_SCHEDULERS, "Library.impl mul.Tensor"),
    ],
)
def test_kernels_of_the_notebooks_are_named_and_taken_back(provenance, watched, source, named):
    """Recorded as they are made (the handle's making too), so what the notebook
    registered is taken back whole, and nothing says it cannot be: made by the notebook's
    own call, or by library code it handed the call to."""
    baseline = global_state.take()
    namespace = {}
    try:
        namespace = cell(
            "import asyncio, concurrent.futures, contextlib, copy, sched, threading, torch\n"
            "import unittest.mock, weakref\n" + source
        )
        assert _three_times_three() == 6.0  # it took
        found = global_state.restore(baseline, provenance)
        assert _three_times_three() == 9.0  # taken back
    finally:
        global_state.restore(baseline, provenance)
        handle = getattr(namespace.get("lib"), "m", namespace.get("lib"))
        if handle is not None:
            handle.reset()
    assert any(named in f for f in found), found
    assert not any("cannot be taken back" in f for f in found), found


_THREADS_READ_ONLY_WHEN_STARTED = """
import _thread, os, sys, threading, torch
from coursekit.grading.sandbox import global_state
from coursekit.grading.sandbox.provenance import Provenance
record = Provenance((os.path.dirname(os.path.dirname(torch.__file__)) + "/",))
record.seal()
assert _thread._count() == 0  # a fresh process: no thread Python started
baseline = global_state.take()
reads = []
current_frames = baseline.tools["current_frames"]
baseline.tools["current_frames"] = lambda: reads.append(1) or current_frames()
assert global_state.restore(baseline, record) == []
assert reads == [], reads
stop, running = threading.Event(), threading.Event()
namespace = {"__name__": "__main__"}
source = "def spin(stop, running):\\n    running.set()\\n    stop.wait(60)\\n"
exec(compile(source, "<cell>", "exec"), namespace)
_thread.start_new_thread(namespace["spin"], (stop, running))
assert running.wait(60)  # (a thread not yet running is seen at the next put-back)
found = global_state.restore(baseline, record)
stop.set()
assert reads and any("still runs beside the tests" in f for f in found), found
print("ok")
"""


def test_threads_are_read_only_when_python_started_one():
    """Every thread's frame is read (``sys._current_frames``, an audited call the runner's
    hook judges each time) only when a thread Python started runs: one started through
    ``_thread`` itself, past ``threading``, is still named. In a process of its own, which
    has no thread Python started (a pytest-xdist worker has one)."""
    import subprocess

    done = subprocess.run(
        [sys.executable, "-c", _THREADS_READ_ONLY_WHEN_STARTED],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]


@pytest.fixture
def watched():
    """torch's registration functions wrapped as the warm parent wraps them, for one test."""
    kept = {(o, n): vars(o)[n] for o, n in torch_registrations.registrars()}
    try:
        torch_registrations.watch()
        yield
    finally:
        for (owner, name), original in kept.items():
            setattr(owner, name, original)
        torch_registrations._WATCHERS.clear()


def test_no_wrapper_hands_back_what_it_replaced(watched):
    """The functions torch registers kernels with are held in a generator's frame, not in a
    wrapper's closure or globals (read without an audited step): reaching them takes
    ``gi_frame`` or ``gc.get_referents``, which the runner's audit hook reports."""
    import torch.library

    for owner, name in torch_registrations.registrars():
        wrapper = vars(owner)[name]
        held = [cell.cell_contents for cell in wrapper.__closure__ or ()]
        held += [v for v in vars(owner).values() if v is not wrapper]  # (its own class's)
        if owner is torch.library.Library:
            continue  # Python methods: they register through the handle's, wrapped
        assert not any(getattr(item, "__name__", "") == name for item in held), (owner, name)


_ON_A_HANDLE_TORCH_MADE = """
import json, os, torch
import torch.distributed._meta_registrations as made_by_torch
from coursekit.grading.sandbox import global_state, torch_registrations
from coursekit.grading.sandbox.provenance import Provenance
record = Provenance((os.path.dirname(os.path.dirname(torch.__file__)) + "/",
                     os.path.dirname(os.__file__) + "/"))
record.seal()
torch_registrations.watch()
snapshot = torch_registrations.dispatcher_snapshot()
baseline = global_state.take()
handle = made_by_torch.lib_impl.m
source = ("import torch, warnings\\n"
          "warnings.simplefilter('ignore')\\n"
          "handle.impl('broadcast_', torch._C.DispatchKey.CPU, lambda *args: None)\\n")
namespace = {"__name__": "__main__", "handle": handle}
exec(compile(source, "<cell>", "exec", dont_inherit=True), namespace)
found = global_state.restore(baseline, record)
print(json.dumps({
    "found": found,
    "kept": made_by_torch.lib_impl.m is handle,
    "changed": torch_registrations.dispatcher_changes(snapshot),
}))
"""


def test_a_kernel_registered_on_a_handle_torch_made_is_named_and_torch_keeps_its_own():
    """A ``Library``'s own ``.m`` (here the distributed package's): the handle's methods are
    wrapped, so the registration is recorded and named; the handle is torch's, holding
    torch's own kernels, so it is not reset: the flag says the kernel stays. In a process
    of its own: the kernel cannot be taken back, and it would break every later test of
    this process that broadcasts (DDP's check of its parameters does)."""
    import json
    import subprocess

    done = subprocess.run(
        [sys.executable, "-c", _ON_A_HANDLE_TORCH_MADE],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["found"] == [
        "it registered DispatchModule.impl broadcast_ with torch's dispatcher on a handle "
        "torch made (this cannot be taken back: the tests after it ran with it)"
    ]
    assert seen["kept"] is True  # torch's own kernels kept
    changed = seen["changed"]
    assert len(changed) == 1 and "c10d::broadcast_" in changed[0]  # and only that one


_HELPERS = """
def registers(lib, fn):
    lib.impl('mul.Tensor', fn, 'CPU')
def calls(function, *args):
    return function(*args)
def calls_registers(lib, fn):
    return calls(registers, lib, fn)
"""


@pytest.mark.parametrize(
    "source, notebooks",
    [
        ("helpers['registers'](lib, add)", False),  # the library chose to register
        ("helpers['calls'](lib.impl, 'mul.Tensor', add, 'CPU')", True),  # handed the API
        ("helpers['calls'](helpers['registers'], lib, add)", False),  # handed the library's
        ("helpers['calls_registers'](lib, add)", False),
    ],
)
def test_a_registration_is_the_notebooks_when_library_code_was_handed_the_call(
    watched, source, notebooks
):
    """Between the notebook's frame and torch's API: a library frame that names the
    function it calls chose that call (torch registers lazily, from its own functions),
    one that calls what it was handed does not (found by review)."""
    helpers = {"__name__": "a_library"}
    exec(compile(_HELPERS, "<library>", "exec"), helpers)  # noqa: S102 - the library's code
    source = (
        "import torch\n"
        "lib = torch.library.Library('aten', 'IMPL')\n"
        "add = lambda a, b: a + b\n" + source + "\n"
    )
    kernels = _kernel_stacks(source, {"__name__": "__main__", "helpers": helpers})
    assert len(kernels) == 1, kernels
    assert torch_registrations.by_notebook(kernels[0], _CodeOf()) is notebooks


def _kernel_stacks(source: str, namespace: dict) -> list:
    """The stacks recorded for ``Library.impl`` as ``source`` ran as a cell (its ``lib``
    reset after)."""
    try:
        _, seen = torch_registrations.records_since(torch_registrations.RECORD, 0)
        cell(source, namespace)
        records, _ = torch_registrations.records_since(torch_registrations.RECORD, seen)
    finally:
        if namespace.get("lib") is not None:
            namespace["lib"].m.reset()
    return [stack for what, stack, *_ in records if what.startswith("Library.impl")]


def test_a_registration_far_under_the_notebooks_frame_is_the_notebooks(watched):
    """The stack of a registration is read whole (found by review: read to 64 frames, a
    notebook's registration 70 frames under nested ``sched.run`` calls lost the notebook's
    frame, and was judged torch's; cut at 512 and judged the notebook's, torch's own under
    a deep ``torch.compile`` was flagged). A library's own function as the kernel: only
    the stack can tell."""
    kernels = _kernel_stacks(
        "import sched, torch\n" + _UNDER_600_SCHEDULERS, {"__name__": "__main__"}
    )
    assert len(kernels) == 1 and len(kernels[0]) > 600
    assert any(code.co_filename == "<cell>" for code, *_ in kernels[0])  # (read to the cell)
    assert torch_registrations.by_notebook(kernels[0], _CodeOf()) is True


class _CodeOf:
    """A stand-in provenance: library code is any but a cell's."""

    def is_library(self, code) -> bool:
        return code.co_filename != "<cell>"

    def is_library_globals(self, namespace) -> bool:
        return namespace.get("__name__") != "__main__"


def test_who_registered_is_judged_without_running_the_notebooks_code(watched):
    """Found by review: the module name ``by_notebook`` reads (the caller's) was turned into
    text with ``str()``, so a str subclass put in a library module's globals ran the
    notebook's ``__str__`` inside put-back, and judged the registration the library's. Now
    only an exact ``str`` is read, with ``str``'s own methods; anything else counts as the
    notebook's. And ``take_back`` calls only torch's own ``_destroy`` and ``reset``: a
    notebook's object recorded as a Library's ``self`` is left alone (its ``_destroy`` never
    runs), and a Library subclass has its handle reset without any of its code running."""
    ran = []

    class Spy(str):
        def __str__(self):
            ran.append("__str__")
            return "torch.library"

        def startswith(self, *args):
            ran.append("startswith")
            return True

    cell_code = compile("pass", "<cell>", "exec")
    library_code = torch_registrations.by_notebook.__code__
    stack = [
        (library_code, {"__name__": Spy("torch.library")}, 0),
        (cell_code, {"__name__": "x"}, 0),
    ]
    assert torch_registrations.by_notebook(stack, _CodeOf()) is True
    assert ran == []

    class Fake:
        m = "a handle"

        def _destroy(self):
            ran.append("_destroy")

    torch_registrations.take_back(Fake())
    made = cell(
        "import torch\n"
        "class Mine(torch.library.Library):\n"
        "    def __getattribute__(self, name):\n"
        "        RAN.append(name)\n"
        "        return object.__getattribute__(self, name)\n"
        "RAN = []\n"
        "lib = Mine('aten', 'IMPL')\n"
        "lib.impl('mul.Tensor', lambda a, b: a + b, 'CPU')\n"
        "RAN.clear()\n"
    )
    try:
        assert (torch.full((1,), 3.0) * torch.full((1,), 3.0)).item() == 6.0
        torch_registrations.take_back(made["lib"])
        assert (torch.full((1,), 3.0) * torch.full((1,), 3.0)).item() == 9.0  # taken back
        ran += made["RAN"]  # (before the finally's own reading)
    finally:
        torch_registrations._LIBRARY_DICT(made["lib"])["m"].reset()
    assert ran == []


def test_a_library_is_taken_back_whole_without_running_the_notebooks_code(provenance, watched):
    """Found by review: taking a notebook's ``Library`` back with torch's own
    ``Library._destroy`` ran Python over the notebook's objects (a handle of its own in
    ``_registration_handles``, a ``RegistrationHandle`` calling a function of its own, a
    key of its own in the ``Library``'s dict). Put-back now does ``_destroy``'s steps over
    torch's own types alone: what torch registered for the notebook (an operator, its CPU
    kernel, a fake kernel) is taken back, and nothing of the notebook's runs."""
    import torch._library.simple_registry as simple_registry

    baseline = global_state.take()
    namespace = cell(
        "import torch, torch.library, torch._library.utils as utils\n"
        "RAN, ARMED = [], [False]\n"
        "def act():\n"
        "    if ARMED[0]:\n"
        "        RAN.append(1)\n"
        "        torch.nn.modules.module.register_module_forward_hook(lambda *a: None)\n"
        "class Handle:\n    def destroy(self):\n        act()\n"
        "class Key:\n"
        "    def __hash__(self):\n        return hash('m')\n"
        "    def __eq__(self, other):\n        act()\n        return False\n"
        "lib = torch.library.Library('zz_taken_back', 'DEF')\n"
        "lib.define('f(Tensor x) -> Tensor')\n"
        "lib.impl('f', lambda x: x * 2, 'CPU')\n"
        "lib._register_fake('f', lambda x: torch.empty_like(x))\n"
        "lib._registration_handles += [Handle(), utils.RegistrationHandle(act)]\n"
        # torch's own code made anew over a cell of the notebook's
        "import types, torch._library.fake_impl as fake_impl\n"
        "code = next(c for c in fake_impl.FakeImplHolder.register.__code__.co_consts\n"
        "            if type(c) is types.CodeType and c.co_name == 'deregister_fake_kernel')\n"
        "class Self:\n"
        "    @property\n    def kernels(self):\n        act()\n        return []\n"
        "cells = {'self': types.CellType(Self()), 'kernel': types.CellType(None)}\n"
        "rebuilt = types.FunctionType(code, fake_impl.FakeImplHolder.register.__globals__,\n"
        "    'deregister_fake_kernel', None, tuple(cells[n] for n in code.co_freevars))\n"
        "lib._registration_handles.append(utils.RegistrationHandle(rebuilt))\n"
        # what torch.library's cache clearer would read and delete through
        "class Namespace:\n"
        "    @property\n    def __dict__(self):\n        act()\n        return {'f': 1}\n"
        "    def __delattr__(self, name):\n        act()\n"
        "torch.ops.zz_taken_back = Namespace()\n"
        # what torch's own deregister function would run over: a kernels list of its own
        "from torch._library.simple_registry import singleton\n"
        "class Kernels(list):\n"
        "    def remove(self, item):\n        act()\n        return list.remove(self, item)\n"
        "holder = singleton.find('zz_taken_back::f').fake_impl\n"
        "holder.kernels = Kernels(holder.kernels)\n"
        "held = vars(lib)\n"
        "m = held.pop('m')\n"
        "held[Key()] = None\n"
        "held['m'] = m\n"
        "ARMED[0] = True\n"
    )
    try:
        found = global_state.restore(baseline, provenance)
        ran = len(namespace["RAN"])
        hooks = dict(torch.nn.modules.module._global_forward_hooks)
        holder = simple_registry.singleton.find("zz_taken_back::f").fake_impl
        try:
            defined = torch._C._dispatch_has_kernel_for_dispatch_key("zz_taken_back::f", "CPU")
        except RuntimeError:  # "operator zz_taken_back::f does not exist": taken back whole
            defined = False
    finally:
        namespace["ARMED"][0] = False
        vars(torch.ops).pop("zz_taken_back", None)
        # the handles left (the notebook's): torch's own finalizer of the Library would
        # call them as this process ends
        namespace["lib"]._registration_handles.clear()
        global_state.restore(baseline, provenance)
    assert ran == 0, f"put-back ran the notebook's code {ran} time(s)"
    assert hooks == {}
    assert not defined  # the operator and its kernels taken back
    # the fake kernel, in a holder whose list the notebook replaced, is left (flagged)
    assert type(holder.kernels).__name__ == "Kernels"
    assert any("zz_taken_back" in text for text in found), found


def test_a_fake_kernel_and_a_dispatch_rule_are_taken_back(provenance, watched):
    """What torch's deregister functions do, done over exact types by put-back itself
    (they are not called: they work over state a cell can change): a notebook's fake
    kernel and ``__torch_dispatch__`` rule are gone once its Library is taken back."""
    import torch._library.simple_registry as simple_registry

    baseline = global_state.take()
    namespace = cell(
        "import torch, torch.library\n"
        "from torch.utils._python_dispatch import TorchDispatchMode\n"
        "class Mode(TorchDispatchMode):\n    pass\n"
        "lib = torch.library.Library('zz_fake_back', 'DEF')\n"
        "lib.define('f(Tensor x) -> Tensor')\n"
        "lib.impl('f', lambda x: x * 2, 'CPU')\n"
        "lib._register_fake('f', lambda x: torch.empty_like(x))\n"
        "lib._register_torch_dispatch_rule('f', Mode, lambda *a, **k: None)\n"
    )
    entry = simple_registry.singleton.find("zz_fake_back::f")
    try:
        before = (len(entry.fake_impl.kernels), len(entry.torch_dispatch_rules._data))
        found = global_state.restore(baseline, provenance)
        after = (len(entry.fake_impl.kernels), len(entry.torch_dispatch_rules._data))
    finally:
        global_state.restore(baseline, provenance)
    assert before == (1, 1)
    assert after == (0, 0), after
    assert namespace["lib"]._registration_handles == []
    assert any("zz_fake_back" in text for text in found), found


def test_the_wrappers_run_none_of_the_notebooks_code(provenance, watched):
    """Found by review: the name registered was read with ``str``'s methods looked up on
    its class, so a subclass ran the notebook's code inside the frame that holds what the
    wrappers replaced (an error's traceback is dropped by ``BaseException``'s own method,
    for the same reason)."""
    made = cell(
        "import torch\n"
        "RAN = []\n"
        "class Name(str):\n"
        "    def strip(self, *args):\n"
        "        RAN.append('strip')\n"
        "        return str.strip(self, *args)\n"
        "handle = torch._C._dispatch_library('FRAGMENT', 'aten', '', '<cell>', 1)\n"
        "handle.impl(Name('sin'), torch._C.DispatchKey.CPU, lambda x: x)\n"
    )
    try:
        assert made["RAN"] == []
    finally:
        made["handle"].reset()
        global_state.restore(global_state.take(), provenance)


def test_a_kernel_registered_and_removed_between_two_looks_is_still_named(provenance, watched):
    """Registered and removed again inside one test's call: no reading of the dispatcher
    sees it, but the record kept as it was made does."""
    baseline = global_state.take()
    try:
        cell(
            "import torch\n"
            "handle = torch._C._dispatch_library('IMPL', 'aten', '', '<cell>', 1)\n"
            "handle.impl('mul.Tensor', torch._C.DispatchKey.CPU, lambda a, b: a + b)\n"
            "handle.reset()\n"
        )
        found = global_state.restore(baseline, provenance)
    finally:
        global_state.restore(baseline, provenance)
    assert any("DispatchModule.impl mul.Tensor" in f for f in found), found


def _registered_and_taken_back(source: str, provenance) -> tuple[dict, list[str]]:
    """Run ``source`` as a cell that registers ``aten::mul`` on its own ``Library`` ``lib``;
    then put back: the kernel must be taken back. (namespace, what put-back found)."""
    baseline = global_state.take()
    namespace = {}
    try:
        namespace = cell(source)
        found = global_state.restore(baseline, provenance)
        assert _three_times_three() == 9.0  # taken back
    finally:
        global_state.restore(baseline, provenance)
        handle = getattr(namespace.get("lib"), "m", None)
        if handle is not None:
            handle.reset()
    return namespace, found


_REWRITES_THE_RECORD = """
import torch
lib = torch.library.Library('aten', 'IMPL')
lib.impl('mul.Tensor', lambda a, b: a + b, 'CPU')
# what the wrappers hold, read through closures and bound methods (no audited step)
seen, lists, todo = set(), [], [getattr(torch.library.Library, 'impl')]
while todo:
    item = todo.pop()
    if id(item) in seen or len(seen) > 500:
        continue
    seen.add(id(item))
    if type(item) is list:
        lists.append(item)
        continue
    for cell in getattr(item, '__closure__', None) or ():
        try:
            todo.append(cell.cell_contents)
        except ValueError:
            pass
    owner = getattr(item, '__self__', None)
    if owner is not None and not isinstance(owner, type):
        todo.append(owner)
for record in lists:  # each registration rewritten as made by nobody's code
    for index, entry in enumerate(record):
        if type(entry) is tuple and len(entry) == 4:
            record[index] = (entry[0], [], entry[2], ())
"""


def test_the_record_of_registrations_cannot_be_rewritten(provenance, watched):
    """Found by review: the record was a list, reached through the wrappers' closures
    (``record`` was its ``append``) with no audited step, and a registration rewritten there
    as made by no code of the notebook's was neither named nor taken back. The record now
    lives in a generator's frame, which only an audited step reaches."""
    namespace, found = _registered_and_taken_back(_REWRITES_THE_RECORD, provenance)
    assert namespace["lists"] == []
    assert any("Library.impl mul.Tensor" in f for f in found), found


def test_the_keeper_hands_on_what_its_record_raised_and_goes_on():
    """A timer's exception met while a registration is recorded is handed to the caller
    with no traceback (raised inside the keeper, it would end it, and its traceback would
    lead to the frame that holds the functions the wrappers replaced)."""

    def record(item):
        raise KeyboardInterrupt

    keeper = torch_registrations._keeper(
        [lambda *args: "made"], record, sys._getframe, torch_registrations._stack_of
    )
    next(keeper)
    for request in [(0, "impl", (), {}), ("no index", "impl", (), {}), (0, "impl", (), {})]:
        done, error = keeper.send(request)  # each handed on, and the keeper goes on
        assert done is False and isinstance(error, KeyboardInterrupt | TypeError)
        assert error.__traceback__ is None
    assert keeper.send(("not", "a", "request")) == (False, None)
    assert keeper.throw(KeyboardInterrupt)[0] is False  # thrown in: handed back too
    assert keeper.send((0, "impl", (), {}))[0] is False


_SENDS_TO_THE_KEEPER = """
import torch
wrapper = vars(torch._C._DispatchModule)['impl']
parts = {name: cell.cell_contents for name, cell in zip(
    wrapper.__code__.co_freevars, wrapper.__closure__)}
lib = torch._C._dispatch_library('IMPL', 'aten', '', '<cell>', 1)
# straight to the keeper, past the wrapper: the stack it was once handed, empty
done, made = parts['send']((parts['index'], parts['label'],
    (lib, 'mul.Tensor', torch._C.DispatchKey.CPU, lambda a, b: a + b), {}))
"""


def test_a_registration_sent_to_the_keeper_past_its_wrapper_is_the_notebooks(provenance, watched):
    """Found by review: a wrapper handed the keeper the stack it had read, so code that
    reached the keeper's ``send`` through the wrapper's closure could send an empty stack,
    and its kernel was judged the library's. The keeper now reads who sent the request."""
    baseline = global_state.take()
    namespace = {}
    try:
        namespace = cell(_SENDS_TO_THE_KEEPER)
        assert namespace["done"] is True and _three_times_three() == 6.0
        found = global_state.restore(baseline, provenance)
        assert _three_times_three() == 9.0  # taken back
    finally:
        global_state.restore(baseline, provenance)
        if namespace.get("lib") is not None:
            namespace["lib"].reset()
    assert any("DispatchModule.impl mul.Tensor" in f for f in found), found


_CLOSES_THE_RECORD = """
import torch
from coursekit.grading.sandbox import torch_registrations
ended = []
for generator in (torch_registrations.RECORD.__self__,):  # the ledger
    try:
        generator.close()
    except RuntimeError:
        ended.append(False)
lib = torch.library.Library('aten', 'IMPL')
lib.impl('mul.Tensor', lambda a, b: a + b, 'CPU')
"""


def test_closing_the_record_of_registrations_ends_nothing(provenance, watched):
    """Found by review: ``RECORD.__self__.close()`` ended the ledger with no audited step,
    and no later registration was recorded or taken back. ``close()`` now raises to its
    caller, and the ledger goes on."""
    namespace, found = _registered_and_taken_back(_CLOSES_THE_RECORD, provenance)
    assert namespace["ended"] == [False]
    assert any("Library.impl mul.Tensor" in f for f in found), found


def test_a_record_the_notebook_adds_is_named_and_not_read(provenance, watched):
    """The ledger takes what any caller sends it: an entry not of the wrappers' form is
    named, and its parts are not read (a notebook's object there would run its code as the
    stack is judged)."""
    baseline = global_state.take()
    try:
        made = cell(
            "import torch\n"
            "from coursekit.grading.sandbox import torch_registrations\n"
            "RAN = []\n"
            "class Code:\n"
            "    def __getattribute__(self, name):\n"
            "        RAN.append(name)\n"
            "        return object.__getattribute__(self, name)\n"
            "torch_registrations.RECORD(('add', ('forged', [(Code(), {})], None)))\n"
            "torch_registrations.RECORD(('add', 'not a record'))\n"
        )
        found = global_state.restore(baseline, provenance)
    finally:
        global_state.restore(baseline, provenance)
    assert made["RAN"] == []
    assert sum("it added to the record of torch.library registrations" in f for f in found) == 2


# ------------------------------------- class c: library code made to run the notebook's

_LIBRARY_CODE_RUNNING_NOTEBOOK_CODE = """
import functools, types, torch
import torch.utils._pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode
always = lambda *a, **k: True
class Always(torch.nn.Module):
    def forward(self, *args):
        return True
class Mode(TorchDispatchMode):  # torch wraps __torch_dispatch__ in a function of its own
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))
linear = torch.nn.Linear(2, 2)
linear.forward = always  # an instance's own attribute
forged_globals = types.FunctionType(
    torch.testing.assert_close.__code__,
    dict(torch.testing.assert_close.__globals__, not_close_error_metas=lambda *a, **k: []),
)
forged_defaults = types.FunctionType(
    torch.nn.functional.dropout.__code__, torch.nn.functional.dropout.__globals__, None, (0.0,)
)
notebooks = {
    "forged globals": forged_globals,
    "partial bound to a lambda": functools.partial(pytree.tree_map, always),
    "keyword bound to a lambda": functools.partial(sorted, key=always),
    "torch.allclose with a lambda keyword": functools.partial(torch.allclose, rtol=always),
    "method bound to a notebook object": types.MethodType(torch.nn.Module.__call__, Always()),
    "library object with a notebook attribute": linear.__call__,
    "mode whose dispatch torch wrapped": Mode(),
    "subclass of a library class": Always,
}
"""


def test_library_code_is_the_libraries_only_when_all_it_can_run_is(provenance):
    namespace = cell(_LIBRARY_CODE_RUNNING_NOTEBOOK_CODE)
    for what, value in namespace["notebooks"].items():
        assert not provenance.is_library_callable(value), what
        assert not harness_seal.library_value(value, provenance), what
    forged_defaults = namespace["forged_defaults"]
    assert not harness_seal.library_value(forged_defaults, provenance)  # strict: not its own
    for value in (
        torch.allclose,
        torch.testing.assert_close,
        functools.reduce,
        torch.nn.Linear(2, 2).__call__,
        torch.nn.functional.dropout,
        functools.partial(torch.allclose, atol=1.0),  # a library function over data
    ):
        assert provenance.is_library_callable(value), value


def test_a_library_function_compiled_again_over_the_notebooks_globals_runs_as_the_notebook(
    provenance,
):
    path = multiprocessing.pool.__file__
    copy = cell(
        f"exec(compile(open({path!r}).read(), {path!r}, 'exec'), copy)\n",
        {"__name__": "__main__", "copy": {"__name__": "x", "__package__": "multiprocessing"}},
    )["copy"]
    frames = []
    copy["starmapstar"]((lambda: frames.append(sys._getframe(1)), [()]))
    assert provenance.is_library(frames[0].f_code)  # the code is the file's own...
    assert not provenance.is_library_frame(frames[0])  # ...but it runs in the notebook's globals
    assert not provenance.is_library_callable(copy["starmapstar"])


def test_the_seal_names_torchs_comparisons_replaced_by_library_code_run_as_the_notebooks(
    provenance,
):
    sealed = harness_seal.seal()
    originals = {name: getattr(torch, name) for name in ("equal", "allclose", "isclose")}
    hook = vars(torch.Tensor)["__torch_function__"]
    namespace = cell(_LIBRARY_CODE_RUNNING_NOTEBOOK_CODE)
    notebooks = namespace["notebooks"]
    try:
        torch.equal = notebooks["partial bound to a lambda"]
        torch.allclose = notebooks["method bound to a notebook object"]
        torch.isclose = namespace["forged_defaults"]
        # every tensor operation goes through it: the notebook's, over torch's own code
        torch.Tensor.__torch_function__ = classmethod(
            types.FunctionType(
                hook.__func__.__code__,
                dict(hook.__func__.__globals__),
                "f",
                hook.__func__.__defaults__,
            )
        )
        found = set(harness_seal.changes(sealed, provenance))
    finally:
        torch.Tensor.__torch_function__ = hook
        for name, original in originals.items():
            setattr(torch, name, original)
    assert {
        "torch.equal",
        "torch.allclose",
        "torch.isclose",
        "torch.Tensor.__torch_function__",
    } <= found, found
    assert harness_seal.changes(sealed, provenance) == []


def test_the_seal_names_a_global_a_torch_function_reads_rebound(provenance, monkeypatch):
    """``nn.Linear.forward`` calls ``F.linear``, looking ``F`` up in its module as it runs:
    rebinding that global changes every linear layer without replacing a sealed function.
    A module's global must stay its module; a function there, the library's."""
    import torch.nn.modules.linear as linear
    import torch.nn.modules.loss as loss

    sealed = harness_seal.seal()
    fake = types.ModuleType("F")  # a module, even: not the one the library imported
    fake.linear = lambda x, weight, bias=None: x.sum() * 0
    namespace = cell("import torch\ndef scaled_mse(a, b, **kw):\n    return 0 * a.sum()\n")
    monkeypatch.setattr(linear, "F", fake)
    monkeypatch.setattr(loss, "F", types.SimpleNamespace(mse_loss=namespace["scaled_mse"]))
    found = set(harness_seal.changes(sealed, provenance))
    monkeypatch.undo()
    assert {"torch.nn.modules.linear.F", "torch.nn.modules.loss.F"} <= found, found
    assert harness_seal.changes(sealed, provenance) == []


def test_a_library_function_of_another_name_put_in_place_is_named(provenance, monkeypatch):
    """All of it is library code, yet ``torch.equal = torch.is_same_size`` makes every
    comparison pass. Only the pass-through wrappers libraries are known to install pass
    (``harness_seal.KNOWN_WRAPPERS``). What a caller can set (``__wrapped__`` on a partial,
    ``__name__``) proves nothing; nor does a library's decorator that holds the original and
    computes something else from data (autocast, a context that suppresses errors,
    ``contextlib``, ``torch.func``); nor another function of the same name (every
    module's method is ``forward``)."""
    import contextlib

    import torch._dynamo  # (imported by the warm parent: it wraps torch.manual_seed)
    import torch.nn.functional as F
    from torch.utils._contextlib import context_decorator

    raw_softsign = F.softsign  # wrapped before the seal, as when torch.compile ran already
    F.softsign = torch._dynamo.disable(raw_softsign)
    try:
        sealed = harness_seal.seal()
        forged = functools.partial(torch.is_same_size)
        forged.__wrapped__ = torch.equal
        dispatched = functools.singledispatch(torch.allclose)
        dispatched.register(torch.Tensor, lambda *args, **kwargs: True)
        suppressed = context_decorator(
            contextlib.suppress(AssertionError), torch.testing.assert_close
        )
        replacements = {
            "torch.equal": (torch, "equal", forged),
            "torch.allclose": (torch, "allclose", dispatched),
            "torch.isclose": (torch, "isclose", contextlib.contextmanager(torch.isclose)),
            "torch.testing.assert_close": (torch.testing, "assert_close", suppressed),
            "torch.nn.functional.mse_loss": (F, "mse_loss", F.l1_loss),
            "torch.nn.functional.l1_loss": (F, "l1_loss", torch.func.grad(F.l1_loss)),
            "torch.nn.Linear.forward": (
                torch.nn.Linear,
                "forward",
                torch.autocast("cpu", dtype=torch.bfloat16)(torch.nn.Linear.forward),
            ),
            # of the same name, from the same library
            "torch.nn.MSELoss.forward": (torch.nn.MSELoss, "forward", torch.nn.L1Loss.forward),
            "torch.Tensor.__eq__": (torch.Tensor, "__eq__", torch.Tensor.__ne__),
        }
        # torch's own pass-through wrapper, its closure rewritten to hold the original in
        # another cell than the one it calls
        swapped = torch._dynamo.disable(F.l1_loss)
        swapped.__closure__[1].cell_contents = F.smooth_l1_loss
        swapped.__wrapped__ = F.smooth_l1_loss
        replacements["torch.nn.functional.smooth_l1_loss"] = (F, "smooth_l1_loss", swapped)
        for owner, name, value in replacements.values():
            monkeypatch.setattr(owner, name, value, raising=False)
        found = set(harness_seal.changes(sealed, provenance))
        monkeypatch.undo()
        assert set(replacements) <= found, set(replacements) - found
        # what libraries do: torch.compile wraps the optimizers with torch._dynamo.disable
        monkeypatch.setattr(F, "mse_loss", torch._dynamo.disable(F.mse_loss))
        monkeypatch.setattr(
            torch.optim.Adam, "_init_group", torch._dynamo.disable(torch.optim.Adam._init_group)
        )
        F.softsign = torch._dynamo.disable(F.softsign)  # and again: it wraps the same call
        assert harness_seal.changes(sealed, provenance) == []
    finally:
        F.softsign = raw_softsign


@pytest.mark.parametrize(
    "table, key, value",
    [
        # copy.deepcopy(model) would share the weights it should copy
        ("copy._deepcopy_dispatch", "torch.nn.Parameter", "copy._deepcopy_atomic"),
        # torch.testing.assert_close would pass anything in float32
        ("torch.testing._comparison._DTYPE_PRECISIONS", "torch.float32", (1e9, 1e9)),
    ],
)
def test_a_table_a_library_function_consults_is_sealed(provenance, table, key, value):
    import copy

    import torch.testing._comparison  # noqa: F401

    def resolve(path):
        module, _, name = path.rpartition(".")
        return getattr(sys.modules[module], name) if module in sys.modules else resolve_attr(path)

    def resolve_attr(path):
        return functools.reduce(getattr, path.split(".")[1:], torch)

    sealed = harness_seal.seal()
    held, entry = resolve(table), resolve(key)
    value = resolve(value) if isinstance(value, str) else value
    before = held.get(entry, copy)
    held[entry] = value
    try:
        found = harness_seal.changes(sealed, provenance)
    finally:
        if before is copy:
            del held[entry]
        else:
            held[entry] = before
    assert any(f.startswith(table) for f in found), found
    # a library adding its own class (copyreg.pickle on import, say) is not a change
    held[types.SimpleNamespace] = held.get(object, copy.copy)
    try:
        assert harness_seal.changes(sealed, provenance) == []
    finally:
        del held[types.SimpleNamespace]


# Where the seal looks a name up: (how a cell reaches the dict, the key the seal looks up
# there, what the seal then names).
_SEALED_DICTS = {
    "a library module's globals": (
        "vars(torch.nn.functional)",
        "'mse_loss'",
        "torch.nn.functional (a key that is not a plain string)",
    ),
    "coursekit's globals": (
        "vars(sys.modules['coursekit.checks'])",
        "'QUESTIONS'",
        "coursekit.checks (a key that is not a plain string)",
    ),
    "sys.modules": ("sys.modules", "'coursekit'", "sys.modules (a key that is not a plain string)"),
    "sys": ("vars(sys)", "'meta_path'", "sys (a key that is not a plain string)"),
    "a table keyed by classes": (
        "copy._deepcopy_dispatch",
        "list",
        "copy._deepcopy_dispatch[<class 'list'>]",
    ),
}


@pytest.mark.slow  # over 3 s: out of the quick run (-m 'not slow')
@pytest.mark.parametrize("where", sorted(_SEALED_DICTS))
def test_a_key_that_collides_with_a_name_the_seal_reads_never_answers(provenance, where):
    """The seal's entry replaced, and a key of the notebook's class put ahead of it in the
    dict's probe order, its hash the entry's key's: a lookup compares the two, and its
    ``__eq__`` (saying "equal") would answer with the very object the seal holds (found by
    review). The seal looks no name up in a dict that holds such a key: it names the dict
    and reads its names as items (a rebinding there is still named, and a memory test's
    fork puts it back, the dict first made of names only); tables keyed by classes are
    compared by identity."""
    reach, key, named = _SEALED_DICTS[where]
    import copy  # noqa: F401  (reached by the cell)

    import coursekit.checks  # noqa: F401  (imported before the seal, as in the warm parent)

    sealed = harness_seal.seal()
    namespace = {"__name__": "__main__"}
    source = (
        "import copy, sys, torch, torch.nn.functional, coursekit.checks\n"
        "RAN, ARMED = [], [False]\n"
        f"held, key = {reach}, {key}\n"
        "class Key:\n"
        "    def __hash__(self):\n        return hash(key)\n"
        "    def __eq__(self, other):\n"
        "        if ARMED[0]:\n            RAN.append(other)\n            return True\n"
        "        return False\n"
        "original = held.pop(key)\n"
        "held[Key()] = original  # what the seal holds, answered for the name\n"
        "held[key] = lambda *args, **kwargs: None  # the entry itself, replaced\n"
        "ARMED[0] = True\n"
    )
    try:
        cell(source, namespace)
        found = harness_seal.changes(sealed, provenance)
        held = namespace["held"]
        rebound = [n for n in harness_seal.rebound_names(sealed, provenance) if n[1] is held]
        kept: list = []
        harness_seal.put_back_names(rebound, kept)  # as a memory test's fork does
        put_back = [dict.get(held, n[2]) is n[3] for n in rebound]
        ran = list(namespace["RAN"])
    finally:
        namespace.get("ARMED", [None])[0] = False
        held = namespace.get("held")
        if held is not None and "original" in namespace:
            for planted in [k for k in list(held) if type(k).__name__ == "Key"]:
                del held[planted]
            held[namespace["key"]] = namespace["original"]
    assert ran == [], f"the seal ran the notebook's __eq__ against {ran}"
    assert named in found, found
    assert all(put_back) and not any(type(k) is not str for k in list(held) if rebound)
    assert harness_seal.changes(sealed, provenance) == []


# Code of the notebook's the seal's comparison once ran (found by review), each set up
# by a cell with ``act()`` to call: (the set-up, what the seal must still name).
_RUNS_ITS_CODE_IN_THE_SEAL = {
    "a class's __module__ read as text": (
        "class Module:\n    def __str__(self):\n        act()\n        return 'x'\n"
        "class Planted:\n    __module__ = Module()\n"
        "copy._deepcopy_dispatch[Planted] = copy._deepcopy_atomic\n",
        "torch.chain_matmul",
    ),
    "a metaclass's __module__": (
        "class Meta(type):\n"
        "    @property\n    def __module__(cls):\n        act()\n        return 'x'\n"
        "class Planted(metaclass=Meta):\n    pass\n"
        "copy._deepcopy_dispatch[Planted] = copy._deepcopy_atomic\n",
        "torch.chain_matmul",
    ),
    "a member's name formatted": (
        "class Name:\n    def __format__(self, spec):\n        act()\n        return 'x'\n"
        "planted = types.ModuleType('coursekit.zz_planted')\n"
        "planted.K = type('K', (), {Name(): 1, 'f': lambda self: 0})\n"
        "sys.modules['coursekit.zz_planted'] = planted\n",
        "coursekit.zz_planted.K.f",
    ),
    "a collection": (
        "class Phoenix:\n"
        "    def __init__(self):\n        self.me = self\n"
        "    def __del__(self):\n        act()\n        Phoenix()\n"
        "Phoenix()\n"
        "gc.set_threshold(1)\n",
        "torch.chain_matmul",
    ),
    "a code's file name compared": (
        "class Name(str):\n"
        "    def __ne__(self, other):\n        act()\n        return False\n"
        "    __hash__ = str.__hash__\n"
        "def f():\n    return 0\n"
        "f.__code__ = f.__code__.replace(co_filename=Name('x.py'))\n"
        "planted = types.ModuleType('coursekit.zz_planted')\n"
        "planted.f = f\n"
        "sys.modules['coursekit.zz_planted'] = planted\n",
        "coursekit.zz_planted.f",
    ),
    "a library function's keyword defaults compared": (
        "class Key:\n"
        "    def __hash__(self):\n        return hash('zz')\n"
        "    def __eq__(self, other):\n        act()\n        return False\n"
        "torch.meshgrid.__kwdefaults__[Key()] = None\n"
        "f = torch.meshgrid\n"
        "g = types.FunctionType(f.__code__, f.__globals__, f.__name__, f.__defaults__)\n"
        "g.__kwdefaults__ = {'indexing': 'xy', 'zz': 0}\n",
        "torch.chain_matmul",
    ),
}


@pytest.mark.slow  # over 4 s: out of the quick run (-m 'not slow')
@pytest.mark.parametrize("route", sorted(_RUNS_ITS_CODE_IN_THE_SEAL))
def test_the_seal_lets_nothing_of_the_notebooks_run_inside_it(provenance, route):
    """The seal's comparison reads classes' names through their C slots and a class's own
    members (never ``str()``, never a metaclass's property), formats only exact ``str``,
    compares keyword defaults as items, and runs with no collection: none of the
    notebook's code runs inside it, and the real change beside (a harness function
    replaced) is still named."""
    import copy
    import gc

    import coursekit.checks  # noqa: F401  (imported before the seal, as in the warm parent)

    sealed = harness_seal.seal()
    threshold = gc.get_threshold()
    source, named = _RUNS_ITS_CODE_IN_THE_SEAL[route]
    namespace = {"__name__": "__main__"}
    original = torch.chain_matmul
    try:
        cell(
            "import copy, gc, sys, torch, types\n"
            "RAN, ARMED = [], [False]\n"
            "def act():\n    if ARMED[0]:\n        RAN.append(1)\n" + source,
            namespace,
        )
        # the real change beside: a replacement judged against the library's defaults, or
        # the notebook's own
        torch.chain_matmul = namespace.get("g", lambda *matrices: matrices[0])
        namespace["ARMED"][0] = True  # (a collection before this point is no test's)
        found = harness_seal.changes(sealed, provenance)
        ran = len(namespace["RAN"])
    finally:
        namespace.get("ARMED", [None])[0] = False
        torch.chain_matmul = original
        gc.set_threshold(*threshold)
        for key in [
            k for k in list(copy._deepcopy_dispatch) if type(k).__name__ in ("type", "Meta")
        ]:
            if getattr(key, "__qualname__", "") == "Planted":
                del copy._deepcopy_dispatch[key]
        for key in [k for k in list(torch.meshgrid.__kwdefaults__) if type(k) is not str]:
            del torch.meshgrid.__kwdefaults__[key]
        sys.modules.pop("coursekit.zz_planted", None)
    assert ran == 0, f"the seal ran the notebook's code {ran} time(s)"
    assert any(text.startswith(named) for text in found), found


def test_the_seal_names_a_question_given_other_attributes_or_a_class_other_bases(provenance):
    """Found by review, unaudited both: a question's attributes replaced whole
    (``q.__dict__ = {...}``: the seal compared the dict it had recorded, still as it was),
    and a sealed class's bases set through a library's frame
    (``unittest.mock.patch.object(nn.MSELoss, "__bases__", ...)``: its methods then come
    from another class). The seal compares each question's dict and each sealed class's MRO
    and metaclass by identity, in C."""
    from unittest import mock

    import coursekit.checks

    sealed = harness_seal.seal()
    question = next(iter(coursekit.checks.QUESTIONS.values()))
    name = next(iter(coursekit.checks.QUESTIONS))
    attributes = vars(question)
    namespace = cell(
        "import torch\n"
        "class Evil(torch.nn.modules.loss._Loss):\n"
        "    def forward(self, a, b):\n        return (a - b).sum() * 0\n"
    )
    bases = torch.nn.MSELoss.__bases__
    patch = mock.patch.object(torch.nn.MSELoss, "__bases__", (namespace["Evil"],))
    try:
        question.__dict__ = dict(attributes)  # the same attributes, in another dict
        patch.start()
        found = harness_seal.changes(sealed, provenance)
    finally:
        torch.nn.MSELoss.__bases__ = bases  # (mock's stop would delete it: not its own)
        question.__dict__ = attributes
    assert f"QUESTIONS[{name!r}].__dict__" in found, found
    assert "torch.nn.MSELoss.__bases__" in found, found
    assert harness_seal.changes(sealed, provenance) == []


def test_a_dict_changed_where_nothing_is_sealed_is_looked_at_once_then_compared_whole(
    provenance,
):
    """The quick look compares each dict that holds sealed entries whole, with what it held
    at the last look that found it clean. A name Python adds (a warning registry) sends
    that dict down the slow path once: its keys are read (all exactly ``str``) and its
    sealed entries looked up, and what it holds then is the next look's baseline. A sealed
    entry replaced after that, or a key of the notebook's put there, is still named."""
    import torch.nn.functional as F

    seal = harness_seal.seal()
    namespace = vars(F)
    at = next(i for i, held in enumerate(seal.quick.spaces) if held is namespace)
    original = F.mse_loss
    try:
        namespace["__warningregistry__"] = {}  # Python's own addition: not a change
        assert harness_seal.changes(seal, provenance) == []
        assert seal.quick.space_keys[at][-1] == "__warningregistry__"  # the new baseline
        assert harness_seal._look(seal.quick) == ([], [])  # and the quick path again
        F.mse_loss = F.l1_loss
        assert "torch.nn.functional.mse_loss" in harness_seal.changes(seal, provenance)
        F.mse_loss = original
        assert harness_seal.changes(seal, provenance) == []
        namespace[1] = None  # a key that is not a name: nothing looked up there, the dict named
        assert harness_seal._look(seal.quick) == ([at], [])
        assert "torch.nn.functional (a key that is not a plain string)" in harness_seal.changes(
            seal
        )
    finally:
        F.mse_loss = original
        namespace.pop(1, None)
        namespace.pop("__warningregistry__", None)
    assert harness_seal.changes(seal, provenance) == []


def test_an_attribute_set_on_a_sealed_function_is_named(provenance):
    """``Optimizer.zero_grad`` is torch's ``_disable_dynamo`` wrapper, which calls the
    ``__dynamo_disable`` attribute of the function it wraps: set by a notebook, every
    ``zero_grad()`` runs its code. The warm parent makes torch's own first (preload.py), so
    an optimizer stepped honestly changes nothing; one the notebook sets is named."""
    from coursekit.grading.sandbox import preload

    preload._make_dynamo_disables()
    preload._hook_optimizer_steps()
    sealed = harness_seal.seal()
    model = torch.nn.Linear(2, 1)
    torch.optim.SGD(model.parameters(), lr=0.1).zero_grad()  # honest: as torch does it
    assert harness_seal.changes(sealed, provenance) == []
    wrapped = torch.optim.Optimizer.zero_grad.__wrapped__
    namespace = cell("def keep_grads(*args, **kwargs):\n    return None\n")
    before = wrapped.__dict__["__dynamo_disable"]
    wrapped.__dynamo_disable = namespace["keep_grads"]
    plain = torch.nn.functional.softsign  # a sealed function with no attribute of its own
    plain.__dynamo_disable = namespace["keep_grads"]
    try:
        found = harness_seal.changes(sealed, provenance)
    finally:
        wrapped.__dynamo_disable = before
        del plain.__dynamo_disable
    assert any("zero_grad" in f and "__dynamo_disable" in f for f in found), found
    assert any(f.startswith("torch.nn.functional.softsign.__dict__") for f in found), found
    assert harness_seal.changes(sealed, provenance) == []


class _FakeEngine:
    def run_backward(self, *args, **kwargs):
        return ()


@pytest.mark.parametrize(
    "owner, name, reached_by",
    [
        # read by torch.optim.sgd.sgd, which SGD.step calls: two levels below the seal's
        ("torch.optim.sgd", "_single_tensor_sgd", "a global of a global"),
        # F.mse_loss calls torch._C._nn.mse_loss: an attribute chain, not a global
        ("torch._C._nn", "mse_loss", "an attribute chain"),
        ("torch._C._VariableFunctions", None, "torch._VF.vf"),
        ("torch._VF", "norm", "a name added where torch.norm looks it up"),
        # dunders of torch's Python classes, beyond __init__/__call__/__torch_function__
        ("torch.Tensor", "__deepcopy__", "a dunder copy.deepcopy calls"),
        ("torch.Tensor", "__rsub__", "a reflected operator"),
        ("torch.nn.Module", "__setstate__", "a dunder of Module"),
        ("torch.nn.Parameter", "__deepcopy__", "a dunder of Parameter"),
        # an object of torch's that torch.autograd.backward calls into
        ("torch.autograd.Variable", "_execution_engine", "torch's autograd engine"),
        # what followed code calls in torch's compiler stack, through a module it imports
        # itself (SGD.step's wrapper: import torch._dynamo; torch._dynamo.graph_break())
        ("torch._dynamo", "graph_break", "a module a function imports itself"),
        ("torch._functorch.utils", "unwrap_dead_wrappers", "autograd.Function.apply's call"),
        # a torch class coursekit's own code uses
        ("torch.utils.flop_counter.FlopCounterMode", "get_total_flops", "coursekit's class"),
        # what the interpreter calls by name as it copies any object (copy.deepcopy(model))
        ("copyreg", "__newobj__", "object.__reduce_ex__'s"),
        ("warnings", "warn", "how torch warns"),
        # torch logs from inside backward: the logger it holds, and Logger's own methods
        ("torch.autograd.graph", "log", "the logger autograd's engine asks"),
        ("logging.Logger", "getEffectiveLevel", "what every logger asks"),
    ],
)
@pytest.mark.slow  # over 4 s: out of the quick run (-m 'not slow')
def test_the_seal_names_what_torch_reaches_through_more_than_one_step(
    provenance, owner, name, reached_by
):
    """Each of these changes what torch computes while every function the harness names
    stays the same: a global read two levels down, an attribute of a compiled module, a
    dunder, an object torch calls into. Each is named; a hand-in's own code, or torch's
    own function of another name, in its place."""
    import torch._dynamo  # noqa: F401  (as the warm parent has it)
    import torch.autograd.variable  # noqa: F401
    import torch.optim.sgd  # noqa: F401

    import coursekit.checkpointing  # noqa: F401  (uses FlopCounterMode)

    sealed = harness_seal.seal()
    namespace = cell("def fake(*args, **kwargs):\n    return 0\n")
    if owner == "torch._C._VariableFunctions":
        holder, name = torch._VF, "vf"
        where = "torch._VF.vf"
        replacement = types.SimpleNamespace(norm=namespace["fake"])
    else:
        module = owner
        while module not in sys.modules:
            module = module.rpartition(".")[0]
        rest = owner[len(module) + 1 :].split(".") if owner != module else []
        holder = functools.reduce(getattr, rest, sys.modules[module])
        where = f"{owner}.{name}"
        replacement = _FakeEngine() if name == "_execution_engine" else namespace["fake"]
    missing = object()
    before = vars(holder).get(name, missing)
    setattr(holder, name, replacement)
    try:
        found = harness_seal.changes(sealed, provenance)
    finally:
        if before is missing:
            delattr(holder, name)
        else:
            setattr(holder, name, before)
    assert any(f.endswith(f".{name}") for f in found), (reached_by, where, found)
    assert harness_seal.changes(sealed, provenance) == []


# ------------------------------ class d: coursekit's answers called through library callers

_FAKE_LIBRARY = """
import functools


def zz_answer(x):
    return x + 1


def names_the_answer(x):
    return zz_answer(x)


RESULTS = []


def harness(fn, *args):
    RESULTS.append(fn(*args))
"""


class _FakeQuestion:
    module = "99_fake"

    def reference(self):
        return lambda x: x + 1


@pytest.fixture(scope="module")
def armed(tmp_path_factory):
    """A module of coursekit's under a trusted folder, its answer wrapped in a tripwire and
    armed: (module, reports, provenance, question)."""
    folder = tmp_path_factory.mktemp("fake-library")
    path = folder / "fake_answers.py"
    path.write_text(_FAKE_LIBRARY)
    spec = importlib.util.spec_from_file_location("coursekit._fake_answers", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.modules["coursekit._fake_answers"] = module
    try:
        record = Provenance(_folders(str(folder) + "/"))
        record.seal()
        reports: list = []
        question = _FakeQuestion()
        # the libraries' own path is run on a thread of its own here (see
        # _in_a_library_thread), as the runner's main thread is in the grader
        root = threading.Thread._bootstrap.__code__
        judge = tampering.install_tripwires({"zz_answer": question}, record, root=root)
        record.trust(record.trusted)  # the module, as the runner's start sees it
        judge(("reporter", lambda call: reports.append(call[1])))
        assert judge(("ping",)) == (None, True)
        yield module, reports, record, question
    finally:
        del sys.modules["coursekit._fake_answers"]


@pytest.fixture
def tripwires(armed):
    armed[1].clear()
    return armed


def _in_a_library_thread(module, fn, *args):
    """Run ``module.harness(fn, *args)`` with nothing of this test's on the stack (a thread's
    stack is the threading module's, then the harness's), as the runner's is."""
    thread = threading.Thread(target=functools.partial(module.harness, fn, *args))
    thread.start()
    thread.join(30)
    return module.RESULTS.pop()


def test_the_libraries_own_path_to_an_answer_is_not_flagged(tripwires):
    module, reports, _, _ = tripwires
    assert _in_a_library_thread(module, module.names_the_answer, 1) == 2
    assert reports == []


@pytest.mark.parametrize(
    "how",
    [
        "direct",
        "map",
        "reduce",
        "starmapstar",
        "starmapstar compiled again",
        "handed as the answer",
        "reference through starmapstar",
    ],
)
def test_an_answer_called_with_the_notebooks_code_on_the_stack_is_flagged(tripwires, how):
    module, reports, _, question = tripwires
    path = multiprocessing.pool.__file__
    namespace = cell(
        "import functools, multiprocessing.pool\n"
        f"copy = {{'__name__': 'x', '__package__': 'multiprocessing'}}\n"
        f"exec(compile(open({path!r}).read(), {path!r}, 'exec'), copy)\n"
        "answer = library.zz_answer\n"
        "ways = {\n"
        "  'direct': lambda x: answer(x),\n"
        "  'map': lambda x: list(map(answer, [x]))[0],\n"
        "  'reduce': lambda x: functools.reduce(lambda a, f: f(a), [answer], x),\n"
        "  'starmapstar': lambda x: multiprocessing.pool.starmapstar((answer, [(x,)]))[0],\n"
        "  'starmapstar compiled again': lambda x: copy['starmapstar']((answer, [(x,)]))[0],\n"
        "  'handed as the answer': answer,\n"
        "  'reference through starmapstar': lambda x: multiprocessing.pool.starmapstar(\n"
        "      (question.reference(), [(x,)]))[0],\n"
        "}\n",
        {"__name__": "__main__", "library": module, "question": question},
    )
    assert _in_a_library_thread(module, namespace["ways"][how], 1) == 2
    assert reports, how


def test_a_library_caller_that_never_names_the_answer_was_handed_it(tripwires):
    module, reports, _, _ = tripwires
    # no frame of the notebook's at all: itertools.starmap inside starmapstar calls it
    answer = functools.partial(multiprocessing.pool.starmapstar, (module.zz_answer, [(1,)]))
    assert _in_a_library_thread(module, answer) == [2]
    assert reports == ["coursekit._fake_answers.zz_answer"]


def test_an_answer_held_inside_the_callable_handed_in_is_named(tripwires):
    module, _, record, _ = tripwires
    namespace = cell(
        "import functools, types\n"
        "def mine(x, helper=None):\n"
        "    return helper(x)\n"
        "class Holder:\n"
        "    def __call__(self, x):\n"
        "        return self.inner(x)\n"
        "holder = Holder()\n"
        "holder.inner = library.zz_answer\n"
        "held = {\n"
        "  'partial keyword': functools.partial(mine, helper=library.zz_answer),\n"
        "  'default': types.FunctionType(mine.__code__, globals(), 'm', (library.zz_answer,)),\n"
        "  'object attribute': holder,\n"
        "  'bound method': types.MethodType(lambda self, x: self.inner(x), holder),\n"
        "}\n",
        {"__name__": "__main__", "library": module},
    )
    for how, value in namespace["held"].items():
        assert tampering.coursekit_function(value, record) is not None, how
    assert tampering.coursekit_function(namespace["mine"], record) is None


# what the tripwire wraps, asked of its judge (read out of its code's constants)
_OPEN = (
    "(lambda j, i: j(('call', i))[1])"
    "(*[c for c in {}.__code__.co_consts if type(c) is tuple and len(c) == 2][0])"
)
_OPENS_THE_TRIPWIRE = {
    "a global": f"got = {_OPEN.format('library.zz_answer')}\n",
    "the reference's": f"got = {_OPEN.format('question.reference()')}\n",
}


@pytest.mark.parametrize("where", list(_OPENS_THE_TRIPWIRE))
def test_the_judge_read_out_of_a_tripwire_hands_over_nothing_and_is_reported(tripwires, where):
    """Found by review: the judge handed the unwatched answer to whoever sent it a call;
    in a cell, with no question tested, the runner did not count the report, and the
    function then called the answer unwatched. The judge now hands it to its tripwires'
    code alone, and reports any other sender with ``READ_OUT``, which the runner counts
    tested or not (``runner.counted``)."""
    module, reports, _, question = tripwires
    namespace = cell(
        _OPENS_THE_TRIPWIRE[where],
        {"__name__": "__main__", "library": module, "question": question},
    )
    assert namespace["got"] is None
    assert reports == [tampering.READ_OUT]


def test_an_answer_imported_by_name_and_watched_is_not_held(tripwires):
    """An earlier module's answer imported by name is the tripwire, which reports a call."""
    module, _, record, _ = tripwires
    namespace = cell(
        "from coursekit._fake_answers import zz_answer as planner\n"
        "import coursekit._fake_answers as library\n"
        "def mine(x):\n    return planner(x) + library.names_the_answer(x)\n",
    )
    assert tampering.coursekit_function(namespace["mine"], record) is None


def test_a_new_audit_hook_from_the_notebook_is_refused_and_named():
    """In a child process: an audit hook cannot be removed from the process it joins."""
    import subprocess

    script = (
        "import os, sys\n"
        "from coursekit.grading.sandbox import tampering\n"
        "from coursekit.grading.sandbox.provenance import Provenance\n"
        "folders = (os.path.dirname(os.__file__) + '/',)\n"
        "record = Provenance(folders)\n"
        "record.seal()\n"
        "reports = []\n"
        "tampering.install_audit_hook(reports.append, folders, record)\n"
        "seen = []\n"
        "exec(compile('sys.addaudithook(lambda e, a: seen.append(e))', '<cell>', 'exec'))\n"
        "import json\n"
        "print(json.dumps([reports, len(seen)]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    reports, seen = __import__("json").loads(done.stdout.splitlines()[-1])
    assert reports == ["it added an audit hook (refused)"] and seen == 0


_A_LIBRARY = """
import types


def target(x, scale=1):
    return x * scale


def other(x, scale=1):
    return x + scale


def set_defaults(function, defaults):
    function.__defaults__ = defaults


def copy_with_defaults(function, defaults):
    copy = types.FunctionType(function.__code__, function.__globals__, function.__name__)
    copy.__defaults__ = defaults
    return copy


def compile_generated(filename):
    return compile("x = 1", filename, "exec")
"""


def test_defaults_changed_and_code_compiled_are_named_only_where_they_matter(tmp_path):
    """A library function that existed before the hand-in has its defaults changed: named,
    even through a library helper. A copy a library makes since, with defaults of its own
    (transformers and networkx do so as they run): not named, unless the notebook's own code
    changes it. Code compiled under a name in a library's folder that is no file (inductor's
    generated code): not named; under a library file's own name with other text: named."""
    import subprocess

    library = tmp_path / "lib"
    library.mkdir()
    (library / "zz_library.py").write_text(_A_LIBRARY)
    script = (
        "import json, os, sys\n"
        f"sys.path.insert(0, {str(library)!r})\n"
        "import zz_library\n"
        "from coursekit.grading.sandbox import tampering\n"
        "from coursekit.grading.sandbox.provenance import Provenance\n"
        f"folders = (os.path.dirname(os.__file__) + '/', {str(library) + '/'!r})\n"
        "record = Provenance(folders)\n"
        "record.seal()\n"
        "reports = []\n"
        "tampering.install_audit_hook(reports.append, folders, record)\n"
        "def cell(source):\n"
        "    exec(compile(source, '<cell>', 'exec'), {'zz_library': zz_library})\n"
        "    return list(reports)\n"
        "steps = [\n"
        "    cell('copy = zz_library.copy_with_defaults(zz_library.target, (2,))'),\n"
        "    cell('zz_library.compile_generated(zz_library.__file__ + \":codegen(f)\")'),\n"
        "    cell('copy = zz_library.copy_with_defaults(zz_library.other, (2,))\\n'\n"
        "         'copy.__defaults__ = (4,)'),\n"
        "    cell('zz_library.set_defaults(zz_library.target, (3,))'),\n"
        "    cell('zz_library.compile_generated(zz_library.__file__)'),\n"
        "]\n"
        "print(json.dumps(steps))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
    )
    assert done.returncode == 0, done.stderr[-2000:]
    steps = __import__("json").loads(done.stdout.splitlines()[-1])
    assert steps[0] == [] and steps[1] == [], steps  # a library's own copy; no file
    other, target = (f"it changed __defaults__ of zz_library.{f}" for f in ("other", "target"))
    assert steps[2] == [other], steps  # the notebook's own change to a library's copy
    assert steps[3] == [other, target], steps  # through a library helper: whoever does it
    compiled = f"it compiled code under a library's file name ({library}/zz_library.py)"
    assert steps[4] == [other, target, compiled], steps
