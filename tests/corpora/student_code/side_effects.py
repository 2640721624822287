"""Mutants of the side-effect classes, built from a question's right answer: the answer stays
right, and something the caller owns is left changed (an input popped, the model left in eval
mode, grad mode left off, a hook left registered).

Each wraps the question's ``correct`` source: the right function runs, then one line does
what a student's function might do on its way out. The answer is right, so only the checks'
side-effect instruments (coursekit/checks/side_effects.py) can kill these mutants. Every one
is named after the class: ``NAMED`` maps each variant to the mistake the checks name.
"""

from __future__ import annotations

# one line each, run after the right function; ``args`` are the caller's arguments
EVAL_MODE_LEFT = "args[0].eval()  # e.g. after an evaluation pass at the end"
GRAD_MODE_LEFT = "torch.set_grad_enabled(False)  # e.g. a no_grad read, switched off for good"
HOOK_LEFT = "args[0].register_forward_hook(lambda *hook_args: None)  # never removed"
DEFAULT_DTYPE_LEFT = "torch.set_default_dtype(torch.float64)  # for precision, never restored"

NAMED = {
    "eval_mode_left": "state_left_changed",
    "grad_mode_left": "state_left_changed",
    "hook_left": "state_left_changed",
    "default_dtype_left": "state_left_changed",
    "inputs_popped": "inputs_changed",
    "inputs_changed_in_place": "inputs_changed",
}


def wrapped(source: str, name: str, after: str) -> str:
    """``source``'s function ``name``, renamed and called by a new ``name`` that runs
    ``after`` (one line) before returning the right answer."""
    inner = source.replace(f"def {name}(", f"def _{name}_right(", 1)
    if inner == source:
        raise ValueError(f"{name} is not defined by `def` in this source")
    return (
        f"{inner}\n\nimport torch\n\n\ndef {name}(*args, **kwargs):\n"
        f"    result = _{name}_right(*args, **kwargs)\n    {after}\n    return result\n"
    )


def variants(source: str, name: str, **lines: str) -> dict[str, str]:
    """``{variant: wrapped(source, name, line)}`` for each ``variant=line`` given."""
    return {variant: wrapped(source, name, line) for variant, line in lines.items()}
