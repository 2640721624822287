"""Instruments a hand-in could blind for the length of one call and put back before any
comparison saw it (issue 40): a signal handler handed the runner's frames, Provenance
patched through its class, the tripwire's reporter swapped, code run inside the audit hook.
The grading runs that try each, in every mode, are in tests/test_grading_harness.py
(tests/corpora/hostile.py: ``signal_handler_frame``, ``blinded_within_a_call``,
``tripwire_reach``)."""

from __future__ import annotations

import json
import subprocess
import sys
import types

import pytest

from coursekit.grading.sandbox import provenance as provenance_module
from coursekit.grading.sandbox import seccomp, tampering
from coursekit.grading.sandbox.provenance import Provenance, made_private

pytestmark = pytest.mark.grading


def _child(script: str) -> list:
    """Run ``script`` in a child Python (a filter or an audit hook stays for good) and read
    the JSON it prints last."""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.splitlines()[-1])


# ------------------------------------------------------------ signal handlers frozen


@pytest.mark.skipif(not seccomp.supported(), reason="no seccomp numbers for this machine")
def test_no_signal_handler_can_be_set_once_frozen_and_the_runners_own_still_runs():
    script = """
import json, signal, subprocess, sys, _thread
from coursekit.grading.sandbox import runner
hits = []
def mine(signum, frame):
    hits.append("the runner's")
signal.signal(signal.SIGUSR2, lambda *_: hits.append("left by earlier code"))
frozen = runner.freeze_handlers(mine)
refused = []
for number in (signal.SIGUSR1, signal.SIGALRM, signal.SIGPROF, signal.SIGCHLD):
    try:
        signal.signal(number, lambda signum, frame: hits.append(frame))
    except OSError:
        refused.append(number.name)
signal.raise_signal(signal.SIGALRM)
_thread.interrupt_main(signal.SIGALRM)
_thread.interrupt_main(signal.SIGUSR2)  # taken off: nothing of Python's runs
import asyncio
async def three():
    return 3
hits.append(f"asyncio.run {asyncio.run(three())}")  # sets no handler over an ignored SIGINT
child = subprocess.run([sys.executable, "-c", "print('a child python starts')"],
                       capture_output=True, text=True)
print(json.dumps([frozen, refused, [h for h in hits if isinstance(h, str)],
                  len([h for h in hits if not isinstance(h, str)]),
                  signal.getsignal(signal.SIGUSR2) == signal.SIG_DFL, child.stdout.strip()]))
"""
    frozen, refused, hits, frames, default, child = _child(script)
    assert frozen is True
    assert refused == ["SIGUSR1", "SIGALRM", "SIGPROF", "SIGCHLD"]
    assert hits == ["the runner's", "the runner's", "asyncio.run 3"] and frames == 0
    assert default and child == "a child python starts"


# ------------------------------------------------------------ the tripwires' judge


_FAKE_ANSWERS = """
def zz_fake(x):
    return x + 1


def by_another_name(x):
    return x + 1


def names_the_answer(x):  # the libraries' own path: library code that names the answer
    return zz_fake(x)
"""


class _Question:
    """A check whose reference is a function it holds, which its module also holds under a
    name that is not the question's."""

    module = "99_fake"
    held: list = []

    def reference(self):
        return self.held[0]


@pytest.fixture
def judged(tmp_path):
    """A fake coursekit module, its answer and the check's reference wrapped in tripwires
    whose judge is handed a record: (judge, module, calls, question)."""
    path = tmp_path / "fake_zz.py"
    path.write_text(_FAKE_ANSWERS)
    module = types.ModuleType("coursekit._fake_zz")
    module.__file__ = str(path)
    exec(compile(_FAKE_ANSWERS, str(path), "exec"), vars(module))
    sys.modules[module.__name__] = module
    try:
        record = made_private(Provenance((str(tmp_path) + "/",)))
        record.seal()
        _Question.held[:] = [module.by_another_name]
        question = _Question()
        judge = tampering.install_tripwires({"zz_fake": question}, record)
        calls: list = []
        judge(("reporter", lambda call: calls.append(call)))
        yield judge, module, calls, question
    finally:
        del sys.modules[module.__name__]


def _from_a_cell(function):
    """``function(1)``, called from a notebook's code (a cell's, in a namespace of its own)."""
    namespace = {"function": function}
    exec(compile("result = function(1)", "<cell>", "exec"), namespace)
    return namespace["result"]


def _parts(tripwire) -> tuple:
    return next(c for c in tripwire.__code__.co_consts if type(c) is tuple and len(c) == 2)


def test_a_tripwire_holds_nothing_a_hand_in_can_rewrite_or_call_unseen(judged):
    """No closure cell (whose contents are written without an audited step), no global looked
    up, and not the answer: its constants hold the judge and an index, and the judge hands
    the answer to its tripwires' code alone (asked by anyone else, it reports the asking
    and hands over nothing)."""
    judge, module, calls, _ = judged
    tripwire = module.zz_fake
    assert tripwire.__closure__ is None and tripwire.__code__.co_names == ()
    assert tripwire.__defaults__ is None and tripwire.__kwdefaults__ is None
    assert _parts(tripwire)[0] is judge and type(_parts(tripwire)[1]) is int
    _, index = _parts(tripwire)
    raised, answer = judge(("call", index))  # asked directly, not by the tripwire: reported
    assert raised is None and answer is None
    assert calls == [("zz_fake", tampering.READ_OUT)]


def test_the_judge_keeps_the_first_record_it_is_handed(judged):
    judge, module, calls, _ = judged
    swapped: list = []
    assert judge(("reporter", swapped.append)) == (None, None)  # passed over
    assert _from_a_cell(module.zz_fake) == 2
    assert calls == [("zz_fake", "coursekit._fake_zz.zz_fake")] and swapped == []
    assert judge(("ping",)) == (None, True)


def test_the_libraries_own_path_passes_on_the_main_thread_only(judged):
    """Through a thread, every frame is library code down to the thread's first: that says
    nothing of who handed the thread its work, so it is reported."""
    from concurrent.futures import ThreadPoolExecutor

    _, module, calls, _ = judged
    with ThreadPoolExecutor(1) as pool:
        assert pool.submit(module.names_the_answer, 1).result() == 2
    assert calls == [("zz_fake", "coursekit._fake_zz.zz_fake")]


def test_a_reference_held_under_its_own_name_is_watched_there_too(judged):
    """The check's reference was once wrapped where the check hands it out only: the same
    function, called by its module's name with a name built at run time, went unseen."""
    _, module, calls, question = judged
    assert module.by_another_name is question.reference()  # both the tripwire
    assert _from_a_cell(getattr(module, "by_another_" + "name")) == 2
    assert calls == [("zz_fake", "the check's reference for zz_fake")]


def test_the_judge_reads_only_plain_data_and_goes_on_after_a_throw(judged):
    judge, _, calls, _ = judged

    class Loud(str):
        def __eq__(self, other):  # noqa: D105 - would run in the judge's frame
            raise AssertionError("ran the notebook's method")

        __hash__ = str.__hash__

    class Index(int):
        def __le__(self, other):  # noqa: D105
            raise AssertionError("ran the notebook's method")

    for message in (
        None,
        ("call",),
        (Loud("call"), 0),
        ("call", Index(0)),
        ("call", 10**6),
        ["call", 0],
    ):
        assert judge(message) == (None, None)
    assert calls == []
    raised, _ = judge.__self__.throw(KeyboardInterrupt("thrown in"))
    assert isinstance(raised, KeyboardInterrupt) and raised.__traceback__ is None
    assert judge(("ping",)) == (None, True)


# ------------------------------------------------------------ Provenance kept private


def test_a_private_record_is_not_blinded_by_patching_the_class_or_the_module():
    record = made_private(Provenance())
    record.seal()
    mine = compile("x = 1", "<cell>", "exec")
    saved = dict(vars(Provenance)), provenance_module._read
    try:
        Provenance.is_library = lambda self, code: True
        Provenance.is_library_globals = lambda self, namespace: True
        provenance_module._read = lambda filename: b"x = 1"
        assert Provenance().is_library(mine)  # the public class, patched
        assert not record.is_library(mine)
        namespace = {"sys": sys}
        exec(compile("frame = sys._getframe()", "<cell>", "exec"), namespace)
        assert not record.is_library_frame(namespace["frame"])
    finally:
        for name in ("is_library", "is_library_globals"):
            setattr(Provenance, name, saved[0][name])
        provenance_module._read = saved[1]
    assert type(record) is not Provenance and type(record).__name__ == "Provenance"


# ------------------------------------------------------------ code run inside the audit hook


_INSIDE_THE_HOOK = """
import json, os, sys, types
sys.modules["torch"] = types.ModuleType("torch")  # cheap
sys.modules["torch"].__file__ = "/no/such/torch/__init__.py"
from coursekit.grading.sandbox import frame_hook_guard, tampering
from coursekit.grading.sandbox.provenance import Provenance, made_private
folders = (os.path.dirname(os.__file__) + '/',)
record = made_private(Provenance(folders))
record.seal()
reports = []
DOOR = []
if DOOR_OPEN:  # a way for the notebook's code to run inside the hook, made for this test
    judge = type(record).is_library_callable
    def is_library_callable(self, value, **options):
        for door in DOOR:
            door()
        return judge(self, value, **options)
    type(record).is_library_callable = is_library_callable
tampering.install_audit_hook(reports.append, folders, record)
cell = '''
import sys
getframe = getattr(sys, "_get" + "frame")
KEPT, LEFT = [], [DEPTH]
class Sly:
    def __call__(self, *args):
        return None
    @property
    def __class__(self):  # once read by the hook's isinstance checks, inside the hook
        door()
        return Sly
class Thing:  # passes for one of torch's classes by name: its provenance is judged
    __module__ = "torch.things"
    def run(self, *args):
        return None
def door():
    if LEFT[0] == 0:
        LEFT[0] = -1
        KEPT.append(getframe(0))
    elif LEFT[0] > 0:
        LEFT[0] -= 1
        sys.audit(EVENT, "set_eval_frame", Thing().run)
DOOR.append(door)
sys.audit(EVENT, "set_eval_frame", Sly())
sys.audit(EVENT, "set_eval_frame", Thing().run)
'''
for depth in (0, 5):
    DOOR.clear()
    exec(compile(cell, "<cell>", "exec"), {"__name__": "__main__", "EVENT": frame_hook_guard.EVENT,
                                            "DEPTH": depth, "DOOR": DOOR})
print(json.dumps(reports))
"""


def test_no_route_runs_the_notebooks_code_inside_the_audit_hook():
    """The hook once read a handed object's ``__class__`` (``isinstance``), which ran the
    notebook's property inside the hook: it reads real types now."""
    reports = _child(_INSIDE_THE_HOOK.replace("DOOR_OPEN", "False"))
    assert not any("sys._getframe" in r or "inside the grader's" in r for r in reports), reports
    assert any("set_eval_frame" in r for r in reports), reports


def test_code_the_audit_hook_runs_is_judged_at_every_depth():
    """Were a route found, the notebook's code run inside the hook is still judged: the hook
    once ignored every event raised while it ran. A door into the hook is made for this test
    (the notebook's code runs each time the hook judges a callable)."""
    reports = _child(_INSIDE_THE_HOOK.replace("DOOR_OPEN", "True"))
    assert any("it called sys._getframe" in r for r in reports), reports
    assert "it ran code of its own inside the grader's audit hook" in reports, reports


def test_a_class_change_is_judged_without_running_the_objects_code():
    ran: list = []

    class Sly:
        def __getattribute__(self, name):
            ran.append(name)
            return object.__getattribute__(self, name)

    assert tampering._module_of(Sly) == __name__ and tampering._qualname_of(Sly).endswith("Sly")
    assert ran == []
    assert isinstance(tampering._module_of(types.SimpleNamespace), str)


# ------------------------------------------------------------ frames kept by gc, or handed


def test_gc_keeps_no_frame_once_its_debug_flags_are_locked():
    """With DEBUG_SAVEALL, a collection once kept a finished frame in gc.garbage, whose
    f_back led to the runner's; a gc module made again shares the lock."""
    script = """
import _imp, gc, importlib.machinery, json
from coursekit.grading.sandbox import gc_lock
locked = gc_lock.lock_debug()
fresh = _imp.create_builtin(importlib.machinery.ModuleSpec("gc", None))
_imp.exec_builtin(fresh)
for module in (gc, fresh):
    module.set_debug(module.DEBUG_SAVEALL)
def cycle():
    try:
        raise ValueError("a frame in a cycle with its own traceback")
    except ValueError as error:
        kept = error
cycle()
gc.collect()
print(json.dumps([locked, gc.get_debug(), [type(o).__name__ for o in gc.garbage]]))
"""
    locked, flags, garbage = _child(script)
    assert locked is True and flags == 0 and "frame" not in garbage


_HANDED = """
import collections, contextlib, functools, json, os, shlex, sys, threading, types, typing
from coursekit.grading.sandbox import tampering
from coursekit.grading.sandbox.provenance import Provenance, made_private
folders = (os.path.dirname(os.__file__) + '/',)
record = made_private(Provenance(folders))
record.seal()
reports = []
own = tampering.private_copy(tampering, modules_frozen=True)
record.trust_globals(own.install_audit_hook.__globals__)  # as the runner trusts its copy
own.install_audit_hook(reports.append, folders, record)
cells = {
    "honest": '''
import collections, typing
Pair = collections.namedtuple("Pair", "a b")
T = typing.TypeVar("T")
''',
    "cached_property": '''
import functools, sys
class Frames(int):
    here = functools.cached_property(getattr(sys, "_get" + "frame"))
frame = Frames(0).here
''',
    "exit_stack": '''
import contextlib, sys
with contextlib.ExitStack() as stack:
    stack.callback(getattr(sys, "_current_" + "frames"))
''',
    "thread_hook": '''
import queue, threading
kept = queue.Queue()
threading.setprofile(kept.put)  # a library's method, which keeps every frame it is given
worker = threading.Thread(target=len, args=("x",))
worker.start()
worker.join()
threading.setprofile(None)
''',
    "iterated_by_a_library": '''
import enum, gc
kept = []
enum.Enum("X", map(lambda found: (kept.append(found), "a")[1:] + (1,),
                   map(getattr(gc, "get_" + "referrers"), [kept])))
''',
    "attribute_by_a_library": '''
import string
def gen():
    yield 1
string.Formatter().get_field("0.gi_" + "frame", (gen(),), {})
''',
    "hook_through_a_thread": '''
import sys, threading
worker = threading.Thread(target=getattr(sys, "addaudit" + "hook"), args=(lambda *a: None,))
worker.start()
worker.join()
''',
    "helper_handed_to_a_library": '''
import functools, inspect
class Frames(int):
    here = functools.cached_property(getattr(inspect, "tr" + "ace"))  # inspect.trace(context)
try:
    raise ValueError
except ValueError:
    frames = Frames(0).here
''',
    "types_rebound": '''
import shlex, types
real, types.FunctionType = types.FunctionType, int
try:
    shlex.quote.__defaults__ = ("changed",)
finally:
    types.FunctionType = real
    shlex.quote.__defaults__ = None
''',
}
found = {}
for name, source in cells.items():
    exec(compile(source, "<cell>", "exec"), {"__name__": "__main__"})
    found[name], reports[:] = list(reports), []
print(json.dumps(found))
"""


def test_a_library_handed_what_hands_over_frames_is_judged_by_its_caller():
    """Library code that calls a function it was handed, and does not name, raised the
    event as if it were the libraries' own: cached_property(sys._getframe) handed a frame
    back, ExitStack().callback(sys.settrace, f) and threading.setprofile installed a tracer
    or a profiler, unflagged; so did a helper that hands frames back (inspect.stack) handed
    to one. A name of a module the hook reads (types.FunctionType) rebound for
    the length of one change hid that change."""
    found = _child(_HANDED)
    assert found["honest"] == [], found
    assert "it called sys._getframe" in found["cached_property"], found
    assert (
        "it read a tb_frame (a frame of the running program)" in found["helper_handed_to_a_library"]
    ), found
    # (each flag is said once: each cell reaches by a function of its own)
    assert "it called sys._current_frames" in found["exit_stack"], found
    assert "it called sys.setprofile" in found["thread_hook"], found
    assert "it called gc.get_referrers" in found["iterated_by_a_library"], found
    assert (
        "it read a gi_frame (a frame of the running program)" in found["attribute_by_a_library"]
    ), found
    assert "it added an audit hook (refused)" in found["hook_through_a_thread"], found
    assert "it changed __defaults__ of shlex.quote" in found["types_rebound"], found
