"""Checked arguments: the library refuses bad input where it arrives, with a named problem.

A count given as ``2.5``, ``True``, ``-3`` or ``"4"`` would otherwise become a wrong number
some lines later (a negative bubble, a fractional world size, a ``KeyError``), or a bare
traceback from deep inside torch. Each helper returns the value in its proper type, or raises
``TypeError`` (not a number of the right kind) or ``ValueError`` (out of range), and the
message names the argument, what it got and what it needs.
"""

from __future__ import annotations

import difflib
import math
import numbers
import operator
from collections.abc import Iterable


def whole(name: str, value, minimum: int | None = 1) -> int:
    """``value`` as an int (NumPy and torch integers too), at least ``minimum``.

    ``True`` is refused: it is an int to Python, but never a count anybody meant.

    Example:
        >>> whole("accum_steps", 4)
        4
    """
    if isinstance(value, bool):
        raise TypeError(f"{name} must be a whole number, got {value!r} (a bool).")
    try:
        number = operator.index(value)
    except TypeError:
        raise TypeError(
            f"{name} must be a whole number, got {value!r} ({type(value).__name__})."
        ) from None
    if minimum is not None and number < minimum:
        raise ValueError(f"{name} must be at least {minimum}, got {number}.")
    return number


def real(
    name: str,
    value,
    low: float | None = None,
    high: float | None = None,
    *,
    low_open: bool = False,
    high_open: bool = False,
) -> float:
    """``value`` as a finite float in the interval from ``low`` to ``high`` (closed unless
    ``low_open``/``high_open``); ``None`` leaves that side unbounded. A one-element tensor
    counts as its number; bools are refused.

    Example:
        >>> real("momentum", 0.1, 0, 1)
        0.1
    """
    if _one_number_tensor(value):
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a number, got {value!r} ({type(value).__name__}).")
    number = float(value)
    if not math.isfinite(number):
        raise ValueError(f"{name} must be a finite number, got {number}.")
    too_low = low is not None and (number <= low if low_open else number < low)
    too_high = high is not None and (number >= high if high_open else number > high)
    if too_low or too_high:
        left = "(" if low_open else "["
        right = ")" if high_open else "]"
        span = f"{left}{'-inf' if low is None else low}, {'inf' if high is None else high}{right}"
        raise ValueError(f"{name} must be in {span}, got {number}.")
    return number


def choice(name: str, value, options: Iterable):
    """``value`` if it is one of ``options``; otherwise a ``ValueError`` listing them, with
    the nearest one when ``value`` looks like a typo.

    Example:
        >>> choice("reduction", "mean", ("mean", "sum"))
        'mean'
    """
    options = tuple(options)
    if isinstance(value, bool) or not _hashable(value) or value not in options:
        near = (
            difflib.get_close_matches(value, [str(o) for o in options], n=1)
            if isinstance(value, str)
            else []
        )
        hint = f" Did you mean {near[0]!r}?" if near else ""
        listed = ", ".join(repr(o) for o in options)
        raise ValueError(f"{name} must be one of {listed}; got {value!r}.{hint}")
    return value


def _one_number_tensor(value) -> bool:
    """A torch tensor holding one real number (torch is not imported here for it)."""
    kind = type(value)
    return (
        kind.__module__.startswith("torch")
        and kind.__name__ in ("Tensor", "Parameter")
        and value.numel() == 1
        and not value.is_complex()
    )


def _hashable(value) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True
