"""Progress for long work: a live bar where someone watches it, a few lines where a log is kept.

One class, three ways to show it, chosen from where it runs:

- in a Jupyter kernel (JupyterLab, Colab, VS Code) with ipywidgets: a widget bar and a label
  (done/total, elapsed, time left, a note such as the loss), updated in place; once finished
  it is swapped for a plain line, which a saved notebook keeps readable;
- in a terminal (or a kernel without ipywidgets): a one-line text bar redrawn with ``"\\r"``;
- anywhere else (a pipe, a file, a CI log): a line at every tenth of the work and at the end.

Redraws are throttled to about ten a second, so a fast loop does not wait for its bar, and
work that ends within a second leaves no bar at all. ``COURSEKIT_PROGRESS=0`` silences every
bar (the grader's hand-in process sets it); functions that show one take ``progress=False``.
"""

from __future__ import annotations

import html
import os
import shutil
import sys
import time

ENV = "COURSEKIT_PROGRESS"
_BAR_WIDTH = 24  # characters of the text bar


def in_kernel(stream) -> bool:
    """Whether ``stream`` is a Jupyter kernel's output stream (as ``sys.stderr`` is there)."""
    return type(stream).__module__.startswith("ipykernel")


def format_seconds(seconds: float) -> str:
    """``"42 s"`` or ``"3 min 05 s"``: a duration as people read it."""
    seconds = round(seconds)
    return f"{seconds} s" if seconds < 60 else f"{seconds // 60} min {seconds % 60:02d} s"


class Progress:
    """A progress bar for ``total`` steps of ``label``: call :meth:`step` once per step.

    The bar finishes by itself at the last step. Use it as a context manager so that it also
    ends cleanly when the work stops early or raises: the widget is removed and one line says
    where the work stopped. ``total`` may be corrected while the work runs (a search that
    ends sooner than its bound sets it to ``done`` before it closes the bar).

    Args:
        stream: where text bars go (default ``sys.stderr``); in a kernel, a widget replaces
            the text when ``stream`` is the kernel's own.
        enabled: ``False`` shows nothing at all, for callers that want silence.

    Example:
        >>> with Progress(3, "training") as bar:
        ...     for loss in (0.9, 0.5, 0.3):
        ...         bar.step(f"loss {loss}")
    """

    min_interval_s = 0.1  # at most about ten redraws a second
    delay_s = 1.0  # work that ends sooner shows no bar: a flash of one says nothing

    def __init__(self, total: int, label: str, stream=None, enabled: bool = True):
        self.total, self.label, self.done = max(int(total), 0), label, 0
        self.note = ""
        self.stream = sys.stderr if stream is None else stream
        self.started = time.monotonic()
        self.closed = False
        self.shown = False  # whether anything was drawn or written yet
        self._drawn_at = float("-inf")
        self._tenths_logged = 0
        self._width = 0  # length of the last "\r" line, to blank what a shorter one leaves
        self._widget = self._display = None
        if not enabled or os.environ.get(ENV, "1").strip().lower() in ("0", "false", "off"):
            self.mode = "off"
        elif in_kernel(self.stream) and _ipywidgets_importable():
            self.mode = "widget"
        elif in_kernel(self.stream) or _isatty(self.stream):
            self.mode = "terminal"  # Jupyter front ends honour "\r" in a stream, as terminals do
        else:
            self.mode = "log"
        self.live = self.mode in ("widget", "terminal")
        if self.total == 0:
            self.close()

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, exc_type, exc, traceback) -> None:
        self.close(stopped_by=None if exc_type is None else exc_type.__name__)

    def step(self, note: str = "") -> None:
        """One step done; ``note`` (say ``"loss 0.42"``) is shown beside the count."""
        self.done += 1
        self.update(note)

    def update(self, note: str = "") -> None:
        """Redraw (throttled) with a new note and the time so far, counting no step.

        For waits with no steps to count, such as processes that have not finished yet.
        """
        if note:
            self.note = note
        if self.closed or self.mode == "off":
            return
        if self.done >= self.total:
            self.close()
            return
        now = time.monotonic()
        if now - self.started < self.delay_s:
            return
        if self.mode == "log":
            tenths = 10 * self.done // self.total
            if tenths > self._tenths_logged:
                self._tenths_logged = tenths
                self._write(self._line() + "\n")
        elif now - self._drawn_at >= self.min_interval_s:
            self._draw()

    def close(self, stopped_by: str | None = None) -> None:
        """Finish the bar (once; later calls do nothing).

        ``stopped_by`` names what ended the work early (an exception's name); the line says
        so. Work that ended within :attr:`delay_s` and showed nothing leaves nothing.
        """
        if self.closed:
            return
        self.closed = True
        if self.mode == "off" or not (self.shown or self._elapsed() >= self.delay_s):
            return
        if self.mode == "widget":
            self._close_widget(stopped_by)
        elif self.mode == "terminal" and self.shown:
            self._write("\r" + _fit(self._line(stopped_by)).ljust(self._width) + "\n")
        else:
            self._write(self._line(stopped_by) + "\n")

    def _elapsed(self) -> float:
        return time.monotonic() - self.started

    def _line(self, stopped_by: str | None = None) -> str:
        filled = int(_BAR_WIDTH * min(self.done, self.total) / max(self.total, 1))
        bar = "#" * filled + "-" * (_BAR_WIDTH - filled)
        return f"{self.label} [{bar}] {self._status(stopped_by)}"

    def _status(self, stopped_by: str | None = None, separator: str = "  ") -> str:
        """Count, elapsed, time left and note; HTML collapses spaces, so widgets use " · "."""
        elapsed = self._elapsed()
        parts = [f"{self.done}/{self.total}", format_seconds(elapsed)]
        if stopped_by is not None:
            parts.append(f"stopped by {stopped_by}")
        elif not self.closed and 0 < self.done < self.total:
            parts.append(
                f"about {format_seconds(elapsed / self.done * (self.total - self.done))} left"
            )
        if self.note:
            parts.append(self.note)
        return separator.join(parts)

    def _draw(self) -> None:
        self._drawn_at = time.monotonic()
        if self.mode == "widget" and (self._widget is not None or self._open_widget()):
            bar, text = self._widget.children
            bar.max, bar.value = max(self.total, 1), min(self.done, self.total)
            text.value = self._status(separator=" · ")
        else:
            line = _fit(self._line())
            self._write("\r" + line.ljust(self._width))
            self._width = len(line)
        self.shown = True

    def _write(self, text: str) -> None:
        self.stream.write(text)
        self.stream.flush()
        self.shown = True

    def _open_widget(self) -> bool:
        """Display the widget; on failure fall back to the text bar (and say why not)."""
        try:
            import ipywidgets
            from IPython.display import display

            bar = ipywidgets.IntProgress(
                min=0, max=1, description=self.label, style={"description_width": "initial"}
            )
            widget = ipywidgets.HBox([bar, ipywidgets.Label()])
            self._display = display(widget, display_id=True)
            self._widget = widget
        except Exception:  # no front end to talk to: the bar must never stop the work
            self.mode = "terminal"
            return False
        return True

    def _close_widget(self, stopped_by: str | None) -> None:
        """Show the final state, then swap the widget for a plain line: a saved notebook
        keeps no widget state, and would show an error where each bar was."""
        finished = _FinishedBar(self, stopped_by)
        if self._widget is None:  # one long step: nothing was drawn before the end
            from IPython.display import display

            display(finished)
        else:
            bar, text = self._widget.children
            bar.max, bar.value = max(self.total, 1), min(self.done, self.total)
            bar.bar_style = "success" if stopped_by is None else "danger"
            text.value = finished.status
            if self._display is not None:  # display() gives no handle outside a shell
                self._display.update(finished)
            self._widget.close()
        self.shown = True


class _FinishedBar:
    """What a finished widget bar leaves in the notebook: HTML, with a text fallback."""

    def __init__(self, progress: Progress, stopped_by: str | None):
        self.text = progress._line(stopped_by)
        self.label, self.status = progress.label, progress._status(stopped_by, " · ")
        self.value, self.max = min(progress.done, progress.total), max(progress.total, 1)

    def _repr_mimebundle_(self, include=None, exclude=None) -> dict:
        page = (
            f"<div style='font-family:monospace'>{html.escape(self.label)} "
            f"<progress value='{self.value}' max='{self.max}'></progress> "
            f"{html.escape(self.status)}</div>"
        )
        return {"text/plain": self.text, "text/html": page}


def _ipywidgets_importable() -> bool:
    try:
        import ipywidgets  # noqa: F401
    except ImportError:
        return False
    return True


def _fit(line: str) -> str:
    """``line`` cut to the terminal's width: a redrawn line that wraps cannot be redrawn."""
    return line[: shutil.get_terminal_size((100, 24)).columns - 1]


def _isatty(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # no isatty, or a closed file
        return False
