"""What module 6's arithmetic questions share: reading a hand-in's numbers, comparing them
to float rounding, naming a mistake only when one alone matches, and judging a refusal.

``scaled_hyperparameters`` and ``ramp_plan`` are both judged exactly (to float rounding)
against :mod:`coursekit.batch_scaling`, and both must refuse bad input with a ValueError: one
set of helpers keeps the two judged alike. ``MODULE`` is the notebook of every module 6
question.
"""

from __future__ import annotations

import math
import numbers

from coursekit.checks.question import Failure

MODULE = "06_batch_size"
TOLERANCE = 1e-9  # relative: every right style agrees far closer, every mistake differs far more


def as_number(value) -> float | None:
    """A real number (NumPy's, a Fraction, a 0-d tensor too) as a float, else None."""
    if getattr(value, "ndim", None) == 0 and hasattr(value, "item"):
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return None
    try:
        return float(value)
    except OverflowError:  # an int past float's range: a number, just far off
        return math.inf if value > 0 else -math.inf


def is_whole(value) -> bool:
    """An int that is not a bool: a count of steps or samples."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_close(got: float, want: float) -> bool:
    """Equal to float rounding; never for inf or nan (``want`` is always finite)."""
    return abs(got - want) <= TOLERANCE * abs(want) + 1e-15


def only_name(matches: dict[str, bool]) -> str | None:
    """The one mistake whose output matched, or None when none or several did."""
    names = [name for name, matched in matches.items() if matched]
    return names[0] if len(names) == 1 else None


def describe(value) -> str:
    """A returned value's type and (cut) repr, for a message about the wrong kind of value."""
    return f"{type(value).__name__}: {repr(value)[:160]}"


def refused(fn, args, kwargs) -> dict:
    """Outputs for a spec the function must refuse: what it raised, or what it returned."""
    try:
        returned = fn(*args, **kwargs)
    except NotImplementedError:  # the stub as handed out: not attempted, not a refusal
        raise
    except Exception as error:  # the refusal is what the spec checks
        return {"raised": type(error).__name__, "value_error": isinstance(error, ValueError)}
    text = repr(returned)
    return {"returned": text if len(text) <= 200 else text[:200] + " ..."}


def judge_refusal(outputs, reason: str, setting: str) -> None:
    """Fail unless the function refused the spec (``reason`` says why it must) with a
    ValueError."""
    if "raised" not in outputs:
        raise Failure(
            f"{reason[0].upper()}{reason[1:]} {setting}, yet your function returned "
            f"{outputs.get('returned')}. Raise a ValueError whose message says what is wrong "
            "and what to do instead.",
            "bad_input_accepted",
        )
    if outputs.get("value_error") is not True:
        raise Failure(
            f"Right to refuse {setting}: {reason}. But raise a ValueError, not "
            f"{outputs.get('raised')}: a ValueError is what callers catch for a bad value, "
            "and its message can say what to change.",
            "wrong_exception",
        )


def show(value) -> str:
    """A value as a message shows it: floats short where that tells them apart."""
    if isinstance(value, float):
        # enough digits to tell a float32 value (or one rounded to 6 digits) from the right one
        short = f"{value:.6g}"
        return short if float(short) == value else repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(show(v) for v in value) + "]"
    return str(value)
