"""What a student's function leaves behind besides its answer: the caller's inputs changed,
the model's or torch's state switched, an answer that depends on an earlier call.

A function can return the right numbers and still break the caller's next cell: a schedule
list popped empty, a model left in eval mode, grad mode left off, a float32 buffer kept from
the last call. The checks see none of that in the answer, so :class:`Kept` snapshots what a
question hands over and reports, after the call, *where* it changed (plain data: a path such
as ``micro_batches[2][0]`` and short codes). ``run`` records; the judge, which trusts nothing,
accepts only the codes and path shapes it knows (:func:`judge_left_behind`) and writes the
message itself. Global switches are put back after the call, so a hand-in cannot change what
the reference or the next spec sees.
"""

from __future__ import annotations

import contextlib
import math
import re
from collections.abc import Mapping

import torch
from torch import nn

from coursekit.checks.question import Failure, relative_gap
from coursekit.gradients import flat_gradient

# The state codes run() may report, and what each means for the caller.
STATE_MESSAGES = {
    "eval_mode": (
        "left the model in eval mode (model.eval() with no model.train() after it): the "
        "caller's next training step would run dropout and batch norm as in evaluation"
    ),
    "train_mode": "switched a module the caller had in eval mode back to train mode",
    "requires_grad": (
        "switched requires_grad of a parameter: the caller's next step would not train it "
        "(or would train one that was frozen)"
    ),
    "hooks": (
        "left a hook registered on the model or a parameter: it runs again in every later "
        "forward or backward (remove it with handle.remove())"
    ),
    "grad_mode": (
        "left gradient recording off (torch.set_grad_enabled(False) or torch.no_grad() "
        "entered and never left): no later backward() would work"
    ),
    "default_dtype": (
        "changed torch's default dtype (torch.set_default_dtype): every tensor the caller "
        "makes next comes out in another precision"
    ),
}

_PATH = re.compile(r"^[a-z_]{1,40}(\[\d{1,6}\]){0,4}( \(\w{1,20}\))?$")


def snapshot(value):
    """A deep copy of nested lists, tuples, dicts and tensors (tensors cloned, detached)."""
    if torch.is_tensor(value):
        return value.detach().clone()
    if isinstance(value, (list, tuple)):
        return type(value)(snapshot(item) for item in value)
    if isinstance(value, Mapping):
        return {key: snapshot(item) for key, item in value.items()}
    return value


def first_change(name: str, given, before) -> str | None:
    """Where ``given`` no longer equals its ``snapshot`` ``before`` (a path), or None.

    A list popped, sorted or extended; a tuple or tensor replaced by another value; a tensor
    changed in place, cast, or made to require grad. Equal new objects are no change.
    """
    if torch.is_tensor(before):
        if not torch.is_tensor(given):
            return f"{name} (replaced)"
        same = (
            given.dtype == before.dtype
            and given.shape == before.shape
            and given.requires_grad == before.requires_grad
            and torch.equal(given.detach(), before)
        )
        return None if same else name
    if isinstance(before, (list, tuple)):
        if type(given) is not type(before) or len(given) != len(before):
            return f"{name} (length)" if isinstance(given, (list, tuple)) else f"{name} (replaced)"
        for index, (item, old) in enumerate(zip(given, before, strict=True)):
            found = first_change(f"{name}[{index}]", item, old)
            if found is not None:
                return found
        return None
    if isinstance(before, Mapping):
        if not isinstance(given, Mapping) or set(given) != set(before):
            return f"{name} (keys)"
        for key in before:
            found = first_change(name, given[key], before[key])
            if found is not None:
                return found
        return None
    try:
        return None if bool(given == before) else f"{name} (replaced)"
    except (TypeError, ValueError, RuntimeError):
        return f"{name} (replaced)"


def _hooks(owner) -> int:
    names = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")
    if torch.is_tensor(owner):
        names = ("_backward_hooks", "_post_accumulate_grad_hooks")
    return sum(len(getattr(owner, name, None) or ()) for name in names)


class Kept:
    """Snapshots the inputs a question hands over (by name) and the state they live in (the
    models' train/eval flags, requires_grad, hooks; torch's grad mode and default dtype);
    :meth:`report` says, after the call, what changed, and puts torch's switches back.

    Create it after the check's own instruments are attached: their hooks are the baseline.
    """

    def __init__(self, models: tuple[nn.Module, ...] = (), **inputs):
        self.models = [m for m in models if isinstance(m, nn.Module)]
        self.inputs = inputs
        self.before = {name: snapshot(value) for name, value in inputs.items()}
        self.state = self._state()

    def _state(self) -> dict:
        modules = [m for model in self.models for m in model.modules()]
        parameters = [p for model in self.models for p in model.parameters()]
        return {
            "training": [m.training for m in modules],
            "requires_grad": [p.requires_grad for p in parameters],
            "hooks": sum(_hooks(m) for m in modules) + sum(_hooks(p) for p in parameters),
            "grad_mode": torch.is_grad_enabled(),
            "default_dtype": torch.get_default_dtype(),
        }

    def report(self) -> dict:
        """``{"input_changed": path or None, "left_changed": [codes]}``, then torch's grad
        mode and default dtype restored."""
        changed = next(
            (
                path
                for name, value in self.inputs.items()
                if (path := first_change(name, value, self.before[name])) is not None
            ),
            None,
        )
        now, then = self._state(), self.state
        codes = []
        if len(now["training"]) == len(then["training"]):
            pairs = list(zip(then["training"], now["training"], strict=True))
            if any(old and not new for old, new in pairs):
                codes.append("eval_mode")
            elif any(new and not old for old, new in pairs):
                codes.append("train_mode")
        if now["requires_grad"] != then["requires_grad"]:
            codes.append("requires_grad")
        if then["grad_mode"] and not now["grad_mode"]:
            codes.append("grad_mode")
        if now["hooks"] > then["hooks"]:
            codes.append("hooks")
        if now["default_dtype"] != then["default_dtype"]:
            codes.append("default_dtype")
        torch.set_grad_enabled(then["grad_mode"])
        torch.set_default_dtype(then["default_dtype"])
        return {"input_changed": changed, "left_changed": codes}


def judge_left_behind(outputs: dict, setting: str, inputs_mistake: str = "inputs_changed") -> None:
    """Fail when ``run`` saw the caller's inputs or state changed; unknown reports are ignored
    (they come from the hand-in's process)."""
    path = outputs.get("input_changed")
    if isinstance(path, str) and _PATH.match(path):
        name, _, how = path.partition(" (")
        what = {"length)": " (its length)", "replaced)": " (replaced)", "keys)": " (its keys)"}
        raise Failure(
            f"Your function changed {name}{what.get(how, '')}, which the caller gave it "
            f"{setting}: the caller uses it again after your function returns (the next "
            "epoch, the next cell). Read your inputs; copy what you need to change "
            "(list(...), .clone()) instead of popping, sorting or editing them in place.",
            inputs_mistake,
        )
    codes = outputs.get("left_changed")
    known = [c for c in codes if c in STATE_MESSAGES] if isinstance(codes, list) else []
    if known:
        said = "; it also ".join(STATE_MESSAGES[c] for c in known)
        raise Failure(
            f"Your function {said} {setting}. Put back what you switch before returning "
            "(or use a context manager, which does).",
            "state_left_changed",
        )


def repeated(answer, spec: dict) -> dict:
    """``answer(spec)`` (plain data, a dict) with ``"again_same"``: whether a second call on
    the same arguments gives the same answer. A function of its arguments always does; one
    that keeps state between calls (a global, a mutable default argument) need not."""
    first = answer(spec)
    try:
        same = answer(spec) == first
    except Exception:  # a second call that raises gave another answer
        same = False
    return {**first, "again_same": same}


def judge_repeated(outputs: dict, setting: str) -> None:
    """Fail when the same arguments gave two different answers (see :func:`repeated`)."""
    if outputs.get("again_same") is False:
        raise Failure(
            "Called twice with the same arguments, your function gave two different answers "
            f"{setting}: it keeps something from one call to the next (a global, a mutable "
            "default argument, a cache). Compute everything from the arguments of this call.",
            "state_across_calls",
        )


@contextlib.contextmanager
def switches_kept():
    """Run the block, then put torch's grad mode and default dtype back as they were (for a
    call of the hand-in whose side effects are not reported, such as a second one)."""
    grad_mode, dtype = torch.is_grad_enabled(), torch.get_default_dtype()
    try:
        yield
    finally:
        torch.set_grad_enabled(grad_mode)
        torch.set_default_dtype(dtype)


def gradient_again(first: list[float] | None, call, parameters) -> float | None:
    """The caller's next window: every ``.grad`` cleared (as zero_grad leaves it), the same
    ``call`` again on the same model and inputs. Returns the relative gap between the
    gradient it leaves and ``first`` (0 for a function of its arguments); None when there is
    nothing to compare."""
    if first is None:
        return None
    parameters = list(parameters)
    for parameter in parameters:
        parameter.grad = None
    try:
        with switches_kept():
            call()
    except Exception:  # a second call that raises: compared as no gradient at all
        return 1.0
    second = flat_gradient(parameters)
    gap = relative_gap([] if second is None else second.tolist(), first)
    return gap if math.isfinite(gap) else 1.0


def judge_again(outputs: dict, tolerance: float, setting: str) -> None:
    """Fail when the same call on the same model, ``.grad`` cleared, left another gradient
    (see :func:`gradient_again`)."""
    gap = outputs.get("again_gap")
    if isinstance(gap, float) and gap > tolerance:
        raise Failure(
            "Called again on the same model and micro-batches, its .grad cleared as after an "
            f"optimizer step, your function left another gradient (relative gap {gap:.1e}) "
            f"{setting}: it keeps something from one call to the next (a count or a buffer in "
            "a global, a default argument, an attribute). Compute everything from this call's "
            "arguments.",
            "state_across_calls",
        )
