"""Human-readable byte counts, shared by reports, plots and widgets."""

from __future__ import annotations

from coursekit.arguments import real

_UNITS = ("B", "KiB", "MiB", "GiB", "TiB")


def format_bytes(n_bytes: float) -> str:
    """``format_bytes(1536) == '1.5 KiB'``: binary units, as torch and nvidia-smi report."""
    value = real("n_bytes", n_bytes)
    for unit in _UNITS:
        if abs(value) < 1024 or unit == _UNITS[-1]:
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")
