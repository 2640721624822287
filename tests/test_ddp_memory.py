"""``ddp_window``'s memory test (coursekit/checks/module04/ddp_memory.py): DDP in the
measured fork, over a group of one process that needs no socket and no thread.

What the test catches, through the real grader, is in tests/test_grading_modules.py
(student "eve" of module 4) and tests/test_mutation.py (``whole_window_elsewhere``)."""

from __future__ import annotations

import json
import random

import pytest
import torch
import torch.distributed as dist

from coursekit.checks import QUESTIONS
from coursekit.checks.module04.ddp_memory import in_ddp, one_process_group
from coursekit.checks.question import Failure
from tests.corpora.student_code.module04.ddp_window import DDP_WINDOW

pytestmark = pytest.mark.grading


def _memory_spec() -> dict:
    question = QUESTIONS["ddp_window"]
    return next(s for s in question.hidden_specs(random.Random(5)) if s.get("memory"))


def test_the_one_process_group_answers_a_collective_at_once_with_its_own_data():
    group = one_process_group()
    tensor = torch.arange(4.0)
    dist.all_reduce(tensor, group=group)  # nothing to wait for: no peer, no worker thread
    assert group.size() == 1 and torch.equal(tensor, torch.arange(4.0))


def test_the_function_sees_that_group_as_the_default_and_the_default_comes_back():
    from torch.distributed.distributed_c10d import _world

    before, seen = _world.default_pg, []

    def window(model, loss_fn, micro_batches):
        seen.append((dist.get_world_size(), model.process_group is _world.default_pg))

    model = torch.nn.Sequential(torch.nn.Linear(3, 2))
    in_ddp(window)(model, None, [])
    assert seen == [(1, True)] and _world.default_pg is before


@pytest.mark.parametrize(
    ("variant", "passes"),
    [("correct", True), ("synced_by_hand", True), ("whole_window_elsewhere", False)],
)
def test_the_memory_test_measures_the_window_and_no_collective_hangs_in_the_fork(variant, passes):
    """``synced_by_hand`` all-reduces by itself in the fork (judged by the other tests);
    a whole-window gradient made around DDP needs some 39 MiB and fails."""
    question, spec = QUESTIONS["ddp_window"], _memory_spec()
    namespace: dict = {}
    exec(DDP_WINDOW[variant], namespace)  # noqa: S102 - the corpus's hand-in
    expected = json.loads(json.dumps(question.run(question.reference(), spec)))
    outputs = json.loads(json.dumps(question.run(namespace["ddp_window"], spec)))
    if passes:
        question.judge(spec, outputs, expected)
    else:
        with pytest.raises(Failure, match="memory beyond what one micro-batch"):
            question.judge(spec, outputs, expected)
