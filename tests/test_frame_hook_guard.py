"""torch._dynamo's frame-hook setters, guarded (issue 40): a callback set is heard by the
audit hook as it is set, so one that turns itself off before the grader reads it is still
named, and the original setter is out of plain reach (coursekit/grading/sandbox/
frame_hook_guard.py). The grading runs that name such a hook in every mode are in
tests/test_grading_harness.py (tests/corpora/hostile.py, ``frame_hook_off_before_read``)."""

from __future__ import annotations

import sys

import pytest
import torch
import torch._dynamo  # noqa: F401  (binds the setter by name, as the warm parent has it)
from torch._C._dynamo import eval_frame

from coursekit.grading.sandbox import frame_hook_guard, tampering
from tests.helpers.reachable import reachable_from

pytestmark = pytest.mark.grading

HEARD: list[tuple] = []


def _hear(event: str, args: tuple) -> None:
    if event == frame_hook_guard.EVENT:
        HEARD.append(args)


@pytest.fixture(scope="module")
def guarded():
    """The setters as the warm parent leaves them (preload.py), and an audit hook that
    keeps this module's event (audit hooks cannot be removed: it keeps nothing else)."""
    originals = {name: vars(eval_frame)[name] for name in frame_hook_guard.SETTERS}
    frame_hook_guard.guard()
    sys.addaudithook(_hear)
    return originals


def test_every_name_torch_binds_a_setter_to_is_the_guard(guarded):
    original = guarded["set_eval_frame"]
    bound = [
        f"{name}.{key}"
        for name, module in list(sys.modules.items())
        for key, value in list(getattr(module, "__dict__", {}).items())
        if value is original
    ]
    assert bound == []
    assert torch._dynamo.eval_frame.set_eval_frame is eval_frame.set_eval_frame
    assert frame_hook_guard.guard() == []  # guarded once


def test_a_callback_set_and_taken_off_is_heard_both_times(guarded):
    from torch._dynamo.types import ConvertFrameReturn, FrameAction, FrameExecStrategy

    default = ConvertFrameReturn(
        frame_exec_strategy=FrameExecStrategy(FrameAction.DEFAULT, FrameAction.DEFAULT),
        apply_to_code=False,
    )

    def every_frame(frame, *rest):
        return default

    HEARD.clear()
    previous = eval_frame.set_eval_frame(None)
    try:
        eval_frame.set_eval_frame(every_frame)
        assert eval_frame.get_eval_frame_callback() is every_frame
    finally:
        eval_frame.set_eval_frame(previous)
    assert ("set_eval_frame", every_frame) in HEARD
    assert HEARD[-1] == ("set_eval_frame", previous)


def test_the_original_setter_is_out_of_plain_reach(guarded):
    for name, original in guarded.items():
        setter = vars(eval_frame)[name]
        assert setter is not original
        assert all(item is not original for item in reachable_from(setter, depth=8)), name
        assert original not in setter.__globals__.values()


def test_an_error_of_the_setter_reaches_the_caller_without_the_guards_frames(guarded):
    with pytest.raises(TypeError) as raised:
        eval_frame.set_eval_frame(1, 2, 3)
    frames = []
    tb = raised.value.__traceback__
    while tb is not None:
        frames.append(tb.tb_frame.f_code.co_name)
        tb = tb.tb_next
    assert "_calls" not in frames
    eval_frame.set_eval_frame(None)  # still works after an error


def test_the_audit_hook_judges_the_callback_and_who_set_it(guarded):
    from coursekit.grading.sandbox.provenance import Provenance

    torchs = torch._dynamo.optimize("eager").callback  # what torch.compile sets
    # (made first: in a hand-in's process, the audit hook records the modules it imports)
    record = Provenance((torch.__file__.rsplit("/torch/", 1)[0] + "/",))
    record.seal()
    notebooks = {"__name__": "__main__"}
    exec(compile("frames = []\ndef hook(frame, *rest):\n    pass\n", "<cell>", "exec"), notebooks)
    own = tampering._frame_hook("set_eval_frame", notebooks["hook"], record)
    assert own[0].endswith("to code of its own") and own[1] is False  # whoever set it
    assert tampering._frame_hook("set_eval_frame", torchs, record)[1] is True  # by whom
    from torch._dynamo.convert_frame import CatchErrorsWrapper

    around_a_spy = CatchErrorsWrapper(notebooks["hook"], torchs.hooks)  # torch's class
    for keeps in (notebooks["frames"].append, dict().__setitem__, print, around_a_spy):
        library = tampering._frame_hook("set_eval_frame", keeps, record)
        assert library[0].endswith("to code of its own") and library[1] is False, keeps
    assert tampering._frame_hook("set_eval_frame", None, record) == (None, True)


# tests/corpora/hostile.py's frame_hook_off_before_read: a callback that turns itself off at
# the first frame it is handed (torch puts it back when it returns, so it stays on), run in a
# process of its own, since it is handed every frame.
_SETS_THE_HOOK_AGAIN = """
import json, os, sys
import torch, torch._dynamo
from torch._C._dynamo import eval_frame
from torch._dynamo.types import ConvertFrameReturn, FrameAction, FrameExecStrategy
from coursekit.grading.sandbox import frame_hook_guard, global_state
from coursekit.grading.sandbox.provenance import Provenance

site = os.path.dirname(os.path.dirname(torch.__file__))
record = Provenance((site + "/", os.path.dirname(os.__file__) + "/"))
record.seal()
torchs = [vars(eval_frame)[name] for name in ("set_eval_frame", "set_bytecode_debugger_callback")]
frame_hook_guard.guard()
base = global_state.take()  # as the hand-in's process takes it, before any hand-in code
default = ConvertFrameReturn(
    frame_exec_strategy=FrameExecStrategy(FrameAction.DEFAULT, FrameAction.DEFAULT),
    apply_to_code=False,
)
off = eval_frame.set_eval_frame  # the guard, as a notebook finds it
refused = []

def once(frame, *rest):  # off at the first frame it is handed
    try:
        off(None)
    except RuntimeError as error:
        refused.append(str(error))
    return default

off(once)
global_state.restore(base, record)  # the grader's put-back, with the callback on
after_restore = eval_frame.get_eval_frame_callback()
off(once)
off(None)  # through the guard, as torch's own code sets it, with the callback on
print(json.dumps({
    "put_back_by_torchs_own": [hook[2] for hook in base.frame_hooks] == torchs
    and all(hook[2] is setter for hook, setter in zip(base.frame_hooks, torchs)),
    "after_restore": repr(after_restore),
    "refused": refused,
    "after_guard": repr(eval_frame.get_eval_frame_callback()),
    "originals_left": sorted(frame_hook_guard._ORIGINALS),
}))
"""


@pytest.mark.slow  # over 2.5 s: out of the quick run (-m 'not slow')
def test_a_callback_that_sets_the_hook_again_holds_neither_the_grader_nor_the_guard():
    """Such a callback, on when the grader put the hook back through the guard, set it again
    from the guard's own frame and waited for ever on the guard's lock: the hand-in was held
    until its time ran out (20 s a hand-in). The put-back now calls torch's setter directly,
    and the guard refuses a call from inside itself."""
    import json
    import subprocess

    try:
        done = subprocess.run(
            [sys.executable, "-c", _SETS_THE_HOOK_AGAIN],
            capture_output=True,
            text=True,
            timeout=300,  # a backstop: the process takes a few seconds, or hangs
        )
    except subprocess.TimeoutExpired:
        done = None
    assert done is not None, "the process waited on the guard's lock (it never finished)"
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["put_back_by_torchs_own"] is True
    assert seen["after_restore"] == "None" and seen["after_guard"] == "None", seen
    assert any("called from a frame callback while it ran: refused" in r for r in seen["refused"])
    assert seen["originals_left"] == []  # taken out of the module by the hand-in's process
