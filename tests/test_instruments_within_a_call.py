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


class _Question:
    module = "99_fake"

    def reference(self):
        return lambda x: x + 1


@pytest.fixture
def judged():
    """A tripwire around a fake question's reference, its judge handed a record."""
    record = made_private(Provenance())
    record.seal()
    question = _Question()
    judge = tampering.install_tripwires({"zz_fake": question}, record)
    calls: list = []
    judge(("reporter", lambda call: calls.append(call)))
    return judge, question.reference(), calls


def test_a_tripwire_holds_nothing_a_hand_in_can_rewrite(judged):
    """No closure cell (whose contents are written without an audited step) and no global
    looked up: what it needs is a constant of its code."""
    _, tripwire, _ = judged
    assert tripwire.__closure__ is None
    assert tripwire.__code__.co_names == ()
    assert tripwire.__defaults__ is None and tripwire.__kwdefaults__ is None


def test_the_judge_keeps_the_first_record_it_is_handed(judged):
    judge, tripwire, calls = judged
    swapped: list = []
    assert judge(("reporter", swapped.append)) is None  # passed over
    assert tripwire(1) == 2  # called from this test's code: not the libraries' own path
    assert calls == [("zz_fake", "the check's reference for zz_fake")] and swapped == []
    assert judge(("ping",)) is True


def test_the_judge_reads_only_plain_data_and_goes_on_after_a_throw(judged):
    judge, _, calls = judged

    class Loud(str):
        def __eq__(self, other):  # noqa: D105 - would run in the judge's frame
            raise AssertionError("ran the notebook's method")

        __hash__ = str.__hash__

    frame = sys._getframe()
    for message in (
        None,
        ("call",),
        ("call", Loud("q"), "w", frozenset({"a"}), frame),
        ("call", "q", "w", frozenset({Loud("a")}), frame),
        ("call", "q", "w", {"a"}, frame),
        ["call", "q", "w", frozenset({"a"}), frame],
    ):
        assert judge(message) is None
    assert calls == []
    raised = judge.__self__.throw(KeyboardInterrupt("thrown in"))
    assert isinstance(raised, KeyboardInterrupt) and raised.__traceback__ is None
    assert judge(("ping",)) is True


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
sys.modules["torch"] = types.SimpleNamespace(__file__="/no/such/torch/__init__.py")  # cheap
from coursekit.grading.sandbox import frame_hook_guard, tampering
from coursekit.grading.sandbox.provenance import Provenance, made_private
folders = (os.path.dirname(os.__file__) + '/',)
record = made_private(Provenance(folders))
record.seal()
reports = []
tampering.install_audit_hook(reports.append, folders, record)
cell = '''
import sys
getframe = getattr(sys, "_get" + "frame")
class Sly:
    def __init__(self, depth):
        self.depth = depth
    def __call__(self, *args):
        return None
    @property
    def __class__(self):  # read by the hook's isinstance checks
        if self.depth == 0:
            KEPT.append(getframe(0))
        else:
            sys.audit(EVENT, "set_eval_frame", Sly(self.depth - 1))
        return Sly
KEPT = []
sys.audit(EVENT, "set_eval_frame", Sly(DEPTH))
'''
for depth in (0, 5):
    exec(compile(cell, "<cell>", "exec"), {"__name__": "__main__", "EVENT": frame_hook_guard.EVENT,
                                            "DEPTH": depth})
print(json.dumps(reports))
"""


def test_code_the_audit_hook_runs_is_judged_at_every_depth():
    """The hook once ignored every event raised while it ran, so a notebook's method that
    it called (a ``__class__`` property read by ``isinstance``) took frames unflagged."""
    reports = _child(_INSIDE_THE_HOOK)
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
