"""Issue 40: torch's dispatcher read directly, whatever way a kernel was registered.

The grader wraps ``torch.library``'s ways in (tests/test_sandbox_process_state.py), but a
kernel can also be registered through a handle torch made (a ``Library``'s own ``.m``) or
through the registration function taken back out of a wrapper. The dispatcher's own record
sees all of them: each test registers a kernel one way, and the snapshot names it; undone,
nothing is named. In process, with torch's own functions: well under a second each.
"""

from __future__ import annotations

import builtins
import warnings

import pytest
import torch

from coursekit.grading.sandbox import tampering, torch_registrations

pytestmark = pytest.mark.grading
C = torch._C


@pytest.fixture(scope="module")
def snapshot():
    return torch_registrations.dispatcher_snapshot()


@pytest.fixture
def handle():
    """A handle of the dispatcher's own, made without torch.library (so nothing wraps it);
    every registration made through it is undone after the test."""
    made = C._dispatch_library("IMPL", "_", "", "<cell>", 1)
    aten = C._dispatch_library("IMPL", "aten", "", "<cell>", 2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch warns when a kernel is overridden
        yield made, aten
    made.reset()
    aten.reset()


def test_nothing_is_named_when_nothing_changed(snapshot):
    assert torch_registrations.dispatcher_changes(snapshot) == []


def test_a_kernel_registered_through_a_raw_handle_is_named_then_gone_when_undone(snapshot, handle):
    _, aten = handle
    aten.impl("mul.Tensor", C.DispatchKey.CPU, lambda a, b: a)
    found = torch_registrations.dispatcher_changes(snapshot)
    assert len(found) == 1 and "aten::mul.Tensor" in found[0], found
    assert "cannot be taken back" in found[0]
    aten.reset()
    assert torch_registrations.dispatcher_changes(snapshot) == []


def test_a_backend_fallback_is_named(snapshot, handle):
    made, _ = handle
    key = C.DispatchKey.PrivateUse3
    assert not C._dispatch_has_backend_fallback(key)
    made.fallback(key, lambda *args: None, False)
    found = torch_registrations.dispatcher_changes(snapshot)
    assert found and "fallback kernel for every operator at PrivateUse3" in found[0], found


def test_an_operator_defined_since_is_not_a_change(snapshot):
    """A library imported after the snapshot defines operators of its own: nothing the
    tests run calls them, and an honest notebook may import one."""
    lib = torch.library.Library("coursekit_test_new", "DEF")
    try:
        lib.define("twice(Tensor x) -> Tensor")
        lib.impl("twice", lambda x: 2 * x, "CPU")
        assert torch.ops.coursekit_test_new.twice(torch.ones(1)).item() == 2.0
        assert torch_registrations.dispatcher_changes(snapshot) == []
    finally:
        lib._destroy()


def test_names_rebound_after_the_snapshot_blind_nothing(snapshot, handle, monkeypatch):
    """The functions the comparison reads with are bound at the snapshot, and the runner
    compares from a private copy of the module: a notebook that rebinds torch's readers, the
    module's names or ``map`` changes nothing it sees."""
    compare = tampering.private_copy(torch_registrations).dispatcher_changes
    _, aten = handle
    aten.impl("add.Tensor", C.DispatchKey.CPU, lambda a, b, alpha=1: a)
    monkeypatch.setattr(C, "_dispatch_dump", lambda name: "")
    monkeypatch.setattr(C, "_dispatch_get_all_op_names", lambda: [])
    monkeypatch.setattr(torch_registrations, "read_fallbacks", lambda *args: [])
    monkeypatch.setattr(torch_registrations, "read_part", lambda *args: [])
    monkeypatch.setattr(builtins, "map", lambda fn, *items: iter(()))
    monkeypatch.setattr(builtins, "zip", lambda *items, **kwargs: iter(()))
    monkeypatch.setattr(builtins, "hash", lambda value: 0)
    monkeypatch.setattr(builtins, "sorted", lambda *args, **kwargs: [])
    found = compare(snapshot)
    monkeypatch.undo()
    assert found and "aten::add.Tensor" in found[0], found
