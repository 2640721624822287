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
import torch._dynamo  # noqa: F401  (as the warm parent has it, before the seal)

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


# A class of the notebook's passes as library code only if nothing Python may run or hand on
# through it is the notebook's. Each cell below once passed: ``isinstance`` believes a class's
# ``__class__``, and only a class's plain functions were judged.
_DISGUISED = {
    "as a module": (
        "import types\n"
        "class Finder:\n"
        "    __class__ = types.ModuleType\n"
        "    def find_spec(self, name, path, target=None):\n"
        "        return None\n"
        "value = Finder()\n"
    ),
    "as a library function": (
        "import functools, types, torch\n"
        "def evil(*args, **kwargs):\n    return True\n"
        "class Equal:\n"
        "    __class__ = types.FunctionType\n"
        "    __code__ = torch.nn.functional.relu.__code__\n"
        "    __globals__ = torch.nn.functional.relu.__globals__\n"
        "    __defaults__ = __kwdefaults__ = __closure__ = None\n"
        "    __call__ = functools.partial(evil)\n"
        "value = Equal()\n"
    ),
    "calling a partial": (
        "import functools\n"
        "def evil(*args, **kwargs):\n    return True\n"
        "class Hook:\n    __call__ = functools.partial(evil)\n"
        "value = Hook()\n"
    ),
    "through its metaclass": (
        "import functools\n"
        "def evil(*args, **kwargs):\n    return True\n"
        "class Meta(type):\n    __call__ = functools.partial(evil)\n"
        "class Made(metaclass=Meta):\n    pass\n"
        "value = Made\n"
    ),
    "a module it made": (
        "import types\n"
        "def evil(*args, **kwargs):\n    return True\n"
        "value = types.ModuleType('helpers')\n"
        "value.find_spec = evil\n"
    ),
    "in a library object's slots": (
        "import asyncio, contextvars\n"
        "def evil(*args, **kwargs):\n    return True\n"
        "value = object.__new__(asyncio.Handle)\n"
        "value._callback, value._args = evil, ()\n"
        "value._context = contextvars.copy_context()\n"
        "value = value._run\n"
    ),
    "a generator's step": ("def evil():\n    yield True\nvalue = evil().__next__\n"),
    "a map's step": "def evil(x):\n    return x\nvalue = map(evil, [1]).__next__\n",
    "an iterator over a call": (
        "import functools\n"
        "def evil():\n    return 0\n"
        "value = functools.partial(list, iter(evil, 0))\n"
    ),
    "behind a weak proxy": (
        "import weakref\ndef evil(*args):\n    return True\nvalue = weakref.proxy(evil)\n"
    ),
    "cached, its __wrapped__ taken off": (
        "import functools\n"
        "def evil(*args):\n    return True\n"
        "value = functools.lru_cache(evil)\n"
        "del value.__wrapped__\n"
    ),
    "as a sort key": (
        "import functools\n"
        "def evil(a, b):\n    return 0\n"
        "value = functools.partial(sorted, [1, 2], key=functools.cmp_to_key(evil))\n"
    ),
    "in a deque": (
        "import collections, functools, operator\n"
        "def evil(*args):\n    return True\n"
        "value = functools.partial(map, operator.call, collections.deque([evil]))\n"
    ),
    "its own __call__": "def evil(*args):\n    return True\nvalue = evil.__call__\n",
    "bound to a library function": (
        "import operator, types\n"
        "def evil(*args):\n    return True\n"
        "value = types.MethodType(operator.call, evil)\n"
    ),
    "compared by a list's sort": (
        "class Item:\n    def __lt__(self, other):\n        return True\n"
        "value = [Item(), Item()].sort\n"
    ),
    "a partial whose func is a property": (
        "import functools\n"
        "def evil(*args):\n    return True\n"
        "class Partial(functools.partial):\n    func = property(type)\n"
        "value = Partial(evil)\n"
    ),
    "a staticmethod whose __func__ is a property": (
        "def evil(*args):\n    return True\n"
        "class Static(staticmethod):\n    __func__ = property(type)\n"
        "class Holder:\n    run = Static(evil)\n"
        "value = Holder()\n"
    ),
    "a thread whose __dict__ is a property": (
        "import threading\n"
        "def evil(*args):\n    return True\n"
        "class Quiet(threading.Thread):\n    __dict__ = property(type)\n"
        "value = Quiet(target=evil).run\n"
    ),
    "a forward hook of a library module": (
        "import torch\n"
        "def evil(*args):\n    return None\n"
        "value = torch.nn.Linear(2, 2)\n"
        "value.register_forward_hook(evil)\n"
    ),
    "a key of a dict": (
        "import functools\n"
        "class Key:\n    def __repr__(self):\n        return 'evil'\n"
        "value = functools.partial(print, {Key(): 1})\n"
    ),
    "in a list of its own class": (
        "def evil(*args):\n    return True\nclass Items(list):\n    pass\nvalue = Items([evil])\n"
    ),
    "a closure of a tuple subclass": (
        "import contextlib, types\n"
        "def evil(*args):\n    return True\n"
        "class Blank(tuple):\n"
        "    def __iter__(self):\n        return iter(())\n"
        "    def __len__(self):\n        return 0\n"
        "made = contextlib.contextmanager(lambda: None)\n"
        "value = types.FunctionType(made.__code__, contextlib.__dict__, 'made', None,\n"
        "                           Blank((types.CellType(evil),)))\n"
    ),
    "keyword defaults of a dict subclass": (
        "import json\n"
        "class Encoder(json.JSONEncoder):\n"
        "    def default(self, value):\n        return None\n"
        "class Blank(dict):\n"
        "    def values(self):\n        return []\n"
        "value = json.dumps.__class__(json.dumps.__code__, json.__dict__, 'dumps',\n"
        "                             json.dumps.__defaults__)\n"
        "value.__kwdefaults__ = Blank(cls=Encoder)\n"
    ),
    "a name in an object's __dict__": (
        "import torch\n"
        "class Name(str):\n"
        "    def __hash__(self):\n        return hash('weight')\n"
        "    def __eq__(self, other):\n        return False\n"
        "module = torch.nn.Linear(2, 2)\n"
        "vars(module)[Name('x')] = 1\n"
        "value = module.forward\n"
    ),
    "a descriptor by a name of a str subclass": (
        "def evil(*args):\n    return True\n"
        "class Name(str):\n    pass\n"
        "Binds = type('Binds', (), {Name('__get__'): evil})\n"
        "class Holder:\n    __call__ = Binds()\n"
        "value = Holder()\n"
    ),
    "a descriptor that only sets": (
        "import torch\n"
        "def evil(*args):\n    return None\n"
        "Sets = type('Sets', (), {'__set__': evil})\n"
        "class Model(torch.nn.Linear):\n    training = Sets()\n"
        "value = Model(2, 2).train\n"
    ),
    "a subclass of a C type": (
        "def evil(*args):\n    return True\n"
        "class Steps(map):\n    pass\n"
        "value = Steps(evil, [1]).__next__\n"
    ),
    "an attribute of a partial": (
        "import functools\n"
        "def evil(*args):\n    return None\n"
        "value = functools.partial(print)\n"
        "value.find_spec = evil\n"
    ),
    "a partial whose __dict__ is a property": (
        "import functools\n"
        "def evil(*args):\n    return None\n"
        "class Partial(functools.partial):\n    __dict__ = property(type)\n"
        "value = Partial(print)\n"
        "functools.partial.__dict__['__dict__'].__get__(value)['find_spec'] = evil\n"
    ),
    "an attribute of an OrderedDict": (
        "import collections, threading, types\n"
        "def evil(*args):\n    return True\n"
        "held = collections.OrderedDict()\n"
        "held._target, held._args, held._kwargs = evil, (), {}\n"
        "value = types.MethodType(threading.Thread.run, held)\n"
    ),
    # text, bytes or a name handed to a library function that runs it as code
    "text for eval, as a finder's find_spec": (
        "import functools, types\n"
        "value = types.SimpleNamespace(find_spec=functools.partial(eval, 'print(1)'))\n"
    ),
    "code compiled by the notebook, for exec": (
        "import functools\nvalue = functools.partial(exec, compile('x = 1', '<cell>', 'exec'))\n"
    ),
    "text for eval through a partial of a partial": (
        "import functools\n"
        "inner = functools.partial(eval)\n"
        "inner.kept = 1  # an attribute: the two partials are not merged into one\n"
        "value = functools.partial(inner, 'print(1)')\n"
    ),
    "text for eval as a bound method's self": (
        "import types\nvalue = types.MethodType(eval, 'print(1)')\n"
    ),
    "pickled bytes": (
        "import functools, pickle\nvalue = functools.partial(pickle.loads, pickle.dumps(1))\n"
    ),
    "a module imported by its name": (
        "import functools, importlib\n"
        "value = functools.partial(importlib.import_module, 'a_module_of_the_notebooks')\n"
    ),
    "a file run by runpy": (
        "import functools, runpy\nvalue = functools.partial(runpy.run_path, 'made_by_it.py')\n"
    ),
    "a console given a line": (
        "import code, functools\n"
        "value = functools.partial(code.InteractiveInterpreter().runsource, 'x = 1')\n"
    ),
    "a logging factory named by its path": (
        "import functools, logging.config\n"
        "config = {'version': 1, 'handlers': {'h': {'()': '__main__.evil'}}}\n"
        "value = functools.partial(logging.config.dictConfig, config)\n"
    ),
    # found by review: a runner one step away, handed on by a library function that calls
    # what it is given, wrapped, held by an iterator, or not on the first list
    "eval handed on by operator.call": (
        "import functools, operator\nvalue = functools.partial(operator.call, eval, '1')\n"
    ),
    "__import__ handed on, as a finder's find_spec": (
        "import functools, operator, types\n"
        "load = functools.partial(operator.call, __import__, 'a_module_of_the_notebooks')\n"
        "value = types.SimpleNamespace(find_spec=load)\n"
    ),
    "exec handed on by sys.call_tracing": (
        "import functools, sys\nvalue = functools.partial(sys.call_tracing, exec, ('x = 1',))\n"
    ),
    "eval given to a methodcaller": (
        "import functools, operator\n"
        "value = functools.partial(operator.methodcaller('__call__', '1'), eval)\n"
    ),
    "exec held by a map a set's union iterates": (
        "import functools\nvalue = functools.partial(set().union, map(exec, ['x = 1']))\n"
    ),
    "exec held by a map, as a bound method's self": (
        "import types\nvalue = types.MethodType(dict.fromkeys, map(exec, ['x = 1']))\n"
    ),
    "eval's __call__": ("import functools\nvalue = functools.partial(eval.__call__, '1')\n"),
    "exec through its type's __call__": (
        "import functools\nvalue = functools.partial(type(eval).__call__, exec, 'x = 1')\n"
    ),
    "import_module's __call__": (
        "import functools, importlib\n"
        "value = functools.partial(importlib.import_module.__call__, 'its_module')\n"
    ),
    "an Unpickler's load": (
        "import io, pickle\nvalue = pickle.Unpickler(io.BytesIO(pickle.dumps(1))).load\n"
    ),
    "the Python Unpickler's load": (
        "import io, pickle\nvalue = pickle._Unpickler(io.BytesIO(pickle.dumps(1))).load\n"
    ),
    "eval in a partialmethod": (
        "import functools\n"
        "Holder = type('Holder', (), {'hook': functools.partialmethod(staticmethod(eval), '1')})\n"
        "value = Holder()\n"
    ),
    "a string annotation typing evaluates": (
        "import functools, types, typing\n"
        "held = types.SimpleNamespace(__annotations__={'x': '__import__(\"os\")'})\n"
        "value = functools.partial(typing.get_type_hints, held)\n"
    ),
    "a name pydoc imports": (
        "import functools, pydoc\nvalue = functools.partial(pydoc.locate, 'its_module')\n"
    ),
    "a name pkgutil imports": (
        "import functools, pkgutil\nvalue = functools.partial(pkgutil.resolve_name, 'its_module')\n"
    ),
    "a name importlib's bootstrap imports": (
        "import functools, importlib._bootstrap as bootstrap\n"
        "value = functools.partial(bootstrap._gcd_import, 'its_module')\n"
    ),
    "exec as a thread's target": (
        "import threading\nvalue = threading.Thread(target=exec, args=('x = 1',)).start\n"
    ),
    # found by the second review: libraries that load pickles or run files
    "a pickle torch.load unpickles": (
        "import functools, torch\n"
        "value = functools.partial(torch.load, 'made_by_it.pt', weights_only=False)\n"
    ),
    "a file a source loader runs": (
        "from importlib.machinery import SourceFileLoader\n"
        "value = SourceFileLoader('its_module', 'made_by_it.py').load_module\n"
    ),
    "a hubconf torch.hub runs": (
        "import functools, torch.hub\n"
        "value = functools.partial(torch.hub.load, '.', 'entry', source='local')\n"
    ),
    "nested past the depth judged": (
        "def evil(*args, **kwargs):\n    return True\n"
        "value = [evil]\n"
        "for _ in range(12):\n    value = [value]\n"
    ),
}


@pytest.mark.parametrize("disguise", sorted(_DISGUISED))
def test_a_notebooks_code_disguised_is_the_notebooks(provenance, disguise):
    value = _notebook(_DISGUISED[disguise])["value"]
    assert not provenance.is_library_object(value)
    assert not provenance.is_library_callable(functools.partial(operator.call, value))
    if callable(value):
        assert not provenance.is_library_callable(value)


def test_library_objects_modules_and_enums_stay_the_librarys(provenance):
    import inspect

    linear = torch.nn.Linear(2, 2)
    assert provenance.is_library_callable(linear.forward)
    assert provenance.is_library_callable(functools.partial(getattr, torch))
    assert provenance.is_library_callable(functools.partial(print, "text, printed: not run"))
    kind = inspect.Parameter.POSITIONAL_ONLY  # an enum member: its class holds its members
    assert provenance.is_library_callable(functools.partial(operator.eq, kind))
    assert provenance.is_library_object(torch.nn.Sequential(linear, torch.nn.ReLU()))
    assert provenance.is_library_callable(torch.optim.SGD(linear.parameters(), lr=0.1).step)


def test_judging_runs_none_of_the_notebooks_code(provenance):
    """A metaclass's ``__hash__``, a member name's ``__eq__``: each would run inside the
    grader's walk if it hashed a type or looked a name up in a class's dict."""
    cell = _notebook(
        "RAN = []\n"
        "class Meta(type):\n"
        "    def __hash__(cls):\n        RAN.append('hash')\n        return 1\n"
        "class Hashed(metaclass=Meta):\n    pass\n"
        "class Name(str):\n"
        "    def __hash__(self):\n        return hash('__get__')\n"
        "    def __eq__(self, other):\n        RAN.append('eq')\n        return False\n"
        "Keyed = type('Keyed', (), {Name('x'): 1})\n"
        "class Holder:\n    member = Keyed()\n"
        "judged = [Hashed(), Keyed()]\n"
        "RAN.clear()  # making the class looked its names up\n"
    )
    for value in cell["judged"]:
        assert not provenance.is_library_object(value)
    provenance.is_library_object(cell["Holder"]())  # a class's data is not judged: not run
    assert cell["RAN"] == []


def test_code_under_a_trusted_folder_by_name_only_is_the_notebooks(provenance, tmp_path):
    """``site-packages/../../tmp/x.py`` starts with a trusted folder's name, and its code is,
    field for field, the code of the file there: the notebook's own file."""
    source = "def evil():\n    return True\n"
    (tmp_path / "x.py").write_text(source)
    climbing = provenance.trusted[0] + "../" * 12 + str(tmp_path / "x.py").lstrip("/")
    namespace = {}
    exec(compile(source, climbing, "exec", dont_inherit=True), namespace)
    assert not provenance.is_library(namespace["evil"].__code__)


def test_code_whose_constants_are_the_notebooks_is_judged_without_hashing_them(provenance):
    cell = _notebook(
        "RAN = []\n"
        "class Constant:\n"
        "    def __hash__(self):\n        RAN.append('hash')\n        return 1\n"
        "    def __eq__(self, other):\n        RAN.append('eq')\n        return False\n"
        "import json\n"
        "code = json.dumps.__code__.replace(co_consts=(None, Constant()))\n"
    )
    assert not provenance.is_library(cell["code"])
    assert cell["RAN"] == []


def test_code_with_names_of_the_notebooks_is_judged_without_running_them(provenance):
    """``code.replace`` takes a ``str`` subclass as a name, and comparing code hashes it;
    a name with a NUL byte made reading the file raise, inside the audit hook too."""
    cell = _notebook(
        "import json, types\n"
        "RAN = []\n"
        "class Name(str):\n"
        "    def __hash__(self):\n        RAN.append('hash')\n        return str.__hash__(self)\n"
        "    def __eq__(self, other):\n        RAN.append('eq')\n        return True\n"
        "named = json.dumps.__code__.replace(co_name=Name('dumps'))\n"
        "nul = json.dumps.__code__.replace(co_filename=json.__file__ + '\\0x')\n"
    )
    assert not provenance.is_library(cell["named"])
    assert not provenance.is_library(cell["nul"])
    assert cell["RAN"] == []
