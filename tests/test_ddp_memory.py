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
    group, _ = one_process_group()
    tensor = torch.arange(4.0)
    dist.all_reduce(tensor, group=group)  # nothing to wait for: no peer, no worker thread
    assert group.size() == 1 and torch.equal(tensor, torch.arange(4.0))


def test_the_function_sees_that_group_as_the_default_and_the_default_comes_back():
    """As in the check's other tests, ``dist.get_world_size()`` answers 2 (a loss divided by
    it shows), the group answers ``dist.get_backend()``, and nothing of the test is left on
    the model or in torch's records of groups afterwards, even when the function raises."""
    from torch.distributed.distributed_c10d import _world

    before, real_world_size, groups = _world.default_pg, dist.get_world_size, len(_world.pg_map)
    seen = []

    def window(model, loss_fn, micro_batches):
        seen.append((dist.get_world_size(), dist.get_backend(), model.process_group.size()))
        raise ValueError("the function's own error")

    model = torch.nn.Sequential(torch.nn.Linear(3, 2))
    with pytest.raises(ValueError, match="own error"):
        in_ddp(window, {}, 2)(model, None, [])
    assert seen == [(2, "gloo", 1)]
    assert _world.default_pg is before and dist.get_world_size is real_world_size
    assert len(_world.pg_map) == groups and not vars(model).keys() - vars(type(model)()).keys()


@pytest.mark.parametrize(
    ("variant", "failure"),
    [
        ("correct", None),
        ("correct_with_one_no_sync_block", None),
        # all-reduces by itself in the fork, at once; divided by the world size the test
        # answers (2, as the others do), its gradient is half
        ("synced_by_hand", "differs from the reference's"),
        ("whole_window_elsewhere", "memory beyond what one micro-batch"),  # some 39 MiB
    ],
)
def test_the_memory_test_measures_the_window_and_no_collective_hangs_in_the_fork(variant, failure):
    question, spec = QUESTIONS["ddp_window"], _memory_spec()
    namespace: dict = {}
    exec(DDP_WINDOW[variant], namespace)  # noqa: S102 - the corpus's hand-in
    expected = json.loads(json.dumps(question.run(question.reference(), spec)))
    outputs = json.loads(json.dumps(question.run(namespace["ddp_window"], spec)))
    assert isinstance(outputs.get("peak_above_warm_up"), int), outputs
    if failure is None:
        question.judge(spec, outputs, expected)
    else:
        with pytest.raises(Failure, match=failure):
            question.judge(spec, outputs, expected)
