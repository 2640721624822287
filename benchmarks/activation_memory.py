"""Activation bytes per sample for module 1's model, and how well a line fits them.

Run: .venv/bin/python benchmarks/activation_memory.py
The model is the one section 5 of 01_accumulation measures: tiny_mlp(64, 256, depth=4).
"""

from __future__ import annotations

import torch

from coursekit import activation_bytes_by_size, fit_bytes_per_sample, format_bytes, tiny_mlp

SIZES = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]


def main() -> None:
    for dtype in (torch.float32, torch.float64):
        model = tiny_mlp(in_features=64, hidden=256, depth=4, dtype=dtype)
        measured = activation_bytes_by_size(
            model, lambda n, dtype=dtype: torch.zeros(n, 64, dtype=dtype), SIZES
        )
        fit = fit_bytes_per_sample(measured)
        by_hand = (64 + 3 * 256) * torch.finfo(dtype).bits // 8
        print(f"{str(dtype)}: micro-batch -> activation bytes")
        for size, n_bytes in measured.items():
            print(f"  {size:5d}  {n_bytes:>10d}  ({format_bytes(n_bytes)})")
        print(
            f"  fit: {fit.bytes_per_sample:.1f} bytes/sample (by hand: {by_hand}), "
            f"intercept {fit.intercept_bytes:.1f} bytes, "
            f"worst relative gap {fit.max_relative_error:.2e}"
        )


if __name__ == "__main__":
    main()
