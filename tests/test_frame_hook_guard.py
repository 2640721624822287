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
