"""A one-line progress bar on stderr, redrawn in place in a terminal or a notebook (a line per
step only when stderr is a file or a pipe, as in CI logs)."""

from __future__ import annotations

import sys
import time


class Progress:
    def __init__(self, total: int, label: str, stream=None):
        self.total, self.label, self.done = total, label, 0
        self.stream = stream or sys.stderr
        self.started = time.monotonic()
        # Jupyter front ends honour a carriage return in a stream, as a terminal does
        in_kernel = type(self.stream).__module__.startswith("ipykernel")
        self.live = in_kernel or self.stream.isatty()

    def step(self, note: str = "") -> None:
        self.done += 1
        width = 24
        filled = int(width * self.done / max(self.total, 1))
        bar = "#" * filled + "-" * (width - filled)
        elapsed = time.monotonic() - self.started
        line = f"{self.label} [{bar}] {self.done}/{self.total}  {elapsed:.0f} s  {note}"
        if self.live:
            self.stream.write("\r" + line[:120].ljust(120))
            if self.done == self.total:
                self.stream.write("\n")
        else:
            self.stream.write(line + "\n")
        self.stream.flush()
